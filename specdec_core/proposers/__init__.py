"""Proposers: where draft tokens come from. The decoder sees only the Proposer protocol."""

from .base import DRAFT, GRAMMAR, LOOKUP, MATCH_MAX, DraftPlan, Proposal, Proposer
from .draft_model import DraftModelProposer
from .grammar import GrammarProposer
from .lookup_draft import LookupDraftProposer
from .prompt_lookup import PromptLookupProposer

__all__ = ["DRAFT", "GRAMMAR", "LOOKUP", "MATCH_MAX", "DraftPlan", "Proposal", "Proposer", "DraftModelProposer",
           "GrammarProposer", "LookupDraftProposer", "PromptLookupProposer"]
