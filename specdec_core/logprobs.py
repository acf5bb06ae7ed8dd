"""Each emitted token's log-probability under the target, and the most likely alternatives at
its position: the log-softmax of the target's logits row that decided it (events.Logprobs).

A verification pass's row j is the target's distribution at the step's j-th emitted token
(accepted proposals, then the corrected or bonus token), so a speculative step costs no extra
forward pass: the rows are already there. The target's own distribution, before bias,
penalties and the warp, as vLLM and llama-server report it by default: the same numbers
whatever the sampling settings, and at temperature 0 too (where the warped one is one-hot).
"""

from __future__ import annotations

import torch

from .events import Logprobs, TokenLogprob


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: printable Latin-1 bytes stand for
    themselves, the others (controls, space, ...) for the characters from U+0100 on, in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            out[chr(256 + extra)] = b
            extra += 1
    return out


_BYTE_OF = _byte_level_alphabet()


class TokenTexts:
    """A token id's own text and exact UTF-8 bytes, remembered once looked up.

    Byte-level BPE vocabularies (Qwen, Llama 3, GPT-2) spell each byte as one printable
    character: mapped back, those give the token's bytes exactly, a character's first half
    included. Other tokenizers: the bytes of the token's decoded text."""

    def __init__(self, tokenizer=None):
        self.tokenizer = tokenizer
        self._known: dict[int, tuple[str, tuple[int, ...]]] = {}
        self._byte_of = _BYTE_OF

    def __call__(self, token_id: int) -> tuple[str, tuple[int, ...]]:
        found = self._known.get(token_id)
        if found is None:
            found = self._known[token_id] = self._look_up(token_id)
        return found

    def _look_up(self, token_id: int) -> tuple[str, tuple[int, ...]]:
        if self.tokenizer is None:  # a decoder without a tokenizer (tests): the id as text
            text = str(token_id)
            return text, tuple(text.encode())
        piece = self.tokenizer.convert_ids_to_tokens(token_id)
        special = token_id in set(getattr(self.tokenizer, "all_special_ids", ()))
        if isinstance(piece, str) and not special and all(ch in self._byte_of for ch in piece):
            raw = bytes(self._byte_of[ch] for ch in piece)
            return raw.decode("utf-8", errors="replace"), tuple(raw)
        text = self.tokenizer.decode([token_id])
        return text, tuple(text.encode())


def token_logprobs(logits: torch.Tensor, tokens: list[int], top: int, texts: TokenTexts) -> list[Logprobs]:
    """logits [>= len(tokens), V] (row j decided tokens[j]) -> each token's Logprobs with its
    `top` most likely alternatives."""
    rows = torch.log_softmax(logits[: len(tokens)].float(), dim=-1)
    chosen = rows[torch.arange(len(tokens), device=rows.device), torch.tensor(tokens, device=rows.device)].tolist()
    if top > 0:
        values, ids = torch.topk(rows, top, dim=-1)
        values, ids = values.tolist(), ids.tolist()
    out = []
    for j, tok in enumerate(tokens):
        alternatives = () if top <= 0 else tuple(_one(i, v, texts) for i, v in zip(ids[j], values[j]))
        out.append(Logprobs(_one(tok, chosen[j], texts), alternatives))
    return out


def _one(token_id: int, logprob: float, texts: TokenTexts) -> TokenLogprob:
    text, utf8 = texts(token_id)
    return TokenLogprob(token_id, text, utf8, logprob)
