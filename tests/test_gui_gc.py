"""Cycles are collected in the GUI thread while a GuiThreadCollector lives (app/gui_gc.py).

A cycle with a finalizer records the thread that collected it; a worker thread allocates enough
to cross the collector's thresholds. Without the collector that thread collects the cycle (the
crash CI once saw, when the garbage held widgets); with it, the GUI thread's timer does."""

from __future__ import annotations

import gc
import os
import threading
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from app.gui_gc import GuiThreadCollector  # noqa: E402


class Cycle:
    def __init__(self, seen: list) -> None:
        self.me = self
        self.seen = seen

    def __del__(self) -> None:
        self.seen.append(threading.current_thread().name)


def drop_cycle_then_allocate_in_a_worker(kept: list) -> list:
    """Make a cycle, drop it, and let a worker allocate far past gen 0's threshold. The worker's
    containers stay alive in `kept` (as a loaded model's would): gc counts allocations net of
    deallocations, so freed ones would not make a collection due."""
    seen: list = []
    Cycle(seen)

    def allocate() -> None:
        kept.extend([i] for i in range(20 * max(gc.get_threshold()[0], 1)))

    worker = threading.Thread(target=allocate, name="worker")
    worker.start()
    worker.join()
    return seen


def wait_for(app, predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.01)
    return predicate()


def test_without_the_collector_a_worker_thread_collects_the_cycle():
    gc.collect()
    assert gc.isenabled()
    assert drop_cycle_then_allocate_in_a_worker([]) == ["worker"]


def test_with_the_collector_only_the_gui_thread_collects(qapp):
    gc.collect()
    collector = GuiThreadCollector(interval_ms=20)
    try:
        assert not gc.isenabled()
        kept: list = []
        seen = drop_cycle_then_allocate_in_a_worker(kept)
        assert seen == []  # the worker crossed the threshold but did not collect
        assert wait_for(qapp, lambda: seen)  # the timer found gen 0 due ...
        assert seen == [threading.main_thread().name]  # ... and collected it here
    finally:
        collector.stop()
    assert gc.isenabled()


def test_stop_collects_now_and_restores_the_collector_as_it_was(qapp):
    gc.disable()
    try:
        collector = GuiThreadCollector(interval_ms=60_000)
        seen: list = []
        Cycle(seen)
        collector.stop()
        assert seen == [threading.main_thread().name] and not gc.isenabled()
    finally:
        gc.enable()


WIDGETS_IN_A_CYCLE = r"""
import gc, sys, threading
from PySide6.QtWidgets import QApplication
from app.gui_gc import GuiThreadCollector
from app.race_view import RaceView
from app.theme import Theme

app = QApplication([])
collector = GuiThreadCollector(interval_ms=20) if sys.argv[1] == "with" else None
gc.disable()  # the cycles below stay garbage until a collection, as between two tests
for _ in range(12):  # with 3 views the crash came in about half the runs; with 12 in every one of 20
    view = RaceView(Theme(False))
    view.show()
    app.processEvents()
    view.close()
    view.me = view  # a cycle: only the cyclic collector can free the view
    del view
kept = []


def work():
    if collector is None:
        gc.enable()  # in the worker, so that its allocations are the ones that make gen 0 due
    kept.extend([i] for i in range(20 * gc.get_threshold()[0]))


worker = threading.Thread(target=work)
worker.start()
worker.join()
app.processEvents()
if collector is not None:
    collector.stop()
print("survived")
"""


@pytest.mark.parametrize("mode", ["with", "without"])
def test_closed_views_in_a_cycle_and_a_worker_crossing_the_threshold(tmp_path, mode):
    """The crash itself, in a child process: views left in cycles, then a worker that allocates.
    With the collector the GUI thread frees them; without it the worker's collection destroys
    them off the GUI thread, a segmentation fault (the control: the scenario is real)."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "cycle.py"
    script.write_text(WIDGETS_IN_A_CYCLE)

    def run():
        return subprocess.run([sys.executable, str(script), mode], cwd=Path(__file__).resolve().parent.parent,
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": "."})

    if mode == "with":
        for _ in range(3):  # never a crash
            r = run()
            assert r.returncode == 0 and "survived" in r.stdout, r.stdout + r.stderr[-2000:]
    else:
        # the crash is a race between the worker's collection and Qt's objects: 12 views make it
        # come every time here (20 of 20); the control still allows 3 tries, asking for one
        # crash at least (the scenario is real, not that it crashes every time)
        outs = []
        for _ in range(3):
            r = run()
            if r.returncode != 0 and "survived" not in r.stdout:
                break
            outs.append(r.stdout)
        else:
            pytest.fail("the hazard no longer reproduces in 3 runs: " + " | ".join(outs))
