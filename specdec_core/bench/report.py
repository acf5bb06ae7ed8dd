"""Aggregate raw runs into rows and summaries; write report.json and report.md.

Aggregation rules (also stated in report.md):
- a row is one prompt x one mode: the median over its repeats, with min and max beside it;
- a category's (or all prompts') figure for a mode is the median over its prompts' rows;
- a speedup is computed per prompt (the mode's median tok/s over the reference's, measured on
  the same prompt in the same interleaved run), then the median over prompts is taken.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from datetime import datetime, timezone
from pathlib import Path

from ..renamed_figures import report_under_current_names
from .markdown import skipped_lines, table
from .modes import HF_ASSISTED, HF_GENERATE, LLAMACPP, LLAMACPP_SPEC, STANDARD, Mode

METRICS = ("tokens_per_second", "decode_tokens_per_second", "latency_s", "ttft_s", "generate_s", "acceptance_rate",
           "tokens_per_speculative_step", "plain_step_share", "peak_memory_bytes", "new_tokens",
           "target_forward_passes", "draft_forward_passes", "mean_draft_length", "mean_plain_step_seconds",
           "catchup_seconds", "idle_read_seconds", "prompt_read_ahead_seconds")
REFERENCES = (STANDARD, HF_GENERATE, HF_ASSISTED, LLAMACPP)
# a prompt below this share of standard's speed counts as a loss (issue 28: "never a loss", with
# room for what one run's timing can tell)
FLOOR = 0.97
# per prompt, the fastest of llama.cpp's modes (plain, speculative at its default, tuned)
LLAMACPP_BEST = "llama.cpp-best"
CODE, CHAT = "code", "chat"


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _spread(xs) -> dict:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def build_rows(runs: list[dict], prompts, modes: list[Mode]) -> list[dict]:
    """One row per measured prompt (a conversation's turn is one: `<id>#<turn>`) and mode, in
    the prompts' order."""
    by_key: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        by_key.setdefault((r["prompt_id"], r["mode"]), []).append(r)
    order = {p.id: i for i, p in enumerate(prompts)}
    # a turn "<id>#<n>" goes where its conversation's prompt is; turns keep the order they ran in
    measured = sorted(dict.fromkeys((r["prompt_id"], r["category"]) for r in runs),
                      key=lambda k: order.get(k[0].split("#")[0], len(order)))
    rows = []
    for pid, category in measured:
        for m in modes:
            reps = sorted(by_key.get((pid, m.name), []), key=lambda r: r["repeat"])
            if not reps:
                continue
            ok = [r for r in reps if not r.get("error")]
            stats = {k: _spread([r.get(k) for r in ok]) for k in METRICS}
            proposed = _sum_lists([r.get("per_position_proposed") or [] for r in ok])
            accepted = _sum_lists([r.get("per_position_accepted") or [] for r in ok])
            ident = [r.get("identical_to_standard") for r in ok]
            ident_known = [x for x in ident if x is not None]
            divergence = next((r["divergence"] for r in ok if r.get("divergence")), None)
            same = [r.get("same_text_as_plain") for r in ok if r.get("same_text_as_plain") is not None]
            parts_at = next((r["text_parts_at"] for r in ok if r.get("text_parts_at") is not None), None)
            row = {
                "category": category,
                "prompt_id": pid,
                "mode": m.name,
                "kind": m.kind,
                "draft_tokens": m.draft_tokens,
                **{k: stats[k]["median"] for k in METRICS},
                "identical_to_standard": all(ident_known) if ident_known else None,
                "divergence": divergence,
                "same_text_as_plain": all(same) if same else None,  # llama.cpp's spec text vs its plain text
                "text_parts_at": parts_at,
                "per_position_acceptance": [a / q if q else None for a, q in zip(accepted, proposed)],
                "per_position_proposed": proposed,
                "per_position_accepted": accepted,
                "stop_reason": ok[0].get("stop_reason") if ok else None,
                "text": ok[0].get("text") if ok else None,
                "error": next((r["error"] for r in reps if r.get("error")), None),
                "stats": stats,
                "repeats": [{k: v for k, v in r.items() if k not in ("prompt_id", "category", "mode", "kind",
                                                                         "draft_tokens", "text")} for r in reps],
            }
            rows.append(row)
    return rows


def _sum_lists(lists: list[list[int]]) -> list[int]:
    n = max((len(x) for x in lists), default=0)
    return [sum(x[i] for x in lists if i < len(x)) for i in range(n)]


def summarize(rows: list[dict], modes: list[Mode]) -> dict:
    """{"overall": {mode: figures}, "by_category": {cat: {mode: figures}}, "groups": {...}}."""
    cats = list(dict.fromkeys(r["category"] for r in rows))
    groups = {"all": None, **{c: [c] for c in cats}}
    if CODE in cats and CHAT in cats:
        groups["code+chat"] = [CODE, CHAT]
    out = {name: {m.name: _figures(rows, m, None if g is None else set(g)) for m in modes}
           for name, g in groups.items()}
    return {"overall": out.pop("all"), "by_category": {c: out[c] for c in cats},
            "groups": {k: v for k, v in out.items() if k not in cats}}


def _figures(rows, mode: Mode, cats: set[str] | None) -> dict:
    sel = [r for r in rows if cats is None or r["category"] in cats]
    mine = {r["prompt_id"]: r for r in sel if r["mode"] == mode.name and r["tokens_per_second"] is not None}
    f = {"prompts": len(mine)}
    for k in ("tokens_per_second", "decode_tokens_per_second", "latency_s", "ttft_s", "acceptance_rate",
              "tokens_per_speculative_step", "plain_step_share", "peak_memory_bytes", "mean_draft_length", "new_tokens",
              "mean_plain_step_seconds", "catchup_seconds", "idle_read_seconds", "prompt_read_ahead_seconds"):
        f[k] = _median([r.get(k) for r in mine.values()])
    f["tokens_per_second_min"] = min((r["stats"]["tokens_per_second"]["min"] for r in mine.values()), default=None)
    f["tokens_per_second_max"] = max((r["stats"]["tokens_per_second"]["max"] for r in mine.values()), default=None)
    best: dict[str, dict] = {}  # prompt -> llama.cpp's fastest row there
    for r in sel:
        if r["kind"] in (LLAMACPP, LLAMACPP_SPEC) and r["tokens_per_second"]:
            if r["prompt_id"] not in best or r["tokens_per_second"] > best[r["prompt_id"]]["tokens_per_second"]:
                best[r["prompt_id"]] = r
    for ref in REFERENCES + (LLAMACPP_BEST,):
        refs = best if ref == LLAMACPP_BEST else {
            r["prompt_id"]: r for r in sel if r["mode"] == ref and r["tokens_per_second"]}
        by_prompt = {p: mine[p]["tokens_per_second"] / refs[p]["tokens_per_second"] for p in mine if p in refs}
        ratios = list(by_prompt.values())
        f[f"speedup_vs_{ref}"] = _median(ratios)
        f[f"speedup_vs_{ref}_min"] = min(ratios) if ratios else None
        f[f"speedup_vs_{ref}_max"] = max(ratios) if ratios else None
        if ref == STANDARD and ratios:
            # "never a loss" is a per-prompt goal (issue 28: every prompt >= FLOOR of standard),
            # which the median and the lowest prompt alone do not show: how many, and which
            f["speedup_vs_standard_geomean"] = statistics.geometric_mean(ratios) if min(ratios) > 0 else None
            f["speedup_vs_standard_compared"] = len(ratios)
            f["below_floor"] = sorted(([p, r] for p, r in by_prompt.items() if r < FLOOR), key=lambda x: x[1])
    same = [r["same_text_as_plain"] for r in mine.values() if r.get("same_text_as_plain") is not None]
    f["same_text_as_plain"] = sum(same)
    f["same_text_compared"] = len(same)
    ident = [r["identical_to_standard"] for r in mine.values() if r["identical_to_standard"] is not None]
    f["identical"] = sum(ident)
    f["compared"] = len(ident)
    proposed = _sum_lists([r["per_position_proposed"] for r in mine.values()])
    accepted = _sum_lists([r["per_position_accepted"] for r in mine.values()])
    f["per_position_acceptance"] = [a / q if q else None for a, q in zip(accepted, proposed)]
    f["per_position_proposed"] = proposed
    return f


def build_report(raw: dict, prompts, modes: list[Mode], decode, settings: dict, engine, machine: dict,
                 memory_method: str, near_tie: float, command: str, note: str | None, wall_seconds: float,
                 skipped: list[dict] = ()) -> dict:
    """report.json's content: the run's raw records (run_suite's) aggregated into rows and
    summaries, with everything a reader needs to repeat it. `decode`: the settings every mode
    shared; `settings`: the run's other values (prompt file, repeats, warm-up, baseline, threads);
    `skipped`: the prompts left out, and why."""
    rows = build_rows(raw["runs"], prompts, modes)
    models = {"target": engine.target_info.to_dict()}
    if engine.draft_info is not None:
        models["draft"] = engine.draft_info.to_dict()
    s = decode.sampling
    return {
        **report_head(command, note),
        "machine": machine,
        "models": models,
        "settings": {
            "prompts": len(prompts),
            "split": settings.get("split"),
            "categories": list(dict.fromkeys(r["category"] for r in rows)),
            "prompt_file": settings["prompt_file"],
            "max_new_tokens": decode.max_new_tokens,
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "seed": decode.seed,
            "repeats": settings["repeats"],
            "min_seconds": settings.get("min_seconds") or 0.0,
            "max_repeats": settings.get("max_repeats"),
            "warmup_tokens": settings["warmup_tokens"],
            "baseline": settings["baseline"],
            "threads": settings["threads"],
            "first_turns": settings.get("first_turns"),
            "between_turns": settings.get("between_turns"),
            "before_the_send": settings.get("before_the_send"),
            "code": settings.get("code"),
        },
        "modes": [dataclasses.asdict(m) for m in modes],
        "memory_method": memory_method,
        "near_tie_margin": near_tie,
        "wall_seconds": wall_seconds,
        "summary": summarize(rows, modes),
        "rows": rows,
        "warmup": raw["warmup"],
        "prompts": [p.to_dict() for p in prompts],
        "skipped": list(skipped),
    }


def report_head(command: str, note: str | None) -> dict:
    """What every report.json opens with: its schema, when, the command that made it, the note.
    Schema 2 names tau `tokens_per_speculative_step` (schema 1: `mean_accepted_per_step`)."""
    return {"schema": 2, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": command,
            "note": note}


def write_report(out: Path, report: dict) -> None:
    """OUT/report.json, OUT/report.md and the figures (named in the report as "plots")."""
    from .plots import write_plots

    report["plots"] = write_plots(out, report)
    save(out, report, render_markdown(report, report["plots"]))


def write_json(path: Path, report: dict) -> None:
    path.write_text(json.dumps(report, indent=1, default=_jsonable, allow_nan=False) + "\n", encoding="utf-8")


def save(out: Path, report: dict, markdown: str) -> None:
    """OUT/report.json and OUT/report.md, OUT made if missing."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "report.json", report)
    (out / "report.md").write_text(markdown, encoding="utf-8")


def _jsonable(x):
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    return str(x)


# -- report.md -------------------------------------------------------------------------------

def _x(v, nd=2) -> str:
    return "–" if v is None else f"{v:.{nd}f}×"


def _f(v, nd=2) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def _gib(v) -> str:
    return "–" if v is None else f"{v / 2**30:.2f} GiB"


def _ident(f) -> str:
    return "–" if not f["compared"] else f"{f['identical']}/{f['compared']}"


def _mode_label(name: str) -> str:
    return name.replace("speculative ", "spec ")


def render_markdown(report: dict, plots: list[str]) -> str:
    """report.md: what was measured and where, then the headline, the ratios, the categories,
    exactness, every prompt, memory and method, section by section. A report of any schema."""
    view = _View(report_under_current_names(report))
    L: list[str] = []
    for section in (_about, _headline, _key_ratios_section, _by_category, _steps, _identical,
                    _llamacpp_exactness, _per_prompt, _memory, _method):
        L += section(view)
    if plots:
        L.append("## Figures\n")
        L += [f"![{p}]({p})\n" for p in plots]
    return "\n".join(L) + "\n"


class _View:
    """What the sections read of a report, named once."""

    def __init__(self, report: dict):
        self.report = report
        self.settings = report["settings"]
        self.modes = [Mode(**x) for x in report["modes"]]
        self.names = [m.name for m in self.modes]
        self.has = set(self.names)
        self.summary = report["summary"]
        self.overall = self.summary["overall"]
        self.cats = list(self.summary["by_category"])
        self.greedy = self.settings["temperature"] == 0
        self.llama = LLAMACPP in self.has
        self.target = report["models"].get("target") or {}
        self.draft = report["models"].get("draft") or {}


def _about(v: _View) -> list[str]:
    m, s, tgt, dft = v.report["machine"], v.settings, v.target, v.draft
    L = ["# specdec bench report\n",
         f"- **target:** {tgt.get('name', '?')} ({tgt.get('dtype', '?')}, {tgt.get('quantization', '?')}, "
         f"{tgt.get('device', '?')})"]
    if dft:
        L.append(f"- **draft:** {dft.get('name', '?')} ({dft.get('dtype', '?')}, {dft.get('quantization', '?')})")
    for role, info in (("target", tgt), ("draft", dft)):
        # which kernels ran: the figures below depend on them as much as on the models
        if info.get("kernels"):
            L.append(f"  - {role} kernels: {info['kernels']}")
    gpu = m.get("gpu")
    L.append(f"- **machine:** {m['cpu_model']}, {m['cpus_available']} CPUs available to this process "
             f"({m['cores_logical']} logical), torch threads {m['torch_threads']}"
             + (f", GPU {gpu['name']}" if gpu else ", no GPU")
             + f"; flags: {', '.join(m['cpu_flags']) or 'n/a'}")
    L.append(f"- **software:** Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}, {m['os']}")
    code = s.get("code")
    if code:
        L.append(f"- **code:** specdec_core from `{code['specdec_core']}`"
                 + (f" (git {code['git']})" if code.get("git") else "")
                 + (f"; CPU kernel `{code['cpu_kernel_library']}`" if code.get("cpu_kernel_library") else "")
                 + (f", {code['cpu_kernel']}" if code.get("cpu_kernel") else ""))
    half = f" of the {s['split']} half" if s.get("split") else ""
    L.append(f"- **settings:** {s['prompts']} prompts{half} ({', '.join(s['categories'])}), "
             f"max {s['max_new_tokens']} new tokens, temperature {s['temperature']}"
             + (f" (top-k {s['top_k']}, top-p {s['top_p']})" if not v.greedy else " (greedy)")
             + f", {s['repeats']} repeat(s)"
             + (f", more (up to {s['max_repeats']}) until standard's answers to a prompt took {s['min_seconds']:g} s"
                if s.get("min_seconds") else "")
             + f", warm-up {s['warmup_tokens']} tokens per mode (excluded)"
             + (f"; first turns: {s['first_turns']}" if s.get("first_turns") else "")
             + (f"; between turns: {s['between_turns']}" if s.get("between_turns") else "")
             + (f"; before the send: {s['before_the_send']}" if s.get("before_the_send") not in (None, "nothing read")
                else ""))
    la0, la1 = m.get("load_average_start"), m.get("load_average_end")
    if la0 or la1:
        L.append(f"- **load average** (1/5/15 min) at start {la0}, at end {la1}")
    L.append(f"- **created:** {v.report['created']}, bench wall time {v.report['wall_seconds'] / 60:.1f} min")
    L.append(f"\nCommand:\n\n```\n{v.report['command']}\n```\n")
    if v.report.get("note"):
        L.append(f"> {v.report['note']}\n")
    skipped = skipped_lines(v.report.get("skipped"))
    return L + (skipped + [""] if skipped else [])


def _headline(v: _View) -> list[str]:
    L = [f"## Headline: median over all {len({r['prompt_id'] for r in v.report['rows']})} prompts\n",
         "tok/s = new tokens / generation time (end-to-end: prefill included); decode tok/s = tokens after "
         "the first / time after the first token. Speedups are per-prompt ratios of end-to-end tok/s on the "
         "same prompt in the same interleaved run, median over prompts [min–max over prompts].\n"]
    head = ["mode", "tok/s", "decode tok/s", "× standard"]
    head += ["× hf generate"] if HF_GENERATE in v.has else []
    head += ["× hf assisted"] if HF_ASSISTED in v.has else []
    head += ["× llama.cpp", "× llama.cpp best"] if v.llama else []
    head += ["latency s", "TTFT s", "α accept", "τ tokens/spec. step", "plain steps", "mean k"]
    head += ["identical"] if v.greedy else []
    rows = []
    for name in v.names:
        f = v.overall[name]
        cells = [_mode_label(name), _f(f["tokens_per_second"], 1), _f(f["decode_tokens_per_second"], 1),
                 f"{_x(f['speedup_vs_standard'])} [{_f(f['speedup_vs_standard_min'])}–{_f(f['speedup_vs_standard_max'])}]"
                 if name != STANDARD else "1×"]
        if HF_GENERATE in v.has:
            cells.append(_x(f["speedup_vs_hf-generate"]))
        if HF_ASSISTED in v.has:
            cells.append(_x(f["speedup_vs_hf-assisted"]))
        if v.llama:
            cells += ["1×" if name == LLAMACPP else _x(f[f"speedup_vs_{LLAMACPP}"]), _x(f[f"speedup_vs_{LLAMACPP_BEST}"])]
        cells += [_f(f["latency_s"]), _f(f["ttft_s"]), _pct(f["acceptance_rate"]),
                  _f(f["tokens_per_speculative_step"]), _pct(f["plain_step_share"]), _f(f["mean_draft_length"], 1)]
        if v.greedy:
            cells.append(_ident(f))
        rows.append(cells)
    return L + table(head, rows) + [""] + _verdicts(v.overall, v.names, "over all prompts")


def _key_ratios_section(v: _View) -> list[str]:
    return _key_ratios(v.summary, v.names, v.has)


def _by_category(v: _View) -> list[str]:
    by = v.summary["by_category"]
    L = ["## tok/s by category (median over the category's prompts)\n"]
    L += table(["mode"] + v.cats, ([_mode_label(n)] + [_f(by[c][n]["tokens_per_second"], 1) for c in v.cats]
                                   for n in v.names))
    L.append("")
    for ref, title in ((STANDARD, "standard"), (HF_ASSISTED, "transformers assisted generation"),
                       (HF_GENERATE, "plain transformers generate"), (LLAMACPP, "llama.cpp's plain decoding"),
                       (LLAMACPP_BEST, "llama.cpp's best mode on each prompt")):
        if ref not in v.has and not (ref == LLAMACPP_BEST and v.llama):
            continue
        L.append(f"### Speedup vs {title}, by category\n")
        L += table(["mode"] + v.cats, ([_mode_label(n)] + [_x(by[c][n][f"speedup_vs_{ref}"]) for c in v.cats]
                                       for n in v.names if n != ref))
        L.append("")
    spec = [m.name for m in v.modes if m.proposes]
    if spec:
        L.append("### Acceptance α and tokens per speculative step τ, by category\n")
        L += table(["mode"] + v.cats, ([_mode_label(n)] + [
            f"{_pct(by[c][n]['acceptance_rate'])} / {_f(by[c][n]['tokens_per_speculative_step'])}" for c in v.cats]
            for n in spec))
        L.append("")
    return L


def _steps(v: _View) -> list[str]:
    """What a step costs in each mode: a plain step inside a speculative mode must cost what a
    standard step costs (issue 28); the lowest prompt's speedup beside the median; the draft's
    reads of text it had not seen."""
    if STANDARD not in v.has:
        return []
    by = v.summary["by_category"]
    spec = [m.name for m in v.modes if m.proposes]
    L = ["## Steps: a plain step against a standard step, the lowest prompt, the draft's reads\n",
         "Per category, medians over prompts of each run's mean plain-step time (standard: every step after "
         "the first); speedup vs standard as median [lowest prompt]; the draft's catch-up reads (s per answer) "
         "and, for a conversation's later turns, its read of what it skipped while no turn ran (s, not in the "
         "turn's time).\n"]
    head = ["category", "standard step ms"] + [f"{_mode_label(n)}: plain ms / x std [lowest] / reads s / between turns s"
                                               for n in spec]

    def ms(x):
        return _f(x * 1000 if x is not None else None, 1)

    L += table(head, ([c, ms(by[c][STANDARD]["mean_plain_step_seconds"])] + [
        f"{ms(by[c][n]['mean_plain_step_seconds'])} / {_x(by[c][n]['speedup_vs_standard'])} "
        f"[{_x(by[c][n]['speedup_vs_standard_min'])}] / {_f(by[c][n]['catchup_seconds'])} / "
        f"{_f(by[c][n].get('idle_read_seconds'))}" for n in spec]
        for c in v.cats))
    return L + [""]


def _identical(v: _View) -> list[str]:
    if not v.greedy:
        return []
    L = ["## Identical to standard at temperature 0\n"]
    rows = v.report["rows"]
    divs = [r for r in rows if r["identical_to_standard"] is False]
    checked = [r for r in rows if r["mode"] != STANDARD and r["identical_to_standard"] is not None]
    if not divs:
        return L + [f"All {len(checked)} prompt × mode results produced exactly standard decoding's token ids "
                    "(every repeat).\n"]
    L.append(f"{len(checked) - len(divs)} of {len(checked)} prompt × mode results equal standard's token "
             f"ids. Where they differ, the first divergence and the target's top-2 logit margin there "
             f"(a near-tie is a margin ≤ {v.report['near_tie_margin']} in {v.target.get('dtype', '?')}: the two "
             "tokens score the same within rounding, and a different batch shape — k+1 positions in a "
             "verification pass vs one — may flip it; a larger margin would point to a bug):\n")
    L += table(["prompt", "mode", "position", "standard", "mode's", "margin", "near-tie?"],
               ([r["prompt_id"], _mode_label(r["mode"]), (r["divergence"] or {}).get("position"),
                 _tok((r["divergence"] or {}).get("text_standard")), _tok((r["divergence"] or {}).get("text_mode")),
                 _f((r["divergence"] or {}).get("margin"), 4),
                 "yes" if (r["divergence"] or {}).get("near_tie") else "**no**"] for r in divs))
    return L + [""]


def _llamacpp_exactness(v: _View) -> list[str]:
    lspec = [r for r in v.report["rows"] if r["kind"] == LLAMACPP_SPEC and r["same_text_as_plain"] is not None]
    if not (v.greedy and lspec):
        return []
    L = ["## llama.cpp: speculative text vs its own plain text at temperature 0\n",
         "llama.cpp's tokens come from its own kernels, so they are compared with its plain decoding, not "
         "with ours (up to the shorter text: its speculative run may write a few tokens past -n).\n"]
    L += table(["prompt", "mode", "same text?", "parts at character"],
               ([r["prompt_id"], _mode_label(r["mode"]), "yes" if r["same_text_as_plain"] else "**no**",
                 "–" if r["text_parts_at"] is None else r["text_parts_at"]] for r in lspec))
    return L + [""]


def _per_prompt(v: _View) -> list[str]:
    L = ["## Per prompt (median [min–max] over repeats)\n"]
    head = ["prompt", "category", "mode", "tok/s", "latency s", "TTFT s", "tokens", "α", "τ", "target / draft passes"]
    rows = []
    for r in v.report["rows"]:
        st = r["stats"]["tokens_per_second"]
        tps = "error" if r["error"] and r["tokens_per_second"] is None else (
            f"{_f(st['median'], 1)} [{_f(st['min'], 1)}–{_f(st['max'], 1)}]")
        cells = [r["prompt_id"], r["category"], _mode_label(r["mode"]), tps, _f(r["latency_s"]), _f(r["ttft_s"]),
                 _f(r["new_tokens"], 0), _pct(r["acceptance_rate"]), _f(r["tokens_per_speculative_step"]),
                 f"{_f(r['target_forward_passes'], 0)} / {_f(r['draft_forward_passes'], 0)}"]
        if v.greedy:
            ident = r["identical_to_standard"]
            cells.append("–" if ident is None else ("yes" if ident else "**no**"))
        rows.append(cells)
    L += table(head + (["identical"] if v.greedy else []), rows)
    L.append("")
    errs = [r for r in v.report["rows"] if r["error"]]
    if errs:
        L.append("Errors (the mode failed on these prompts; they are left out of medians):\n")
        L += [f"- {r['prompt_id']} / {r['mode']}: `{r['error']}`" for r in errs]
        L.append("")
    return L


def _memory(v: _View) -> list[str]:
    tgt, dft, method = v.target, v.draft, v.report["memory_method"]
    L = ["## Memory\n",
         f"Model weights: target {_gib(tgt.get('memory_bytes'))}"
         + (f", draft {_gib(dft.get('memory_bytes'))}: standard decoding needs the target alone, speculative "
            f"decoding with a draft needs {_gib((tgt.get('memory_bytes') or 0) + (dft.get('memory_bytes') or 0))} "
            "of weights (plus the draft's KV cache); prompt lookup needs no second model." if dft else "."),
         f"Peak per run, measured as {method}"
         + (" — both models stay loaded in the process for the whole run, so on CPU the modes differ only "
            "by caches and activations:" if "RSS" in method else ":") + "\n"]
    L += table(["mode", "peak memory (median over prompts)"],
               ([_mode_label(n), _gib(v.overall[n]["peak_memory_bytes"])] for n in v.names))
    return L + [""]


def _method(v: _View) -> list[str]:
    L = ["## How this was measured\n",
         "- **Interleaved:** for each prompt, for each repeat, every mode ran once in turn (the order rotating by "
         "one mode per group), so machine noise — other processes, frequency changes — is shared by all modes "
         "instead of landing on one. Timings on a shared or small machine are still noisy: read the min–max "
         "ranges, not just the medians.",
         "- **Warm-up:** each mode ran once on the first prompt before measuring; those runs are excluded.",
         "- **latency** is end to end: chat template and tokenization, generation, and detokenization to the final "
         "text. **TTFT** is from the same start to the first new token. **tok/s** is new tokens over "
         "generation time (prefill included, tokenization excluded), the same definition for every mode.",
         "- **α** (acceptance rate) = accepted / proposed draft tokens; **τ** = tokens emitted per speculative "
         "step (a target pass that verified k ≥ 1 proposed tokens); **plain steps** = the share of target passes "
         "that proposed nothing (the prefill, steps the adaptive controller left to the target, no lookup "
         "match), whose tokens are `standard`; **mean k** = average draft length of the speculative steps."]
    if v.llama:
        spec = [m for m in v.modes if m.kind == LLAMACPP_SPEC]
        ways = ", ".join(f"{_mode_label(m.name)} (`--spec-type {m.spec_type or 'draft-simple'}`"
                         + (f" `--spec-draft-n-max {m.draft_tokens}`" if m.draft_tokens else "")
                         + (f" `--spec-draft-p-min {m.p_min:g}`" if m.p_min is not None else "") + ")" for m in spec)
        L.append("- **llama.cpp** is llama.cpp's `llama-completion` (plain decoding)"
                 + (f" and `llama-speculative-simple` (its speculative decoding: {ways}; `draft-simple` drafts with "
                    "the draft model, `ngram-mod` from n-grams of the text itself)" if spec else "")
                 + f", each run as its own process on the same GGUF files, the prompt text our chat template renders, "
                 f"{v.settings.get('threads', '?')} threads for target and draft, greedy at temperature 0. Its tok/s "
                 f"is from its own timings: generated tokens / (prompt processing + decoding), prefill included like "
                 f"ours; its latency column is the whole process (start-up and model mapping included). **× llama.cpp "
                 f"best** compares with the fastest of all these llama.cpp modes on each prompt. Its α is n_accept / "
                 f"n_drafted; it reports no τ.")
    if HF_ASSISTED in v.has or HF_GENERATE in v.has:
        L.append("- **hf generate / hf assisted** are transformers' `model.generate()` and "
                 "`model.generate(assistant_model=draft)` on the same loaded models and prompt ids, with a clean "
                 "GenerationConfig (no repetition penalty or sampling defaults from the models' "
                 "generation_config.json) and transformers' default assisted settings (num_assistant_tokens=20, "
                 "constant schedule, confidence threshold 0.4). τ for assisted generation is its tokens after the "
                 "first per target forward call after the prefill; transformers does not report α.")
    L.append("- **Speedups** are per-prompt ratios of median tok/s, then the median over prompts.")
    return L + [""]


def _tok(t) -> str:
    return "–" if t is None else "`" + t.replace("`", "'").replace("\n", "\\n").replace("|", "\\|") + "`"


def _verdicts(figs: dict, names: list[str], where: str) -> list[str]:
    """Plain sentences: which modes are faster than standard, which are slower."""
    out = []
    for name in names:
        if name == STANDARD:
            continue
        sp = figs[name]["speedup_vs_standard"]
        if sp is None:
            continue
        lo, hi = figs[name]["speedup_vs_standard_min"], figs[name]["speedup_vs_standard_max"]
        label = _mode_label(name)
        if sp < 0.98:
            out.append(f"- **{label} is slower than standard decoding** {where}: {sp:.2f}× "
                       f"(per prompt {lo:.2f}–{hi:.2f}×).")
        elif sp <= 1.02:
            out.append(f"- {label} is about as fast as standard decoding {where}: {sp:.2f}× "
                       f"(per prompt {lo:.2f}–{hi:.2f}×).")
        else:
            slower = " — but slower on some prompts" if lo < 0.98 else ""
            out.append(f"- {label} is faster than standard decoding {where}: {sp:.2f}× "
                       f"(per prompt {lo:.2f}–{hi:.2f}×){slower}.")
        out += _floor_line(figs[name], label)
    if out:
        out.append("")
    return out


def _floor_line(f: dict, label: str, shown: int = 8) -> list[str]:
    """How many prompts fell below FLOOR of standard, the lowest named; the geometric mean
    beside the median. Reports written before these figures existed have none: no line."""
    below, n = f.get("below_floor"), f.get("speedup_vs_standard_compared")
    if below is None or not n:
        return []
    gm = "" if f.get("speedup_vs_standard_geomean") is None else f"geometric mean {f['speedup_vs_standard_geomean']:.2f}×; "
    if not below:
        return [f"  - {label}: {gm}no prompt below {FLOOR:.2f}× standard ({n} compared)."]
    named = ", ".join(f"{p} {r:.2f}×" for p, r in below[:shown]) + (", …" if len(below) > shown else "")
    return [f"  - {label}: {gm}**{len(below)} of {n} prompts below {FLOOR:.2f}× standard**: {named}."]


def _key_ratios(summ: dict, names: list[str], has: set[str]) -> list[str]:
    """The ratios a speed goal is stated in, one table: vs standard (all, code), vs transformers
    assisted (code+chat), vs plain generate, and τ on code."""
    cats = summ["by_category"]
    groups = summ["groups"]
    cols = [("× standard, all", summ["overall"], f"speedup_vs_{STANDARD}")]
    if CODE in cats:
        cols.append(("× standard, code", cats[CODE], f"speedup_vs_{STANDARD}"))
    if HF_ASSISTED in has:
        g = groups.get("code+chat") or cats.get(CODE) or cats.get(CHAT)
        label = "code+chat" if "code+chat" in groups else (CODE if CODE in cats else (CHAT if CHAT in cats else None))
        if g is not None:
            cols.append((f"× hf assisted, {label}", g, f"speedup_vs_{HF_ASSISTED}"))
        cols.append(("× hf assisted, all", summ["overall"], f"speedup_vs_{HF_ASSISTED}"))
    if HF_GENERATE in has:
        cols.append(("× hf generate, all", summ["overall"], f"speedup_vs_{HF_GENERATE}"))
    if LLAMACPP in has:
        cols.append(("× llama.cpp, all", summ["overall"], f"speedup_vs_{LLAMACPP}"))
        for cat in (CODE, CHAT):
            if cat in cats:
                cols.append((f"× llama.cpp best, {cat}", cats[cat], f"speedup_vs_{LLAMACPP_BEST}"))
    if CODE in cats:
        cols.append(("τ, code", cats[CODE], "tokens_per_speculative_step"))
    if len(cols) < 2:
        return []
    def cell(name, figs, key):
        if key.startswith("speedup_vs_") and name == key[len("speedup_vs_"):]:
            return "1×"
        return _f(figs[name].get(key)) if key == "tokens_per_speculative_step" else _x(figs[name].get(key))

    L = ["## Key ratios\n", "Medians over the named prompts of per-prompt ratios (same prompt, same run).\n"]
    L += table(["mode"] + [c[0] for c in cols],
               ([_mode_label(name)] + [cell(name, figs, key) for _, figs, key in cols] for name in names))
    L.append("")
    if HF_GENERATE in has:
        sg = summ["overall"][STANDARD].get(f"speedup_vs_{HF_GENERATE}")
        if sg is not None:
            word = "faster than" if sg > 1.02 else ("slower than" if sg < 0.98 else "about as fast as")
            L.append(f"Our standard decoding is {word} plain transformers `generate()`: {sg:.2f}× (median over all "
                     "prompts) — the baseline every speedup above is measured from.\n")
    return L
