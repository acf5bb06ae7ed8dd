"""Prompt lookup (n-gram) proposer: copy what followed the latest earlier occurrence of the
sequence's last n tokens. No model, no cost; strong on code edits, summaries and quotes,
where the answer repeats the context.
"""

from __future__ import annotations

import torch

from ..sampling import SamplingParams
from .base import Proposal


class PromptLookupProposer:
    name = "prompt-lookup"
    stops_on_confidence = False  # a match has no probability: the controller caps its length

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def reset(self, keep: list[int] | None = None) -> None:
        pass  # stateless: every proposal reads the committed sequence itself

    def propose(self, ids: list[int], k: int, params: SamplingParams, rng: torch.Generator,
                min_confidence: float = 0.0) -> Proposal:
        return Proposal(lookup(ids, k, self.max_ngram, self.min_ngram))

    def observe(self, ids: list[int], n_accepted: int) -> None:
        pass


def lookup(ids: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Longest n-gram first; among its earlier occurrences, the most recent one with a full
    k-token continuation (else the longest continuation seen). Up to k tokens; [] if none."""
    n_ids = len(ids)
    if k <= 0:
        return []
    for n in range(min(max_ngram, n_ids - 1), min_ngram - 1, -1):
        tail = ids[n_ids - n :]
        best: list[int] = []
        # scan right to left: recent context predicts the continuation best, but a match
        # right before the tail has only a token or two after it, so keep looking for k
        for start in range(n_ids - n - 1, -1, -1):
            if ids[start : start + n] == tail:
                cont = ids[start + n : start + n + k]
                if len(cont) == k:
                    return cont
                if len(cont) > len(best):
                    best = cont
        if best:
            return best
    return []
