"""The adaptive controller on synthetic measurements (no models): the rules in
specdec_core/adaptive.py's docstring."""

import pytest

from specdec_core.adaptive import (LOOKUP_PRIOR, AdaptiveDraftLength, FixedDraftLength, StepOutcome,
                                   conversation_prior, make_policy)
from specdec_core.proposers import DRAFT, LOOKUP, MATCH_MAX, DraftPlan
from specdec_core.textkind import CODE

SURE, UNSURE = 10.0, 0.1  # the target's top-1 minus top-2 logit on an easy and a hard token


class Sim:
    """Drives a controller the way the decoder does, in simulated seconds: a plain step costs
    `plain`; a verification of k proposed rows plain * (1 + row * k); a drafted token `d`; the
    draft's read of n unread tokens n * `read`. `accept(source, k)` says how many of k
    proposed tokens the target keeps, `stop` where the draft's confidence ends a draft,
    `match()` the length of the match prompt lookup finds (0: none), `margin` the target's
    margin on every emitted token. The draft has read nothing at first (`prompt` tokens);
    after it, it falls behind by what other steps emit, up to its catch-up window of 16."""

    def __init__(self, ctl, accept, d=0.1, row=0.25, plain=1.0, read=0.02, stop=None, match=None,
                 margin=SURE, prompt=100, budget=10_000):
        self.ctl, self.accept, self.d, self.row, self.plain, self.read = ctl, accept, d, row, plain, read
        self.stop, self.match, self.margin, self.budget = stop, match, margin, budget
        self.unread = prompt
        self.steps: list[tuple[str, int]] = []
        ctl.observe_prefill(prompt, prompt * plain * row)

    def step(self) -> tuple[str, int]:
        ctl = self.ctl
        plan = ctl.plan(self.unread if DRAFT in ctl.sources else 0, self.budget)
        source, k, n, draft_s, read_s, read_n = "", 0, 0, 0.0, 0.0, 0
        n = self.match() if self.match is not None and max(plan.lookup) else 0
        if n and plan.lookup[min(n, MATCH_MAX)]:
            source, k = LOOKUP, plan.lookup[min(n, MATCH_MAX)]
        elif plan.draft:
            source, k = DRAFT, plan.draft if self.stop is None else min(plan.draft, self.stop)
            read_n, read_s = self.unread, self.unread * self.read
            draft_s = k * self.d
        kept = min(self.accept(source, k), k) if k else 0
        verify = self.plain * (1 + self.row * k)
        if source == DRAFT:
            self.unread = 0
        elif ctl.draft_started:
            self.unread = min(self.unread + kept + 1, 16)
        else:
            self.unread += kept + 1
        ctl.observe(StepOutcome(source, k, kept, draft_s, verify, read_s, read_n, None, [self.margin] * (kept + 1),
                                n if source == LOOKUP else 0))
        self.steps.append((source, k))
        return source, k

    def run(self, n):
        return [self.step() for _ in range(n)]


def all_kept(source, k):
    return k


def sources(steps):
    return [s for s, _ in steps]


def test_threshold_is_the_measured_cost_of_one_more_token():
    ctl = AdaptiveDraftLength()
    assert ctl.min_confidence == 0.5  # nothing measured yet
    ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0))  # a plain step: 1.0 s
    ctl.observe(StepOutcome(DRAFT, 4, 4, 0.4, 2.0))  # draft 0.1 s per token; 5 rows 2.0 s
    # c = 0.1 / 1.0; each of the 4 proposed rows added (2.0 - 1.0) / 4 = 0.25 of a step
    assert ctl.cost_ratio == pytest.approx(0.1) and ctl.row_cost == pytest.approx(0.25)
    assert ctl.min_confidence == pytest.approx(0.35)
    ctl.observe(StepOutcome(DRAFT, 4, 0, 4.0, 9.0))  # slow: the threshold rises, but never past its clamp
    ctl.observe(StepOutcome(DRAFT, 4, 0, 4.0, 9.0))
    assert ctl.min_confidence == ctl.threshold_max == 0.9


def test_a_verification_costs_what_was_measured_at_its_length():
    # a one-row step that is memory-bound: 2 and 3 rows nearly free, the 4th row costly
    ctl = AdaptiveDraftLength()
    ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0))
    for k, seconds in ((1, 1.05), (2, 1.25), (3, 1.8)):
        ctl.observe(StepOutcome(LOOKUP, k, k, 0.0, seconds, match=8))
    assert [round(ctl.verify_cost(k), 3) for k in range(4)] == [1.0, 1.05, 1.25, 1.8]
    # between two measured lengths, on the line between them; past the longest, a row each
    ctl.observe(StepOutcome(LOOKUP, 7, 7, 0.0, 2.6, match=8))
    assert ctl.verify_cost(5) == pytest.approx(1.8 + (2.6 - 1.8) * 2 / 4)
    assert ctl.verify_cost(9) == pytest.approx(2.6 + 2 * ctl.row_cost)
    # one cost per row (the mean of what each step's rows added) would call the 3rd proposal as
    # cheap as the 2nd; the draft's threshold after 2 tokens holds what the 3rd costs
    ctl.observe(StepOutcome(DRAFT, 1, 1, 0.2, 1.05))
    steps = ctl.confidence_steps
    c = ctl.cost_ratio
    assert steps[0] == pytest.approx(min(max((c + 0.2) / ctl.calibration, 0.2), 0.9))
    assert steps[1] == pytest.approx(min(max((c + 0.55) / ctl.calibration, 0.2), 0.9))
    assert steps[1] > steps[0] and steps[1] > steps[2]
    assert ctl.plan(0, 100).confidence_after(2) == steps[1]


def test_a_long_verification_costs_at_least_a_row_of_the_prefill_each():
    # the Zen 4 VM's avx2 build (speed notes, item 121): a 19-row prefill 6.5 plain steps, then a
    # two-row verification that ran as fast as the plain step. Priced at the rows measured so
    # far (0 each), a 3-token match's 12 proposals looked free and were staked on an
    # 11-token answer (one kept, ~3 plain steps lost); past the longest length measured, a row
    # costs at least what the prefill's rows did
    ctl = AdaptiveDraftLength(sources=(LOOKUP, DRAFT))
    ctl.observe_prefill(19, 6.5)
    ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0))
    assert ctl.long_row == pytest.approx(5.5 / 18)
    ctl.observe(StepOutcome(DRAFT, 1, 1, 0.3, 1.0))
    assert ctl.row_cost == 0.0
    assert ctl.verify_cost(12) == pytest.approx(1.0 + 11 * 5.5 / 18)
    assert ctl.plan(0, 100).lookup[3] <= 2
    # measured lengths still rule where they are known, and a short prefill says nothing
    ctl.observe(StepOutcome(LOOKUP, 12, 12, 0.0, 2.0, match=8))
    assert ctl.verify_cost(6) == pytest.approx(1.0 + 1.0 * 5 / 11)
    short = AdaptiveDraftLength()
    short.observe_prefill(4, 1.6)
    short.observe(StepOutcome("", 0, 0, 0.0, 1.0))
    assert short.long_row is None


def test_a_draft_that_has_earned_nothing_proposes_what_its_ledger_can_lose():
    # rule 6 before the step: a costly draft's first steps propose one token, whose rejection
    # the budget can carry; as its steps earn, its runs lengthen
    ctl = AdaptiveDraftLength()
    steps = Sim(ctl, all_kept, d=0.4, row=0.25, prompt=10).run(60)
    drafted = [k for s, k in steps if s == DRAFT]
    assert drafted[0] == 1
    assert max(drafted[-10:]) > 3
    assert ctl.draft_room() > 3
    # one that keeps losing stays at one token a step while it is allowed to run at all
    ctl = AdaptiveDraftLength()
    steps = Sim(ctl, lambda s, k: 0, d=0.4, row=0.25, prompt=10).run(200)
    assert {k for s, k in steps if s == DRAFT} == {1}
    # without the cap (risk_cap=False) the same draft's first step proposes all it may
    ctl = AdaptiveDraftLength(risk_cap=False)
    steps = Sim(ctl, lambda s, k: 0, d=0.4, row=0.25, prompt=10).run(20)
    assert [k for s, k in steps if s == DRAFT][0] == ctl.k_max


def test_the_first_step_after_the_prefill_is_plain_and_measures_a_plain_step():
    ctl = AdaptiveDraftLength(sources=(LOOKUP, DRAFT))
    assert ctl.plan(0, 100).empty
    ctl.observe(StepOutcome("", 0, 0, 0.0, 0.5))
    assert ctl.plain_rate == pytest.approx(2.0)


def test_long_drafts_where_everything_is_accepted_and_verification_is_cheap():
    ctl = AdaptiveDraftLength()
    steps = Sim(ctl, all_kept, d=0.01, row=0.01, prompt=20).run(30)
    assert steps[0] == ("", 0)  # start plain
    first = sources(steps).index(DRAFT)
    # the target is sure: predicted to pay; the first draft step, its cost not measured yet and
    # priced at the prior, risks one token (rule 6), the next ones all they may
    assert first <= 3 and steps[first] == (DRAFT, 1) and steps[first + 1] == (DRAFT, ctl.k_max)
    assert sources(steps[first:]).count(DRAFT) >= len(steps) - first - 1
    assert ctl.alpha > 0.9
    assert ctl.min_confidence == ctl.threshold_min  # cheap draft, cheap rows: run as far as it is sure


def test_the_draft_does_not_start_while_the_target_is_unsure():
    # Start plain (rule 5): where the target's own margins say the text is unpredictable, the
    # draft never reads the prompt -- speculative decoding costs what standard decoding costs.
    ctl = AdaptiveDraftLength()
    steps = Sim(ctl, lambda s, k: k // 4, d=0.37, row=0.25, margin=UNSURE).run(100)
    assert steps == [("", 0)] * 100
    assert not ctl.draft_started and ctl.predicted_gain() <= 1.0


def test_the_draft_starts_when_the_text_turns_predictable():
    ctl = AdaptiveDraftLength(first_answer_prior=0)  # the horizon: the answer so far alone
    sim = Sim(ctl, all_kept, d=0.1, row=0.1, margin=UNSURE)
    sim.run(40)
    assert not ctl.draft_started
    sim.margin = SURE
    steps = sim.run(30)
    first = sources(steps).index(DRAFT)
    assert first <= 8  # the running share of sure tokens crosses within a few tokens
    assert sources(steps[first:]).count(DRAFT) >= len(steps) - first - 2


def test_a_first_answer_is_expected_to_run_on():
    # a 300-token prompt to read: the answer's first tokens alone cannot repay that read, the 64
    # tokens a first answer is expected to run to can
    def first_draft_step(ctl):
        steps = sources(Sim(ctl, all_kept, d=0.1, row=0.1, read=0.02, prompt=300).run(80))
        return steps.index(DRAFT) if DRAFT in steps else len(steps)

    expecting = first_draft_step(AdaptiveDraftLength())
    assert expecting <= 8
    assert first_draft_step(AdaptiveDraftLength(first_answer_prior=0)) > expecting + 20
    # a conversation's previous answer is the evidence, when there is one: a short one holds
    # the draft back longer than the prior would
    assert first_draft_step(AdaptiveDraftLength(answer_prior=8)) > expecting


def test_a_long_prompt_is_read_only_where_the_answer_can_repay_it():
    # the same predictable text; reading a 5,000-token prompt costs ~100 plain steps, which 64
    # tokens at the draft's gain cannot repay: the draft waits ...
    ctl = AdaptiveDraftLength()
    assert Sim(ctl, all_kept, d=0.1, row=0.1, read=0.02, prompt=5000).run(40) == [("", 0)] * 40
    # ... while a short one is read within a dozen tokens
    ctl = AdaptiveDraftLength()
    assert DRAFT in sources(Sim(ctl, all_kept, d=0.1, row=0.1, read=0.02, prompt=50).run(12))
    # and nothing is read in an answer's last tokens, where there is nothing left to save
    ctl = AdaptiveDraftLength()
    assert Sim(ctl, all_kept, d=0.1, row=0.1, read=0.02, prompt=200, budget=3).run(3) == [("", 0)] * 3
    # nor right at the start of an answer where the 64 tokens a first answer is expected to
    # run to cannot repay it (the horizon grows with the answer)
    ctl = AdaptiveDraftLength()
    assert Sim(ctl, all_kept, d=0.1, row=0.1, read=0.02, prompt=2000).run(3) == [("", 0)] * 3


def every_fourth_first_token():
    """An acceptance where the draft's first token is kept one step in four, nothing after it."""
    calls = []

    def accept(source, k):
        calls.append(source)
        return 1 if len(calls) % 4 == 0 else 0
    return accept


def test_stops_speculating_where_it_does_not_pay():
    # a verified row 0.25 of a plain step, a drafted token 0.4; the draft stops after 4 and
    # keeps its first token one step in four, whatever the length (at one token a step, which
    # rule 6 starts it with, 1.25 tokens for 1.65 plain steps): the text looked easy (so it
    # started), the draft is poor
    ctl = AdaptiveDraftLength()
    steps = Sim(ctl, every_fourth_first_token(), d=0.4, row=0.25, stop=4, prompt=10).run(80)
    assert DRAFT in sources(steps[:20])
    assert sources(steps[-40:]).count("") >= 36  # then plain steps, with the odd probe
    assert ctl.draft_rate < ctl.plain_rate


def test_keeps_speculating_where_it_pays():
    ctl = AdaptiveDraftLength()
    steps = Sim(ctl, all_kept, d=0.1, row=0.1, prompt=20).run(80)
    tail = steps[-40:]
    assert sources(tail).count("") <= 2  # the plain steps that keep the plain rate current
    assert max(k for _, k in tail) == ctl.k_max
    assert ctl.draft_rate > ctl.plain_rate and ctl.cost_ratio == pytest.approx(0.1)


def test_probes_back_off_while_they_keep_losing_and_come_back_when_the_budget_allows():
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, lambda s, k: 0, d=0.4, row=0.25, stop=4, prompt=10)
    steps = sim.run(300)
    probes = [i for i, (s, _) in enumerate(steps) if s == DRAFT]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps[-1] >= ctl.probe_max and sorted(gaps[1:]) == gaps[1:]  # each lost probe waits longer
    # a probe risks one token (draft_room: it has earned nothing), 0.4 + 0.25 = 0.65 plain steps
    # where four cost 2.6: more of them fit in the same budget, and still few
    assert all(k == 1 for s, k in steps if s == DRAFT) and len(probes) <= 12
    # rule 6: what the probes lost stays within 2% of the time, give or take the one probe
    # that took it past
    assert ctl.lost(DRAFT) <= ctl.budget_share * ctl.elapsed + 2.6 + 1e-9
    # the draft turns right and cheap: a probe as soon as the budget covers the losses wins,
    # and it speculates from then on
    sim.accept, sim.d, sim.row = all_kept, 0.02, 0.05
    steps = sim.run(150)
    first = sources(steps).index(DRAFT)
    assert sources(steps[first:]).count(DRAFT) >= len(steps) - first - 6


def test_a_source_that_loses_in_prose_stops_there_and_is_judged_afresh_in_code():
    # lookup after 1-token matches in an explanation, nothing kept: it stops in prose; a code
    # block opens: there it is judged from the prior again and proposes
    ctl = AdaptiveDraftLength(sources=(LOOKUP,))
    steps = Sim(ctl, lambda s, k: 0, row=0.1, match=lambda: 1).run(60)
    assert sources(steps[-40:]).count(LOOKUP) <= 2
    assert ctl.plan(0, 100, kind=CODE).lookup[1] > 0 and ctl.kind == CODE


def test_a_code_block_opening_measures_the_draft_afresh():
    # the draft lost in prose (its rate below plain's); a code fence opens: its rate on record
    # is of the other kind of text, so it proposes at once and is judged on code
    ctl = AdaptiveDraftLength(sources=(LOOKUP, DRAFT))
    sim = Sim(ctl, lambda s, k: 0, d=0.4, row=0.25, stop=4, prompt=10)
    sim.run(40)
    assert ctl.draft_started and not ctl.draft_wins
    plan = ctl.plan(0, 100, kind=CODE)
    assert plan.draft > 0 and ctl.draft_rate is None


def test_the_ledger_stops_a_source_whose_steps_lose_time_whatever_its_acceptance_says():
    # hand-built steps: a plain step takes 1 s; lookup keeps 1 of 2 after 8-token matches (its
    # prior says such a run pays) but the verification takes 3 s: 2 tokens for 3 s lose 1 s
    # against plain steps. Within 2% of the time it may lose; past it, it stops until the
    # budget, growing with the answer, covers what it lost.
    ctl = AdaptiveDraftLength(sources=(LOOKUP,))
    ctl.plan(0, 100)
    ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0))
    for _ in range(20):
        ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0))
    assert ctl.plan(0, 100).lookup[MATCH_MAX] > 0
    ctl.observe(StepOutcome(LOOKUP, 2, 1, 0.0, 3.0, match=MATCH_MAX))
    assert ctl.lost(LOOKUP, MATCH_MAX) == pytest.approx(1.0)
    assert ctl.plan(0, 100).lookup[MATCH_MAX] == 0  # 1 s lost > 2% of 24 s
    assert ctl.lost(LOOKUP, 4) == 0.0  # other match lengths keep their own ledger
    for _ in range(25):  # 2% of 49 s is still below 1 s
        ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0))
    assert ctl.plan(0, 100).lookup[MATCH_MAX] == 0
    assert not ctl.within_budget(LOOKUP, MATCH_MAX)
    for _ in range(2):  # 2% of 51 s covers it (whether it then pays is the row cost's say)
        ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0))
    assert ctl.within_budget(LOOKUP, MATCH_MAX)
    # a gain is a negative loss, but only up to credit_cap plain steps
    ctl.observe(StepOutcome(LOOKUP, 8, 8, 0.0, 1.0, match=1))
    ctl.observe(StepOutcome(LOOKUP, 8, 8, 0.0, 1.0, match=1))
    assert ctl.lost(LOOKUP, 1) == pytest.approx(-ctl.credit_cap)


def test_lookup_is_judged_by_the_length_of_its_match():
    # short matches are mostly wrong, long ones mostly right: lookup proposes after long
    # matches only, and as far as their measured acceptance makes worth it
    ctl = AdaptiveDraftLength(sources=(LOOKUP,))
    lengths = iter([1, 8] * 200)

    def accept(source, k):
        return k if last[0] == 8 else 0

    last = [0]

    def match():
        last[0] = next(lengths)
        return last[0]

    Sim(ctl, accept, row=0.1, match=match).run(100)
    plan = ctl.plan(0, 1000)
    assert plan.lookup[1] == 0 and plan.lookup[MATCH_MAX] == ctl.k_max
    assert ctl.lookup_beta(MATCH_MAX) > 0.95 and ctl.lookup_beta(1) < LOOKUP_PRIOR[1]


def test_lookup_proposes_where_it_finds_a_long_match_and_the_draft_where_it_does_not():
    # the draft starts once the answer has shown it runs on (here every drafted token is kept
    # at a tenth of a step: started at once, its rate would leave lookup's prior no chance)
    ctl = AdaptiveDraftLength(sources=(LOOKUP, DRAFT), first_answer_prior=0)
    lengths = iter([0, 8] * 100)
    steps = Sim(ctl, all_kept, d=0.1, row=0.05, match=lambda: next(lengths), prompt=20).run(60)
    assert sources(steps).count(LOOKUP) >= 25 and sources(steps).count(DRAFT) >= 20


def test_while_lookup_copies_the_text_the_draft_is_not_started():
    # a summary or an edit: long matches everywhere, every copied token kept; the draft's read
    # of a long prompt would save nothing lookup does not already save
    ctl = AdaptiveDraftLength(sources=(LOOKUP, DRAFT))
    steps = Sim(ctl, all_kept, d=0.1, row=0.05, match=lambda: 8, prompt=400).run(40)
    assert not ctl.draft_started and sources(steps[1:]).count(LOOKUP) == 39


def test_fixed_and_factory():
    k3 = (0,) + (3,) * MATCH_MAX
    assert make_policy(3).plan() == DraftPlan(draft=3)
    assert make_policy(3, (LOOKUP, DRAFT)).plan() == DraftPlan(draft=3, lookup=k3)
    assert make_policy(3, (LOOKUP,)).plan() == DraftPlan(lookup=k3)
    assert isinstance(make_policy("adaptive"), AdaptiveDraftLength)
    with pytest.raises(ValueError):
        FixedDraftLength(0)


def test_a_plan_is_clipped_to_the_budget():
    plan = DraftPlan(draft=16, lookup=(0,) + (9,) * MATCH_MAX, min_confidence=0.4).clip(3)
    assert plan.draft == 3 and set(plan.lookup[1:]) == {3} and plan.min_confidence == 0.4
    assert DraftPlan(draft=5).clip(0).empty and not DraftPlan(draft=5).empty


def test_one_winning_probe_switches_at_once():
    # A long losing stretch: the draft's rate on record is from text long gone. When the text
    # turns (a probe that is fast), that probe's rate replaces the stale one, so the very next
    # step speculates; an average moved by one step would keep plain steps for several probes.
    ctl = AdaptiveDraftLength()
    Sim(ctl, lambda s, k: 0, d=0.4, row=0.25, stop=4, prompt=10).run(60)
    assert not ctl.draft_wins
    while ctl.plan(0, 100).draft == 0:
        ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0, margins=[SURE]))
    ctl.observe(StepOutcome(DRAFT, 4, 4, 4 * 0.05, 1.3, margins=[SURE] * 5))  # 5 tokens in 1.5 plain steps
    assert ctl.draft_wins and ctl.plan(0, 100).draft > 0


def test_an_overconfident_draft_must_be_surer_before_it_goes_on():
    # same costs for both; one draft's confidences expect 4 kept tokens a step and 4 are kept,
    # the other's expect 4 and 2 are kept: its confidence is worth half, so the threshold
    # (cost / calibration) doubles, up to the clamp
    def run(kept):
        ctl = AdaptiveDraftLength()
        ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0))
        for _ in range(30):
            ctl.observe(StepOutcome(DRAFT, 4, kept, 4 * 0.1, 1.8, expected_accepted=4.0))
        return ctl
    calibrated, overconfident = run(4), run(2)
    assert calibrated.calibration == pytest.approx(1.0)
    assert overconfident.calibration == pytest.approx(0.5, abs=0.05)
    # c = 0.1 / 1.0, each of 4 rows added (1.8 - 1.0) / 4 = 0.2: a cost of 0.3 plain steps
    assert calibrated.min_confidence == pytest.approx(0.3)
    assert overconfident.min_confidence == pytest.approx(0.3 / overconfident.calibration)


@pytest.mark.parametrize(
    "reused, last_prompt, last_answer, prior",
    [
        (0, 0, 0, 0),  # the first generation
        (120, 100, 40, 40),  # a next turn: the last prompt and answer are cached
        (99, 100, 40, 40),  # a regenerate: all of the last prompt but its last token
        (20, 100, 40, 0),  # a new chat: the system prompt alone is shared
        (90, 100, 40, 0),  # the last user message edited: not the same question
    ],
)
def test_conversation_prior_only_within_one_conversation(reused, last_prompt, last_answer, prior):
    assert conversation_prior(reused, last_prompt, last_answer) == prior
