"""The grammar proposer: in a constrained answer (a JSON schema, a tool call), much of the text is
forced -- keys, quotes, separators, a tool call's opening -- and a forced run needs no model to
propose it. It goes first; where the grammar forces nothing, the proposer it wraps (lookup, the
draft model, both) proposes, with the grammar's state to mask its own distributions.

The forced run is the grammar's forced text in the tokenizer's own tokenization (llguidance's
fast-forward tokens). The target still verifies it like any deterministic proposal (one-hot q):
where the model would spell the same text with other tokens it is free to, so the answer follows
the masked distribution exactly, whatever is proposed.
"""

from __future__ import annotations

import torch

from ..sampling import SamplingParams
from .base import GRAMMAR, DraftPlan, Proposal, Proposer


class GrammarProposer:
    def __init__(self, inner: Proposer | None, constraint):
        """`inner`: what proposes where the grammar forces nothing (None: nothing does);
        `constraint`: the answer's grammar state (grammar/constraint.py), which the decoder
        moves on as tokens are emitted."""
        self.inner = inner
        self.constraint = constraint
        self.name = inner.name if inner is not None else "grammar"
        self.sources = (GRAMMAR,) + (inner.sources if inner is not None else ())

    def reset(self, keep: list[int] | None = None) -> None:
        if self.inner is not None:
            self.inner.reset(keep)

    def propose(self, ids: list[int], plan: DraftPlan, params: SamplingParams, rng: torch.Generator,
                constraint=None) -> Proposal:
        forced = self.constraint.forced(plan.grammar)
        if forced:
            return Proposal(forced, source=GRAMMAR)
        if self.inner is None:
            return Proposal([])
        return self.inner.propose(ids, plan, params, rng, constraint=self.constraint)

    def unread(self, ids: list[int]) -> int:
        return self.inner.unread(ids) if self.inner is not None else 0

    def observe(self, ids: list[int], n_accepted: int) -> None:
        if self.inner is not None:
            self.inner.observe(ids, n_accepted)
