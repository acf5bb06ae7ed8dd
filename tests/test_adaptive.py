"""The adaptive draft-length controller on synthetic measurements (no models): the rule in
specdec_core/adaptive.py's docstring."""

import pytest

from specdec_core.adaptive import AdaptiveDraftLength, FixedDraftLength, make_policy


def feed(ctl, steps, accept, d, v):
    """Drive the controller: a step proposing k accepts accept(k) tokens and costs k*d + v(k)."""
    ks = []
    for _ in range(steps):
        k = ctl.next_k()
        ks.append(k)
        ctl.observe(k, min(k, accept(k)), k * d, v(k))
    return ks


def test_cap_follows_acceptance():
    ctl = AdaptiveDraftLength()
    assert ctl.next_k() == 4
    ctl.observe(4, 4, 0.4, 1.0)  # full draft accepted: +2
    assert ctl.cap == 6
    ctl.observe(6, 2, 0.6, 1.0)  # a rejection: -1
    assert ctl.cap == 5
    ctl.observe(3, 3, 0.3, 1.0)  # stopped early (confidence), all kept: unchanged
    assert ctl.cap == 5


def test_grows_to_k_max_when_everything_is_accepted_and_verification_is_flat():
    ctl = AdaptiveDraftLength()
    ks = feed(ctl, 30, lambda k: k, d=0.01, v=lambda k: 1.0)
    assert ks[0] == 4 and max(ks) == ctl.k_max
    assert ctl.alpha > 0.9


def test_stops_speculating_where_it_does_not_pay():
    # CPU shape measured here: plain step 1.0, any verification 2.05, draft 0.4 per token;
    # half the draft accepted -> speculative steps yield fewer tokens per second
    ctl = AdaptiveDraftLength()
    ks = feed(ctl, 48, lambda k: k // 2, d=0.4, v=lambda k: 1.0 if k == 0 else 2.05)
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


def test_fixed_and_factory():
    assert make_policy(3).next_k() == 3 and make_policy(3).min_confidence == 0.0
    assert isinstance(make_policy("adaptive"), AdaptiveDraftLength)
    with pytest.raises(ValueError):
        FixedDraftLength(0)
