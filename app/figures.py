"""How the engine's Stats are written in the GUI: one label for each number, used by the side
panel, the message header, the Markdown export and the race view.

Only formatting: every value is a field or property of the Stats the engine made (running while
a message streams, final when it ends), read as typed values; nothing here recomputes a figure
from token events. No Qt, no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specdec_core.events import Stats

    from .answer_figures import AnswerFigures

DECODE_RATE = "tok/s decode"  # tokens after the first / time after the first token
END_TO_END_RATE = "tok/s end-to-end"  # all tokens / whole generation time, prefill included
DECODE_RATE_TIP = "decoding speed after the first token: (tokens − 1) / (time − time to the first token)"
END_TO_END_RATE_TIP = "all new tokens / the whole generation time, the prompt's prefill included"
ALPHA_TIP = ("acceptance rate α: accepted / proposed tokens (proposed by the draft model, prompt lookup or the "
             "grammar), over the steps that proposed something")
TAU_TIP = ("tokens per speculative step (τ): the tokens a step that verified at least one proposed token "
           "emitted, its accepted ones and the target's corrected or bonus one")
SOURCES_TIP = ("which source proposed each speculative step: lookup copies a continuation from the conversation, "
               "the draft model predicts one, a constrained answer's grammar forces one; per source, its steps and the proposed tokens the target kept "
               "(the engine's own counts)")
SOURCE_NAMES = {"lookup": "lookup", "draft": "draft model", "grammar": "grammar"}
PLAIN_TIP = ("share of steps that proposed nothing (the prefill, plain steps the adaptive controller "
             "chose, no prompt-lookup match, the last step of the budget); their tokens are 'standard'")


def rate(value: float | None) -> str:
    return "—" if not value else f"{value:.1f}"


def share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def speculative(stats: Stats) -> bool:
    return stats.mode == "speculative"


def alpha(stats: Stats) -> str:
    return f"{stats.acceptance_rate:.2f}" if speculative(stats) and stats.proposed_tokens else "—"


def tau(stats: Stats) -> str:
    return f"{stats.tokens_per_speculative_step:.2f}" if speculative(stats) and stats.speculative_steps else "—"


def draft_length(stats: Stats) -> str:
    """k of the latest step: "0 (plain)" when it proposed nothing."""
    if not speculative(stats) or stats.last_draft_length is None:
        return "—"
    return "0 (plain)" if stats.last_draft_length == 0 else str(stats.last_draft_length)


def sources(stats: Stats) -> list[str]:
    """One line per source that proposed a step ("lookup: 12 steps · 30 of 45 kept (67%)"), from
    the Stats' steps_by_source / proposed_by_source / accepted_by_source; lookup first."""
    if not speculative(stats):
        return []
    steps, proposed, accepted = stats.steps_by_source, stats.proposed_by_source, stats.accepted_by_source
    order = [s for s in SOURCE_NAMES if s in steps] + sorted(s for s in steps if s not in SOURCE_NAMES)
    lines = []
    for src in order:
        n, p, a = steps.get(src, 0), proposed.get(src, 0), accepted.get(src, 0)
        if not n:
            continue
        kept = f"{a} of {p} kept" + (f" ({a / p:.0%})" if p else "")
        lines.append(f"{SOURCE_NAMES.get(src, src)}: {n} step{'' if n == 1 else 's'} · {kept}")
    return lines


def meta_line(fig: AnswerFigures | None) -> str:
    """A message's header (and its line in a Markdown export): mode, both rates labelled, α, τ
    and the plain-step share of a speculative answer, "stopped" when it was."""
    if fig is None:
        return ""
    if fig.edited_only:  # an answer the user rewrote: the text is theirs, no figures describe it
        return "edited"
    stats = fig.stats
    # an edited answer the model wrote on: the figures are its part's
    bits = (["edited, then continued"] if fig.edited else []) + [stats.mode]
    if speculative(stats) and stats.proposer:
        bits.append(stats.proposer)
    if stats.decode_tokens_per_second:
        bits.append(f"{stats.decode_tokens_per_second:.1f} {DECODE_RATE}")
    if stats.tokens_per_second:
        bits.append(f"{stats.tokens_per_second:.1f} {END_TO_END_RATE}")
    if speculative(stats):
        bits.append(f"α {alpha(stats)}")
        if fig.steps_counted:  # not where an earlier build saved it (its τ meant another thing)
            bits += [f"τ {tau(stats)}", f"plain steps {share(stats.plain_step_share)}"]
    # how it ended, where it did not end by itself: the mark that offers Continue
    bits.append(STOP_MARKS.get(stats.stop_reason, ""))
    return " · ".join(b for b in bits if b)


# a stream that broke off ("error") or an app that ended while it streamed ("cut"): the part is kept
STOP_MARKS = {"cancelled": "stopped", "max_new_tokens": "token limit", "context": "context full",
              "error": "cut off", "cut": "cut off"}
