"""Continue: an answer that was cut short -- by its token limit, a full context, Stop, a stream
that broke off, or the app ending while it streamed -- written on in the same message.

The model reads the conversation with the answer so far as the assistant's open turn (the
worker asks the engine for a prefill, `continue_final`, with the answer's own token ids), so
the new tokens continue the old ones as if the answer had never stopped. The message keeps one
list of tokens: the old ones, then the new ones, their steps numbered on from the old ones, and
one set of figures: the engine's Stats of both parts joined (Stats.joined: counts and times add
up, rates follow from the sums). Plain data, no widgets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from specdec_core.events import Stats  # light: no torch

from .answer_figures import AnswerFigures
from .history import Message, StoredToken

# the stop reasons an answer can be continued after: it did not end by itself ("eos")
CONTINUABLE = ("max_new_tokens", "context", "cancelled", "error")


def can_continue(message: Message | None) -> bool:
    """An answer the model did not finish: cut short (see CONTINUABLE) or cut off when the app
    ended. Not an edited answer: its text is the user's, and its tokens are gone."""
    if message is None or message.role != "assistant" or not message.tokens:
        return False
    fig = message.figures
    if fig is not None and fig.edited:
        return False
    return message.cut or (fig is not None and fig.stats.stop_reason in CONTINUABLE)


@dataclass
class Base:
    """What the message held before this generation: empty for a new answer, the part written
    so far for a continuation."""

    tokens: list[StoredToken] = field(default_factory=list)
    content: str = ""
    figures: AnswerFigures | None = None
    state: str = ""  # the message's state before ("cut": the app ended while it streamed)

    @classmethod
    def of(cls, message: Message) -> Base:
        return cls(list(message.tokens), message.content, message.figures, message.state)

    @property
    def continuing(self) -> bool:
        return bool(self.tokens)

    @property
    def series(self) -> list[tuple[float, float]]:
        return list(self.figures.series) if self.figures is not None else []

    @property
    def step_offset(self) -> int:
        """The new part's steps are numbered on from the old part's last step."""
        return max(t.step for t in self.tokens) + 1 if self.tokens else 0

    @property
    def seconds(self) -> float:
        return self.figures.stats.seconds if self.figures is not None else 0.0

    def shift(self, events: list) -> list:
        """The new part's token events with their steps numbered on from the old part's."""
        off = self.step_offset
        return [dataclasses.replace(ev, step=ev.step + off) for ev in events] if off else list(events)

    def joined(self, stats: Stats, error: str = "") -> AnswerFigures:
        """The figures of the whole message: the old part's and `stats` (the new part's running or
        final Stats), joined; the settings and the curve are the caller's."""
        new = AnswerFigures.of(stats, error=error)
        old = self.figures
        if not self.continuing or old is None:
            return new
        # the error and the server's figures are the latest part's word
        return AnswerFigures(old.stats.joined(stats), continued=old.continued + 1, error=new.error, server=new.server)
