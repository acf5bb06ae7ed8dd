"""Writes to the History in order, and keeps them when the disk says no.

Each write is a function of the History, queued under a key that names what it writes (a chat's
row, a message, a chat's title or pin); a second request for the same key while the first still
waits replaces it, so the newest content is what reaches the disk. Where it goes in the queue:

- a row others depend on (a chat's row, a message: a question before its answer) keeps the first
  request's place, so nothing is written before what it refers to;
- a setting (`last=True`: the branch shown, a title, a pin, a pref) goes to the end, so the last
  thing the user chose is the last word: pin, unpin, pin again while the disk is full ends
  pinned, and the branch switched to after a send is the one the chat reopens on (writing a
  message also moves the chat's leaf to it).

When a write fails
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

    def submit(self, key: Hashable, write: Callable[[History], object], last: bool = False) -> bool:
        """Queue `write` in the place of a waiting write under `key` (at the end with `last`, or
        when none waits) and flush; True when nothing waits after."""
        i = next((i for i, (k, _) in enumerate(self._queue) if k == key), None)
        if i is not None and not last:
            self._queue[i] = (key, write)
        else:
            if i is not None:
                del self._queue[i]
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
