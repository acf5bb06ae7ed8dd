"""The Models dialog's background work: listing local models, checking which drafts fit a target,
estimating memory, downloading from the hub. Two workers, each in its own QThread, so a long
download never holds up a compatibility check:

- InspectWorker: scan (local models, presets with what they need here, this machine's memory),
  drafts (read each candidate's vocabulary and say why it does or does not fit the target),
  estimate (the chosen pair's memory, and the too-big message with a smaller preset);
- DownloadWorker: one hub download at a time, with bytes, speed and time left.

Same rules as app/worker.py: no torch, transformers or engine import at module import time (the
models layer is imported inside the slots, in the worker thread); the workers never touch widgets,
they only emit signals; every request carries an id echoed on its signals, so the dialog drops
answers to questions it no longer asks; cancel is cooperative (a threading.Event the GUI sets: a
drafts job stops between candidates, a download at its next chunk and keeps what it has).

`start_in_thread()` is the one function that wires a worker to its thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, QThread, Signal, Slot

from .worker import _one_line


@dataclass(frozen=True)
class DraftsJob:
    """Which of `candidates` ({key: (spec, role)}) can draft for `target` (spec, role)."""

    job_id: int
    target: tuple[str, str]
    candidates: dict
    cancel: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)


@dataclass(frozen=True)
class EstimateJob:
    job_id: int
    target: str
    draft: str | None
    device: str
    quantization: str | None
    freeable: int = 0  # bytes the models loaded now give back when replaced


@dataclass(frozen=True)
class DownloadJob:
    job_id: int
    spec: str
    cancel: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)


class InspectWorker(QObject):
    scanned = Signal(object)  # {"machine", "presets", "local"}
    described = Signal(object)  # a LocalModel dict (a file or folder the user opened)
    draft_checked = Signal(int, str, str, str)  # job id, candidate key, "ok" | "no" | "unknown", reason
    target_unreadable = Signal(int, str)  # job id, why no draft can be checked against it
    drafts_done = Signal(int)
    estimated = Signal(int, object)  # job id, {"pair": PairEstimate dict, "too_big": str | None}
    failed = Signal(str)

    _scan_requested = Signal(object)
    _describe_requested = Signal(str)
    _drafts_requested = Signal(object)
    _estimate_requested = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self._machine = None
        self._scan_requested.connect(self._scan)
        self._describe_requested.connect(self._describe)
        self._drafts_requested.connect(self._drafts)
        self._estimate_requested.connect(self._estimate)

    # -- GUI-thread API -------------------------------------------------------------------
    def request_scan(self, recent_file: Path | None) -> None:
        self._scan_requested.emit(recent_file)

    def request_describe(self, path: str) -> None:
        self._describe_requested.emit(path)

    def request_drafts(self, job: DraftsJob) -> None:
        self._drafts_requested.emit(job)

    def request_estimate(self, job: EstimateJob) -> None:
        self._estimate_requested.emit(job)

    # -- worker-thread slots --------------------------------------------------------------
    def machine(self, fresh: bool = False):
        from specdec_core.models import memory

        if self._machine is None or fresh:
            self._machine = memory.probe()
        return self._machine

    def _with_need(self, m) -> dict:
        """A LocalModel as a dict, with what it needs loaded here in the role it is listed for."""
        from specdec_core.models import memory

        d = m.to_dict()
        if not m.error:
            device, e = memory.estimate_for(m.spec, m.role or "target", self.machine())
            d["need"] = {**e.to_dict(), "device": device, "place": memory.place(device)}
        return d

    @Slot(object)
    def _scan(self, recent_file) -> None:
        try:
            from specdec_core.models import PRESETS, local, memory

            machine = self.machine(fresh=True)
            presets = []
            for p in PRESETS:
                e = memory.estimate_preset(p, machine)
                presets.append({**p.__dict__, "estimate": e.to_dict(), "fits": memory.fits(e.bytes, e.device, machine)})
            models = [self._with_need(m) for m in local.scan(recent_file)]
            from specdec_core.models import download

            self.scanned.emit({"machine": {**machine.to_dict(), "summary": machine.summary()},
                               "presets": presets, "local": models, "partial": download.partial_downloads()})
        except Exception as exc:  # noqa: BLE001 -- a listing that fails says so in one line
            self.failed.emit(_one_line(exc))

    @Slot(str)
    def _describe(self, path: str) -> None:
        try:
            from specdec_core.models import local

            self.described.emit(self._with_need(local.describe(path, "recent")))
        except Exception as exc:  # noqa: BLE001
            self.failed.emit(_one_line(exc))

    @Slot(object)
    def _drafts(self, job: DraftsJob) -> None:
        from specdec_core.models import ModelError, vocab

        try:
            target = vocab.read_vocab(*job.target)
        except Exception as exc:  # noqa: BLE001 -- ModelError above all: one line for the dialog
            self.target_unreadable.emit(job.job_id, str(exc) if isinstance(exc, ModelError) else _one_line(exc))
            self.drafts_done.emit(job.job_id)
            return
        for key, (spec, role) in job.candidates.items():
            if job.cancel.is_set():
                return  # the user picked another target: this answer is no longer wanted
            try:
                why = vocab.incompatibility(target, vocab.read_vocab(spec, role))
            except ModelError as exc:
                self.draft_checked.emit(job.job_id, key, "unknown", str(exc))
                continue
            except Exception as exc:  # noqa: BLE001
                self.draft_checked.emit(job.job_id, key, "unknown", _one_line(exc))
                continue
            self.draft_checked.emit(job.job_id, key, "ok" if why is None else "no", why or "")
        self.drafts_done.emit(job.job_id)

    @Slot(object)
    def _estimate(self, job: EstimateJob) -> None:
        try:
            from specdec_core.models import memory

            machine = self.machine(fresh=True)
            pair = memory.estimate_pair(job.target, job.draft, machine, device=job.device,
                                        quantization=job.quantization)
            self.estimated.emit(job.job_id, {
                "pair": pair.to_dict(),
                "free": machine.free(pair.device) + job.freeable,
                "total": machine.total(pair.device),
                "too_big": memory.too_big_message(pair, machine, job.freeable),
                "smaller": (lambda found: found[0].name if found else None)(
                    memory.smaller_preset(pair.bytes, machine, job.freeable) if pair.bytes else None),
            })
        except Exception as exc:  # noqa: BLE001
            self.estimated.emit(job.job_id, {"pair": None, "error": _one_line(exc), "too_big": None})


class DownloadWorker(QObject):
    progress = Signal(int, object)  # job id, DownloadProgress dict
    done = Signal(int, str, str)  # job id, spec, local path
    failed = Signal(int, str, str)  # job id, spec, one line
    cancelled = Signal(int, str, object)  # job id, spec, {"kept", "total"}

    _download_requested = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self._current: DownloadJob | None = None
        self._lock = threading.Lock()
        self._download_requested.connect(self._download)

    def request_download(self, job: DownloadJob) -> None:
        self._download_requested.emit(job)

    def cancel(self) -> None:
        """Stop the running download (thread-safe); its bytes stay for the next attempt."""
        with self._lock:
            job = self._current
        if job is not None:
            job.cancel.set()

    @Slot(object)
    def _download(self, job: DownloadJob) -> None:
        from specdec_core.models import download

        with self._lock:
            self._current = job
        try:
            path = download.download(job.spec, lambda p: self.progress.emit(job.job_id, p.to_dict()), job.cancel)
            self.done.emit(job.job_id, job.spec, str(path))
        except download.DownloadCancelled as exc:
            self.cancelled.emit(job.job_id, job.spec, {"kept": exc.kept, "total": exc.total})
        except Exception as exc:  # noqa: BLE001 -- ModelError and anything else: one line
            self.failed.emit(job.job_id, job.spec, _one_line(exc))
        finally:
            with self._lock:
                self._current = None


def start_in_thread(worker: QObject, name: str, parent: QObject | None = None) -> QThread:
    """The one place a models worker is wired to its thread; returns the running thread."""
    thread = QThread(parent)
    thread.setObjectName(name)
    worker.moveToThread(thread)
    thread.finished.connect(worker.deleteLater)
    thread.start()
    return thread


def stop_thread(thread: QThread, timeout_ms: int = 5000) -> bool:
    thread.quit()
    return thread.wait(timeout_ms)
