"""One assistant token as the app keeps it: what the chat view colours and what the history
saves are the same value, made once from the engine's TokenEvent (`from_event`) or read once
from a saved row. No Qt, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)  # shared by the view and the store: nobody changes one in place
class AnswerToken:
    token_id: int
    text: str
    kind: str  # a TokenKind's value: "standard" | "accepted" | "corrected" | "bonus" | "server"
    step: int
    draft_position: int | None
    # what proposed the token's step: "lookup" | "draft" | "grammar" | "" (a plain step);
    # None: not recorded (rows saved before the source was)
    source: str | None = None

    @classmethod
    def from_event(cls, ev) -> AnswerToken:
        """The token of an engine's TokenEvent (specdec_core.events)."""
        return cls(ev.token_id, ev.text, ev.kind.value, ev.step, ev.draft_position, ev.source)

    @property
    def copied(self) -> bool:
        """A token lookup proposed (copied from the conversation) and the target kept."""
        return self.kind == "accepted" and self.source == "lookup"
