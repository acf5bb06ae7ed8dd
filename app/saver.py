"""Writes to the History in order, and keeps them when the disk says no.

Each write is a function of the History that reads what it saves when it runs (a chat, a message
as it is now), queued under a key: a second request for the same key while the first still
waits adds nothing, since the first writes the newest content anyway. When a write fails
(SaveError: disk full, a read-only folder) the queue stops there, `failed` is emitted once for
the run of failures, the chat stays in memory, and the queue is tried again every RETRY_MS until
it goes through (`resumed`). GUI thread only, like the History.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from PySide6.QtCore import QObject, QTimer, Signal

from .history import History, SaveError

RETRY_MS = 2000


class Saver(QObject):
    failed = Signal(str)  # why the first write of a run of failures did not go through
    resumed = Signal()  # every waiting write went through after a failure

    def __init__(self, history: History, parent: QObject | None = None):
        super().__init__(parent)
        self.history = history
        self._queue: list[tuple[Hashable, Callable[[History], object]]] = []
        self.error: str | None = None  # set while writes wait for the disk
        self._retry = QTimer(self)
        self._retry.setInterval(RETRY_MS)
        self._retry.timeout.connect(self.flush)

    @property
    def pending(self) -> int:
        return len(self._queue)

    def submit(self, key: Hashable, write: Callable[[History], object]) -> bool:
        """Queue `write` (unless `key` already waits) and flush; True when nothing waits after."""
        if all(k != key for k, _ in self._queue):
            self._queue.append((key, write))
        return self.flush()

    def discard(self, keep: Callable[[Hashable], bool]) -> None:
        """Drop the waiting writes whose key `keep` rejects (a chat deleted before it was saved)."""
        self._queue = [(k, w) for k, w in self._queue if keep(k)]

    def flush(self) -> bool:
        while self._queue:
            key, write = self._queue[0]
            try:
                write(self.history)
            except SaveError as exc:
                first = self.error is None
                self.error = str(exc)
                if not self._retry.isActive():
                    self._retry.start()
                if first:
                    self.failed.emit(self.error)
                return False
            self._queue.pop(0)
        if self.error is not None:
            self.error = None
            self._retry.stop()
            self.resumed.emit()
        return True
