"""Grammar-constrained decoding: what an answer must match (spec.py, a plain value) and its state
while the decoder writes it (constraint.py, on llguidance)."""

from .spec import GrammarSpec

__all__ = ["GrammarSpec"]
