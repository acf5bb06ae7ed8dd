"""The background worker: opens an engine and runs generations in a QThread.

Rules (docs/architecture.md):
- this module does not import torch, transformers or specdec_core's engine at import time; the
  engine is opened (specdec_core.open_engine.open_engine) inside the worker thread's slots;
- it only adapts the engine (specdec_core.contract.EngineLike) to Qt: it calls the engine and
  turns what comes back -- token events, Stats, a Fit that does not fit, errors -- into signals;
- the worker never touches widgets: it only emits signals (queued to the GUI thread);
- every generation request carries an id, echoed on each signal, so the GUI can drop anything
  from a request it no longer waits for (a stopped generation never lands in a newer message);
- stop is cooperative: the GUI sets the request's threading.Event directly (thread-safe); the
  engine checks it between steps and the worker stops forwarding tokens at once;
- between turns the draft reads what its windows skipped (engine.read_ahead) while the user
  reads and types; a new request (or a load, or stop) ends that read within one of its passes;
- while the user writes under a long attachment or paste, the target reads the prompt the input
  box would send (engine.read_prompt, asked for by the context watch): the same way, only the
  newest input's, never one from before an answer the worker has begun since;
- tokens are batched: one `tokens` signal about every 30 ms (at a step's end), not one per token,
  each carrying the engine's running Stats (a typed copy) for exactly the tokens sent so far: the
  GUI shows those numbers and saves them with a stopped message; it never recomputes them from
  events. The end is one typed `Finished` value.

`start_worker()` is the one function that wires a Worker to its QThread.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specdec_core.events import Stats  # light: no torch
from specdec_core.settings import DEFAULT_DRAFT_TOKENS, DecodeSettings  # light: no torch

if TYPE_CHECKING:  # the contract, for the types only: the engine itself opens in the worker thread
    from specdec_core.contract import EngineLike

BATCH_SECONDS = 0.030


def default_settings() -> DecodeSettings:
    """The app's settings until the user changes them: the side panel starts from these. No
    answer budget: an answer runs until the model ends it or the context is full."""
    return DecodeSettings(max_new_tokens=None, draft_tokens=DEFAULT_DRAFT_TOKENS)


@dataclass(frozen=True)
class LoadRequest:
    """What to open. `factory`, when given, replaces open_engine: it is called in the worker
    thread as factory(progress) and must return an EngineLike (tests, self-test)."""

    target: str = "default"
    draft: str | None = "default"
    device: str = "auto"
    dtype: str = "auto"
    quantization: str | None = None
    factory: Callable[[Callable[[str, float | None], None]], EngineLike] | None = None
    api_key: str | None = field(default=None, repr=False)  # a server target's key (else $SPECDEC_API_KEY)


@dataclass(frozen=True)
class Finished:
    """How a generation ended, as the `finished` signal hands it to the GUI: the engine's final
    Stats (a server's ServerStats), the answer's text, and why a server's stream broke off
    midway ("" when it did not: then `stats.stop_reason` is "error" and the part is kept)."""

    stats: Stats
    text: str = ""
    error: str = ""


@dataclass(frozen=True)
class GenerateRequest:
    """One assistant message to generate. Plain values only: the GUI builds it without torch."""

    request_id: int
    messages: list[dict[str, str]]
    settings: DecodeSettings = field(default_factory=default_settings)
    dropped: int = 0  # oldest conversation messages left out of the prompt (the chat keeps them)
    # Continue: the last message is the assistant's answer so far, and the new tokens continue it
    # (its turn left open); `answer_ids` are its tokens as the engine wrote them (empty: unknown)
    continuing: bool = False
    answer_ids: tuple[int, ...] = ()
    cancel: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def fit_options(self) -> dict:
        """What engine.fit needs beyond the chat and its budget (nothing for a new answer)."""
        if not self.continuing:
            return {}
        return {"continue_final": True, "answer_ids": list(self.answer_ids) or None}

    def generate_options(self, engine: EngineLike, fit) -> dict:
        """What engine.generate needs beyond the prompt and the settings: for a continuation, how
        many of the prompt's last tokens are the answer so far (so its text reads on from theirs)."""
        n = answer_prefix(engine, self, fit)
        return {"answer_prefix": n} if n else {}


def answer_prefix(engine: EngineLike, req: GenerateRequest, fit) -> int:
    """The prompt's last tokens that are the answer being continued: its own ids, or, for an
    answer given as text (an edited one), what the chat template's rendering of it takes beyond the
    assistant's turn opener. 0 where that cannot be told: a server's prompt (it detokenizes
    itself), a template that opens the turn otherwise when it has content."""
    if not req.continuing:
        return 0
    if req.answer_ids:
        return len(req.answer_ids)
    prompt = fit.prompt
    if not isinstance(prompt, list):
        return 0
    from specdec_core.context import drop_oldest  # light: no torch

    opener = list(engine.encode_chat(drop_oldest(req.messages, fit.dropped)[:-1]))
    return len(prompt) - len(opener) if len(prompt) > len(opener) and prompt[: len(opener)] == opener else 0


@dataclass(frozen=True)
class PromptRead:
    """An input to read ahead: the chat as the next send would make it."""

    messages: list[dict[str, str]]
    max_new_tokens: int | None
    dropped: int
    generations_asked: int  # the worker's count when it was asked for; -1: one was under way then


class RequestTracker:
    """The one request in flight, so stop() can cancel it from the GUI thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: Any = None

    def begin(self, req: Any) -> None:
        with self._lock:
            self._current = req

    def end(self) -> None:
        with self._lock:
            self._current = None

    def stop(self, request_id: int | None = None) -> None:
        """Cancel the running request (or only `request_id`, when given). Thread-safe."""
        with self._lock:
            cur = self._current
        if cur is not None and (request_id is None or cur.request_id == request_id):
            cur.cancel.set()


def step_batches(items, event_of: Callable[[Any], Any] = lambda x: x,
                 cancel: threading.Event | None = None):
    """Group a stream of token events (or items carrying one: `event_of`) into lists, one
    about every BATCH_SECONDS, cut only at the end of a step (its one target token: not
    "accepted"). A step's events arrive at once and then the decoder computes the next step,
    so a cut mid-step would hold that step's tail back a whole step. Once `cancel` is set,
    nothing more is yielded (the decoder still ends within its step)."""
    batch: list = []
    last = time.perf_counter()
    try:
        for item in items:
            if cancel is not None and cancel.is_set():
                continue
            batch.append(item)
            now = time.perf_counter()
            if event_of(item).kind.value != "accepted" and now - last >= BATCH_SECONDS:
                yield batch
                batch = []
                last = now
    except Exception:
        # a stream that broke off (a server target): what arrived still reaches the view
        if batch and not (cancel is not None and cancel.is_set()):
            yield batch
        raise
    if batch and not (cancel is not None and cancel.is_set()):
        yield batch


def describe(engine: EngineLike) -> dict:
    """What the GUI shows of an opened engine, as plain values: {"target": info dict, "draft":
    info dict | None, "server": ServerInfo | None}."""
    draft = engine.draft_info
    return {"target": engine.target_info.to_dict(), "draft": draft.to_dict() if draft is not None else None,
            "server": engine.server_info()}


class Worker(QObject):
    """Lives in its own QThread. Call the request_* / stop methods from the GUI thread."""

    # loading
    progress = Signal(str, float)  # message, fraction in [0, 1] or -1 when unknown
    loaded = Signal(object)  # describe(engine): {"target": info dict, "draft": info dict | None, "server": ...}
    load_failed = Signal(str)  # one line for a dialog
    # generation; every signal carries the request id first
    started = Signal(int)
    tokens = Signal(int, object, object)  # request id, [TokenEvent, ...], the running Stats (a copy)
    finished = Signal(int, object)  # request id, Finished
    failed = Signal(int, str)  # request id, message
    # request id, context.Fit: the chat plus its answer budget does not fit the target's context;
    # its `drop` = the fewest oldest messages to leave out (counting those already left out),
    # None when even the last turn alone does not fit
    too_long = Signal(int, object)
    # an input read ahead (request_read_prompt): prompt tokens read and seconds, once it ends
    prompt_read = Signal(int, float)

    # internal: queued hops from the GUI thread into the worker thread
    _load_requested = Signal(object)
    _generate_requested = Signal(object)
    _read_prompt_requested = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.engine: EngineLike | None = None
        self._requests = RequestTracker()
        # work queued for this thread and not started yet (requests, loads) and stops asked for:
        # an idle read ends as soon as there is any
        self._waiting = _Counter()
        self._load_requested.connect(self._load)
        self._generate_requested.connect(self._generate)
        # the newest input to read ahead (read_prompt), and the generations asked for and done:
        # an input asked for while one was under way or waiting, or before one asked for since,
        # is stale (the chat it was made from has grown by that answer)
        self._prompt_lock = threading.Lock()
        self._prompt_job: PromptRead | None = None
        self._generations_asked = 0
        self._generations_done = 0
        self._read_prompt_requested.connect(self._read_prompt)

    # -- GUI-thread API -------------------------------------------------------------------
    def request_load(self, request: LoadRequest) -> None:
        self._waiting.add(1)
        self._load_requested.emit(request)

    def request_generate(self, request: GenerateRequest) -> None:
        self._waiting.add(1)
        with self._prompt_lock:
            self._generations_asked += 1
        self._generate_requested.emit(request)

    def request_read_prompt(self, messages: list[dict[str, str]], max_new_tokens: int | None, dropped: int = 0) -> None:
        """The chat as the next send would make it (what the input box holds): let the target
        read its prompt while the user goes on writing. Only the newest is read; a send, a load or
        a newer input ends the read within one of its passes."""
        with self._prompt_lock:
            settled = self._generations_done == self._generations_asked
            self._prompt_job = PromptRead(messages, max_new_tokens, dropped, self._generations_asked if settled else -1)
        self._read_prompt_requested.emit()

    def stop(self, request_id: int | None = None) -> None:
        """Cancel the running generation (or only `request_id`, when given), and any idle read.
        Thread-safe."""
        self._waiting.stopped = True
        self._requests.stop(request_id)

    # -- worker-thread slots --------------------------------------------------------------
    @Slot(object)
    def _load(self, request: LoadRequest) -> None:
        self._waiting.add(-1)

        def progress(message: str, fraction: float | None = None) -> None:
            self.progress.emit(str(message), -1.0 if fraction is None else float(fraction))

        # the models loaded now go first: a model switch must not hold both pairs in memory
        # (the Models dialog counts their bytes as free when it checks the new pair)
        if self.engine is not None:
            import gc

            self.engine = None
            gc.collect()
        try:
            progress("Preparing models…", 0.0)
            if request.factory is not None:
                engine = request.factory(progress)
            else:
                from specdec_core.open_engine import open_engine  # lazily, in this thread

                engine = open_engine(request.target, request.draft, device=request.device, dtype=request.dtype,
                                     quantization=request.quantization, api_key=request.api_key, progress=progress)
        except Exception as exc:  # ModelError and anything else: one line for the dialog
            self.load_failed.emit(_one_line(exc))
            return
        # every chat starts with the template's head, and every message is decoded on the cache
        # the last one left: read it now, so the first chat starts where later ones do
        read_head = getattr(engine, "read_template_head", None)
        if read_head is not None:
            try:
                read_head()
            except Exception:  # noqa: BLE001 -- only a head start: the first message reads it instead
                pass
        self.engine = engine
        progress("Models ready", 1.0)
        self.loaded.emit(describe(engine))

    @Slot(object)
    def _generate(self, req: GenerateRequest) -> None:
        self._waiting.add(-1)  # this one has started
        try:
            answered = self._answer(req)
        finally:
            with self._prompt_lock:
                self._generations_done += 1
        if answered:
            self._read_ahead()

    def _answer(self, req: GenerateRequest) -> bool:
        """The generation itself; True when an answer (whole or stopped) was handed over."""
        if req.cancel.is_set():  # stopped before it even started: say so, emit no tokens
            self.finished.emit(req.request_id, Finished(Stats(stop_reason="cancelled")))
            return False
        if self.engine is None:
            self.failed.emit(req.request_id, "no models are loaded yet")
            return False
        self._requests.begin(req)
        gen, answered = None, False
        try:
            fit = self.engine.fit(req.messages, req.settings.max_new_tokens, req.dropped, **req.fit_options())
            if not fit.fits:  # said at once, before any computing: the GUI offers to drop turns
                self.too_long.emit(req.request_id, fit)
                return False
            self.started.emit(req.request_id)
            # a chat's next turn starts with the conversation so far: keep its cached prefix
            gen = self.engine.generate(fit.prompt, req.settings, cancel=req.cancel, reuse_cache=True,
                                       **req.generate_options(self.engine, fit))
            for batch in step_batches(gen, cancel=req.cancel):
                # batches end at a step's end, where the running stats count exactly these tokens
                self.tokens.emit(req.request_id, batch, gen.snapshot())
            stats = gen.snapshot()
            if req.cancel.is_set():
                stats = dataclasses.replace(stats, stop_reason="cancelled")
            self.finished.emit(req.request_id, Finished(stats, gen.text))
            answered = True
        except Exception as exc:
            from specdec_core.models.errors import ModelError  # light: a user-facing one-liner

            if not isinstance(exc, ModelError):  # a server's error is news for the user, not a bug
                traceback.print_exc()
            if gen is not None and gen.events and gen.stats is not None and gen.stats.stop_reason == "error":
                # a server's stream broke off midway: its figures for what arrived, marked as cut
                self.finished.emit(req.request_id, Finished(gen.snapshot(), gen.text, _one_line(exc)))
            else:
                self.failed.emit(req.request_id, _one_line(exc))
        finally:
            self._requests.end()
        return answered

    @Slot()
    def _read_prompt(self) -> None:
        with self._prompt_lock:
            job, self._prompt_job = self._prompt_job, None
            stale = job is None or job.generations_asked != self._generations_asked
        read = getattr(self.engine, "read_prompt", None)
        if stale or read is None:
            return
        self._idle_read(lambda: self._read_fitted(job, read))

    def _read_fitted(self, job, read) -> None:
        """The prompt the input would send, read by the engine; stopped by new work or a newer input."""
        fit = self.engine.fit(job.messages, job.max_new_tokens, job.dropped)
        if fit.fits and isinstance(fit.prompt, list):
            tokens, seconds = read(fit.prompt, lambda: self._waiting.any() or self._prompt_job is not None)
            if tokens:
                self.prompt_read.emit(tokens, seconds)

    def _read_ahead(self) -> None:
        """After an answer, while this thread would otherwise wait: the draft reads what it
        skipped of the conversation (Engine.read_ahead), until done or until new work is
        queued. Only a speed-up for the next turn: a failure here loses nothing."""
        read = getattr(self.engine, "read_ahead", None)
        if read is not None:
            self._idle_read(lambda: read(self._waiting.any))

    def _idle_read(self, read) -> None:
        """Begin a read while this thread would otherwise wait (the input's, or the backlog's
        after an answer): a stop asked before this point was for an answer, so it is forgotten;
        new work already queued keeps the read off. Only a head start: a failure loses nothing
        (the next send or turn reads what this did not)."""
        self._waiting.stopped = False
        if self._waiting.any():
            return
        try:
            read()
        except Exception:  # noqa: BLE001 -- a head start only
            traceback.print_exc()


class _Counter:
    """Work queued for the worker's thread and not started (added from the GUI thread, taken
    off in the worker's), and whether a stop was asked since the last idle read began."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n = 0
        self.stopped = False
        self.closing = False  # the thread is being shut down: no more reads

    def add(self, n: int) -> None:
        with self._lock:
            self._n = max(self._n + n, 0)

    def any(self) -> bool:
        return self._n > 0 or self.stopped or self.closing


def _one_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    text = msg[0] if msg else ""
    return text if text else type(exc).__name__


def start_worker(parent: QObject | None = None) -> tuple[Worker, QThread]:
    """The one place a Worker is wired to its thread. Returns (worker, thread), thread running.

    Shut down with stop_worker(worker, thread)."""
    thread = QThread(parent)
    thread.setObjectName("specdec-worker")
    worker = Worker()
    worker.moveToThread(thread)
    thread.finished.connect(worker.deleteLater)
    thread.start()
    return worker, thread


def stop_worker(worker: Worker, thread: QThread, timeout_ms: int = 10000) -> bool:
    """Cancel what runs, end the thread's event loop and wait for it. True when it ended."""
    worker._waiting.closing = True  # an idle read ends, and none starts
    worker.stop()
    thread.quit()
    return thread.wait(timeout_ms)
