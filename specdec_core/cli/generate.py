"""`specdec generate`: one prompt (or raw ids), standard or speculative, printed as it comes
(coloured by kind on a terminal) or as one JSON object per sample."""

from __future__ import annotations

import argparse
import json
import sys
import threading

from ..settings import DEFAULT_PROPOSER, MODES, PROPOSERS
from .args import (UsageError, add_model_args, add_sampling_args, check_bias, int_at_least, open_from_args,
                   settings_from_args)
from .terminal import KIND_COLOURS, print_loaded, server_line, stats_line


def _prompt_ids(value: str) -> list[int]:
    try:
        ids = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--prompt-ids takes comma-separated token ids like 1,2,3, got {value!r}")
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"--prompt-ids needs at least one non-negative id, got {value!r}")
    return ids


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="generate text (standard or speculative)")
    add_model_args(g)
    g.add_argument("--mode", default="speculative", choices=MODES)
    src = g.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="one user message, through the target's chat template")
    src.add_argument("--prompt-ids", type=_prompt_ids, help="raw token ids, no template: 1,2,3")
    add_sampling_args(g)
    g.add_argument("--samples", type=int_at_least("--samples"), default=1)
    g.add_argument("--proposer", choices=PROPOSERS,
                   help=f"where proposals come from (default {DEFAULT_PROPOSER}: copied from the conversation "
                        "where it has a continuation, else the draft model)")
    g.add_argument("--json", action="store_true", help="one JSON object per line per sample")


def run(args) -> int:
    if args.prompt is None and args.prompt_ids is None:
        raise UsageError("give --prompt TEXT or --prompt-ids 1,2,3")
    settings = settings_from_args(args)  # checked before loading anything
    engine = open_from_args(args, settings.needs_draft)
    check_bias(settings, engine)
    print_loaded(engine)  # the notes include bitsandbytes' "slow on CPU" where it applies
    if engine.server_info() is None:  # a server holds no model here
        from ..models import recent

        for role, spec, info in (("target", args.target, engine.target_info), ("draft", args.draft, engine.draft_info)):
            if info is not None:
                recent.remember(spec, role, vars(info))  # `specdec models` shows what it loaded as
    prompt = _prompt(args, engine)
    colour = sys.stdout.isatty() and not args.json
    for i in range(args.samples):
        gen = engine.generate(prompt, settings.for_sample(i), cancel=threading.Event())
        try:
            for ev in gen:
                if not args.json:
                    piece = f"{KIND_COLOURS[ev.kind.value]}{ev.text}\x1b[0m" if colour and ev.text else ev.text
                    sys.stdout.write(piece)
                    sys.stdout.flush()
        except Exception:
            _keep_cut_answer(gen, args.json)  # a server's stream that broke off: what came is kept
            raise
        if args.json:
            print(json.dumps(_answer(gen)), flush=True)
        else:
            s = gen.stats
            sys.stdout.write("\n")
            print(stats_line(s), file=sys.stderr)
            if server_line(s):
                print(server_line(s), file=sys.stderr)
    return 0


def _prompt(args, engine):
    if args.prompt_ids is None:
        return engine.encode_prompt(args.prompt)
    vocab = engine.vocab_size  # None for a server target: the server checks its own vocabulary
    bad = [i for i in args.prompt_ids if vocab is not None and i >= vocab]
    if bad:
        raise UsageError(f"--prompt-ids: id {bad[0]} is outside the target's vocabulary (size {vocab})")
    return args.prompt_ids


def _answer(gen) -> dict:
    return {"token_ids": gen.token_ids, "kinds": gen.kinds, "sources": gen.sources, "text": gen.text,
            "stats": gen.stats.to_dict()}


def _keep_cut_answer(gen, as_json: bool) -> None:
    """Before the one-line error: the part of the answer that arrived, marked as cut (text
    mode already printed it; --json prints its object with "cut": true)."""
    if not gen.events or gen.stats is None:
        return
    if as_json:
        print(json.dumps({**_answer(gen), "cut": True}), flush=True)
    else:
        sys.stdout.write("\n")
        sys.stdout.flush()
        print(f"[cut] the answer above stopped after {gen.stats.new_tokens} tokens", file=sys.stderr)
