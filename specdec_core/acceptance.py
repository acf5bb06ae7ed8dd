"""Acceptance math: small pure functions, every random number passed in.

Speculative sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2):
for draft tokens x_1..x_k proposed from q_draft and target distributions p_target at the
k+1 positions of one verification pass,

  1. accept x_i while u_i < p_target_i(x_i) / q_draft_i(x_i)     (probability min(1, p/q));
  2. at the first rejection, sample from norm(max(0, p_target_i - q_draft_i))   -> "corrected";
  3. if all k >= 1 were accepted, sample one more token from p_target_{k+1}     -> "bonus".
     With k = 0 (nothing proposed) the step is a plain target step and its token is
     "standard": the draft earned nothing there, and the colours must never say it did.

Every emitted token is then distributed exactly as the target's own (warped) next-token
distribution. Greedy decoding is the limit of one-hot distributions: accept while the draft
token is the target's argmax, then emit the target's argmax.

Named edge cases (each handled below, each tested):
  * deterministic proposer (prompt lookup, q_draft is None): q is one-hot on the proposed
    token, so accept with probability p_target(x) and on rejection sample p_target with x
    removed -- still exact.
  * zero draft probability, q_draft(x) = 0: a proposer that samples from q cannot produce x;
    a buggy one could. p/q is undefined; we reject (never accept on an infinite ratio).
  * empty residual: max(0, p - q) sums to 0 only when p == q, where rejection has probability
    0; float rounding can still get there. Then sample p_target itself (p == q anyway).
  * all accepted: the bonus token from the (k+1)-th target row.
  * EOS inside the draft is the decoder's business (stop after an accepted EOS); the math
    here is per-position and does not care.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .events import TokenKind
from .sampling import sample_from


@dataclass(frozen=True, slots=True)
class Verdict:
    """n_accepted proposed tokens kept, then one target token: CORRECTED after a rejection, BONUS
    after all k >= 1 proposals were kept, STANDARD when nothing was proposed (k = 0)."""

    n_accepted: int
    next_token: int
    next_kind: TokenKind


def greedy_verify(proposed: list[int], target_argmax: list[int]) -> Verdict:
    """proposed [k]: the proposal's token ids (any source); target_argmax [k+1]: the target's argmax
    after each prefix."""
    k = len(proposed)
    if len(target_argmax) != k + 1:
        raise ValueError(f"need k+1={k + 1} target rows, got {len(target_argmax)}")
    n = 0
    while n < k and proposed[n] == target_argmax[n]:
        n += 1
    return Verdict(n, target_argmax[n], step_token_kind(k, n))


def step_token_kind(k: int, n_accepted: int) -> TokenKind:
    """The kind of a step's one target token, from how many of its k proposals were kept."""
    if n_accepted < k:
        return TokenKind.CORRECTED
    return TokenKind.BONUS if k >= 1 else TokenKind.STANDARD


def accept_mask(
    proposed: torch.Tensor,  # [k] long
    q_draft: torch.Tensor | None,  # [k, V] probabilities the draft sampled from; None = deterministic
    p_target: torch.Tensor,  # [k+1, V] (only the first k rows are read)
    u_accept: torch.Tensor,  # [k] uniforms in [0, 1)
) -> torch.Tensor:
    """[k] bool: whether each position, on its own, passes u < p(x)/q(x)."""
    k = proposed.shape[0]
    rows = torch.arange(k, device=p_target.device)
    p_x = p_target[rows, proposed].double()
    if q_draft is None:
        q_x = torch.ones_like(p_x)  # one-hot proposal: q(x) = 1
    else:
        q_x = q_draft[rows, proposed].double()
    # u < p/q written as u*q < p so q = 0 never divides; q = 0 then rejects (0 < p is False
    # only when p = 0 too -- guard explicitly so a zero-q token is never accepted).
    return (u_accept.double() * q_x < p_x) & (q_x > 0)


def residual(p_row: torch.Tensor, q_row: torch.Tensor | None, rejected: int) -> torch.Tensor:
    """norm(max(0, p - q)) for one position, unnormalised; q None = one-hot on `rejected`.

    Returns p itself when the residual is empty (p == q up to rounding): see module docstring.
    """
    if q_row is None:
        r = p_row.clone()
        r[rejected] = 0.0
    else:
        r = torch.clamp(p_row - q_row, min=0.0)
    if float(r.sum()) <= 0.0:
        return p_row
    return r


def speculative_verify(
    proposed: torch.Tensor,  # [k] long
    q_draft: torch.Tensor | None,  # [k, V] or None for a deterministic proposer
    p_target: torch.Tensor,  # [k+1, V]
    u_accept: torch.Tensor,  # [k] uniforms for the acceptance tests
    u_next: float,  # one uniform for the corrected or bonus draw
) -> Verdict:
    k = proposed.shape[0]
    if p_target.shape[0] != k + 1:
        raise ValueError(f"need k+1={k + 1} target rows, got {p_target.shape[0]}")
    ok = accept_mask(proposed, q_draft, p_target, u_accept)
    rejected_at = torch.nonzero(~ok)
    if rejected_at.numel() == 0:
        return Verdict(k, sample_from(p_target[k], u_next), step_token_kind(k, k))
    n = int(rejected_at[0])
    q_row = None if q_draft is None else q_draft[n]
    r = residual(p_target[n], q_row, int(proposed[n]))
    return Verdict(n, sample_from(r, u_next), step_token_kind(k, n))
