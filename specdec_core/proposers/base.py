"""The Proposer protocol: propose tokens as a step's plan allows, then hear how many the target kept.

Mirrors transformers' candidate generators (get_candidates / update_candidate_strategy) in
two methods, so a draft model, prompt lookup, the two together and later tree proposers are
interchangeable: the decoder never asks which one it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from ..sampling import SamplingParams

# Where a proposal came from: the words the events, the stats and the side panel use.
DRAFT = "draft"  # the draft model's own tokens
LOOKUP = "lookup"  # tokens copied from the conversation (prompt, earlier turns, the answer so far)
GRAMMAR = "grammar"  # tokens a constrained answer's grammar forces (proposers/grammar.py)


# Prompt lookup tells matches apart by length up to this (a longer one counts as this long):
# what followed a 1-token match is rarely what comes next, what followed an 8-token one in an
# edit or a summary usually is.
MATCH_MAX = 8
NO_LOOKUP = (0,) * (MATCH_MAX + 1)


@dataclass(frozen=True, slots=True)
class DraftPlan:
    """What one step may propose, per source (0: that source proposes nothing this step).

    The draft-length controller (adaptive.py) makes one per step; a proposer takes what applies
    to it. An empty plan is a plain step: the target decides one token alone.
    """

    draft: int = 0  # most tokens the draft model may propose
    # most tokens prompt lookup may copy after a match of n tokens, at index n (0..MATCH_MAX)
    lookup: tuple[int, ...] = NO_LOOKUP
    # the draft model stops after the token that takes its running confidence (the product of
    # its probabilities of its picks) below this; 0: never early
    min_confidence: float = 0.0
    # most tokens a grammar's forced run may give (the decoder sets it for a constrained answer:
    # forced tokens cost no model, so every step may take them, whatever the controller planned)
    grammar: int = 0
    # the same threshold per length, where the next token costs more at some lengths than at
    # others: entry i - 1 holds after i tokens (the last entry past its end); empty: min_confidence
    confidence_steps: tuple[float, ...] = ()

    def confidence_after(self, i: int) -> float:
        """The running confidence the draft needs, after i >= 1 tokens, to propose another."""
        steps = self.confidence_steps
        return steps[min(i, len(steps)) - 1] if steps else self.min_confidence

    @property
    def empty(self) -> bool:
        return self.draft <= 0 and max(self.lookup) <= 0 and self.grammar <= 0

    def clip(self, n: int) -> DraftPlan:
        """The same plan, no source proposing more than n (the answer's remaining budget)."""
        n = max(n, 0)
        return DraftPlan(min(self.draft, n), tuple(min(k, n) for k in self.lookup), self.min_confidence,
                         min(self.grammar, n), self.confidence_steps)


@dataclass(frozen=True, slots=True)
class Proposal:
    """tokens [k'] (may be empty: nothing to propose this step).

    q_draft [k', V]: the distribution each token was actually sampled from, over the
    target's ids; None for a deterministic proposer (prompt lookup, greedy drafting), which
    the acceptance math treats as one-hot.
    """

    tokens: list[int]
    q_draft: torch.Tensor | None = None
    forward_passes: int = 0
    # seconds spent reading text the proposer had not seen (a draft catching up on tokens the
    # target wrote in plain steps, or on the prompt when it starts late): a cost of switching
    # to speculation, not of these k tokens
    catchup_seconds: float = 0.0
    catchup_tokens: int = 0  # how many tokens that read took in
    # the proposer's own expectation of how many of these tokens the target keeps (the sum of
    # its running confidences), where it has one; the adaptive controller checks it against
    # what was kept, because a small draft is often surer than it is right
    expected_accepted: float | None = None
    source: str = ""  # DRAFT, LOOKUP or GRAMMAR; "" when nothing was proposed
    match: int = 0  # LOOKUP: how many tokens the match behind it is long (at most MATCH_MAX)


@runtime_checkable
class Proposer(Protocol):
    name: str
    # the sources it can draft from (GRAMMAR, LOOKUP, DRAFT), in the order it tries them: the
    # controller plans a length for each
    sources: tuple[str, ...]

    def reset(self, keep: list[int] | None = None) -> None:
        """A new sequence starts. `keep`: its prompt, when the caller allows reuse -- a
        proposer that caches work (a draft model's KV cache) may keep what it computed for a
        prefix of it (the next turn of a chat starts with the conversation so far)."""

    def propose(self, ids: list[int], plan: DraftPlan, params: SamplingParams, rng: torch.Generator,
                constraint=None) -> Proposal:
        """Tokens continuing `ids` (the committed sequence: prompt + emitted), as many as the
        plan allows its source. A draft model may stop early, after the token that takes its
        confidence in the whole run below `plan.min_confidence`; that decision must depend on
        the proposer's own state only (so the acceptance rule stays exact). `constraint`: a
        constrained answer's grammar state (grammar/constraint.py), given by the grammar
        proposer: a model masks its distributions with it, as the target's are masked; a copying
        proposer stops before a token it forbids."""

    def unread(self, ids: list[int]) -> int:
        """How many tokens of `ids` it would read before proposing (a draft model's catch-up
        on text it has not seen; 0 for a proposer that reads nothing): what starting it costs."""

    def observe(self, ids: list[int], n_accepted: int) -> None:
        """The target kept n_accepted of the last proposal; `ids` is the new committed
        sequence (it ends with the target's corrected or bonus token)."""
