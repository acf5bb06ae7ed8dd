"""The grammar's forced runs (issue 29) are named as their own source wherever the app names a
step's source: the side panel's per-source lines and a token's hover text."""

from app import figures
from app.message_text import ViewToken, token_tooltip
from specdec_core.events import Stats


def test_the_side_panel_names_the_grammar_s_steps():
    stats = Stats(mode="speculative", speculative_steps=3, steps_by_source={"grammar": 2, "draft": 1},
                  proposed_by_source={"grammar": 9, "draft": 4}, accepted_by_source={"grammar": 9, "draft": 2})
    assert figures.sources(stats) == ["draft model: 1 step · 2 of 4 kept (50%)",
                                      "grammar: 2 steps · 9 of 9 kept (100%)"]


def test_a_forced_token_says_the_grammar_proposed_it():
    tip = token_tooltip(ViewToken(7, '"', "accepted", 3, 0, "grammar"))
    assert "proposed by the answer&#x27;s grammar" in tip or "proposed by the answer's grammar" in tip
