"""The adaptive controller on synthetic measurements (no models): the rules in
specdec_core/adaptive.py's docstring."""

import pytest

from specdec_core.adaptive import AdaptiveDraftLength, FixedDraftLength, StepOutcome, make_policy
from specdec_core.proposers import DRAFT, LOOKUP, DraftPlan

SURE, UNSURE = 10.0, 0.1  # the target's top-1 minus top-2 logit on an easy and a hard token


class Sim:
    """Drives a controller the way the decoder does, in simulated seconds: a plain step costs
    `plain`; a verification of k proposed rows plain * (1 + row * k); a drafted token `d`; a
    read of n unread tokens n * `read`. `accept(source, k)` says how many of k proposed
    tokens the target keeps, `stop` where the draft's confidence ends a draft, `match(k)` what
    prompt lookup finds (0: nothing), `margin` the target's margin on every emitted token."""

    def __init__(self, ctl, accept, d=0.1, row=0.25, plain=1.0, read=0.02, stop=None, match=None,
                 margin=SURE, prompt=100, budget=10_000):
        self.ctl, self.accept, self.d, self.row, self.plain, self.read = ctl, accept, d, row, plain, read
        self.stop, self.match, self.margin, self.budget = stop, match, margin, budget
        self.unread = prompt  # the draft has read nothing yet
        self.steps: list[tuple[str, int]] = []
        ctl.observe_prefill(prompt, prompt * plain * row)

    def step(self) -> tuple[str, int]:
        ctl = self.ctl
        plan = ctl.plan(self.unread if DRAFT in ctl.sources else 0, self.budget)
        source, k, draft_s, read_s, read_n = "", 0, 0.0, 0.0, 0
        found = self.match(plan.lookup) if plan.lookup and self.match is not None else 0
        if found:
            source, k = LOOKUP, min(plan.lookup, found)
        elif plan.draft:
            source, k = DRAFT, plan.draft if self.stop is None else min(plan.draft, self.stop)
            read_n, read_s = self.unread, self.unread * self.read
            draft_s = k * self.d
        n = min(self.accept(source, k), k) if k else 0
        verify = self.plain * (1 + self.row * k)
        self.unread = 0 if source == DRAFT else min(self.unread + n + 1, 10_000 if not ctl.draft_started else 16)
        ctl.observe(StepOutcome(source, k, n, draft_s, verify, read_s, read_n, None, [self.margin] * (n + 1)))
        self.steps.append((source, k))
        return source, k

    def run(self, n):
        return [self.step() for _ in range(n)]


def all_kept(source, k):
    return k


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


def test_the_first_step_after_the_prefill_is_plain_and_measures_a_plain_step():
    ctl = AdaptiveDraftLength(sources=(LOOKUP, DRAFT))
    assert ctl.plan(0, 100).empty
    ctl.observe(StepOutcome("", 0, 0, 0.0, 0.5))
    assert ctl.plain_rate == pytest.approx(2.0)


def test_long_drafts_where_everything_is_accepted_and_verification_is_cheap():
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, all_kept, d=0.01, row=0.01)
    steps = sim.run(30)
    assert steps[0] == ("", 0)  # start plain
    assert steps[1] == (DRAFT, ctl.k_max)  # predicted to pay at once: the target is sure of its text
    assert [s for s, _ in steps[2:]].count(DRAFT) >= 26
    assert ctl.alpha > 0.9
    assert ctl.min_confidence == ctl.threshold_min  # cheap draft, cheap rows: run as far as it is sure


def test_the_draft_does_not_start_while_the_target_is_unsure():
    # Start plain (rule 4): where the target's own margins say the text is unpredictable, the
    # draft never reads the prompt -- speculative decoding costs what standard decoding costs.
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, lambda s, k: k // 4, d=0.37, row=0.25, margin=UNSURE)
    steps = sim.run(100)
    assert steps == [("", 0)] * 100
    assert not ctl.draft_started and ctl.predicted_gain() < 1.0


def test_the_draft_starts_when_the_text_turns_predictable():
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, all_kept, d=0.1, row=0.1, margin=UNSURE)
    sim.run(40)
    assert not ctl.draft_started
    sim.margin = SURE
    steps = sim.run(30)
    first = next(i for i, (s, _) in enumerate(steps) if s == DRAFT)
    assert first <= 8  # the running share of sure tokens crosses within a few tokens
    assert [s for s, _ in steps[first:]].count(DRAFT) >= len(steps) - first - 2


def test_a_long_prompt_is_read_only_where_the_answer_left_can_repay_it():
    # the same predictable text; the read of a 5,000-token prompt costs ~100 plain steps,
    # which no 64-token horizon can repay: the draft waits ...
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, all_kept, d=0.1, row=0.1, read=0.02, prompt=5000)
    assert sim.run(10) == [("", 0)] * 10
    # ... while a short one is read at once
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, all_kept, d=0.1, row=0.1, read=0.02, prompt=50)
    assert DRAFT in [s for s, _ in sim.run(4)]
    # and nothing is read in the answer's last tokens, where there is nothing left to save
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, all_kept, d=0.1, row=0.1, read=0.02, prompt=200, budget=3)
    assert sim.run(3) == [("", 0)] * 3


def test_stops_speculating_where_it_does_not_pay():
    # CPU shape measured on the AMD machine: a verified row 0.25 of a plain step, a drafted
    # token 0.4; the draft stops after 4 and only one of them is kept
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, lambda s, k: 1, d=0.4, row=0.25, stop=4)
    steps = sim.run(60)
    tail = [s for s, _ in steps[-30:]]
    assert tail.count("") >= 24  # mostly plain steps ...
    assert DRAFT in [s for s, _ in steps]  # ... after it tried (the margins said it might pay)
    assert ctl.draft.rate < ctl.plain_rate


def test_keeps_speculating_where_it_pays():
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, all_kept, d=0.1, row=0.1)
    steps = sim.run(60)
    tail = steps[-30:]
    assert [s for s, _ in tail].count("") <= 2  # the plain step that keeps the plain rate current
    assert max(k for _, k in tail) == ctl.k_max
    assert ctl.draft.rate > ctl.plain_rate and ctl.cost_ratio == pytest.approx(0.1)


def test_probes_back_off_while_they_keep_losing_and_reset_on_a_change():
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, lambda s, k: 0, d=0.4, row=0.25, stop=4)
    steps = sim.run(200)
    probes = [i for i, (s, _) in enumerate(steps) if s == DRAFT]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and gaps[0] == ctl.probe_every and gaps[-1] == ctl.probe_max  # 8, 16, 32, 32, ...
    assert len(probes) <= 9
    # the draft turns right and cheap: the next probe wins and it speculates from then on
    sim.accept, sim.d, sim.row = all_kept, 0.02, 0.05
    steps = sim.run(80)
    first = next(i for i, (s, _) in enumerate(steps) if s == DRAFT)
    assert first <= ctl.probe_max
    assert [s for s, _ in steps[first:]].count(DRAFT) >= len(steps) - first - 3


def test_lookup_proposes_where_it_finds_a_match_and_the_draft_where_it_does_not():
    ctl = AdaptiveDraftLength(sources=(LOOKUP, DRAFT))
    matches = iter([0, 8, 0, 8] * 50)
    sim = Sim(ctl, all_kept, d=0.1, row=0.05, match=lambda k: next(matches))
    steps = sim.run(40)
    assert {s for s, _ in steps[2:]} <= {LOOKUP, DRAFT, ""}
    assert [s for s, _ in steps].count(LOOKUP) >= 12 and [s for s, _ in steps].count(DRAFT) >= 12


def test_lookup_that_keeps_failing_is_switched_off():
    # every lookup proposal is rejected at once: its steps cost k rows for one token
    ctl = AdaptiveDraftLength(sources=(LOOKUP, DRAFT))
    sim = Sim(ctl, lambda s, k: 0 if s == LOOKUP else k, d=0.1, row=0.25, match=lambda k: k)
    steps = sim.run(80)
    assert [s for s, _ in steps[-40:]].count(LOOKUP) <= 3
    assert not ctl.wins(LOOKUP)


def test_a_proposer_without_confidence_gets_a_cap_that_follows_acceptance():
    ctl = make_policy("adaptive", (LOOKUP,))
    ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0))
    assert ctl.plan(0, 100).lookup == 4 and ctl.plan(0, 100).draft == 0
    ctl.observe(StepOutcome(LOOKUP, 4, 4, 0.0, 1.0))  # whole proposal accepted: +2
    assert ctl.cap == 6
    ctl.observe(StepOutcome(LOOKUP, 6, 2, 0.0, 1.0))  # a rejection: -1
    assert ctl.cap == 5
    ctl.observe(StepOutcome(LOOKUP, 3, 3, 0.0, 1.0))  # a shorter match, all kept: unchanged
    assert ctl.cap == 5


def test_fixed_and_factory():
    assert make_policy(3).plan() == DraftPlan(draft=3)
    assert make_policy(3, (LOOKUP, DRAFT)).plan() == DraftPlan(draft=3, lookup=3)
    assert isinstance(make_policy("adaptive"), AdaptiveDraftLength)
    with pytest.raises(ValueError):
        FixedDraftLength(0)


def test_one_winning_probe_switches_at_once():
    # A long losing stretch: the draft's rate on record is from text long gone. When the text
    # turns (a probe that is fast), that probe's rate replaces the stale one, so the very next
    # step speculates; an average moved by one step would keep plain steps for several probes.
    ctl = AdaptiveDraftLength()
    sim = Sim(ctl, lambda s, k: 0, d=0.4, row=0.25, stop=4)
    sim.run(60)
    assert not ctl.wins(DRAFT)
    while ctl.plan(0, 100).draft == 0:
        ctl.observe(StepOutcome("", 0, 0, 0.0, 1.0, margins=[SURE]))
    ctl.observe(StepOutcome(DRAFT, 4, 4, 4 * 0.05, 1.3, margins=[SURE] * 5))  # 5 tokens in 1.5 plain steps
    assert ctl.wins(DRAFT) and ctl.plan(0, 100).draft > 0


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
    # lookup passes no expectation: the calibration stays 1
    lookup = make_policy("adaptive", (LOOKUP,))
    lookup.observe(StepOutcome(LOOKUP, 4, 1, 0.0, 1.0))
    assert lookup.calibration == 1.0
