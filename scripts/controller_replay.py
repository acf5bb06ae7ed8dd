"""Replay the adaptive controller offline on recorded greedy answers (a dev tool, speed notes).

Why: a lever of the controller (adaptive.py) changes when the draft starts, which lookup matches
propose, when a source stops -- its effect on speed is what to predict before a bench run, and a
bench run on this 2-core machine takes minutes and drifts with whatever else runs. A greedy
answer does not depend on the rule that sped it up, so one recording per prompt lets any rule be
replayed in milliseconds with a cost model of this machine's passes.

  record: the target's greedy answer (tokens, text pieces, top-1 minus top-2 margins) and, at
          every answer position, the draft's greedy pick and its probability given the text so
          far as the draft would see it (the prompt's last FIRST_READ tokens, then the answer).
          A greedy draft that agrees with the target proposes exactly the target's tokens, so
          how many of its proposals a step keeps is known from one pass.
  replay: drives the real AdaptiveDraftLength and the real prompt-lookup index through the
          decoder's loop with times from a cost model (plain step, verified row, drafted token,
          the draft's read per token, the target's prefill per row).

    python scripts/controller_replay.py record --split tuning --out /tmp/rec [--categories a,b]
    python scripts/controller_replay.py replay /tmp/rec [--costs vnni|avx2|vnni-rows|...] [--budget 256]
    python scripts/controller_replay.py oracle /tmp/rec [--costs ...]   (the ceiling: see oracle_one)

Approximations (say so beside any figure): after the draft's first disagreement in a step the
picks it would go on proposing are not recorded (their probabilities are taken as 0.5: they only
set how many rows are verified); the draft's catch-up windows inside the answer are not
modelled (it sees the whole answer); conversations are not replayed (the bench measures them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

FIRST_READ = 128

# seconds; plain step = base + per_ctx * context tokens, the prefill's row prefill_row +
# prefill_quad * prompt tokens (attention); row, draft token and read in plain
# steps of the same context (measured on the project's Intel VM: speed notes items 39-47)
COSTS = {
    "vnni": dict(base=0.052, per_ctx=0.000016, row=0.16, draft=0.30, read=0.032, prefill_row=0.0051, prefill_quad=0.000003),
    "avx2": dict(base=0.060, per_ctx=0.000018, row=0.22, draft=0.35, read=0.04, prefill_row=0.006, prefill_quad=0.0000035),
    # the Intel VM on 2026-12-07 (passbench at context 256, avx512vnni build, medians; speed notes
    # item 105): a pass of n rows in one-row steps, v[n - 1]; draft_row: a row more in a draft's pass,
    # in draft passes (measured 0.09-0.13 here, 0.20-0.27 on avx2; --guess only)
    "vnni-rows": dict(base=0.0489, per_ctx=0.000016, row=0.10, draft=0.26, draft_row=0.15, read=0.037, prefill_row=0.0061,
                      prefill_quad=0.000003, rows=[1.0, 1.08, 1.15, 1.22, 1.36, 1.44, 1.52, 1.60, 1.76, 1.88, 2.0,
                                                   2.11, 2.21, 2.31, 2.42, 2.52, 2.71]),
    # the same VM and sitting, the avx2 build
    "avx2-rows": dict(base=0.0532, per_ctx=0.000018, row=0.13, draft=0.24, draft_row=0.25, read=0.053, prefill_row=0.0099,
                      prefill_quad=0.0000035, rows=[1.0, 1.05, 1.15, 1.24, 1.50, 1.62, 1.74, 1.86, 2.04, 2.24, 2.44,
                                                    2.63, 2.78, 2.93, 3.09, 3.24, 3.42]),
    # the 2-core AMD Zen 4 VM on 2026-12-07 (passbench at context 256, avx512vnni build, medians;
    # speed notes item 109): past 4 rows the K-quants' passes go through the unit's scratch
    "zen4": dict(base=0.0345, per_ctx=0.000012, row=0.15, draft=0.27, draft_row=0.10, read=0.073, prefill_row=0.0070,
                 prefill_quad=0.000003, rows=[1.0, 1.12, 1.33, 1.54, 2.29, 2.36, 2.50, 2.62, 2.77, 3.02, 3.17, 3.28,
                                              3.47, 3.64, 3.69, 3.98, 4.16]),
    # the same VM on 2026-12-07 (f) with the ymm copy for 5-16 rows (item 115; passbench at context
    # 256, avx512vnni build, medians; the draft's 64-row read 2.16 ms a token; speed notes item 116)
    "zen4-ymm": dict(base=0.0287, per_ctx=0.000012, row=0.15, draft=0.31, draft_row=0.08, read=0.068, prefill_row=0.0070,
                     prefill_quad=0.000003, rows=[1.0, 1.15, 1.47, 1.59, 2.02, 2.24, 2.50, 2.74, 3.10, 3.23, 3.44, 3.56,
                                                  3.84, 4.04, 4.24, 4.54, 4.64]),
    # the same VM and sitting with the blocks ahead hinted into L2 (item 116; zmm for every pass of
    # the target, passbench medians at context 256, interleaved with the parent's kernel)
    "zen4-l2": dict(draft_pass=[0.32, 0.35, 0.50, 0.57],  # the draft's 1-4-row passes (item 117)
                    base=0.0265, per_ctx=0.000012, row=0.15, draft=0.33, draft_row=0.08, read=0.077, prefill_row=0.0065,
                    prefill_quad=0.000003, rows=[1.0, 1.04, 1.26, 1.48, 2.02, 2.22, 2.43, 2.63, 2.81, 2.95, 3.10, 3.38,
                                                 3.59, 3.80, 4.01, 4.22, 4.30]),
    # the same VM on 2026-12-07 (g), the avx2 build (passbench at context 256, medians, one process with
    # avx512vnni's: 1 row 33.0 ms against 30.9; the draft's one-row pass 10.0 ms, its 64-row read 3.7 ms a
    # token; the target's 64-row pass 10.6 ms a row; speed notes item 117)
    "zen4-avx2-l2": dict(draft_pass=[0.30, 0.42, 0.52, 0.61], base=0.0299, per_ctx=0.000012, row=0.32, draft=0.30,
                         draft_row=0.25, read=0.113,
                         prefill_row=0.0097, prefill_quad=0.0000035,
                         rows=[1.0, 1.13, 1.37, 1.68, 2.39, 2.76, 2.99, 3.06, 3.59, 3.64, 4.00, 4.25, 4.54, 4.61, 5.10,
                               5.29, 6.12]),
    # the same with 5-8 rows on the direct path (item 109, tried and not taken: those passes 0.80-0.82 of
    # the unit's)
    "zen4-direct8": dict(base=0.0345, per_ctx=0.000012, row=0.15, draft=0.27, draft_row=0.10, read=0.073,
                         prefill_row=0.0070, prefill_quad=0.000003,
                         rows=[1.0, 1.12, 1.33, 1.54, 1.88, 1.94, 2.01, 2.15, 2.77, 3.02, 3.17, 3.28, 3.47, 3.64, 3.69,
                               3.98, 4.16]),
    # the 2-core AMD Zen 5 VM after speed notes items 62-63 (avx512vnni kernel): a one-row step is
    # memory-bound and fast, so a verification's cost is not linear in its rows -- v[n] is a pass
    # of n rows in one-row steps (measured at context 200; speed notes item 64)
    "zen5": dict(base=0.0228, per_ctx=0.0000052, row=0.18, draft=0.36, read=0.043, prefill_row=0.0044,
                 prefill_quad=0.0000003, rows=[1.0, 1.072, 1.287, 1.812, 1.884, 2.012, 2.072, 2.167, 2.381, 2.49, 2.535,
                                               2.656, 2.797, 2.778, 2.932, 3.557, 3.867]),
}


def read_cost(cost: dict, n: int, merged: bool) -> float:
    """The draft's read of n tokens before it proposes, in one-row target steps: where the machine
    has a table of the draft's passes (draft_pass[r - 1]: a pass of r rows, then `read` a row
    more), a pass of its own (`merged` False) or the extra rows of its first proposing pass
    (True); else n reads at `read` each."""
    if n <= 0:
        return 0.0
    table = cost.get("draft_pass")
    if not table:
        return n * cost["read"]

    def passed(r: int) -> float:
        return table[r - 1] if r <= len(table) else table[-1] + (r - len(table)) * cost["read"]
    return passed(n + 1) - passed(1) if merged else passed(n)


def verify_cost(cost: dict, k: int) -> float:
    """A verification of k proposals (k + 1 rows) in one-row steps: the machine's table where it
    has one, else linear in the rows."""
    table = cost.get("rows")
    if table:
        return table[k] if k < len(table) else table[-1] + (k + 1 - len(table)) * cost["row"]
    return 1 + cost["row"] * k


def record(args) -> None:
    from specdec_core.engine import Engine
    from specdec_core.settings import DecodeSettings
    import torch

    rows = [json.loads(line) for line in open("assets/bench_corpus.jsonl")]
    cats = set(args.categories.split(",")) if args.categories else None
    e = Engine.load("default", "default")
    draft_lm = e.proposer("lookup+draft").draft.lm
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for p in rows:
        if p["split"] != args.split or "turns" in p or (cats and p["category"] not in cats):
            continue
        path = out / f"{p['id']}.json"
        if path.exists():
            continue
        msgs = p.get("messages") or [{"role": "user", "content": p["prompt"]}]
        ids = e.encode_chat(msgs)
        g = e.generate(ids, DecodeSettings(max_new_tokens=args.max_new_tokens, mode="standard"))
        toks, pieces, margins = [], [], []
        for ev in g:
            toks.append(ev.token_id)
            pieces.append(ev.text)
            margins.append(ev.margin)
        # the draft's pick after each answer prefix (the first answer token comes from the
        # target's prefill, so the draft predicts answer[1:], given the prompt's window + answer)
        if len(toks) < 2:
            continue
        # and the same for each other first-read window asked for (--windows): what the draft
        # would pick had it read less of the prompt (a prompt within a window reads the same)
        by_window = {}
        for w in sorted({FIRST_READ, *args.windows}):
            if by_window and len(ids) <= max(by_window):
                by_window[w] = by_window[max(by_window)]
                continue
            draft_lm.reset()
            with torch.no_grad():
                logits = draft_lm.forward(ids[-w:] + toks[:-1], logits_to_keep=len(toks) - 1)  # [n-1, V]
            conf, pick = torch.softmax(logits.float(), dim=-1).max(dim=-1)
            by_window[w] = ([None] + pick.tolist(), [None] + conf.tolist())
        json.dump(dict(id=p["id"], category=p["category"], prompt=ids, answer=toks, pieces=pieces,
                       margins=margins, draft_pick=by_window[FIRST_READ][0],
                       draft_conf=by_window[FIRST_READ][1], stop=g.stats.stop_reason,
                       by_window={str(w): v for w, v in by_window.items() if w != FIRST_READ}), open(path, "w"))
        print(p["id"], len(ids), len(toks), file=sys.stderr, flush=True)



def _prefill(cost: dict, prompt: list[int], head: int) -> float:
    """The target's read of a prompt past `head`: the chat template's first tokens, which both
    models read before the message (the app after loading, the bench before each prompt:
    Engine.read_template_head)."""
    return (len(prompt) - head) * (cost["prefill_row"] + cost["prefill_quad"] * len(prompt))


def replay_one(rec: dict, cost: dict, policy_kw: dict, budget: int = 128, first_window: int = FIRST_READ,
               catchup_window: int = 16, peek: int = 0, guess: tuple[int, int] = (0, 0), head: int = 0,
               merged: bool = True) -> dict:
    """One recorded answer through the decoder's loop with the real controller and lookup index:
    (standard seconds, speculative seconds, both with the prefill, and the prefill)."""
    from specdec_core.adaptive import AdaptiveDraftLength, StepOutcome
    from specdec_core.proposers.base import DRAFT, LOOKUP
    from specdec_core.proposers.prompt_lookup import PromptLookupProposer
    from specdec_core.textkind import TextKind

    prompt, ans, pieces, margins = rec["prompt"], rec["answer"], rec["pieces"], rec["margins"]
    pick, conf = rec["draft_pick"], rec["draft_conf"]
    if str(first_window) in rec.get("by_window", {}):  # recorded with --windows
        pick, conf = rec["by_window"][str(first_window)]
    n = len(ans)

    def plain(ctx: int) -> float:
        return cost["base"] + cost["per_ctx"] * ctx

    prefill = _prefill(cost, prompt, head)
    standard = prefill + sum(plain(len(prompt) + j) for j in range(1, n))
    # --set sources='["lookup"]': lookup alone
    policy = AdaptiveDraftLength(**{**policy_kw, "sources": tuple(policy_kw.get("sources", (LOOKUP, DRAFT)))})
    policy.observe_prefill(len(prompt), prefill)
    lookup = PromptLookupProposer()
    kind = TextKind()
    kind.push(pieces[0])
    ids = prompt + ans[:1]
    emitted, seen, fresh, t = 1, head, True, prefill
    used = {"draft": [0, 0], "lookup": [0, 0]}
    catch_tokens = 0
    while emitted < n:
        ctx = len(ids)
        remaining = budget - emitted
        pending = ctx - seen
        unread = 0 if pending <= 2 else min(pending - 1, first_window if fresh else catchup_window)
        plan = policy.plan(unread, remaining - 1, kind.kind).clip(remaining - 1) if remaining > 1 else None
        source, tokens, match, expected, catch_s, catch_n, draft_s = "", [], 0, None, 0.0, 0, 0.0
        if plan is not None and not plan.empty:
            found = lookup.propose(ids, plan, None, None)
            if found.tokens and plan.draft > 0 and peek and found.match <= peek:
                # (a lever replayed, not in the decoder: speed notes item 105) the draft's first
                # pick judges a short match: the same token, lookup copies on (the draft paid one
                # token and its catch-up); another, the draft's run goes on from that token
                catch_n = unread
                catch_s = read_cost(cost, unread, merged) * plain(ctx)
                if emitted < n and pick[emitted] == found.tokens[0]:
                    draft_s = cost["draft"] * plain(ctx)
                    seen, fresh = ctx, False
                    found_tokens = list(found.tokens)
                else:
                    found_tokens = []
            else:
                found_tokens = list(found.tokens)
            if found_tokens:
                source, tokens, match = LOOKUP, found_tokens, found.match
            elif plan.draft > 0:
                source, catch_n = DRAFT, unread
                catch_s = read_cost(cost, unread, merged) * plain(ctx)  # (with a peek: the same read)
                sure, expected, ok = 1.0, 0.0, True
                # (a lever replayed, not in the decoder: speed notes item 105) with guess = (g, m),
                # each of the draft's passes also feeds lookup's next g tokens after its chain (a
                # match of m+ tokens): where the draft's pick is the guessed token, the next
                # row's logits are there already, so the pass gives another token
                passes, rows, covered, pending_guess = 0, 0, False, []
                if guess[0]:
                    lookup.index.sync(ids)
                for j in range(plan.draft):
                    pos = emitted + j
                    if not covered:
                        passes += 1
                        pending_guess = _guess(lookup.index, ids + tokens, *guess) if guess[0] and ok else []
                        rows += len(pending_guess)
                    c = conf[pos] if pos < n and ok else 0.5
                    agrees = ok and pos < n and pick[pos] == ans[pos]
                    mine = pick[pos] if ok and pos < n else -1  # the draft's own pick (known while it agreed)
                    tokens.append(ans[pos] if agrees else -1)
                    covered = bool(pending_guess) and mine == pending_guess[0]
                    pending_guess = pending_guess[1:] if covered else []
                    ok = agrees
                    sure *= c
                    expected += sure
                    if sure < plan.confidence_after(len(tokens)):
                        break
                draft_s = (passes + rows * cost.get("draft_row", 0.07)) * cost["draft"] * plain(ctx)
                seen, fresh = ctx, False
        acc = 0
        while acc < len(tokens) and emitted + acc < n - 1 and tokens[acc] == ans[emitted + acc]:
            acc += 1
        verify = plain(ctx) * verify_cost(cost, len(tokens))
        if source:
            used[source][0] += len(tokens)
            used[source][1] += acc
        catch_tokens += catch_n
        policy.observe(StepOutcome(source, len(tokens), acc, draft_s, verify, catch_s, catch_n, expected,
                                   margins[emitted: emitted + acc + 1], match))
        for j in range(emitted, emitted + acc + 1):
            kind.push(pieces[j])
        ids = ids + ans[emitted: emitted + acc + 1]
        if source == DRAFT:
            seen = len(ids) - 1
        emitted += acc + 1
        t += draft_s + catch_s + verify
    return dict(standard=standard, speculative=t, prefill=prefill, used=used, catch=catch_tokens)


def _guess(index, seq: list[int], g: int, m: int) -> list[int]:
    """Up to g tokens that followed the latest earlier occurrence (in the indexed, committed
    text) of seq's last n tokens, n the longest of MATCH_MAX..m that occurred; [] if none.
    NgramIndex.continuation's search, but for a tail that runs past the indexed text (the
    draft's chain is not committed, so it must not be indexed) and without its preference
    for an occurrence with g tokens after it -- the guess item 105 replayed."""
    from specdec_core.proposers.base import MATCH_MAX

    for n in range(min(MATCH_MAX, len(seq) - 1), m - 1, -1):
        starts = index.after[n].get(tuple(seq[len(seq) - n:]))
        if starts:
            e = starts[-1]
            return index.ids[e: e + g]
    return []


def oracle_one(rec: dict, cost: dict, budget: int = 128, k_max: int = 16, first_window: int = FIRST_READ,
               head: int = 0) -> dict:
    """The least time any controller could take for a recorded answer with this pair and these
    costs: knowing the future, every step picks a plain step, lookup's copy or the draft's run and
    its length (a dynamic program over the answer's positions). The draft pays its first read
    once, if it is used at all; its catch-up reads inside the answer are taken as free, so this
    is a ceiling, not a policy. (standard seconds, ceiling seconds, both with the prefill.)"""
    from specdec_core.proposers.base import MATCH_MAX
    from specdec_core.proposers.prompt_lookup import NgramIndex

    prompt, ans, pick = rec["prompt"], rec["answer"], rec["draft_pick"]
    n = min(len(ans), budget)

    def plain(ctx: int) -> float:
        return cost["base"] + cost["per_ctx"] * ctx

    prefill = _prefill(cost, prompt, head)
    standard = prefill + sum(plain(len(prompt) + j) for j in range(1, n))
    index = NgramIndex(MATCH_MAX, 1)
    look = [(0, 0)] * (n + 1)  # at i tokens emitted: (tokens lookup has, how many of them are right)
    for i in range(1, n):
        index.sync(prompt + ans[:i])
        cont, _ = index.continuation(k_max)
        r = 0
        while r < len(cont) and i + r < n and cont[r] == ans[i + r]:
            r += 1
        look[i] = (len(cont), r)
    agree = [0] * (n + 1)  # how many draft picks from i on agree with the answer
    for j in range(n - 1, 0, -1):
        agree[j] = agree[j + 1] + 1 if pick[j] == ans[j] else 0

    def best(with_draft: bool) -> float:
        t = [0.0] * (n + 1)
        for i in range(n - 1, 0, -1):
            p = plain(len(prompt) + i)
            options = [p + t[i + 1]]
            have, right = look[i]
            for k in range(1, min(have, k_max) + 1):
                options.append(p * verify_cost(cost, k) + t[min(i + min(k, right) + 1, n)])
            if with_draft:
                for k in range(1, k_max + 1):
                    options.append(p * (k * cost["draft"] + verify_cost(cost, k)) + t[min(i + min(k, agree[i]) + 1, n)])
            t[i] = min(options)
        return t[1]

    read = min(first_window, len(prompt) - head) * cost["read"] * plain(len(prompt))
    return dict(standard=standard, ceiling=prefill + min(best(False), best(True) + read), prefill=prefill)


def oracle(args) -> None:
    cost = _costs(args)
    by_cat: dict[str, list[float]] = {}
    recs = [json.load(open(path)) for path in sorted(Path(args.dir).glob("*.json"))]
    head = _template_head(recs) if args.head else 0
    for rec in recs:
        o = oracle_one(rec, cost, budget=args.budget, head=head)
        r = replay_one(rec, cost, {}, budget=args.budget, head=head)
        ceil, got = o["standard"] / o["ceiling"], r["standard"] / r["speculative"]
        by_cat.setdefault(rec["category"], []).append((ceil, got))
        if args.show:
            print(f"{rec['id']:34s} {rec['category']:14s} n={len(rec['answer']):3d} ceiling {ceil:5.2f}x controller {got:5.2f}x")
    for cat, xs in sorted(by_cat.items()):
        print(f"{cat:16s} ceiling median {statistics.median(c for c, _ in xs):.3f}x  controller median "
              f"{statistics.median(g for _, g in xs):.3f}x  n={len(xs)}")


def _template_head(recs: list[dict]) -> int:
    """The chat template's head: the tokens every recorded prompt begins with."""
    if len(recs) < 2:
        return 0
    first, n = recs[0]["prompt"], len(recs[0]["prompt"])
    for rec in recs[1:]:
        n = next((i for i, (a, b) in enumerate(zip(first[:n], rec["prompt"])) if a != b), min(n, len(rec["prompt"])))
    return n


def _fields(items) -> dict:
    """KEY=JSON items (--set, --cost) as a dict."""
    return {key: json.loads(value) for key, value in (item.split("=", 1) for item in items or ())}


def _costs(args) -> dict:
    return {**COSTS[args.costs], **_fields(args.cost)}


def replay(args) -> None:
    cost = _costs(args)
    kw = _fields(args.set)
    by_cat: dict[str, list[float]] = {}
    e2e_all, low = [], []
    recs = [json.load(open(path)) for path in sorted(Path(args.dir).glob("*.json"))]
    head = _template_head(recs) if args.head else 0
    for rec in recs:
        r = replay_one(rec, cost, kw, budget=args.budget, first_window=args.first_window, peek=args.peek,
                       guess=tuple(args.guess), head=head, merged=not args.apart)
        dec_std = r["standard"] - r["prefill"]
        dec_spec = r["speculative"] - r["prefill"]
        ratio = dec_std / dec_spec if dec_spec > 0 else 1.0
        e2e = r["standard"] / r["speculative"]
        by_cat.setdefault(rec["category"], []).append(e2e)
        e2e_all.append(e2e)
        if args.show:
            print(f"{rec['id']:34s} {rec['category']:14s} n={len(rec['answer']):3d} e2e {e2e:5.2f}x decode {ratio:5.2f}x "
                  f"used {r['used']} catch {r['catch']}")
    for cat, xs in sorted(by_cat.items()):
        print(f"{cat:16s} median {statistics.median(xs):.3f}x  min {min(xs):.3f}x  n={len(xs)}")
    print(f"ALL median {statistics.median(e2e_all):.3f}x  geomean "
          f"{statistics.geometric_mean(e2e_all):.3f}x  below 0.97: {sum(x < 0.97 for x in e2e_all)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--split", default="tuning", choices=("tuning", "holdout"))
    r.add_argument("--categories", default="")
    r.add_argument("--max-new-tokens", type=int, default=128)
    r.add_argument("--out", required=True)
    r.add_argument("--windows", type=lambda v: [int(x) for x in v.split(",") if x], default=[],
                   help="also record the draft's picks after these first-read windows (e.g. 16,32,64)")
    p = sub.add_parser("replay")
    p.add_argument("dir")
    p.add_argument("--costs", default="vnni", choices=tuple(COSTS))
    p.add_argument("--show", action="store_true", help="one line per prompt")
    p.add_argument("--set", action="append", help="a controller field, KEY=JSON (e.g. answer_prior=64)")
    p.add_argument("--peek", type=int, default=0, help="the draft's first pick judges lookup's matches up to this long")
    p.add_argument("--guess", type=int, nargs=2, default=(0, 0), metavar=("G", "M"),
                   help="the draft's passes also feed lookup's next G tokens after a match of M+")
    p.add_argument("--budget", type=int, default=128, help="the answers' token budget (the recordings' --max-new-tokens)")
    p.add_argument("--apart", action="store_true",
                   help="the draft reads what it has not seen in a pass of its own, not in its first proposing "
                        "pass (the proposer before speed notes item 117)")
    p.add_argument("--first-window", type=int, default=FIRST_READ, help="the draft's first read window")
    p.add_argument("--head", action="store_true",
                   help="both models have read the template's head before the prompt (as the app and bench do)")
    o = sub.add_parser("oracle", help="the ceiling: each step's best choice knowing the future")
    o.add_argument("dir")
    o.add_argument("--costs", default="vnni", choices=tuple(COSTS))
    o.add_argument("--budget", type=int, default=128)
    o.add_argument("--show", action="store_true")
    o.add_argument("--head", action="store_true", help="as replay's --head")
    for sp in (p, o):
        sp.add_argument("--cost", action="append", help="a cost table entry changed, KEY=JSON (what-if: e.g. draft=0.26)")
    args = ap.parse_args()
    {"record": record, "replay": replay, "oracle": oracle}[args.cmd](args)


if __name__ == "__main__":
    main()
