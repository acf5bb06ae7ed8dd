"""One request's answer, decoded in a thread of its own and handed to the event loop in pieces.

`Answer.run` (the thread) iterates the generation -- which first waits for its turn on the
engine (queue.py) -- and delivers:

    Piece(tokens, text)   the tokens of one engine step (a step's tokens come at once and end
                          with its target token, the one that is not `accepted`), less any text
                          held back because it may be the start of a stop string
    Done(...)             the end: why (finish_reason), the engine's Stats, the token count
    Failure(message)      the engine raised on a request it had accepted

A stop string ends the text before it (OpenAI's rule: the stop string is not returned). The
engine has no stop strings of its own, so the answer sets the generation's cancel event, which
the decoder reads before its next step: the step that found the stop is its last. The same
event is how a client that goes away stops the engine (app.py sets it), within one step.

The Stats are the engine's, as they are; only their stop_reason says "stop_word" where a stop
string ended the answer (the decoder saw a cancel). Their new_tokens count every token the engine
decided, the tokens of the last step after a stop string too; `usage.completion_tokens` counts
the tokens returned.
"""

from __future__ import annotations

import dataclasses
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from ..events import Stats, TokenEvent, TokenKind
from .queue import QueuedGeneration

FINISH = {"eos": "stop", "stop_word": "stop", "max_new_tokens": "length", "context": "length"}


@dataclass(frozen=True)
class Piece:
    tokens: list[TokenEvent]
    text: str
    running: Stats | None = None  # the engine's running Stats after these tokens, when asked for


@dataclass(frozen=True)
class Done:
    finish_reason: str | None  # "stop" | "length"; None when the client went away (nothing to say)
    stats: Stats
    completion_tokens: int
    queue_seconds: float


@dataclass(frozen=True)
class Failure:
    message: str


class StopText:
    """Releases tokens whose text cannot be the start of a stop string; finds the first stop.

    Whole tokens only: a token whose text reaches into what is held back is held back with it, so
    every released token carries exactly its own text (the last one before a stop: its text up to
    the stop)."""

    def __init__(self, stops: tuple[str, ...]):
        self.stops = stops
        self.held: list[TokenEvent] = []

    def feed(self, events: list[TokenEvent]) -> tuple[list[TokenEvent], bool]:
        """(tokens to hand out, whether a stop string ended the text)."""
        self.held.extend(events)
        if not self.stops:
            out, self.held = self.held, []
            return out, False
        text = "".join(e.text for e in self.held)
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            return self._cut(min(hits)), True
        keep = max(_overlap(text, s) for s in self.stops)
        return self._release(len(text) - keep), False

    def flush(self) -> list[TokenEvent]:
        out, self.held = self.held, []
        return out

    def _cut(self, end: int) -> list[TokenEvent]:
        """A stop string starts at `end`: the tokens before it, the last one cut there."""
        out, pos = [], 0
        for ev in self.held:
            if pos >= end:
                break
            out.append(ev if pos + len(ev.text) <= end else dataclasses.replace(ev, text=ev.text[: end - pos]))
            pos += len(ev.text)
        self.held = []
        return out

    def _release(self, limit: int) -> list[TokenEvent]:
        """The held tokens whose text ends by `limit`; the rest stay held."""
        pos = 0
        for i, ev in enumerate(self.held):
            pos += len(ev.text)
            if pos > limit:
                out, self.held = self.held[:i], self.held[i:]
                return out
        out, self.held = self.held, []
        return out


def _overlap(text: str, stop: str) -> int:
    """The length of the longest end of `text` that begins `stop` (and is shorter than it)."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:n]):
            return n
    return 0


class Answer:
    """What one request's thread does; `deliver` hands each Piece/Done/Failure to the loop."""

    def __init__(self, gen: QueuedGeneration, cancel: threading.Event, stops: tuple[str, ...], running_stats: bool,
                 deliver: Callable[[object], None]):
        self.gen = gen
        self.cancel = cancel
        self.stops = stops
        self.running_stats = running_stats
        self.deliver = deliver

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="specdec-serve-answer", daemon=True)
        thread.start()
        return thread

    def run(self) -> None:
        gen, stop = self.gen, StopText(self.stops)
        step: list[TokenEvent] = []
        stopped = False
        sent = 0
        try:
            for ev in gen:
                if stopped:
                    continue  # the rest of the step whose text a stop string ended
                step.append(ev)
                if ev.kind is TokenKind.ACCEPTED:
                    continue  # its step's target token comes next, at once
                out, stopped = stop.feed(step)
                step = []
                if stopped:
                    self.cancel.set()  # the decoder ends before its next step
                sent += self._hand_out(out)
            if not stopped:  # an accepted end-of-text token may close the last step
                out, stopped = stop.feed(step)
                sent += self._hand_out(out if stopped else out + stop.flush())
            stats = gen.stats if gen.stats is not None else gen.snapshot()
            if stopped:
                stats = dataclasses.replace(stats, stop_reason="stop_word")
            finish = FINISH.get(stats.stop_reason) if not (self.cancel.is_set() and not stopped) else None
            self.deliver(Done(finish, stats, sent, gen.queue_seconds))
        except Exception as exc:  # noqa: BLE001 -- the client gets the error shape, the log the trace
            traceback.print_exc()
            self.deliver(Failure(f"the engine failed: {type(exc).__name__}: {exc}"))

    def _hand_out(self, tokens: list[TokenEvent]) -> int:
        if not tokens:
            return 0
        running = self.gen.snapshot() if self.running_stats else None
        self.deliver(Piece(tokens, "".join(e.text for e in tokens), running))
        return len(tokens)
