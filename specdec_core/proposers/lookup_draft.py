"""Lookup first, draft second: copy from the conversation where it has a continuation, ask the
draft model where it has none.

Copying costs nothing but the verification of what it copies, and where an answer repeats its
context (a code edit, a summary, a quoted passage) it proposes long runs a small draft would
have to produce token by token. Where the text is new, the draft model is the better guess.
Which source may propose in a step, and how much, is the controller's plan (adaptive.py); the
proposal says which one did (its `source`), which the events carry to the chat's colours.
"""

from __future__ import annotations

import torch

from ..sampling import SamplingParams
from .base import DRAFT, LOOKUP, DraftPlan, Proposal
from .draft_model import DraftModelProposer
from .prompt_lookup import PromptLookupProposer


class LookupDraftProposer:
    name = "lookup+draft"
    sources = (LOOKUP, DRAFT)

    def __init__(self, draft: DraftModelProposer, lookup: PromptLookupProposer | None = None):
        self.draft = draft
        self.lookup = lookup if lookup is not None else PromptLookupProposer()

    def reset(self, keep: list[int] | None = None) -> None:
        self.draft.reset(keep)
        self.lookup.reset(keep)

    def prime(self, ids: list[int]) -> None:
        self.draft.prime(ids)  # lookup reads nothing

    def propose(self, ids: list[int], plan: DraftPlan, params: SamplingParams, rng: torch.Generator,
                constraint=None) -> Proposal:
        found = self.lookup.propose(ids, plan, params, rng, constraint)
        if found.tokens:
            return found
        return self.draft.propose(ids, plan, params, rng, constraint)

    def read_backlog(self, stop=lambda: False) -> tuple[int, float]:
        return self.draft.read_backlog(stop)  # lookup reads nothing

    def read_prompt(self, ids: list[int], stop=lambda: False, least: int = 1) -> tuple[int, float]:
        return self.draft.read_prompt(ids, stop, least)  # lookup reads nothing

    def unread(self, ids: list[int]) -> int:
        return self.draft.unread(ids)  # lookup reads nothing

    def observe(self, ids: list[int], n_accepted: int) -> None:
        # the draft rolls its cache back to what is committed, whichever source proposed
        self.draft.observe(ids, n_accepted)
        self.lookup.observe(ids, n_accepted)
