"""One decode at a time on one engine; the others wait their turn in a bounded line.

An engine's KV caches and proposers are single-threaded state, so every generation on it --
a server request, the app's chat, a race -- takes a turn first, in the order they came.
`QueuedEngine` is an engine (contract.EngineLike) that does that around another: its
generations join the line when they are made (a full line raises QueueFull at once, which the
server answers with 429) and wait for their turn when first iterated, so a cancel while waiting
ends them without a token. The app wraps its chat worker's engine in one sharing the server's
line, which is how a chat message and a server request queue on the same engine.

A turn belongs to a thread and is re-entrant there: a race interleaves its two lanes in one
thread, and both run in that thread's turn. It is released when the generation ends (exhausted,
closed, or failed), from whatever thread that happens in.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterator

from ..context import Fit, Messages
from ..contract import EngineLike, GenerationLike, Prompt, ServerInfo
from ..events import EventStream, Stats
from ..fim import Infill
from ..models.types import ModelInfo
from ..settings import DecodeSettings

_POLL = 0.05  # seconds between looks at a waiting generation's cancel event


class QueueFull(Exception):
    """The line is as long as allowed; `retry_after` is the server's guess in whole seconds."""

    def __init__(self, waiting: int, retry_after: int):
        super().__init__(f"{waiting} request(s) are already waiting for the engine; try again in about "
                         f"{retry_after} s")
        self.waiting = waiting
        self.retry_after = retry_after


class Ticket:
    """A place in the line (its identity is all it is)."""

    __slots__ = ("joined",)

    def __init__(self) -> None:
        self.joined = time.perf_counter()


class DecodeQueue:
    """First come, first served turns on one engine. `max_waiting` bounds the line of bounded
    joiners (server requests); unbounded ones (the app's chat) always get a place."""

    def __init__(self, max_waiting: int = 16):
        if max_waiting < 0:
            raise ValueError(f"max_waiting must be >= 0, got {max_waiting}")
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._line: deque[Ticket] = deque()
        self._owner: int | None = None  # the thread whose turn it is
        self._depth = 0
        self._turn_started = 0.0
        self._durations: deque[float] = deque(maxlen=16)  # recent turns, for Retry-After
        self.turns = 0  # turns granted so far (what /health reports as served)

    # -- what it looks like (plain reads, any thread) -------------------------------------
    @property
    def waiting(self) -> int:
        return len(self._line)

    @property
    def busy(self) -> bool:
        return self._owner is not None

    def retry_after(self) -> int:
        """Whole seconds until a place is likely free: the line times a recent turn's length."""
        with self._cond:
            return self._retry_after_locked()

    # -- turns ----------------------------------------------------------------------------
    def join(self, bounded: bool = True) -> Ticket:
        """A place at the end of the line, at once; QueueFull when a bounded joiner finds it full."""
        with self._cond:
            if bounded and len(self._line) >= self.max_waiting:
                raise QueueFull(len(self._line), self._retry_after_locked())
            ticket = Ticket()
            self._line.append(ticket)
            return ticket

    def wait(self, ticket: Ticket, cancel: threading.Event | None = None) -> bool:
        """Block until it is `ticket`'s turn (True), or until `cancel` is set (False: it has left
        the line). The thread whose turn it already is passes at once (re-entrant)."""
        me = threading.get_ident()
        with self._cond:
            while True:
                if self._owner == me:
                    self._line.remove(ticket)
                    self._depth += 1
                    return True
                if self._owner is None and self._line and self._line[0] is ticket:
                    self._line.popleft()
                    self._owner, self._depth = me, 1
                    self._turn_started = time.perf_counter()
                    self.turns += 1
                    return True
                if cancel is not None and cancel.is_set():
                    self._line.remove(ticket)
                    self._cond.notify_all()
                    return False
                self._cond.wait(_POLL)

    def try_turn(self) -> bool:
        """Take a turn at once if nobody holds one and nobody waits (True), else nothing (False):
        for work that only uses idle time (Engine.read_ahead). End it with release()."""
        with self._cond:
            if self._owner is not None or self._line:
                return False
            self._owner, self._depth = threading.get_ident(), 1
            self._turn_started = None  # not a decode: Retry-After's estimate leaves it out
            return True

    def leave(self, ticket: Ticket) -> None:
        """Give up a place that was never waited on (a request refused after it joined)."""
        with self._cond:
            if ticket in self._line:
                self._line.remove(ticket)
                self._cond.notify_all()

    def release(self) -> None:
        """End one turn taken by wait(); the next in line goes when the outermost one ends."""
        with self._cond:
            self._depth -= 1
            if self._depth <= 0:
                self._owner, self._depth = None, 0
                if self._turn_started is not None:
                    self._durations.append(time.perf_counter() - self._turn_started)
                self._cond.notify_all()

    def _retry_after_locked(self) -> int:
        mean = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, math.ceil(mean * (len(self._line) + 1)))


class QueuedGeneration(EventStream):
    """A generation that waits for its turn on first iteration and gives it back at its end.
    Cancelled while waiting, it yields nothing and its stats say "cancelled"."""

    def __init__(self, inner: GenerationLike, queue: DecodeQueue, ticket: Ticket, settings: DecodeSettings,
                 cancel: threading.Event | None, after=None):
        """after: called once its turn is given back (QueuedEngine's read between turns)."""
        self.inner = inner
        self._after = after
        self.events = []
        self._queue, self._ticket, self._cancel = queue, ticket, cancel
        self._mode = settings.mode
        self._stats: Stats | None = None
        self.queue_seconds = 0.0  # how long it waited for its turn
        self.own_clock = inner.own_clock

    def __iter__(self) -> Iterator:
        if self._ticket is None:  # iterated again after its end: nothing more
            return
        ticket, self._ticket = self._ticket, None
        if not self._queue.wait(ticket, self._cancel):
            self._stats = Stats(mode=self._mode, stop_reason="cancelled")
            return
        self.queue_seconds = time.perf_counter() - ticket.joined
        try:
            for ev in self.inner:
                self.events.append(ev)
                yield ev
        finally:
            self._queue.release()
            if self._after is not None:
                self._after()

    def close(self) -> None:
        """Leave the line if it never started (a generation made and then not wanted)."""
        if self._ticket is not None:
            self._queue.leave(self._ticket)
            self._ticket = None
            self._stats = Stats(mode=self._mode, stop_reason="cancelled")

    @property
    def stats(self) -> Stats | None:
        return self._stats if self._stats is not None else self.inner.stats

    def snapshot(self) -> Stats:
        return self._stats if self._stats is not None else self.inner.snapshot()

    @property
    def text(self) -> str:
        return self.inner.text


class QueuedEngine:
    """contract.EngineLike around `inner`: every generation takes its turn in `queue`.
    `bounded`: whether its generations may be refused by a full line (a server's requests) or
    always join it (the app's chat, which waits)."""

    def __init__(self, inner: EngineLike, queue: DecodeQueue, bounded: bool = True, read_between: bool = False):
        """read_between: once a generation ends and nobody waits, a background thread lets the
        draft read what it skipped (read_ahead) -- a server, whose clients send the next turn
        later; the app's worker calls read_ahead itself."""
        self.inner = inner
        self.queue = queue
        self.bounded = bounded
        self.read_between = read_between

    def read_ahead(self, stop=lambda: False) -> tuple[int, float]:
        """The inner engine's read_ahead in a turn of its own, only while the line is empty: it
        takes no turn when someone holds or waits for one, and stops when someone joins."""
        return self._idle_turn(getattr(self.inner, "read_ahead", None), stop)

    def read_prompt(self, prompt: Prompt, stop=lambda: False) -> tuple[int, float]:
        """The inner engine's read_prompt, as read_ahead (the app's chat while it serves its models)."""
        read = getattr(self.inner, "read_prompt", None)
        if read is None or not isinstance(prompt, list):
            return 0, 0.0
        return self._idle_turn(lambda until: read(prompt, until), stop)

    def _idle_turn(self, read, stop) -> tuple[int, float]:
        """read(until) in a turn of its own, taken only while the line is empty; `until` is true
        once `stop` is or someone joins the line. (0, 0.0) when there is no read or no turn."""
        if read is None or not self.queue.try_turn():
            return 0, 0.0
        try:
            return read(lambda: stop() or self.queue.waiting > 0)
        finally:
            self.queue.release()

    def _read_soon(self) -> None:
        if self.queue.waiting == 0 and getattr(self.inner, "read_ahead", None) is not None:
            threading.Thread(target=self._read_quietly, name="specdec-read-ahead", daemon=True).start()

    def _read_quietly(self) -> None:
        try:
            self.read_ahead()
        except Exception:  # noqa: BLE001 -- only a head start for the next turn: it reads what this did not
            pass

    @property
    def target_info(self) -> ModelInfo:
        return self.inner.target_info

    @property
    def draft_info(self) -> ModelInfo | None:
        return self.inner.draft_info

    @property
    def context_length(self) -> int | None:
        return self.inner.context_length

    @property
    def vocab_size(self) -> int | None:
        return self.inner.vocab_size

    def server_info(self) -> ServerInfo | None:
        return self.inner.server_info()

    def encode_chat(self, messages: Messages, *, continue_final: bool = False,
                    answer_ids: list[int] | None = None) -> Prompt:
        more = {"answer_ids": answer_ids} if answer_ids else {}
        return self.inner.encode_chat(messages, continue_final=continue_final, **more)

    def encode_tool_chat(self, messages: Messages, tools: list[dict] | None, *,
                         continue_final: bool = False) -> Prompt:
        return self.inner.encode_tool_chat(messages, tools, continue_final=continue_final)

    def token_id(self, text: str) -> int | None:
        return self.inner.token_id(text)

    @property
    def end_token_ids(self) -> frozenset[int]:
        return self.inner.end_token_ids

    def encode_prompt(self, text: str) -> Prompt:
        return self.inner.encode_prompt(text)

    def encode_text(self, text: str) -> Prompt:
        return self.inner.encode_text(text)

    def encode_infill(self, infill: Infill) -> Prompt:
        return self.inner.encode_infill(infill)

    def count_tokens(self, messages: Messages) -> int | None:
        return self.inner.count_tokens(messages)

    def fit(self, messages: Messages, max_new_tokens: int | None, dropped: int = 0, *, continue_final: bool = False,
            answer_ids: list[int] | None = None) -> Fit:
        more = {"continue_final": True, "answer_ids": answer_ids} if continue_final else {}
        return self.inner.fit(messages, max_new_tokens, dropped, **more)

    def generate(self, prompt: Prompt, settings: DecodeSettings, *, cancel: threading.Event | None = None,
                 reuse_cache: bool = False, answer_prefix: int = 0, reuse_at_most: int | None = None) -> QueuedGeneration:
        """Refusals first (ContextError, EngineError: nothing joins), then a place in the line
        (QueueFull when it is full and this engine is bounded)."""
        more = {"answer_prefix": answer_prefix} if answer_prefix else {}  # passed on only where it says something
        if reuse_at_most is not None:
            more["reuse_at_most"] = reuse_at_most
        inner = self.inner.generate(prompt, settings, cancel=cancel, reuse_cache=reuse_cache, **more)
        ticket = self.queue.join(self.bounded)
        after = self._read_soon if self.read_between and settings.speculative else None
        return QueuedGeneration(inner, self.queue, ticket, settings, cancel, after)

    def fork(self) -> QueuedEngine:
        """A race's lane: the inner engine's fork, in the same line."""
        return QueuedEngine(self.inner.fork(), self.queue, self.bounded)
