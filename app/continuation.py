"""Continue: an answer that was cut short -- by its token limit, a full context, Stop, a stream
that broke off, or the app ending while it streamed -- or an answer the user edited, written on.

Where it is written: the last answer of its branch grows in the same message. An answer that
later turns follow was read by the model when it wrote them, so it is not rewritten under them:
the continuation is a new version of it (`branch_copy`, a sibling as a regenerated answer is),
and the later turns stay with the old version (‹ › on the answer).

The model reads the conversation with the answer so far as the assistant's open turn (the
worker asks the engine for a prefill, `continue_final`, with the answer's own token ids), so
the new tokens continue the old ones as if the answer had never stopped. The message keeps one
list of tokens: the old ones, then the new ones, their steps numbered on from the old ones, and
one set of figures: the engine's Stats of both parts joined (Stats.joined: counts and times add
up, rates follow from the sums).

An edited answer's text is the user's: no token wrote it. Continued, the model reads that text
as its open turn (re-encoded by the chat template: there are no ids to give), and the message is
the text (its `lead`, uncoloured) followed by the model's tokens; its figures are the model's
part's. Plain data, no widgets.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

from specdec_core.events import Stats  # light: no torch

from .answer_figures import AnswerFigures
from .history import Message, StoredToken

# the stop reasons an answer can be continued after: it did not end by itself ("eos")
CONTINUABLE = ("max_new_tokens", "context", "cancelled", "error")


def can_continue(message: Message | None) -> bool:
    """An answer the model did not finish: cut short (see CONTINUABLE) or cut off when the app
    ended; or an edited answer the model has not written on yet (the user's text has no end of
    the model's: once continued, its stop reason says, as any answer's)."""
    if message is None or message.role != "assistant" or not (message.tokens or message.content):
        return False
    fig = message.figures
    if fig is not None and fig.edited_only:
        return True
    return bool(message.tokens) and (message.cut or (fig is not None and fig.stats.stop_reason in CONTINUABLE))


def lead(message: Message) -> str:
    """The start of the answer no token of it wrote: an edited answer's text, which the
    continuation's tokens follow ("" for the model's own answer, whose text is its tokens')."""
    written = "".join(t.text for t in message.tokens)
    if not message.content.endswith(written):
        return ""  # not a text the tokens end (an old row): shown by its tokens, as before
    return message.content[: len(message.content) - len(written)]


def answer_ids(message: Message) -> tuple[int, ...]:
    """The answer's token ids for the engine to read back as they were written; empty where a
    part of it is text no token wrote (an edit): the engine encodes the text then."""
    return () if lead(message) else tuple(t.token_id for t in message.tokens)


def branch_copy(message: Message) -> Message:
    """A new version of `message` to write on in (the caller adds it beside `message`): its
    text, tokens and figures, none of its place in the tree or on disk. A cut answer's copy is
    not cut: it is being written on."""
    return Message("assistant", message.content, list(message.tokens), copy.deepcopy(message.figures))


def continue_words(message: Message, followed: bool) -> tuple[str, str]:
    """The Continue button's text and tooltip for `message`; `followed`: later turns follow it
    (the continuation is then a new version of it)."""
    if followed:
        return ("Continue ▸ new version",
                "Write on in this answer as a NEW VERSION of it (‹ › switches): the turns after it were written "
                "from this text, so they stay with the current version")
    if message.figures is not None and message.figures.edited_only:
        return ("Continue ▸", "Write on from your edited text: the model reads it as the start of its answer, and "
                              "its tokens join this version")
    return ("Continue ▸", "Write on in this answer from where it stopped (the model reads the answer so far and "
                          "continues it)")


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
        """There is a part to write on in (the model's tokens, or an edited answer's text)."""
        return bool(self.tokens) or bool(self.content)

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
        if not self.continuing:
            return new
        if self.tokens and old is not None and not old.edited_only:
            # the error and the server's figures are the latest part's word
            whole = AnswerFigures(old.stats.joined(stats), error=new.error, server=new.server)
        else:  # an edited answer's text: no figures describe it, the model's part's are the message's
            whole = new
        whole.edited = old is not None and old.edited
        whole.continued = (old.continued if old is not None else 0) + 1
        return whole
