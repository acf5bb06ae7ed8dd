"""Proposers: where draft tokens come from. The decoder sees only the Proposer protocol."""

from .base import DRAFT, LOOKUP, MATCH_MAX, DraftPlan, Proposal, Proposer
from .draft_model import DraftModelProposer
from .lookup_draft import LookupDraftProposer
from .prompt_lookup import PromptLookupProposer

__all__ = ["DRAFT", "LOOKUP", "MATCH_MAX", "DraftPlan", "Proposal", "Proposer", "DraftModelProposer", "LookupDraftProposer",
           "PromptLookupProposer"]
