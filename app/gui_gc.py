"""Python's cyclic garbage collection, run only in the GUI thread.

Why: the collector runs in whichever thread happens to allocate when a generation crosses its
threshold. In this app that is usually a worker (loading models and decoding allocate a lot). If
the garbage then holds the wrapper of a Qt object -- a closed view kept in a cycle by its own
slots, say -- its C++ destructor runs off the GUI thread and Qt crashes. CI saw exactly that: a
segmentation fault "Garbage-collecting" under a race worker's `copy.deepcopy`.

So while a `GuiThreadCollector` lives, automatic collection is off and a GUI-thread timer does the
same work: each tick collects the generations whose counts passed their thresholds, as the
automatic collector would have (the pattern of pyqtgraph's and Camelot's GarbageCollector).
Reference counting still frees everything that is not in a cycle, in any thread, at once.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer


class GuiThreadCollector(QObject):
    """Create in the GUI thread after the QApplication; `stop()` hands collection back."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = 1000) -> None:
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.collect_due)
        self._timer.start()

    def collect_due(self) -> int:
        """Collect the oldest generation whose count passed its threshold (and the younger ones
        with it, as gc does). Returns the number of unreachable objects found."""
        counts = gc.get_count()
        due = -1
        for generation, (count, threshold) in enumerate(zip(counts, self._thresholds)):
            if threshold and count > threshold:
                due = generation
            else:
                break  # an older generation is only considered once the younger one is due
        return gc.collect(due) if due >= 0 else 0

    def stop(self) -> None:
        """Stop the timer, collect everything now (in this thread) and restore the automatic
        collector as it was."""
        self._timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()
