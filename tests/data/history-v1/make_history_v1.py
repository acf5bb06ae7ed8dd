"""Writes tests/data/history-v1/chats.sqlite3 with the app as it was at commit 9d4143d (the release
before chat branches, search and attachments): the database a user upgrades from. Run from that
commit's tree: QT_QPA_PLATFORM=offscreen python make_history_v1.py OUT_DIR"""

import sys
import time
from pathlib import Path

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow
from app.theme import Theme
from app.worker import LoadRequest
from app_fixtures import tiny_factory

app = QApplication(["v1"])
out = Path(sys.argv[1])
win = MainWindow(out, Theme(False), LoadRequest(factory=tiny_factory(delay=0.01)))
state = {"ready": False, "done": 0}
win.models_ready.connect(lambda: state.update(ready=True))
win.message_done.connect(lambda _r: state.update(done=state["done"] + 1))


def wait(pred, t=120):
    end = time.monotonic() + t
    while time.monotonic() < end and not pred():
        app.processEvents()
        time.sleep(0.005)
    assert pred()


win.start_loading()
wait(lambda: state["ready"])
win.side_panel.max_new.setValue(24)
# a fixed draft length: every kind (accepted, corrected, bonus, standard) in the saved answers
win.side_panel.adaptive.setChecked(False)
win.side_panel.k_spin.setValue(3)


def send(text, mode, proposer=None):
    win.side_panel.set_mode(mode)
    if proposer:
        win.side_panel.proposer.setCurrentIndex(win.side_panel.proposer.findData(proposer))
    want = state["done"] + 1
    assert win.send(text)
    wait(lambda: state["done"] >= want)


win.system_prompt.setPlainText("you are a cat")
send("is the cat on the mat", "speculative", "lookup+draft")
send("the cat the cat the cat", "speculative", "prompt-lookup")
send("and the hat", "standard")
# a stopped answer: stop after the first batch
win.side_panel.max_new.setValue(200)
win.side_panel.set_mode("speculative")
win.side_panel.proposer.setCurrentIndex(win.side_panel.proposer.findData("draft"))
want = state["done"] + 1
win.send("tell me about the mat")
wait(lambda: win.active is not None and len(win.active.events) > 3)
win.stop()
wait(lambda: state["done"] >= want)
win.new_chat()
win.side_panel.max_new.setValue(16)
send("a second chat: the hat on the cat", "speculative", "lookup+draft")
win.regenerate()
wait(lambda: state["done"] >= want + 2)
assert win.shutdown()
print("wrote", out / "chats.sqlite3")
