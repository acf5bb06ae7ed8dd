"""A causal LM and its KV cache, addressed by position.

The cache always holds the first `length` tokens of the sequence being decoded; rolling back
after a rejection is one `crop` of the tokens past the accepted prefix (transformers 5.x:
`DynamicCache.crop` takes the negative count to remove). It remembers those tokens, so a new
sequence that starts with them (the next turn of a chat) can keep them instead of recomputing.
Given a lean forward (the CPU backend's, cpu/lean.py: one kernel call per pass), it runs
that instead of the model's forward, on a cache written by position: there a rollback is only
a shorter length.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """How many leading tokens a and b share, counting at most `limit`."""
    n = 0
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class CachedLM:
    def __init__(self, model: torch.nn.Module, vocab_size: int | None = None, lean=None):
        """lean: a forward with the lean protocol -- new_cache(), and (ids, start, cache,
        logits_to_keep) -> logits -- that computes the model's logits faster; None: the model's own."""
        self.model = model
        self.device = next(model.parameters()).device
        # Rows handed out are trimmed or padded to this width, so a draft whose embedding
        # matrix is padded differently from the target's still speaks over the same ids.
        self.vocab_size = vocab_size
        self.lean = lean
        # A lean forward with a reduced head (FR-Spec, models/draft_vocab.py) gives logits of
        # its chosen tokens only: they are put back at their ids, every other token at -inf
        # (never proposed; the target still scores the whole vocabulary).
        rows = getattr(lean, "head_rows", None)
        self.head_rows = None if rows is None else torch.from_numpy(rows)
        self.cache = None  # DynamicCache, or the lean forward's own cache
        self.ids: list[int] = []  # the tokens whose keys and values the cache holds
        self.forward_passes = 0

    @property
    def length(self) -> int:
        return len(self.ids)

    def reset(self) -> None:
        self.cache = self.lean.new_cache() if self.lean is not None else DynamicCache(config=self.model.config)
        self.ids = []

    def keep_prefix(self, ids: list[int]) -> int:
        """Start the sequence `ids`, keeping the cached tokens it begins with; returns how many.

        At least the last token of `ids` is left to feed: its logits are the next step's.
        """
        if self.cache is None:
            self.reset()
            return 0
        n = common_prefix(self.ids, ids, min(len(self.ids), len(ids) - 1))
        if n == 0:
            self.reset()
        else:
            self.rollback(n)
        return n

    @torch.inference_mode()
    def forward(self, ids: list[int], logits_to_keep: int = 1) -> torch.Tensor:
        """Feed ids at positions length..length+len(ids)-1; return logits [logits_to_keep, V]
        for the last logits_to_keep positions (so the LM head runs only where needed; 0: none,
        the tokens are only read into the cache)."""
        if self.cache is None:
            self.reset()
        try:
            if self.lean is not None:
                logits = self.lean(ids, len(self.ids), self.cache, logits_to_keep)
            else:
                x = torch.tensor([ids], dtype=torch.long, device=self.device)
                # transformers reads logits_to_keep=0 as "all rows": ask for one and drop it
                out = self.model(input_ids=x, cache=self.cache, use_cache=True, logits_to_keep=max(logits_to_keep, 1))
                logits = out.logits[0, out.logits.shape[1] - logits_to_keep :]
        except BaseException:
            self.cache = None  # some layers may hold the new tokens and some not: start over
            self.ids = []
            raise
        self.ids.extend(ids)
        self.forward_passes += 1
        if self.head_rows is not None:
            logits = self._full_head(logits)
        return self._fit_vocab(logits)

    def _full_head(self, logits: torch.Tensor) -> torch.Tensor:
        """[n, len(head_rows)] -> [n, vocab]: each column at its token's id, -inf elsewhere."""
        width = self.vocab_size or int(self.model.config.vocab_size)
        full = logits.new_full((logits.shape[0], max(width, int(self.head_rows[-1]) + 1)), float("-inf"))
        full[:, self.head_rows] = logits
        return full

    def rollback(self, length: int) -> None:
        """Keep only the first `length` cached tokens."""
        if length < self.length:
            if self.lean is None:
                self.cache.crop(length - self.length)
            del self.ids[length:]

    def _fit_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        v = self.vocab_size
        if v is None or logits.shape[-1] == v:
            return logits
        if logits.shape[-1] > v:  # padding rows of a larger embedding: never real tokens
            return logits[..., :v]
        pad = logits.new_full((*logits.shape[:-1], v - logits.shape[-1]), float("-inf"))
        return torch.cat([logits, pad], dim=-1)
