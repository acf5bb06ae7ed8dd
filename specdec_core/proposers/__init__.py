"""Proposers: where draft tokens come from. The decoder sees only the Proposer protocol."""

from .base import Proposal, Proposer
from .draft_model import DraftModelProposer
from .prompt_lookup import PromptLookupProposer

__all__ = ["Proposal", "Proposer", "DraftModelProposer", "PromptLookupProposer"]
