"""The chat app as a process of its own, for the kill -9 test (tests/test_kill.py): built as
`specdec-chat` builds it (app/main.py: QApplication, the theme, the GUI-thread collector, the
window, the event loop), on tiny models that answer slowly. It sends one message once the models
are loaded and prints, as the window shows them, `shown N` (tokens in the answer on screen); the
test kills it with SIGKILL mid-answer and reads what reached the disk.

    python tests/app_process.py DATA_DIR [PROMPT]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def print_shown(win, interval_ms: int = 10):
    """Print `shown N` whenever the tokens of the answer on screen change (a killing parent reads
    them); returns the timer (keep it)."""
    from PySide6.QtCore import QTimer

    last = {"n": -1}

    def report() -> None:
        n = len(win.generation.active.events) if win.generation.active is not None else last["n"]
        if n != last["n"]:
            last["n"] = n
            print(f"shown {n}", flush=True)

    timer = QTimer()
    timer.timeout.connect(report)
    timer.start(interval_ms)
    return timer


def main() -> int:
    from PySide6.QtWidgets import QApplication

    from app.gui_gc import GuiThreadCollector
    from app.main_window import MainWindow
    from app.theme import apply_theme
    from app.worker import LoadRequest
    from app_fixtures import tiny_factory

    data_dir = sys.argv[1]
    prompt = sys.argv[2] if len(sys.argv) > 2 else "is the cat on the mat"
    app = QApplication(["specdec-chat"])
    collector = GuiThreadCollector(app)
    theme = apply_theme(app, "light")
    win = MainWindow(data_dir, theme, LoadRequest(factory=tiny_factory(delay=0.02)))
    win.side_panel.max_new.setValue(400)
    win.side_panel.adaptive.setChecked(False)  # a fixed k: every kind shows up in the tiny answer
    win.side_panel.k_spin.setValue(3)
    win.show()
    timer = print_shown(win)  # noqa: F841 -- runs while the app does
    win.models_ready.connect(lambda: win.generation.send(prompt))
    win.message_done.connect(lambda reason: print(f"done {reason}", flush=True))
    win.models.start_loading()
    rc = app.exec()
    win.shutdown()
    collector.stop()
    return rc


if __name__ == "__main__":
    sys.exit(main())
