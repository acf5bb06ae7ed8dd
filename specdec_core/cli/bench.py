"""`specdec bench`: its flags, what they are checked into before a model loads, and the run --
on local models (every mode interleaved, with the peers) or through a server (bench/server.py).
The measuring and the report live in specdec_core/bench; this module only wires them."""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..bench import BenchError
from ..settings import DecodeSettings, SamplingParams
from .args import UsageError, add_model_args, int_at_least, open_from_args


def add_parser(sub) -> None:
    b = sub.add_parser(
        "bench",
        help="benchmark standard vs speculative decoding, write a report",
        description="Run standard decoding, speculative decoding at each draft length, prompt lookup and "
                    "(with --baseline hf) transformers' generate(), interleaved on the same prompts; write "
                    "DIR/report.json, DIR/report.md and PNG figures.",
    )
    add_model_args(b)
    b.add_argument("--prompts", metavar="FILE|corpus|classic",
                   help='JSONL of {"category": ..., "prompt": ...}, {"category": ..., "messages": [...]} or '
                        '{"category": ..., "turns": [...]} (a conversation); or a built-in set: corpus (the default, '
                        "assets/bench_corpus.jsonl: 180 prompts, 15 kinds of text, split into tuning and holdout "
                        "halves) or classic (assets/bench_prompts.jsonl, the 18 prompts of the earlier reports)")
    b.add_argument("--split", choices=("tuning", "holdout"), default=None,
                   help="only that half of the prompt set (tune on tuning, report holdout on its own)")
    b.add_argument("--categories", metavar="A,B", help="only these categories (e.g. code,chat)")
    b.add_argument("--limit", type=int_at_least("--limit"), metavar="N", help="at most N prompts per category")
    b.add_argument("--max-new-tokens", type=int_at_least("--max-new-tokens"), default=128)
    b.add_argument("--draft-tokens", default="1,2,4,8,adaptive", metavar="K,K,...|adaptive|none|default",
                   help="draft lengths to measure, comma-separated (default 1,2,4,8,adaptive); 'none' = no draft "
                        "model; 'default' = only the default mode beside standard")
    b.add_argument("--lookup-tokens", default="4", metavar="K|adaptive|none",
                   help="draft length of the prompt-lookup proposer (default 4); 'none' skips that mode")
    b.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (and the identical-text check)")
    b.add_argument("--top-k", type=int, default=0, help="0 = off")
    b.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--repeats", type=int_at_least("--repeats"), default=3, help="runs per prompt and mode (default 3)")
    b.add_argument("--min-seconds", type=float, default=0.0, metavar="S",
                   help="repeat a prompt past --repeats (every mode, up to --max-repeats runs) until standard's "
                        "answers to it add up to S seconds: a short answer's ratio from one run is mostly the "
                        "machine's noise (default 0: exactly --repeats)")
    b.add_argument("--max-repeats", type=int_at_least("--max-repeats"), default=8,
                   help="the most runs per prompt and mode that --min-seconds may ask for (default 8)")
    b.add_argument("--warmup-tokens", type=int_at_least("--warmup-tokens", 0), default=16,
                   help="tokens per mode in the excluded warm-up run (0 = no warm-up)")
    b.add_argument("--cold-start", action="store_true",
                   help="every first turn pays its whole prompt, the chat template's head too (default: the "
                        "caches hold that head, as a new chat in the app finds them)")
    b.add_argument("--no-read-ahead", action="store_true",
                   help="a conversation's later turns without the draft's read, between the turns, of what it "
                        "skipped (default: that read runs, as the app runs it while the user types, and is "
                        "reported beside the turn, not in its time)")
    b.add_argument("--read-while-writing", action="store_true",
                   help="a single-turn prompt's message up to its last paragraph (the document or code it "
                        "asks about) is read before the send, in our modes, as the app reads an attachment "
                        "while the user writes the question; not in the send's time, reported beside it "
                        "(default: every prompt read at its send, as a pasted message is)")
    b.add_argument("--baseline", default="none", metavar="hf,llama.cpp|none",
                   help="peers to time beside our modes, comma-separated: hf = transformers' generate() and "
                        "generate(assistant_model=draft); llama.cpp = llama.cpp's plain decoding and its own "
                        "speculative decoding on the same GGUF files (needs --llama-cpp)")
    b.add_argument("--llama-cpp", metavar="DIR", default=None,
                   help="the folder with llama.cpp's llama-completion and llama-speculative-simple "
                        "(default: $SPECDEC_LLAMA_CPP; `bash scripts/build-llamacpp.sh` builds them)")
    b.add_argument("--note", default=None, help="a sentence about the conditions, copied into the report")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument("--out", required=True, metavar="DIR", help="where report.json, report.md and the PNGs go")


def command_line(args, server: bool = False) -> str:
    """The exact command, rebuilt from the parsed flags (every value spelled out). With a server
    as the target only the flags that apply to it; an API key is never written."""
    local = not server
    parts = ["specdec", "bench", "--target", args.target] + (["--draft", args.draft] if local else [])
    if args.prompts:
        parts += ["--prompts", args.prompts]
    if args.split:
        parts += ["--split", args.split]
    if args.categories:
        parts += ["--categories", args.categories]
    if args.limit:
        parts += ["--limit", str(args.limit)]
    parts += ["--max-new-tokens", str(args.max_new_tokens)]
    if local:
        parts += ["--draft-tokens", args.draft_tokens, "--lookup-tokens", args.lookup_tokens]
    parts += ["--temperature", f"{args.temperature:g}"]
    if args.temperature > 0:
        parts += ["--top-k", str(args.top_k), "--top-p", f"{args.top_p:g}", "--seed", str(args.seed)]
    parts += ["--repeats", str(args.repeats)]
    if local and getattr(args, "min_seconds", 0) > 0:
        parts += ["--min-seconds", f"{args.min_seconds:g}", "--max-repeats", str(args.max_repeats)]
    parts += ["--warmup-tokens", str(args.warmup_tokens)]
    if local and getattr(args, "cold_start", False):
        parts += ["--cold-start"]
    if local and getattr(args, "no_read_ahead", False):
        parts += ["--no-read-ahead"]
    if local and getattr(args, "read_while_writing", False):
        parts += ["--read-while-writing"]
    if local:
        parts += ["--baseline", args.baseline]
        if args.llama_cpp:
            parts += ["--llama-cpp", args.llama_cpp]
        parts += ["--device", args.device, "--dtype", args.dtype]
        if args.quantization:
            parts += ["--quantization", args.quantization]
    parts += ["--out", args.out]
    return " ".join(shlex.quote(p) for p in parts)


def run(args) -> int:
    from ..remote import is_server_spec

    try:
        if is_server_spec(args.target):  # a server: its own runner and report (bench/server.py)
            return _run_server(args)
        return _run_local(args)
    except BenchError as exc:
        raise UsageError(str(exc)) from None


# -- checked before anything loads ----------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """What the flags ask for, checked: the prompts, the settings every run shares, the out folder."""

    prompts: list
    decode: DecodeSettings  # each mode sets its own mode, proposer and draft length; each repeat its seed
    out: Path


def _plan(args) -> Plan:
    from ..bench.prompts import load_prompts

    try:
        decode = DecodeSettings(args.max_new_tokens, SamplingParams(args.temperature, args.top_k, args.top_p),
                                seed=args.seed)
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    if not 0 <= args.min_seconds < float("inf"):
        raise BenchError(f"--min-seconds takes seconds >= 0, got {args.min_seconds:g}")
    cats = [c.strip() for c in args.categories.split(",") if c.strip()] if args.categories else None
    if args.categories is not None and not cats:
        raise BenchError("--categories: give at least one category name, e.g. code,chat")
    prompts = load_prompts(args.prompts, cats, args.limit, args.split)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BenchError(f"--out: {str(out)!r} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"--out: cannot create {str(out)!r} ({exc.strerror})") from None
    return Plan(prompts, decode, out)


def _modes(args) -> tuple[list, set[str]]:
    """(modes, baselines) from --draft-tokens, --lookup-tokens and --baseline; a peer's missing
    tool, or a missing draft, is said before any model loads."""
    from ..bench.modes import build_modes, parse_baselines, parse_draft_lengths, parse_lookup_tokens

    draft_lengths = parse_draft_lengths(args.draft_tokens)
    lookup = parse_lookup_tokens(args.lookup_tokens)
    baselines = parse_baselines(args.baseline)
    modes = build_modes(draft_lengths, lookup, "hf" in baselines, "llama.cpp" in baselines)
    if "llama.cpp" in baselines:
        from ..bench.llamacpp import find_tools

        find_tools(args.llama_cpp)
    if any(m.needs_draft for m in modes) and args.draft in ("none", ""):
        raise BenchError("--draft none: the draft-model modes need a draft; pass --draft-tokens none "
                         "(and no --baseline) to measure without one")
    return modes, baselines


# -- local models ------------------------------------------------------------------------------
def _run_local(args) -> int:
    import torch

    from ..bench.machine import code_identity, load_average, machine_info
    from ..bench.memory import PeakMemory
    from ..bench.report import build_report, write_report
    from ..bench.runner import RunSettings, run_suite
    from ..events import near_tie_margin

    modes, baselines = _modes(args)
    plan = _plan(args)
    started = time.perf_counter()
    machine = machine_info()
    print(f"specdec bench: {len(plan.prompts)} prompts x {len(modes)} modes x {args.repeats} repeats "
          f"-> {plan.out}", file=sys.stderr)
    engine = open_from_args(args, any(m.needs_draft for m in modes))
    prompts, skipped = _fitting(engine, plan)
    hf, llama = _peers(engine, baselines, args.llama_cpp, torch.get_num_threads())
    near_tie = near_tie_margin(engine.target_info.dtype)
    # first turns start from the template's head, as a new chat in the app (runner.py)
    head = None if args.cold_start or not hasattr(engine, "template_head") else len(engine.template_head)
    writing = args.read_while_writing and head is not None and hasattr(engine, "read_prompt")
    max_repeats = max(args.max_repeats, args.repeats)  # --min-seconds never runs fewer than --repeats
    with PeakMemory(engine.target_info.device) as memory:
        raw = run_suite(engine, prompts, modes, RunSettings(plan.decode, args.repeats, args.warmup_tokens, head,
                                                            not args.no_read_ahead, writing,
                                                            args.min_seconds, max_repeats),
                        memory, hf, progress=not args.no_progress, near_tie=near_tie, llama=llama)
    machine["load_average_end"] = load_average()
    settings = {"prompt_file": _prompt_file(args.prompts), "split": args.split,
                "repeats": args.repeats, "min_seconds": args.min_seconds,
                "max_repeats": max_repeats,
                "warmup_tokens": args.warmup_tokens, "baseline": args.baseline,
                "threads": torch.get_num_threads(),
                "first_turns": "cold" if head is None else f"template head cached ({head} tokens)",
                "between_turns": ("no read" if args.no_read_ahead or not hasattr(engine, "read_ahead") else
                                  "the draft reads what it skipped (not in the turns' time)"),
                "before_the_send": ("the target and the draft read the message up to its last paragraph "
                                    "(not in the send's time)" if writing else "nothing read"),
                "code": code_identity()}
    report = build_report(raw, prompts, modes, plan.decode, settings, engine, machine, memory.method, near_tie,
                          command_line(args), args.note, time.perf_counter() - started, skipped)
    write_report(plan.out, report)
    _print_summary(report, plan.out)
    return 0


def _prompt_file(prompts: str | None) -> str:
    from ..bench.prompts import BUILTIN_SETS, builtin_file

    if prompts is None or prompts in BUILTIN_SETS:
        return f"assets/{builtin_file(prompts)}"
    return Path(prompts).name


def _fitting(engine, plan: Plan) -> tuple[list, list[dict]]:
    """The prompts that fit the target's context with the answer budget, before anything runs;
    each one that does not is said, and reported as skipped with the reason."""
    from ..bench.prompts import split_by_fit

    prompts, skipped = split_by_fit(engine, plan.prompts, plan.decode.max_new_tokens)
    for s in skipped:
        print(f"specdec bench: skipping {s['prompt_id']}: {s['reason']}", file=sys.stderr)
    if not prompts:
        raise BenchError(f"no prompt fits the target's context ({engine.context_length} tokens) with "
                         f"--max-new-tokens {plan.decode.max_new_tokens}: lower it, or give shorter prompts")
    return prompts, skipped


def _peers(engine, baselines: set[str], llama_dir, threads: int):
    """(transformers' baseline, llama.cpp's) on the loaded models, None where not asked for."""
    hf = llama = None
    if "hf" in baselines:
        from ..bench.hf import HFBaseline

        hf = HFBaseline(engine.target, engine.draft)
    if "llama.cpp" in baselines:
        from ..bench.llamacpp import LlamaCpp

        if engine.target.gguf_path is None or (engine.draft is not None and engine.draft.gguf_path is None):
            raise BenchError("--baseline llama.cpp compares on the same GGUF files: give GGUF target and draft SPECs")
        llama = LlamaCpp(llama_dir, engine.target.gguf_path,
                         engine.draft.gguf_path if engine.draft is not None else None, threads)
    return hf, llama


def _print_summary(report: dict, out: Path) -> None:
    from ..bench.modes import HF_ASSISTED, LLAMACPP

    overall = report["summary"]["overall"]
    greedy = report["settings"]["temperature"] == 0
    # tok/s end-to-end (prefill included) and decode (after the first token): Stats' two rates
    print(f"{'mode':<28} {'tok/s e2e':>9} {'decode':>6} {'x std':>6} {'x hf-asst':>9} {'x llama':>7} {'alpha':>6} "
          f"{'tau':>5} {'plain':>5}" + ("  identical" if greedy else ""))
    for m in report["modes"]:
        f = overall[m["name"]]

        def num(v, fmt):
            return format(v, fmt) if v is not None else "-"

        line = (f"{m['name']:<28} {num(f['tokens_per_second'], '9.1f')} {num(f['decode_tokens_per_second'], '6.1f')} "
                f"{num(f['speedup_vs_standard'], '6.2f')} {num(f.get('speedup_vs_' + HF_ASSISTED), '9.2f')} "
                f"{num(f.get('speedup_vs_' + LLAMACPP), '7.2f')} "
                f"{num(f['acceptance_rate'], '6.0%')} {num(f['tokens_per_speculative_step'], '5.2f')} "
                f"{num(f['plain_step_share'], '5.0%')}")
        if greedy:
            line += f"  {f['identical']}/{f['compared']}" if f["compared"] else "  -"
        print(line)
    print(f"report: {out / 'report.md'}")


# -- a server -----------------------------------------------------------------------------------
def _run_server(args) -> int:
    """The prompt set through a server, which decodes with its own draft: no modes to compare."""
    from ..bench.report import save
    from ..bench.server import render_markdown, run_server_suite, server_report

    if args.baseline not in ("none", ""):
        raise BenchError("--baseline compares local models on this machine; a server target has none (drop it)")
    if args.draft not in ("default", "none", ""):
        raise BenchError("--draft: a server target drafts with its own draft model (drop --draft)")
    if args.min_seconds > 0:
        raise BenchError("--min-seconds times standard beside the default on this machine; a server target has "
                         "one mode (use --repeats)")
    plan = _plan(args)
    engine = open_from_args(args, need_draft=False)
    server = engine.server_info()
    started = time.perf_counter()
    print(f"specdec bench: {len(plan.prompts)} prompts x {args.repeats} repeats on the {server.engine} server at "
          f"{server.url} -> {plan.out}", file=sys.stderr)
    prompts, skipped = _fitting(engine, plan)
    runs = run_server_suite(engine, prompts, plan.decode, args.repeats, args.warmup_tokens,
                            progress=not args.no_progress)
    report = server_report(engine, prompts, plan.decode, args.repeats, args.warmup_tokens, runs,
                           command_line(args, server=True), args.note, time.perf_counter() - started, skipped)
    save(plan.out, report, render_markdown(report))
    o = report["summary"]["overall"]
    print(f"overall: {o['tokens_per_second']:.1f} tok/s (client), {o['server_tokens_per_second']:.1f} tok/s "
          f"(server's clock), alpha {_f(o['acceptance_rate'])}, tau {_f(o['tokens_per_speculative_step'])}")
    print(f"report: {plan.out / 'report.md'}")
    return 0


def _f(v, nd=2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"
