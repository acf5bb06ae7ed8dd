"""Tier 1: the acceptance math on hand-built distributions, every random number chosen by hand.

Each table row carries one comment saying what it checks; the expected values were worked out
on paper from Leviathan et al. 2023, Algorithm 1.
"""

import pytest
import torch

from specdec_core.acceptance import accept_mask, greedy_verify, residual, speculative_verify, step_token_kind
from specdec_core.events import TokenKind
from specdec_core.sampling import probabilities, sample_from
from specdec_core.settings import SamplingParams, SettingsError

# ---------------------------------------------------------------------------------------------
# Greedy: accept while draft == target argmax, then the target's argmax.
GREEDY = [
    # (draft, target argmax after each prefix, n accepted, next token, kind)
    ([5, 6, 7], [5, 6, 7, 8], 3, 8, TokenKind.BONUS),  # all match: bonus is argmax after the last
    ([5, 6, 7], [4, 6, 7, 8], 0, 4, TokenKind.CORRECTED),  # first differs: nothing kept, target's 4
    ([5, 6, 7], [5, 9, 7, 8], 1, 9, TokenKind.CORRECTED),  # later matches after a miss never count
    ([5, 6, 7], [5, 6, 1, 8], 2, 1, TokenKind.CORRECTED),  # miss on the last draft position
    ([], [3], 0, 3, TokenKind.STANDARD),  # nothing proposed: a plain target step, the target's alone
    ([2], [2, 2], 1, 2, TokenKind.BONUS),  # repeated tokens are fine
]


@pytest.mark.parametrize("draft,argmax,n,nxt,kind", GREEDY)
def test_greedy_verify_table(draft, argmax, n, nxt, kind):
    v = greedy_verify(draft, argmax)
    assert (v.n_accepted, v.next_token, v.next_kind) == (n, nxt, kind)


@pytest.mark.parametrize("k,n,kind", [
    (0, 0, TokenKind.STANDARD),  # nothing proposed: the draft earned nothing
    (1, 0, TokenKind.CORRECTED),
    (1, 1, TokenKind.BONUS),  # the one proposal kept: the extra token is the draft's doing
    (4, 3, TokenKind.CORRECTED),
    (4, 4, TokenKind.BONUS),
])
def test_a_steps_target_token_kind(k, n, kind):
    assert step_token_kind(k, n) is kind


def test_speculative_verify_with_nothing_proposed_is_a_plain_step():
    # k = 0: one target row; the token is drawn from it (u=0.6: cdf 0.5, 0.8 -> token 1), standard
    v = speculative_verify(torch.tensor([], dtype=torch.long), None, P[:1], torch.tensor([]), 0.6)
    assert (v.n_accepted, v.next_token, v.next_kind) == (0, 1, TokenKind.STANDARD)


def test_greedy_verify_needs_k_plus_one_rows():
    with pytest.raises(ValueError):
        greedy_verify([1, 2], [1, 2])


# ---------------------------------------------------------------------------------------------
# Speculative sampling over a 3-token vocabulary.
P = torch.tensor(
    [
        [0.5, 0.3, 0.2],  # p_target at position 1
        [0.1, 0.6, 0.3],  # position 2
        [0.2, 0.2, 0.6],  # position 3 (bonus row when k = 2)
    ]
)
Q = torch.tensor(
    [
        [0.25, 0.5, 0.25],  # q_draft at position 1
        [0.1, 0.3, 0.6],  # position 2
    ]
)

SPEC = [
    # (draft, u_accept, u_next, n accepted, next token, kind)
    # x1=0: p/q = 0.5/0.25 >= 1, always kept; x2=1: p/q = 0.6/0.3 >= 1, kept; bonus from P[2]
    # with u=0.5: cdf(0.2, 0.4, 1.0) -> token 2.
    ([0, 1], [0.99, 0.99], 0.5, 2, 2, TokenKind.BONUS),
    # x1=1: p/q = 0.3/0.5 = 0.6; u=0.59 < 0.6 accepts. x2=2: p/q = 0.3/0.6 = 0.5; u=0.5 rejects
    # (u < 0.5 is false). residual max(0, P[1]-Q[1]) = (0, 0.3, 0) -> token 1 whatever u.
    ([1, 2], [0.59, 0.5], 0.99, 1, 1, TokenKind.CORRECTED),
    # x1=1: u=0.6 rejects (0.6 < 0.6 false). residual max(0, P[0]-Q[0]) = (0.25, 0, 0) -> 0.
    ([1, 0], [0.6, 0.0], 0.3, 0, 0, TokenKind.CORRECTED),
    # x1=2: p/q = 0.2/0.25 = 0.8; u=0.79 accepts. x2=0: p/q = 1, always kept; bonus with u=0.1
    # from P[2]: cdf 0.2 > 0.1 -> token 0.
    ([2, 0], [0.79, 0.999], 0.1, 2, 0, TokenKind.BONUS),
]


@pytest.mark.parametrize("draft,u_acc,u_next,n,nxt,kind", SPEC)
def test_speculative_verify_table(draft, u_acc, u_next, n, nxt, kind):
    v = speculative_verify(torch.tensor(draft), Q, P, torch.tensor(u_acc), u_next)
    assert (v.n_accepted, v.next_token, v.next_kind) == (n, nxt, kind)


def test_deterministic_proposer_is_one_hot():
    # q None = one-hot on x: accept with probability p(x). x=0 at position 1: p=0.5.
    keep = accept_mask(torch.tensor([0]), None, P[:2], torch.tensor([0.49]))
    drop = accept_mask(torch.tensor([0]), None, P[:2], torch.tensor([0.5]))
    assert keep.tolist() == [True] and drop.tolist() == [False]
    # residual of a one-hot proposal: p with x removed -> (0, 0.3, 0.2), never x itself.
    r = residual(P[0], None, rejected=0)
    assert torch.allclose(r, torch.tensor([0.0, 0.3, 0.2]))
    v = speculative_verify(torch.tensor([0]), None, P[:2], torch.tensor([0.9]), 0.0)
    assert (v.n_accepted, v.next_token, v.next_kind) == (0, 1, TokenKind.CORRECTED)


def test_zero_draft_probability_rejects():
    # A proposer claiming x=0 where q(0)=0 (impossible for an honest sampler): p/q is undefined,
    # so we reject even with u = 0, and sample the residual max(0, p - q).
    q = torch.tensor([[0.0, 0.5, 0.5]])
    assert accept_mask(torch.tensor([0]), q, P[:2], torch.tensor([0.0])).tolist() == [False]
    v = speculative_verify(torch.tensor([0]), q, P[:2], torch.tensor([0.0]), 0.0)
    assert v.n_accepted == 0 and v.next_token == 0  # residual (0.5, 0, 0)


def test_empty_residual_falls_back_to_target():
    # p == q: rejection has probability 0, but a forced one (u >= 1 via rounding) must still
    # sample a valid token: the residual is empty, so sample p itself.
    p = torch.tensor([0.2, 0.3, 0.5])
    r = residual(p, p.clone(), rejected=2)
    assert torch.equal(r, p)
    v = speculative_verify(torch.tensor([2]), p[None], torch.stack([p, p]), torch.tensor([1.0]), 0.95)
    assert (v.n_accepted, v.next_token) == (0, 2)


def test_speculative_verify_needs_k_plus_one_rows():
    with pytest.raises(ValueError):
        speculative_verify(torch.tensor([0, 1]), Q, P[:2], torch.tensor([0.1, 0.1]), 0.5)


# ---------------------------------------------------------------------------------------------
SAMPLE = [
    # (probs, u, token)
    ([0.1, 0.2, 0.7], 0.0, 0),  # u = 0 lands on the first token with mass
    ([0.1, 0.2, 0.7], 0.25, 1),  # u inside the second interval [0.1, 0.3)
    ([0.25, 0.25, 0.5], 0.5, 2),  # an exact boundary (representable) belongs to the next token
    ([0.0, 0.5, 0.5], 0.0, 1),  # zero-mass tokens are never drawn
    ([0.2, 0.3, 0.0], 0.999999, 1),  # ... not even at the very top
    ([2.0, 2.0, 4.0], 0.6, 2),  # unnormalised weights work (residuals are unnormalised)
]


@pytest.mark.parametrize("probs,u,token", SAMPLE)
def test_sample_from_table(probs, u, token):
    assert sample_from(torch.tensor(probs), u) == token


def test_warping_matches_transformers_generate_order():
    # temperature, then top-k, then top-p: 4 logits at T=0.5 -> softmax; top-k 3 drops the
    # smallest; top-p 0.9 keeps the smallest set whose mass reaches 0.9.
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    p = probabilities(logits, SamplingParams(temperature=0.5, top_k=3, top_p=0.9))[0]
    assert p[3] == 0  # removed by top-k
    z = torch.softmax(torch.tensor([4.0, 2.0, 1.0]), -1)  # after T and top-k: (0.844, 0.114, 0.042)
    # top-p 0.9: 0.844 < 0.9, so token 1 stays; token 2's tail mass 0.042 <= 0.1 goes.
    assert p[2] == 0
    assert torch.allclose(p[:2], z[:2] / z[:2].sum(), atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [dict(temperature=-0.1), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.5), dict(temperature=float("nan"))],
)
def test_bad_sampling_settings(kwargs):
    with pytest.raises(SettingsError):
        SamplingParams(**kwargs)
