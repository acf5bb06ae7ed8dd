"""The names three of Stats' figures had before they said what they are, for the readers of what
was written under them. Nothing writes these names any more; Stats has one name per figure.

    draft_tokens            -> proposed_tokens               proposed tokens of any source (the draft
                                                             model, prompt lookup, the grammar) that
                                                             reached verification; the old name was
                                                             also k's (DecodeSettings.draft_tokens,
                                                             which keeps it)
    accepted_draft_tokens   -> accepted_tokens               of those, the ones the target kept
    mean_accepted_per_step  -> tokens_per_speculative_step   tau: tokens a speculative step emits
                                                             (its accepted ones and the corrected or
                                                             bonus one), not accepted ones alone

Where the old names are read: saved chats (app/history.py migrates the file's rows, schema 3),
chat files of format version 1 (app/chat_json.py), an older `specdec serve`'s stats
(serve/protocol.py, stats_from_wire), and bench reports written before (bench/report.py and
bench/server.py render them; their `draft_tokens` is k and stays). Plain Python, no torch.
"""

from __future__ import annotations

STATS_RENAMED = {
    "draft_tokens": "proposed_tokens",
    "accepted_draft_tokens": "accepted_tokens",
    "mean_accepted_per_step": "tokens_per_speculative_step",
}
TAU_RENAMED = {"mean_accepted_per_step": "tokens_per_speculative_step"}


def renamed_keys(d: dict, renames: dict[str, str]) -> dict:
    """`d` with its keys in `renames` under their new names, in the same places, the values as
    they were; a key already present under its new name wins over its old one. Top level only:
    a nested dict keeps its keys (a saved answer's "settings" holds k as `draft_tokens`)."""
    out = {}
    for key, value in d.items():
        new = renames.get(key)
        if new is None:
            out[key] = value
        elif new not in d:
            out[new] = value
    return out


def stats_under_current_names(d: dict) -> dict:
    """A Stats.to_dict() of any release (with the app's keys beside, as a saved answer has them)
    under today's names."""
    return renamed_keys(d, STATS_RENAMED)


def report_under_current_names(report):
    """A bench report.json (bench/report.py's or bench/server.py's) of any release under today's
    names: tau's key renamed wherever it stands (rows, their spreads and repeats, the summaries);
    every other key as written (a row's `draft_tokens` is k)."""
    if isinstance(report, dict):
        return {k: report_under_current_names(v) for k, v in renamed_keys(report, TAU_RENAMED).items()}
    if isinstance(report, list):
        return [report_under_current_names(v) for v in report]
    return report
