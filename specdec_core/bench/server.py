"""`specdec bench --target http://HOST:PORT`: the prompt set through a server, with its figures.

A server decodes with its own draft and no request turns that off (see specdec_core/server), so
there are no modes to compare: each prompt runs `--repeats` times (after one untimed warm-up),
prompts in file order, the server's prompt cache off so every run pays its prefill. What is
measured per run: tokens, the client's seconds and time to the first token (network
included), the server's own tokens/s, and its drafted/accepted figures; the report gives
medians per category and overall, α = accepted / drafted and τ = tokens / verification over
the runs. Writes DIR/report.json and DIR/report.md.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from . import BenchError
from .cli import command_line


def refuse_local_flags(args) -> None:
    """Flags that only mean something for local models."""
    if args.baseline not in ("none", ""):
        raise BenchError("--baseline compares local models on this machine; a server target has none (drop it)")
    if args.draft not in ("default", "none", ""):
        raise BenchError("--draft: a server target drafts with its own draft model (drop --draft)")


def run_server_bench(args) -> int:
    from ..cli import open_from_args
    from ..settings import DecodeSettings, SamplingParams
    from .prompts import load_prompts
    from .report import write_json

    refuse_local_flags(args)
    cats = [c.strip() for c in args.categories.split(",") if c.strip()] if args.categories else None
    prompts = load_prompts(args.prompts, cats, args.limit)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BenchError(f"--out: {str(out)!r} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    # the server drafts with its own draft length and proposer
    settings = DecodeSettings(args.max_new_tokens, SamplingParams(args.temperature, args.top_k, args.top_p),
                              seed=args.seed)
    engine = open_from_args(args, need_draft=False)
    server = engine.server_info()
    started = time.perf_counter()
    print(f"specdec bench: {len(prompts)} prompts x {args.repeats} repeats on the {server.engine} server at "
          f"{server.url} -> {out}", file=sys.stderr)
    if args.warmup_tokens:
        _one(engine, prompts[0], settings.replace(max_new_tokens=min(args.warmup_tokens, args.max_new_tokens))
             .for_sample(0))
    runs = []
    for p in prompts:
        for r in range(args.repeats):
            rec = _one(engine, p, settings.for_sample(r))
            rec.update(prompt=p.id, category=p.category, repeat=r)
            runs.append(rec)
            if not args.no_progress:
                print(f"  {p.id} #{r}: {rec['new_tokens']} tokens, {rec['tokens_per_second']:.1f} tok/s",
                      file=sys.stderr)
    report = {
        "schema": 1,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(args, server=True),
        "note": args.note,
        "server": server.to_dict(),
        "models": {"target": engine.target_info.summary(),
                   "draft": engine.draft_info.summary() if engine.draft_info is not None else None},
        "settings": {"prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                     "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed, "repeats": args.repeats,
                     "warmup_tokens": args.warmup_tokens},
        "wall_seconds": time.perf_counter() - started,
        "summary": summarize(runs),
        "runs": runs,
    }
    write_json(out / "report.json", report)
    (out / "report.md").write_text(render_markdown(report), encoding="utf-8")
    o = report["summary"]["overall"]
    print(f"overall: {o['tokens_per_second']:.1f} tok/s (client), {o['server_tokens_per_second']:.1f} tok/s "
          f"(server's clock), alpha {_f(o['acceptance_rate'])}, tau {_f(o['mean_accepted_per_step'])}")
    print(f"report: {out / 'report.md'}")
    return 0


def _one(engine, prompt, settings) -> dict:
    gen = engine.generate(engine.encode_chat(list(prompt.messages)), settings, cancel=threading.Event())
    gen.run()
    s = gen.stats
    return {
        "new_tokens": s.new_tokens,
        "seconds": s.seconds,
        "ttft_s": s.prefill_seconds,
        "tokens_per_second": s.tokens_per_second,
        "server_tokens_per_second": s.server.get("tokens_per_second", 0.0),
        "draft_tokens": s.draft_tokens,
        "accepted_draft_tokens": s.accepted_draft_tokens,
        "verifications": s.target_forward_passes,
        "stop_reason": s.stop_reason,
        "figures": s.server.get("figures", ""),
        "text": gen.text,
    }


def summarize(runs: list[dict]) -> dict:
    def figures(rs):
        drafted = sum(r["draft_tokens"] for r in rs)
        accepted = sum(r["accepted_draft_tokens"] for r in rs)
        verifs = sum(r["verifications"] for r in rs)
        return {
            "runs": len(rs),
            "tokens_per_second": statistics.median(r["tokens_per_second"] for r in rs),
            "server_tokens_per_second": statistics.median(r["server_tokens_per_second"] for r in rs),
            "ttft_s": statistics.median(r["ttft_s"] for r in rs),
            "acceptance_rate": accepted / drafted if drafted else None,
            "mean_accepted_per_step": sum(r["new_tokens"] for r in rs) / verifs if verifs else None,
        }

    cats = list(dict.fromkeys(r["category"] for r in runs))
    return {"overall": figures(runs), "categories": {c: figures([r for r in runs if r["category"] == c]) for c in cats}}


def _f(v, nd=2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def render_markdown(report: dict) -> str:
    srv = report["server"]
    lines = [
        f"# Server benchmark: {srv['engine']} at {srv['url']}",
        "",
        f"`{report['command']}`",
        "",
        f"Target: {report['models']['target']}  ",
        f"Draft: {report['models']['draft'] or 'none the server reports'}  ",
        f"Figures: {report['runs'][0]['figures'] if report['runs'] else '-'}",
        "",
        "The server decodes with its own draft; no request can turn drafting off, so this measures the "
        "server as it is. Client tok/s and time to first token include the network; the server's tok/s "
        "is its own decode clock.",
        "",
        "| category | runs | tok/s (client) | tok/s (server) | first token s | α | τ |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = list(report["summary"]["categories"].items()) + [("**overall**", report["summary"]["overall"])]
    for name, f in rows:
        lines.append(f"| {name} | {f['runs']} | {_f(f['tokens_per_second'], 1)} | "
                     f"{_f(f['server_tokens_per_second'], 1)} | {_f(f['ttft_s'])} | {_f(f['acceptance_rate'])} | "
                     f"{_f(f['mean_accepted_per_step'])} |")
    if report.get("note"):
        lines += ["", report["note"]]
    return "\n".join(lines) + "\n"
