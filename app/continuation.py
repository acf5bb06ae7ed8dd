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

from .history import Message, StoredToken

# the stop reasons an answer can be continued after: it did not end by itself ("eos")
CONTINUABLE = ("max_new_tokens", "context", "cancelled", "error")


def can_continue(message: Message | None) -> bool:
    """An answer the model did not finish: cut short (see CONTINUABLE) or cut off when the app
    ended. Not an edited answer: its text is the user's, and its tokens are gone."""
    if message is None or message.role != "assistant" or not message.tokens or message.stats.get("edited"):
        return False
    return message.cut or message.stats.get("stop_reason") in CONTINUABLE


@dataclass
class Base:
    """What the message held before this generation: empty for a new answer, the part written
    so far for a continuation."""

    tokens: list[StoredToken] = field(default_factory=list)
    content: str = ""
    stats: dict = field(default_factory=dict)
    series: list = field(default_factory=list)  # [[seconds, decode tok/s], ...] as saved
    state: str = ""  # the message's state before ("cut": the app ended while it streamed)

    @classmethod
    def of(cls, message: Message) -> Base:
        stats = dict(message.stats)
        return cls(list(message.tokens), message.content, stats, [list(p) for p in stats.get("series") or []],
                   message.state)

    @property
    def continuing(self) -> bool:
        return bool(self.tokens)

    @property
    def step_offset(self) -> int:
        """The new part's steps are numbered on from the old part's last step."""
        return max(t.step for t in self.tokens) + 1 if self.tokens else 0

    @property
    def seconds(self) -> float:
        return float(self.stats.get("seconds") or 0.0)

    def shift(self, events: list) -> list:
        """The new part's token events with their steps numbered on from the old part's."""
        off = self.step_offset
        return [dataclasses.replace(ev, step=ev.step + off) for ev in events] if off else list(events)

    def joined(self, stats: dict) -> dict:
        """The figures of the whole message: the old part's and `stats` (the new part's running or
        final Stats), joined; the app's own keys (settings, series, ...) are the caller's."""
        if not self.continuing or not self.stats:
            return dict(stats)
        whole = Stats.from_dict(self.stats).joined(Stats.from_dict(stats)).to_dict()
        for key in ("error", "server"):  # the latest part's word on these, when it has one
            if key in stats:
                whole[key] = stats[key]
        whole["continued"] = int(self.stats.get("continued", 0)) + 1
        return whole
