"""Prompt lookup (n-gram) proposer: copy what followed the latest earlier occurrence of the
sequence's last n tokens. No model, no cost but the verification of what it copies; strong on
code edits, summaries and quotes, where the answer repeats the context.

The committed sequence only grows within a generation, so the n-grams are indexed as they come
(a dict per n from n-gram to the positions that follow it): a step costs a few dict lookups
whatever the conversation's length, where a scan of a 4,000-token chat took milliseconds.
"""

from __future__ import annotations

import torch

from ..sampling import SamplingParams
from .base import LOOKUP, MATCH_MAX, DraftPlan, Proposal


class NgramIndex:
    """For n in [min_ngram, max_ngram]: n-gram -> the positions right after its occurrences,
    oldest first, over a token sequence that grows at its end."""

    def __init__(self, max_ngram: int, min_ngram: int):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.ids: list[int] = []
        self.after: list[dict[tuple[int, ...], list[int]]] = [{} for _ in range(max_ngram + 1)]

    def sync(self, ids: list[int]) -> None:
        """Index `ids`; a sequence that does not extend the indexed one starts the index over."""
        n_old = len(self.ids)
        if len(ids) < n_old or ids[:n_old] != self.ids:
            self.ids, n_old = [], 0
            self.after = [{} for _ in range(self.max_ngram + 1)]
        self.ids.extend(ids[n_old:])
        # an n-gram ending at position e-1 (followed by e) is indexed once position e exists
        for e in range(max(n_old, 1), len(self.ids)):
            for n in range(self.min_ngram, min(self.max_ngram, e) + 1):
                self.after[n].setdefault(tuple(self.ids[e - n : e]), []).append(e)

    def continuation(self, k: int) -> tuple[list[int], int]:
        """(up to k tokens that followed the longest earlier match of the sequence's tail, that
        match's length n); ([], 0) when no n-gram of the tail occurred before. Among a tail's
        occurrences the most recent with k tokens after it wins, else the longest continuation."""
        ids, total = self.ids, len(self.ids)
        for n in range(min(self.max_ngram, total - 1), self.min_ngram - 1, -1):
            starts = self.after[n].get(tuple(ids[total - n :]))
            if not starts:
                continue
            best: list[int] = []
            for e in reversed(starts):  # recent context predicts the continuation best
                cont = ids[e : e + k]
                if len(cont) == k:
                    return cont, n
                if len(cont) > len(best):
                    best = cont
            if best:
                return best, n
        return [], 0


class PromptLookupProposer:
    name = "prompt-lookup"
    sources = (LOOKUP,)

    def __init__(self, max_ngram: int = MATCH_MAX, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.index = NgramIndex(max_ngram, min_ngram)

    def reset(self, keep: list[int] | None = None) -> None:
        pass  # the index follows the committed sequence itself (sync starts over on a new one)

    def propose(self, ids: list[int], plan: DraftPlan, params: SamplingParams, rng: torch.Generator,
                constraint=None) -> Proposal:
        """What followed the longest earlier match of the sequence's end, as long as the plan
        allows for a match of that length (0: none this step) -- and, in a constrained answer, up
        to the first token the grammar forbids (the target would reject it for certain)."""
        longest = max(plan.lookup)
        if longest <= 0:
            return Proposal([])
        self.index.sync(ids)
        tokens, n = self.index.continuation(longest)
        k = plan.lookup[min(n, MATCH_MAX)] if tokens else 0
        if constraint is not None and k > 0:
            k = constraint.valid_prefix(tokens[:k])
        if k <= 0:
            return Proposal([])
        return Proposal(tokens[:k], source=LOOKUP, match=min(n, MATCH_MAX))

    def unread(self, ids: list[int]) -> int:
        return 0  # nothing to read: the index catches up in microseconds

    def observe(self, ids: list[int], n_accepted: int) -> None:
        pass


def lookup(ids: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Longest n-gram first; among its earlier occurrences, the most recent one with a full
    k-token continuation (else the longest continuation seen). Up to k tokens; [] if none."""
    if k <= 0:
        return []
    index = NgramIndex(max_ngram, min_ngram)
    index.sync(ids)
    return index.continuation(k)[0]
