"""`specdec bench --target http://HOST:PORT`: the prompt set through a server, with its figures.

A server decodes with its own draft and no request turns that off (see specdec_core/remote), so
there are no modes to compare: each prompt runs `--repeats` times (after one untimed warm-up),
prompts in file order, the server's prompt cache off so every run pays its prefill. What is
measured per run: tokens, the client's seconds and time to the first token (network
included), the server's own tokens/s, and its proposed/accepted figures; the report gives
medians per category and overall, α = accepted / proposed and τ = tokens / verification over
the runs. Writes DIR/report.json and DIR/report.md.
"""

from __future__ import annotations

import statistics
import sys
import threading

from ..renamed_figures import report_under_current_names
from .markdown import skipped_lines, table
from .report import report_head


def run_server_suite(engine, prompts, settings, repeats: int, warmup_tokens: int, progress: bool = True) -> list[dict]:
    """Every prompt `repeats` times, in file order, after one untimed warm-up of `warmup_tokens`
    (none for 0); repeat r runs with `settings.for_sample(r)`. -> one record per run."""
    if warmup_tokens:
        _one(engine, prompts[0], settings.replace(max_new_tokens=min(warmup_tokens, settings.max_new_tokens))
             .for_sample(0))
    runs = []
    for p in prompts:
        for r in range(repeats):
            rec = _one(engine, p, settings.for_sample(r))
            rec.update(prompt=p.id, category=p.category, repeat=r)
            runs.append(rec)
            if progress:
                print(f"  {p.id} #{r}: {rec['new_tokens']} tokens, {rec['tokens_per_second']:.1f} tok/s",
                      file=sys.stderr)
    return runs


def server_report(engine, prompts, settings, repeats: int, warmup_tokens: int, runs: list[dict], command: str,
                  note: str | None, wall_seconds: float, skipped: list[dict] = ()) -> dict:
    s = settings.sampling
    return {
        **report_head(command, note),
        "server": engine.server_info().to_dict(),
        "models": {"target": engine.target_info.summary(),
                   "draft": engine.draft_info.summary() if engine.draft_info is not None else None},
        "settings": {"prompts": len(prompts), "max_new_tokens": settings.max_new_tokens, "temperature": s.temperature,
                     "top_k": s.top_k, "top_p": s.top_p, "seed": settings.seed, "repeats": repeats,
                     "warmup_tokens": warmup_tokens},
        "wall_seconds": wall_seconds,
        "summary": summarize(runs),
        "runs": runs,
        "skipped": list(skipped),
    }


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
        "proposed_tokens": s.proposed_tokens,
        "accepted_tokens": s.accepted_tokens,
        "verifications": s.target_forward_passes,
        "stop_reason": s.stop_reason,
        "figures": s.server.get("figures", ""),
        "text": gen.text,
    }


def summarize(runs: list[dict]) -> dict:
    def figures(rs):
        proposed = sum(r["proposed_tokens"] for r in rs)
        accepted = sum(r["accepted_tokens"] for r in rs)
        verifs = sum(r["verifications"] for r in rs)
        return {
            "runs": len(rs),
            "tokens_per_second": statistics.median(r["tokens_per_second"] for r in rs),
            "server_tokens_per_second": statistics.median(r["server_tokens_per_second"] for r in rs),
            "ttft_s": statistics.median(r["ttft_s"] for r in rs),
            "acceptance_rate": accepted / proposed if proposed else None,
            "tokens_per_speculative_step": sum(r["new_tokens"] for r in rs) / verifs if verifs else None,
        }

    cats = list(dict.fromkeys(r["category"] for r in runs))
    return {"overall": figures(runs), "categories": {c: figures([r for r in runs if r["category"] == c]) for c in cats}}


def _f(v, nd=2) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def render_markdown(report: dict) -> str:
    """report.md of a server run's report (of any schema)."""
    report = report_under_current_names(report)
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
    ]
    groups = list(report["summary"]["categories"].items()) + [("**overall**", report["summary"]["overall"])]
    lines += table(["category", "runs", "tok/s (client)", "tok/s (server)", "first token s", "α", "τ"],
                   ([name, f["runs"], _f(f["tokens_per_second"], 1), _f(f["server_tokens_per_second"], 1),
                     _f(f["ttft_s"]), _f(f["acceptance_rate"]), _f(f["tokens_per_speculative_step"])]
                    for name, f in groups), right=range(1, 7))
    if report.get("skipped"):
        lines += [""] + skipped_lines(report["skipped"])
    if report.get("note"):
        lines += ["", report["note"]]
    return "\n".join(lines) + "\n"
