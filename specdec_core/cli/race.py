"""`specdec race`: standard vs speculative decoding on one prompt, each lane timed by its own clock."""

from __future__ import annotations

import json
import sys

from ..settings import DEFAULT_PROPOSER, PROPOSERS
from .args import UsageError, add_model_args, add_sampling_args, check_bias, open_from_args, settings_from_args
from .terminal import print_loaded


def add_parser(sub) -> None:
    r = sub.add_parser(
        "race",
        help="race standard against speculative decoding on one prompt",
        description="Run the same prompt with standard and with speculative decoding (same target, "
        "sampling settings and seed), interleaved step by step in one thread; each lane's clock counts "
        "only its own compute time.",
    )
    add_model_args(r)
    r.add_argument("--prompt", required=True, help="one user message, through the target's chat template")
    add_sampling_args(r)
    r.add_argument("--proposer", choices=PROPOSERS,
                   help=f"where proposals come from (default {DEFAULT_PROPOSER}: copied from the conversation "
                        "where it has a continuation, else the draft model)")
    r.add_argument("--json", action="store_true", help="one JSON object with both lanes and the summary")


def run(args) -> int:
    if not args.prompt.strip():
        raise UsageError("--prompt is empty: give the text to race on")
    settings = settings_from_args(args)  # checked before loading anything
    engine = open_from_args(args, settings.needs_draft)
    check_bias(settings, engine)
    print_loaded(engine)

    from ..race import CLOCK_NOTE, start_race

    race = start_race(engine, engine.encode_prompt(args.prompt), settings)
    live = sys.stderr.isatty()
    counts = {"standard": 0, "speculative": 0}
    for rev in race:
        counts[rev.lane] += 1
        if live:
            c = race.clocks
            sys.stderr.write(f"\rstandard {counts['standard']:4d} tok {c['standard']:6.2f}s │ "
                             f"speculative {counts['speculative']:4d} tok {c['speculative']:6.2f}s")
            sys.stderr.flush()
    if live:
        sys.stderr.write("\n")
    result = race.result
    if args.json:
        print(json.dumps(result.to_dict()), flush=True)
        return 0
    print(summary_text(result))
    print(f"({CLOCK_NOTE})")
    print("\n--- standard ---\n" + result.standard.text)
    if not result.identical:
        print("\n--- speculative ---\n" + result.speculative.text)
    return 0


def summary_text(result) -> str:
    """The terminal summary: one line per lane, then the verdict."""
    std, spec = result.standard, result.speculative
    s = spec.stats
    lines = [
        f"standard     {len(std.events):5d} tokens {std.seconds:8.2f} s {std.tokens_per_second:8.1f} tok/s end-to-end"
        f" {std.decode_tokens_per_second:8.1f} tok/s decode",
        f"speculative  {len(spec.events):5d} tokens {spec.seconds:8.2f} s {spec.tokens_per_second:8.1f} tok/s end-to-end"
        f" {spec.decode_tokens_per_second:8.1f} tok/s decode"
        + (f"  ({result.proposer}, acceptance {s.acceptance_rate:.0%}, "
           f"{s.tokens_per_speculative_step:.2f} tokens per speculative step, {s.plain_step_share:.0%} plain steps, {s.target_forward_passes} target passes)"
           if s and s.speculative_steps else f"  ({result.proposer}: nothing proposed, every step plain)" if s else ""),
        f"speedup {result.speedup:.2f}x (end-to-end tok/s, own clocks)",
        result.verdict,
    ]
    return "\n".join(lines)
