"""Which kind of text an answer is writing now: code (inside a Markdown code fence) or prose.

The controller judges each source of proposals by what it earns in the kind of text at hand
(issue 28): prompt lookup copies identifiers well in code and rarely in prose, and the draft
model agrees with the target far more inside a code block than in an explanation around it.
A fence is three backticks (or tildes) at the start of a line; the tracker reads the answer's
text as it streams, so a fence split across tokens still counts.
"""

from __future__ import annotations

PROSE = "prose"
CODE = "code"


class TextKind:
    """Push each piece of the answer's text; `kind` is PROSE or CODE after it."""

    def __init__(self) -> None:
        self._line = ""  # the current line's start, up to the first 3 characters
        self._in_code = False

    @property
    def kind(self) -> str:
        return CODE if self._in_code else PROSE

    def push(self, text: str) -> str:
        for ch in text:
            if ch == "\n":
                self._line = ""
                continue
            if not self._line and ch in " \t":  # a fence may be indented (a list item's)
                continue
            if len(self._line) < 3:
                self._line += ch
                if self._line in ("```", "~~~"):
                    self._in_code = not self._in_code
        return self.kind
