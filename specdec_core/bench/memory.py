"""Peak memory of one measured run.

CUDA: torch.cuda.max_memory_allocated after a reset (tensors only, the allocator's view).
CPU (and MPS): the process's resident set size, sampled every `interval` seconds by a daemon
thread (psutil), plus a reading at the start and end of the run. Model weights are resident
for every mode, so on CPU the peak differs between modes only by caches and activations.
"""

from __future__ import annotations

import threading

import psutil


class PeakMemory:
    def __init__(self, device: str, interval: float = 0.02):
        self.cuda = str(device).startswith("cuda")
        self.interval = interval
        self._proc = psutil.Process()
        self._peak = 0
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.method = "torch.cuda.max_memory_allocated" if self.cuda else "process RSS (psutil, sampled)"

    def __enter__(self) -> PeakMemory:
        if not self.cuda:
            self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._running.set()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def start(self) -> None:
        """Begin a measured run: forget the previous peak."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return
        with self._lock:
            self._peak = self._rss()
        self._running.set()

    def stop(self) -> int:
        """End the run; the peak bytes seen since start()."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            return int(torch.cuda.max_memory_allocated())
        self._running.clear()
        with self._lock:
            self._peak = max(self._peak, self._rss())
            return int(self._peak)

    def _rss(self) -> int:
        return self._proc.memory_info().rss

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._running.wait()
            if self._stop.is_set():
                return
            rss = self._rss()
            with self._lock:
                if rss > self._peak:
                    self._peak = rss
            self._stop.wait(self.interval)
