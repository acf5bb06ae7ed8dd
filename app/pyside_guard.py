"""A guard against PySide6 6.12.0's reference counting on Python 3.11 and older.

PySide6 6.12.0 returns None from a C++ method that returns nothing (QTextCursor.setPosition,
mergeCharFormat, QColor.setAlpha, setHtml...) without taking the reference to None it hands back:
every such call takes one reference of None away. From Python 3.12 on, None is immortal and this
costs nothing; on 3.11 None starts with a few thousand references, the chat view makes thousands
of such calls for each render of a streaming answer, and within a minute of a long answer the
process dies with "Fatal Python error: none_dealloc: deallocating None" -- the answer on screen
lost with it (seen with the embedded pair; 6.11.3 does not do it).

pyproject.toml keeps 6.12.0 off Python < 3.12; this guard covers an environment that has it
anyway (installed before, or by hand): when a test call shows the leak, None is given a large
stock of references at once, topped up from a timer in the GUI thread, so it never reaches zero.
The count is a number in None's header, so the stock costs no memory. Installed once per process,
by the main window; nothing happens where the leak is not there.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QCoreApplication, QObject, QTimer

STOCK = 1 << 30  # references given to None at a time: hours of the fastest streaming
FLOOR = 1 << 28  # topped up below this
CHECK_MS = 1000

_guard: QObject | None = None


def void_calls_drop_none() -> bool:
    """True when a call of a C++ method that returns nothing takes a reference of None away."""
    if sys.version_info >= (3, 12):  # None is immortal (PEP 683): there is nothing to take
        return False
    from PySide6.QtGui import QColor

    colour = QColor()
    before = sys.getrefcount(None)
    for _ in range(64):
        colour.setAlpha(255)
    return sys.getrefcount(None) <= before - 32


def _top_up() -> None:
    # None's reference count, in its object header (CPython: the first field of every object),
    # written under the GIL as any Py_INCREF is
    count = ctypes.c_ssize_t.from_address(id(None))
    if count.value < FLOOR:
        count.value += STOCK


def install() -> bool:
    """Guard this process if it needs it (a QCoreApplication must exist for the timer); True
    when the leak was found and the guard runs."""
    global _guard
    if _guard is not None:
        return True
    if not void_calls_drop_none():
        return False
    _top_up()
    _guard = QObject(QCoreApplication.instance())  # lives as long as the application
    timer = QTimer(_guard)
    timer.setInterval(CHECK_MS)
    timer.timeout.connect(_top_up)
    timer.start()
    return True
