"""The race worker: runs specdec_core.race in a worker thread and streams race events.

Same rules as app/worker.py:
- no torch / engine import at module import time (the race module is imported lazily in the slot);
- never touches widgets: signals only (queued to the GUI thread);
- every request carries an id, echoed on each signal;
- stop is cooperative: the GUI sets the request's threading.Event; the race stops calling its
  lanes at once and the decoders end within their current step;
- events are batched: one `events` signal about every 30 ms, at a step's end, with each lane's
  running Stats (timed by its own clock): the figures the lanes show.

The engine comes from `engine_provider()`, called in the worker's thread at the start of each
race. In the app the race worker lives in the chat worker's own thread and reads its engine:
one thread for the device, so a race and a chat never compute at the same time (either would
distort the other's clock); a request simply waits until the thread is free.

`start_race_worker()` is the one function that wires a RaceWorker to its thread.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specdec_core.settings import DecodeSettings  # light: no torch

from .worker import RequestTracker, _one_line, default_settings, step_batches


@dataclass(frozen=True)
class RaceRequest:
    """One race. Plain values only: the GUI builds it without torch. The settings' proposer
    drives the speculative lane; their mode is each lane's own."""

    request_id: int
    prompt: str
    system: str = ""
    settings: DecodeSettings = field(default_factory=lambda: default_settings().replace(max_new_tokens=128))
    cancel: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    def messages(self) -> list[dict[str, str]]:
        out = [{"role": "system", "content": self.system}] if self.system.strip() else []
        return out + [{"role": "user", "content": self.prompt}]


class RaceWorker(QObject):
    started = Signal(int)  # request id: the race got the thread and its clocks start
    events = Signal(int, object, object)  # request id, [RaceEvent(lane, event, clock), ...], {lane: Stats}
    finished = Signal(int, object)  # request id, the RaceResult (None: stopped before it started)
    failed = Signal(int, str)

    _race_requested = Signal(object)

    def __init__(self, engine_provider: Callable[[], Any]) -> None:
        super().__init__()
        self.engine_provider = engine_provider
        self._requests = RequestTracker()
        self._race_requested.connect(self._race)

    # -- GUI-thread API -------------------------------------------------------------------
    def request_race(self, request: RaceRequest) -> None:
        self._race_requested.emit(request)

    def stop(self, request_id: int | None = None) -> None:
        """Cancel the running race (or only `request_id`). Thread-safe."""
        self._requests.stop(request_id)

    # -- worker-thread slot ---------------------------------------------------------------
    @Slot(object)
    def _race(self, req: RaceRequest) -> None:
        if req.cancel.is_set():
            self.finished.emit(req.request_id, None)
            return
        engine = self.engine_provider()
        if engine is None:
            self.failed.emit(req.request_id, "no models are loaded yet")
            return
        self._requests.begin(req)
        try:
            from specdec_core.race import start_race  # lazily, in this thread

            race = start_race(engine, engine.encode_chat(req.messages()), req.settings, req.cancel)
            self.started.emit(req.request_id)
            for batch in step_batches(race, event_of=lambda rev: rev.event):
                stats = {lane: race.lane_stats(lane) for lane in {rev.lane for rev in batch}}
                self.events.emit(req.request_id, batch, {k: v for k, v in stats.items() if v is not None})
            self.finished.emit(req.request_id, race.result)
        except Exception as exc:
            traceback.print_exc()
            self.failed.emit(req.request_id, _one_line(exc))
        finally:
            self._requests.end()


def start_race_worker(engine_provider: Callable[[], Any], parent: QObject | None = None,
                      thread: QThread | None = None) -> tuple[RaceWorker, QThread]:
    """The one place a RaceWorker is wired to its thread. With `thread` (the chat worker's), it
    shares that running thread; without, it gets its own, started here. Returns (worker, thread)."""
    own = thread is None
    if own:
        thread = QThread(parent)
        thread.setObjectName("specdec-race-worker")
    worker = RaceWorker(engine_provider)
    worker.moveToThread(thread)
    thread.finished.connect(worker.deleteLater)
    if own:
        thread.start()
    return worker, thread


def stop_race_worker(worker: RaceWorker, thread: QThread, timeout_ms: int = 10000) -> bool:
    """Cancel the race, end the thread's event loop and wait for it. True when it ended."""
    worker.stop()
    thread.quit()
    return thread.wait(timeout_ms)
