"""`specdec` command line: generate, models, bench, race.

Printing lives here; the engine only yields events and returns stats. Bad input exits 2 with
one line on stderr (what is wrong and how to fix it), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading

from . import __version__
from .settings import DEFAULT_DRAFT_TOKENS, MODES, PROPOSERS, DecodeSettings, SamplingParams

EXIT_BAD_INPUT = 2


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _draft_tokens(value: str) -> int | str:
    if value == "adaptive":
        return value
    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--draft-tokens takes an integer k >= 1 or 'adaptive', got {value!r}")
    if k < 1:
        raise argparse.ArgumentTypeError(f"--draft-tokens must be >= 1 (or 'adaptive'), got {k}")
    return k


def _prompt_ids(value: str) -> list[int]:
    try:
        ids = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--prompt-ids takes comma-separated token ids like 1,2,3, got {value!r}")
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"--prompt-ids needs at least one non-negative id, got {value!r}")
    return ids


def _seconds(value: str) -> float:
    try:
        s = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--timeout takes seconds, e.g. 30, got {value!r}") from None
    if not s > 0:
        raise argparse.ArgumentTypeError(f"--timeout must be > 0 seconds, got {value}")
    return s


def int_at_least(name: str, minimum: int = 1):
    """argparse type: an integer >= minimum, with a one-line message naming the flag."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes an integer, got {value!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {n}")
        return n

    return parse


def add_model_args(p: argparse.ArgumentParser, draft: bool = True) -> None:
    """--target/--draft/--device/--dtype/--quantization, shared by generate, bench and race."""
    p.add_argument("--target", default="default", metavar="SPEC",
                   help="local HF folder, .gguf file, hub id, 'default' (the embedded target), or a server "
                        "http://HOST:PORT (llama-server, vLLM: it decodes with its own draft)")
    if draft:
        p.add_argument("--draft", default="default", metavar="SPEC",
                       help="draft model SPEC (same forms); 'default' = the embedded draft")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--quantization", default=None, choices=["nf4", "int8", "none"],
                   help="target quantization (default: nf4 on CUDA, none on CPU; GGUF keeps its own)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow model repos to run their own Python code (off unless you trust them)")
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="a server target's API key (default: $SPECDEC_API_KEY; the variable keeps it out of ps)")
    p.add_argument("--timeout", type=_seconds, default=120.0, metavar="S",
                   help="a server target: seconds to wait for each piece of the answer (default 120)")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int_at_least("--max-new-tokens"), default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    p.add_argument("--seed", type=int, default=0,
                   help="sampling seed; with a fixed --draft-tokens K it reproduces a sample exactly, with adaptive "
                        "k (which follows measured speed) the distribution is the same but a sample may differ")
    p.add_argument("--draft-tokens", type=_draft_tokens, default=DEFAULT_DRAFT_TOKENS, metavar="K|adaptive",
                   help="tokens the draft proposes per verification, or adaptive (default: measured faster "
                        "than any fixed k on the built-in prompts)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specdec", description="Exact speculative decoding: generate, benchmark, compare.")
    parser.add_argument("--version", action="version", version=f"specdec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    g = sub.add_parser("generate", help="generate text (standard or speculative)")
    add_model_args(g)
    g.add_argument("--mode", default="speculative", choices=MODES)
    src = g.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="one user message, through the target's chat template")
    src.add_argument("--prompt-ids", type=_prompt_ids, help="raw token ids, no template: 1,2,3")
    add_sampling_args(g)
    g.add_argument("--samples", type=int_at_least("--samples"), default=1)
    g.add_argument("--proposer", default="draft", choices=PROPOSERS)
    g.add_argument("--json", action="store_true", help="one JSON object per line per sample")

    m = sub.add_parser("models", help="presets, what is cached, the default pair's status")
    m.add_argument("--json", action="store_true")

    from .bench.cli import add_bench_parser  # the benchmark owns its flags

    add_bench_parser(sub)
    from .race_cli import add_race_parser

    add_race_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "generate":
            return run_generate(args)
        if args.command == "models":
            from .cli_models import run_models

            return run_models(args)
        if args.command == "bench":
            from .bench.cli import run_bench

            return run_bench(args)
        if args.command == "race":
            from .race_cli import run_race

            return run_race(args)
        raise UsageError(f"unknown command {args.command!r}")
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 -- the one place that turns errors into a line
        if _is_user_error(exc):
            print(f"specdec: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise


def _is_user_error(exc: Exception) -> bool:
    from .contract import EngineError
    from .settings import SettingsError

    kinds: tuple[type, ...] = (UsageError, SettingsError, EngineError)
    try:
        from .models import ModelError

        kinds += (ModelError,)
    except ImportError:
        pass
    return isinstance(exc, kinds)


def progress_printer():
    """progress(message, fraction|None) -> a tqdm bar on stderr, one per message."""
    from tqdm import tqdm

    state: dict = {"bar": None, "msg": None}

    def progress(message: str, fraction: float | None) -> None:
        if message != state["msg"]:
            if state["bar"] is not None:
                state["bar"].close()
            state["msg"] = message
            state["bar"] = tqdm(total=100 if fraction is not None else None, desc=message, file=sys.stderr,
                                leave=False, bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}"
                                if fraction is not None else "{desc}... {elapsed}")
        bar = state["bar"]
        if fraction is not None:
            bar.n = round(100 * min(max(fraction, 0.0), 1.0))
            bar.refresh()
        if fraction is not None and fraction >= 1.0:
            bar.close()
            state["bar"] = state["msg"] = None

    return progress


def settings_from_args(args) -> DecodeSettings:
    """The flags -> the one settings value (checked here, before anything loads). A command
    without --mode or --proposer gets the defaults."""
    return DecodeSettings(args.max_new_tokens, SamplingParams(args.temperature, args.top_k, args.top_p),
                          args.draft_tokens, args.seed, mode=getattr(args, "mode", "speculative"),
                          proposer=getattr(args, "proposer", "draft"))


def open_from_args(args, need_draft: bool):
    """--target/--draft/... -> an engine (engines.open_engine), with a progress display on a
    terminal. A server target drafts with its own draft: --draft and --proposer are refused."""
    from .engines import open_engine
    from .server import is_server_spec

    server = is_server_spec(args.target)
    if server and getattr(args, "draft", "default") not in (None, "", "default", "none"):
        raise UsageError("--draft: a server target drafts with the server's own draft model (llama-server "
                         "--model-draft, vLLM --speculative-config); drop --draft")
    if server and getattr(args, "proposer", "draft") != "draft":
        raise UsageError(f"--proposer {args.proposer}: a server target proposes with the server's own drafting; "
                         "drop --proposer")
    progress = None
    if sys.stderr.isatty():
        progress = server_progress if server else progress_printer()
    return open_engine(args.target, args.draft if need_draft else None, device=args.device, dtype=args.dtype,
                       quantization=args.quantization, trust_remote_code=args.trust_remote_code,
                       api_key=args.api_key, timeout=args.timeout, progress=progress)


def server_progress(message: str, fraction: float | None) -> None:
    """A server's connection steps, one line each."""
    if fraction is None:
        print(message, file=sys.stderr)


def print_loaded(engine) -> None:
    """What was loaded, on stderr: one line per model, then its load notes (kernels, fallbacks)."""
    for role, info in (("target", engine.target_info), ("draft", engine.draft_info)):
        if info is not None:
            print(f"{role}: {info.summary()}", file=sys.stderr)
            for note in info.notes:
                print(f"  - {note}", file=sys.stderr)


KIND_COLOURS = {"accepted": "\x1b[32m", "corrected": "\x1b[33m", "bonus": "\x1b[36m", "standard": "",
                "server": "\x1b[35m"}


def run_generate(args) -> int:
    if args.prompt is None and args.prompt_ids is None:
        raise UsageError("give --prompt TEXT or --prompt-ids 1,2,3")
    settings = settings_from_args(args)  # checked before loading anything
    engine = open_from_args(args, settings.needs_draft)
    print_loaded(engine)  # the notes include bitsandbytes' "slow on CPU" where it applies
    if engine.server_info() is None:  # a server holds no model here
        from .models import recent

        for role, spec, info in (("target", args.target, engine.target_info), ("draft", args.draft, engine.draft_info)):
            if info is not None:
                recent.remember(spec, role, vars(info))  # `specdec models` shows what it loaded as
    if args.prompt_ids is not None:
        vocab = engine.vocab_size  # None for a server target: the server checks its own vocabulary
        bad = [i for i in args.prompt_ids if vocab is not None and i >= vocab]
        if bad:
            raise UsageError(f"--prompt-ids: id {bad[0]} is outside the target's vocabulary (size {vocab})")
        prompt = args.prompt_ids
    else:
        prompt = engine.encode_prompt(args.prompt)
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
            print(json.dumps({"token_ids": gen.token_ids, "kinds": gen.kinds, "text": gen.text,
                              "stats": gen.stats.to_dict()}), flush=True)
        else:
            s = gen.stats
            sys.stdout.write("\n")
            print(stats_line(s), file=sys.stderr)
            if server_line(s):
                print(server_line(s), file=sys.stderr)
    return 0


def stats_line(s) -> str:
    """One line of a generation's Stats for the terminal, every figure labelled."""
    line = (f"[{s.mode}] {s.new_tokens} tokens in {s.seconds:.2f}s ({s.decode_tokens_per_second:.1f} tok/s decode, "
            f"{s.tokens_per_second:.1f} tok/s end-to-end)")
    if s.mode == "speculative":
        # no proposal at all (every step plain): no alpha or tau to show, rather than zeros
        alpha = f"{s.acceptance_rate:.0%}" if s.draft_tokens else "-"
        tau = f"{s.mean_accepted_per_step:.2f}" if s.speculative_steps else "-"
        line += (f", acceptance {alpha}, {tau} tokens per speculative step,"
                 f" {s.plain_step_share:.0%} plain steps, {s.target_forward_passes} target passes")
    return line + f", stop: {s.stop_reason}"


def server_line(stats) -> str:
    """One line of what the server reported about an answer (empty for a local model)."""
    from .server.generation import figure_notes

    server = getattr(stats, "server", None)  # ServerStats only
    if not server:
        return ""
    bits = [f"server: {server.get('engine', '?')} at {server.get('url', '?')}"]
    bits += figure_notes(server, stats.draft_tokens, stats.accepted_draft_tokens)
    return ", ".join(bits)


def _keep_cut_answer(gen, as_json: bool) -> None:
    """Before the one-line error: the part of the answer that arrived, marked as cut (text
    mode already printed it; --json prints its object with "cut": true)."""
    stats = gen.stats
    if not gen.events or stats is None:
        return
    if as_json:
        print(json.dumps({"token_ids": gen.token_ids, "kinds": gen.kinds, "text": gen.text,
                          "stats": stats.to_dict(), "cut": True}), flush=True)
    else:
        sys.stdout.write("\n")
        sys.stdout.flush()
        print(f"[cut] the answer above stopped after {stats.new_tokens} tokens", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
