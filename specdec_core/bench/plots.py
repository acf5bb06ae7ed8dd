"""PNG figures for the report (matplotlib's Agg canvas directly: no global backend switch, no
display needed, safe to call from a process that also runs Qt)."""

from __future__ import annotations

from pathlib import Path

from .modes import HF_ASSISTED, HF_GENERATE, Mode

TOKS_BY_CATEGORY = "tokens_per_second_by_category.png"
SPEEDUP_VS_K = "speedup_vs_draft_length.png"
ACCEPTANCE_BY_POSITION = "acceptance_by_position.png"


def _figure(w: float, h: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _colours(n: int):
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def write_plots(out: Path, report: dict) -> list[str]:
    """Write the figures into `out`; return their file names (those that had data)."""
    modes = [Mode(**m) for m in report["modes"]]
    summ = report["summary"]
    written = []
    for name, fn in ((TOKS_BY_CATEGORY, _toks_by_category), (SPEEDUP_VS_K, _speedup_vs_k),
                     (ACCEPTANCE_BY_POSITION, _acceptance_by_position)):
        fig = fn(summ, modes, report)
        if fig is not None:
            fig.savefig(out / name)
            written.append(name)
    return written


def _toks_by_category(summ, modes, report):
    import numpy as np

    cats = list(summ["by_category"])
    groups = cats + (["all"] if len(cats) > 1 else [])
    n = len(modes)
    fig = _figure(max(7.0, 1.3 * len(groups) * max(1, n / 4)), 4.6)
    ax = fig.add_subplot(111)
    x = np.arange(len(groups))
    width = 0.8 / n
    for i, (m, c) in enumerate(zip(modes, _colours(n))):
        figs = [summ["by_category"][g][m.name] if g != "all" else summ["overall"][m.name] for g in groups]
        med = [f["tokens_per_second"] or 0.0 for f in figs]
        lo = [max(0.0, (f["tokens_per_second"] or 0) - (f["tokens_per_second_min"] or f["tokens_per_second"] or 0))
              for f in figs]
        hi = [max(0.0, (f["tokens_per_second_max"] or f["tokens_per_second"] or 0) - (f["tokens_per_second"] or 0))
              for f in figs]
        hatch = "//" if m.is_hf else None
        ax.bar(x - 0.4 + width * (i + 0.5), med, width, yerr=[lo, hi], capsize=2, color=c, hatch=hatch,
               edgecolor="black" if m.is_hf else None, linewidth=0.4, label=m.name.replace("speculative ", "spec "))
    ax.set_xticks(x, groups)
    ax.set_ylabel("tokens / s (median over prompts)")
    ax.set_xlabel("error bars: slowest to fastest single run", fontsize=7)
    ax.set_title(f"Generation speed by mode and category — {_subtitle(report)}", fontsize=9)
    ax.legend(fontsize=7, ncol=min(4, n), loc="upper center", bbox_to_anchor=(0.5, -0.1), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def _speedup_vs_k(summ, modes, report):
    fixed = [m for m in modes if m.kind == "speculative" and isinstance(m.draft_tokens, int)]
    adaptive = [m for m in modes if m.kind == "speculative" and m.draft_tokens == "adaptive"]
    if not fixed and not adaptive:
        return None
    fig = _figure(7.0, 4.4)
    ax = fig.add_subplot(111)
    ks = [m.draft_tokens for m in fixed]
    pos = {k: i for i, k in enumerate(ks)}
    xa = len(ks)  # "adaptive" sits right of the fixed lengths
    labels = [str(k) for k in ks] + (["adaptive"] if adaptive else [])
    cats = list(summ["by_category"])
    series = [("all prompts", summ["overall"])] + ([(c, summ["by_category"][c]) for c in cats] if len(cats) > 1 else [])
    for j, ((label, figs), colour) in enumerate(zip(series, _colours(len(series)))):
        xs = [pos[m.draft_tokens] for m in fixed]
        ys = [figs[m.name]["speedup_vs_standard"] for m in fixed]
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        lw, ms = (2.4, 7) if j == 0 else (1.0, 4)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", lw=lw, ms=ms, color=colour, label=label)
        if adaptive and figs[adaptive[0].name]["speedup_vs_standard"] is not None:
            ax.plot([xa], [figs[adaptive[0].name]["speedup_vs_standard"]], marker="D", ms=ms, color=colour,
                    linestyle="none", label=None if pts else label)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.text(-0.3, 1.0, " standard = 1×", va="bottom", fontsize=7)
    if HF_ASSISTED in {m.name for m in modes}:
        v = summ["overall"][HF_ASSISTED]["speedup_vs_standard"]
        if v is not None:
            ax.axhline(v, color="grey", lw=1.0, ls="--")
            ax.text(len(labels) - 0.65, v, f"transformers assisted ({v:.2f}×) ", va="bottom", ha="right",
                    fontsize=7, color="dimgray")
    if HF_GENERATE in {m.name for m in modes}:
        v = summ["overall"][HF_GENERATE]["speedup_vs_standard"]
        if v is not None:
            ax.axhline(v, color="grey", lw=0.8, ls=":")
            ax.text(len(labels) - 0.65, v, f"transformers generate ({v:.2f}×) ", va="top", ha="right",
                    fontsize=7, color="dimgray")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlim(-0.4, len(labels) - 0.6)
    ax.set_xlabel("draft length k")
    ax.set_ylabel("speedup vs standard (tok/s ratio, median over prompts)")
    ax.set_title(f"Speedup vs draft length — {_subtitle(report)}", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def _acceptance_by_position(summ, modes, report):
    prop = [m for m in modes if m.proposes]
    data = [(m, summ["overall"][m.name]["per_position_acceptance"], summ["overall"][m.name]["per_position_proposed"])
            for m in prop]
    data = [(m, a, p) for m, a, p in data if a]
    if not data:
        return None
    fig = _figure(7.0, 4.4)
    ax = fig.add_subplot(111)
    for (m, acc, proposed), c in zip(data, _colours(len(data))):
        xs = [i + 1 for i, v in enumerate(acc) if v is not None]
        ys = [v for v in acc if v is not None]
        ax.plot(xs, ys, marker="o", color=c, label=m.name.replace("speculative ", "spec "),
                ls="--" if m.kind == "prompt-lookup" else "-")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("position in the draft (1 = first proposed token)")
    ax.set_ylabel("P(accepted | proposed at this position)")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Acceptance per draft position (all prompts) — {_subtitle(report)}", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def _subtitle(report) -> str:
    s = report["settings"]
    t = report["models"].get("target") or {}
    return f"{t.get('name', '?')}, T={s['temperature']}, {s['max_new_tokens']} tokens"
