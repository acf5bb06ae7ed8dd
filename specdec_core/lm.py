"""A causal LM and its KV cache, addressed by position.

The cache always holds the first `length` tokens of the sequence being decoded; rolling back
after a rejection is one `crop` of the tokens past the accepted prefix (transformers 5.x:
`DynamicCache.crop` takes the negative count to remove).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


class CachedLM:
    def __init__(self, model: torch.nn.Module, vocab_size: int | None = None):
        self.model = model
        self.device = next(model.parameters()).device
        # Rows handed out are trimmed or padded to this width, so a draft whose embedding
        # matrix is padded differently from the target's still speaks over the same ids.
        self.vocab_size = vocab_size
        self.cache: DynamicCache | None = None
        self.length = 0
        self.forward_passes = 0

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.length = 0

    @torch.inference_mode()
    def forward(self, ids: list[int], logits_to_keep: int = 1) -> torch.Tensor:
        """Feed ids at positions length..length+len(ids)-1; return logits [logits_to_keep, V]
        for the last logits_to_keep positions (so the LM head runs only where needed)."""
        if self.cache is None:
            self.reset()
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=x, cache=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
        self.length += len(ids)
        self.forward_passes += 1
        logits = out.logits[0]
        return self._fit_vocab(logits)

    def rollback(self, length: int) -> None:
        """Keep only the first `length` cached tokens."""
        if length < self.length:
            self.cache.crop(length - self.length)
            self.length = length

    def _fit_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        v = self.vocab_size
        if v is None or logits.shape[-1] == v:
            return logits
        if logits.shape[-1] > v:  # padding rows of a larger embedding: never real tokens
            return logits[..., :v]
        pad = logits.new_full((*logits.shape[:-1], v - logits.shape[-1]), float("-inf"))
        return torch.cat([logits, pad], dim=-1)
