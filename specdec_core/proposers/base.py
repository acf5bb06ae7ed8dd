"""The Proposer protocol: propose up to k tokens, then hear how many the target kept.

Mirrors transformers' candidate generators (get_candidates / update_candidate_strategy) in
two methods, so a draft model, prompt lookup and later tree proposers are interchangeable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from ..sampling import SamplingParams


@dataclass(frozen=True, slots=True)
class Proposal:
    """tokens [k'] with k' <= k (may be empty: nothing to propose this step).

    q_draft [k', V]: the distribution each token was actually sampled from, over the
    target's ids; None for a deterministic proposer (prompt lookup, greedy drafting), which
    the acceptance math treats as one-hot.
    """

    tokens: list[int]
    q_draft: torch.Tensor | None = None
    forward_passes: int = 0
    # seconds spent reading text the proposer had not seen (a draft catching up on tokens the
    # target wrote in plain steps): a cost of switching to speculation, not of these k tokens
    catchup_seconds: float = 0.0
    # the proposer's own expectation of how many of these tokens the target keeps (the sum of
    # its running confidences), where it has one; the adaptive controller checks it against
    # what was kept, because a small draft is often surer than it is right
    expected_accepted: float | None = None


@runtime_checkable
class Proposer(Protocol):
    name: str
    # True when propose() honours min_confidence (its own probabilities say when to stop);
    # the adaptive controller then asks for long drafts and lets the proposer cut them
    stops_on_confidence: bool

    def reset(self, keep: list[int] | None = None) -> None:
        """A new sequence starts. `keep`: its prompt, when the caller allows reuse -- a
        proposer that caches work (a draft model's KV cache) may keep what it computed for a
        prefix of it (the next turn of a chat starts with the conversation so far)."""

    def propose(
        self, ids: list[int], k: int, params: SamplingParams, rng: torch.Generator,
        min_confidence: float = 0.0,
    ) -> Proposal:
        """Up to k tokens continuing `ids` (the committed sequence: prompt + emitted). A
        proposer with a notion of confidence may stop early, after the token that takes its
        confidence in the whole run (for a draft model, the product of its probabilities of
        its picks) below `min_confidence`; the decision must depend on the proposer's own
        state only."""

    def observe(self, ids: list[int], n_accepted: int) -> None:
        """The target kept n_accepted of the last proposal; `ids` is the new committed
        sequence (it ends with the target's corrected or bonus token)."""
