"""How often the embedded draft's proposals are kept, by the target's margin there, at a
temperature: the evidence behind the start rule's `alpha_floor` / `alpha_slope` (adaptive.py,
rule 5; docs/speed-notes.md, item 56).

For each tuning-half prompt of the named categories, one answer with the draft model alone at a
fixed k (no early stop, no lookup), and for every proposed position the target reached -- the
accepted ones and the first rejected one -- the target's top-1 minus top-2 logit there and
whether the token was kept. The controller's own observation hook is wrapped (a fixed-k policy
learns nothing, so wrapping it changes no decision); the text is the engine's real decoding.

    python scripts/start_rule_calibration.py --temperature 0.7 --per-category 3 --out cal.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

from specdec_core import adaptive
from specdec_core.bench.prompts import BenchPrompt, load_prompts
from specdec_core.engine import Engine
from specdec_core.settings import DecodeSettings, SamplingParams

CATEGORIES = "explanation,creative,chat,advice,factual,translation,code,math,how-to"
BUCKETS = ((0, 0.5), (0.5, 1), (1, 2), (2, 3), (3, 5), (5, float("inf")))


def record(engine: Engine, prompts: list[BenchPrompt], temperature: float, k: int) -> list[tuple[str, float, bool]]:
    rows: list[tuple[str, float, bool]] = []
    category = {"now": ""}
    observe = adaptive.FixedDraftLength.observe

    def keep(self, o):  # every position the target reached: kept before the first miss, then the miss
        if o.source == "draft" and o.margins:
            for i in range(min(o.accepted + 1, o.proposed, len(o.margins))):
                rows.append((category["now"], o.margins[i], i < o.accepted))
        observe(self, o)

    adaptive.FixedDraftLength.observe = keep
    try:
        for p in prompts:
            category["now"] = p.category
            ids = engine.encode_chat(list(p.messages))
            g = engine.generate(ids, DecodeSettings(128, SamplingParams(temperature), k, seed=1, proposer="draft"))
            for _ in g:
                pass
            print(f"{p.id:34s} alpha {g.stats.acceptance_rate:.2f}", flush=True)
    finally:
        adaptive.FixedDraftLength.observe = observe
    return rows


def summary(rows: list[tuple[str, float, bool]], sure: float) -> str:
    def rate(xs):
        return f"{sum(xs) / len(xs):.3f} (n={len(xs)})" if xs else "-"

    lines = [f"margin >= {sure}: kept {rate([a for _, m, a in rows if m >= sure])}; "
             f"below: kept {rate([a for _, m, a in rows if m < sure])}"]
    lines += [f"  margin [{lo}, {hi}): kept {rate([a for _, m, a in rows if lo <= m < hi])}" for lo, hi in BUCKETS]
    by = defaultdict(list)
    for c, m, a in rows:
        by[c].append((m, a))
    lines += [f"  {c:12s} sure {rate([a for m, a in v if m >= sure])}  unsure {rate([a for m, a in v if m < sure])}"
              for c, v in by.items()]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--categories", default=CATEGORIES)
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--out", help="write the rows (category, margin, kept) as JSON here")
    args = ap.parse_args()
    # one-shot prompts only: a conversation's later turns would need the earlier answers
    prompts = [p for p in load_prompts(categories=args.categories.split(","), limit=args.per_category, split="tuning")
               if not p.conversation]
    rows = record(Engine.load("default", "default"), prompts, args.temperature, args.k)
    print(summary(rows, adaptive.AdaptiveDraftLength.sure_margin))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
