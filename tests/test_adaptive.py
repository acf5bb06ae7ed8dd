"""The adaptive draft-length controller on synthetic measurements (no models): it follows
E(k) / (k*d + v(k)) as documented in specdec_core/adaptive.py."""

import pytest

from specdec_core.adaptive import AdaptiveDraftLength, FixedDraftLength, make_policy


def feed(ctl, steps, alpha_hit, d, v):
    """Drive the controller: each step accepts `round(alpha_hit * k)` tokens and costs
    k*d + v(k) as given by the function v."""
    ks = []
    for _ in range(steps):
        k = ctl.next_k()
        ks.append(k)
        n = min(k, round(alpha_hit * k))
        ctl.observe(k, n, k * d, v(k))
    return ks


def test_starts_at_k_start_and_grows_when_verification_is_flat():
    # GPU-like: verifying 10 costs what verifying 1 does; every token accepted; cheap draft
    ctl = AdaptiveDraftLength()
    ks = feed(ctl, 30, 1.0, d=0.01, v=lambda k: 1.0)
    assert ks[0] == 4
    assert ks[-1] == ctl.k_max


def test_stops_speculating_where_it_does_not_pay():
    # CPU-like (measured shape): a plain step 1.0, any verification 2.05, draft 0.4 per token,
    # acceptance ~0.5 -> E(k) <= 2: speculation loses, k = 0 wins
    ctl = AdaptiveDraftLength()
    ks = feed(ctl, 40, 0.5, d=0.4, v=lambda k: 1.0 if k == 0 else 2.05)
    assert 0 in ks[:4]  # measured a plain step early
    tail = ks[-16:]
    assert tail.count(0) >= 12  # mostly plain steps ...
    assert any(k > 0 for k in tail)  # ... with periodic probes (acceptance may change)


def test_speculates_on_cpu_shape_when_acceptance_is_high():
    # same costs, but the draft is nearly always right and cheap: long drafts pay
    ctl = AdaptiveDraftLength()
    ks = feed(ctl, 40, 1.0, d=0.1, v=lambda k: 1.0 if k == 0 else 2.05)
    assert all(k >= 6 for k in ks[-10:])


def test_expected_tokens_formula():
    ctl = AdaptiveDraftLength(accepted=1.0, trials=2.0)  # alpha = 0.5
    assert ctl.expected_tokens(0) == pytest.approx(1.0)
    assert ctl.expected_tokens(2) == pytest.approx((1 - 0.5**3) / 0.5)


def test_k0_is_never_extrapolated_from_longer_drafts():
    ctl = AdaptiveDraftLength()
    ctl.observe(2, 2, 0.2, 2.0)
    ctl.observe(4, 4, 0.4, 2.2)
    assert 0 not in ctl.verify and ctl.best_k() > 0


def test_fixed_and_factory():
    assert make_policy(3).next_k() == 3
    assert isinstance(make_policy("adaptive"), AdaptiveDraftLength)
    with pytest.raises(ValueError):
        FixedDraftLength(0)
