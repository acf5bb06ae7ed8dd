"""Incremental detokenization: the text each new token adds, without re-decoding everything.

Byte-level BPE can split one character over several tokens; until it is complete the decoded
tail ends in U+FFFD, and we hold the text back until a later token completes it.
"""

from __future__ import annotations


class IncrementalDetokenizer:
    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.ids: list[int] = []
        self.prefix_offset = 0  # decode from here for context (leading-space handling)
        self.read_offset = 0  # text up to here has been handed out

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        if self.tokenizer is None:
            return ""
        dec = self.tokenizer.decode
        prefix = dec(self.ids[self.prefix_offset : self.read_offset], skip_special_tokens=self.skip)
        full = dec(self.ids[self.prefix_offset :], skip_special_tokens=self.skip)
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return full[len(prefix) :]
        return ""

    def text(self) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(self.ids, skip_special_tokens=self.skip)
