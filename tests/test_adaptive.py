"""The adaptive draft-length controller on synthetic measurements (no models): the rule in
specdec_core/adaptive.py's docstring."""

import pytest

from specdec_core.adaptive import AdaptiveDraftLength, FixedDraftLength, make_policy


def feed(ctl, steps, accept, d, v, stop=None):
    """Drive the controller: a step asked for k proposes min(k, stop) (the draft's confidence
    stop), accepts accept(proposed) of them and costs proposed*d + v(proposed)."""
    ks = []
    for _ in range(steps):
        k = ctl.next_k()
        ks.append(k)
        k = k if stop is None else min(k, stop)
        ctl.observe(k, min(k, accept(k)), k * d, v(k))
    return ks


def test_threshold_is_the_measured_cost_of_one_more_token():
    ctl = AdaptiveDraftLength()
    assert ctl.next_k() == ctl.k_max == 16 and ctl.min_confidence == 0.5  # nothing measured yet
    ctl.observe(4, 4, 0.4, 2.0)  # draft 0.1 s per token; verification of 5 rows 2.0 s
    ctl.observe(0, 0, 0.0, 1.0)  # a plain step: 1.0 s
    assert ctl.min_confidence == 0.5  # the row cost needs a verification after a plain step
    ctl.observe(4, 4, 0.4, 2.0)
    # c = 0.1 / 1.0; each of the 4 proposed rows added (2.0 - 1.0) / 4 = 0.25 of a step
    assert ctl.cost_ratio == pytest.approx(0.1) and ctl.row_cost == pytest.approx(0.25)
    assert ctl.min_confidence == pytest.approx(0.35)
    ctl.observe(4, 0, 4.0, 9.0)  # slow: the threshold rises, but never past its clamp
    ctl.observe(4, 0, 4.0, 9.0)
    assert ctl.min_confidence == ctl.threshold_max == 0.9


def test_long_drafts_where_everything_is_accepted_and_verification_is_flat():
    ctl = AdaptiveDraftLength()
    ks = feed(ctl, 30, lambda k: k, d=0.01, v=lambda k: 1.0)
    assert ks[0] == ctl.k_max and ks.count(ctl.k_max) >= 25
    assert ctl.alpha > 0.9
    assert ctl.min_confidence == ctl.threshold_min  # cheap draft, free rows: run as far as it is sure


def test_stops_speculating_where_it_does_not_pay():
    # CPU shape measured here: plain step 1.0, any verification 2.05, draft 0.4 per token;
    # the draft stops after 4 and half of them are accepted -> speculative steps yield fewer
    # tokens per second
    ctl = AdaptiveDraftLength()
    ks = feed(ctl, 48, lambda k: k // 2, d=0.4, v=lambda k: 1.0 if k == 0 else 2.05, stop=4)
    assert 0 in ks[:4]  # measured a plain step early
    tail = ks[-24:]
    assert tail.count(0) >= 18  # mostly plain steps ...
    assert any(k > 0 for k in tail)  # ... with periodic probes: acceptance may change
    assert ctl.spec_rate < ctl.plain_rate


def test_keeps_speculating_where_it_pays():
    # same CPU costs, but the draft is cheap and right: long drafts beat plain steps
    ctl = AdaptiveDraftLength()
    ks = feed(ctl, 40, lambda k: k, d=0.1, v=lambda k: 1.0 if k == 0 else 2.05)
    tail = ks[-16:]
    assert tail.count(0) <= 2 and max(tail) == ctl.k_max
    assert ctl.spec_rate > ctl.plain_rate
    assert ctl.cost_ratio == pytest.approx(0.1)


def test_a_proposer_without_confidence_gets_a_cap_that_follows_acceptance():
    ctl = make_policy("adaptive", confident=False)  # prompt lookup
    assert ctl.next_k() == 4
    ctl.observe(4, 4, 0.0, 1.0)  # full draft accepted: +2
    assert ctl.next_k() == 6
    ctl.observe(6, 2, 0.0, 1.0)  # a rejection: -1
    assert ctl.cap == 5
    ctl.observe(3, 3, 0.0, 1.0)  # a shorter match, all kept: unchanged
    assert ctl.cap == 5
    assert make_policy("adaptive").next_k() == 16  # a draft model: long, cut by its confidence


def test_fixed_and_factory():
    assert make_policy(3).next_k() == 3 and make_policy(3).min_confidence == 0.0
    assert isinstance(make_policy("adaptive"), AdaptiveDraftLength)
    with pytest.raises(ValueError):
        FixedDraftLength(0)


def test_probes_back_off_while_they_keep_losing_and_reset_on_a_change():
    # the losing shape of test_stops_speculating_where_it_does_not_pay, for longer
    ctl = AdaptiveDraftLength()
    ks = feed(ctl, 200, lambda k: k // 2, d=0.4, v=lambda k: 1.0 if k == 0 else 2.05, stop=4)
    probes = [i for i, k in enumerate(ks) if k > 0 and i >= 8]  # after the first two steps
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and gaps[0] == 16 and gaps[-1] == ctl.probe_max  # 16, 32, 32, ...
    assert len(probes) <= 8  # instead of one every 8 steps (~24)
    # the draft turns right and cheap: the next probe wins; plain probes start again at 8
    ks = feed(ctl, 80, lambda k: k, d=0.02, v=lambda k: 1.0 if k == 0 else 1.2)
    first = next(i for i, k in enumerate(ks) if k > 0)
    assert first <= ctl.probe_max and ctl.speculating
    assert ks[first + 1 : first + ctl.probe_every + 1].index(0) == ctl.probe_every - 1


def test_one_winning_probe_switches_at_once():
    # Long plain stretch: the speculative rate on record is from text long gone. When the text
    # turns (a probe that is fast), that probe's rate replaces the stale one, so the very next
    # step speculates; an average moved by one step would keep plain steps for several probes.
    ctl = AdaptiveDraftLength()
    feed(ctl, 60, lambda k: 0, d=0.4, v=lambda k: 1.0 if k == 0 else 2.05, stop=4)
    assert not ctl.speculating
    while ctl.next_k() == 0:
        ctl.observe(0, 0, 0.0, 1.0)
    ctl.observe(4, 4, 4 * 0.05, 1.3)  # the probe: 5 tokens in 1.5 plain steps
    assert ctl.speculating and ctl.next_k() > 0
    # and the other way: a plain probe after speculating replaces the old plain rate
    ctl.plain_rate = 0.1  # stale and far too low
    while ctl.next_k() > 0:
        ctl.observe(4, 4, 4 * 0.05, 1.3)
    ctl.observe(0, 0, 0.0, 1.0)
    assert ctl.plain_rate == pytest.approx(1.0)


def test_an_overconfident_draft_must_be_surer_before_it_goes_on():
    # same costs for both; one draft's confidences expect 4 kept tokens a step and 4 are kept,
    # the other's expect 4 and 2 are kept: its confidence is worth half, so the threshold
    # (cost / calibration) doubles, up to the clamp
    def run(kept):
        ctl = AdaptiveDraftLength()
        for _ in range(30):
            k = ctl.next_k()
            if k == 0:
                ctl.observe(0, 0, 0.0, 1.0)
            else:
                ctl.observe(4, kept, 4 * 0.1, 1.8, expected_accepted=4.0)
        return ctl
    calibrated, overconfident = run(4), run(2)
    assert calibrated.calibration == pytest.approx(1.0)
    assert overconfident.calibration == pytest.approx(0.5, abs=0.05)
    # c = 0.1 / 1.0, each of 4 rows added (1.8 - 1.0) / 4 = 0.2: a cost of 0.3 plain steps
    assert calibrated.min_confidence == pytest.approx(0.3)
    assert overconfident.min_confidence == pytest.approx(0.3 / overconfident.calibration)
    assert overconfident.min_confidence > calibrated.min_confidence
    # proposers without a confidence (prompt lookup) pass none: the calibration stays 1
    lookup = make_policy("adaptive", confident=False)
    lookup.observe(4, 1, 0.0, 1.0)
    assert lookup.calibration == 1.0
