"""Incremental detokenization: the text each new token adds, without re-decoding everything.

Byte-level BPE can split one character over several tokens; until it is complete the decoded
tail ends in U+FFFD, and we hold the text back until a later token completes it.

A continued answer (the app's Continue) seeds the detokenizer with the tail of what was already
written: its text is not handed out again, but it is the context the new tokens decode in, so a
word's leading space survives (SentencePiece drops it at the start of a decode) and a character
split across the boundary comes out whole with the token that completes it.
"""

from __future__ import annotations


class IncrementalDetokenizer:
    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.ids: list[int] = []
        self.prefix_offset = 0  # decode from here for context (leading-space handling)
        self.read_offset = 0  # text up to here has been handed out
        self.base = 0  # ids before this are a seed: written before, not part of text()

    def seed(self, ids: list[int]) -> None:
        """Start after `ids`, the end of an answer being continued: their text counts as handed
        out except an incomplete character at the end (it was held back, and the token that
        completes it hands it out)."""
        self.ids = list(ids)
        done = len(self.ids)
        if self.tokenizer is not None:
            while done > 0 and self.tokenizer.decode(self.ids[:done], skip_special_tokens=self.skip).endswith("\ufffd"):
                done -= 1
        self.prefix_offset = 0
        self.read_offset = self.base = done

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
        """The text of the tokens pushed (after a seed: what they add to it)."""
        if self.tokenizer is None:
            return ""
        full = self.tokenizer.decode(self.ids, skip_special_tokens=self.skip)
        if not self.base:
            return full
        return full[len(self.tokenizer.decode(self.ids[: self.base], skip_special_tokens=self.skip)):]
