#!/usr/bin/env python
"""The pictures of the chat's features (issue 23), taken in a real window on a 1366x768 screen:

    xvfb-run -a -s "-screen 0 1366x768x24" python scripts/screenshot_features.py OUT_DIR \
        --target default --draft default

writes, into OUT_DIR:
  chat-branches.png    a question answered in standard mode, then regenerated speculatively
                       (‹ 2/2 › on the answer), and the question edited into a second branch
  chat-search.png      search results for a word, and the chat opened at the message found
  chat-attachment.png  an answer about an attached file (lookup copies from it: dotted underlines;
                       the side panel's steps per source)
  chat-dark.png        the same chat in the dark theme
  chat-killed.png      an answer whose app was killed with SIGKILL 10 s into it (and 80 tokens at
                       least), reopened: the part that streamed is there, coloured, marked as cut

Without --target it runs on the tiny test models (seconds; for trying the script). Each picture
is the window as the window manager shows it, at the size the app picks for the screen.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

CODE = '''def parse_price(text):
    text = text.strip().replace("$", "")
    if "," in text:
        text = text.replace(",", "")
    value = float(text)
    if value < 0:
        raise ValueError("negative price")
    return round(value, 2)


def total(prices):
    result = 0
    for p in prices:
        result = result + parse_price(p)
    return result
'''


def request(args):
    from app.worker import LoadRequest

    if args.target is None:
        from app_fixtures import tiny_factory

        return LoadRequest(factory=tiny_factory(eos=(2,)))
    draft = None if (args.draft or "").lower() in ("", "none") else args.draft
    return LoadRequest(args.target, draft, args.device, args.dtype)


class Driver:
    """A window and the little waits a script needs (the event loop runs while it waits)."""

    def __init__(self, args, data_dir: Path, theme: str = "light"):
        from PySide6.QtWidgets import QApplication

        from app.main_window import MainWindow
        from app.theme import app_icon, apply_theme

        self.app = QApplication.instance() or QApplication(["specdec-chat"])
        self.app.setWindowIcon(app_icon())
        self.args = args
        self.theme = apply_theme(self.app, theme)
        self.win = MainWindow(data_dir, self.theme, request(args))
        self.win.show()
        self.state = {"ready": False, "error": None, "done": 0}
        self.win.models_ready.connect(lambda: self.state.update(ready=True))
        self.win.load_error.connect(lambda m: self.state.update(error=m))
        self.win.message_done.connect(lambda _r: self.state.update(done=self.state["done"] + 1))

    def wait(self, pred, timeout: float | None = None) -> bool:
        end = time.monotonic() + (timeout or self.args.timeout)
        while time.monotonic() < end and not pred():
            self.app.processEvents()
            time.sleep(0.01)
        return pred()

    def settle(self, seconds: float = 0.6) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.app.processEvents()
            time.sleep(0.02)

    def load(self) -> None:
        self.win.models.start_loading()
        if not self.wait(lambda: self.state["ready"] or self.state["error"]) or self.state["error"]:
            raise SystemExit(f"load failed: {self.state['error']}")
        self.win.side_panel.max_new.setValue(self.args.max_new_tokens)

    def answer(self, action) -> None:
        want = self.state["done"] + 1
        action()
        if not self.wait(lambda: self.state["done"] >= want):
            raise SystemExit("generation timed out")

    def send(self, text: str, mode: str = "speculative") -> None:
        self.win.side_panel.set_mode(mode)
        self.answer(lambda: self.win.generation.send(text))

    def shot(self, path: Path) -> None:
        self.settle()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.win.grab().save(str(path))
        print(path, flush=True)

    def close(self) -> None:
        self.win.shutdown()
        self.win.close()


def branches_search_attachment_dark(args, out: Path) -> None:
    d = Driver(args, Path(tempfile.mkdtemp(prefix="specdec-shots-")))
    d.load()
    win = d.win
    # a short chat first, so the search has more than one chat to look through
    d.send("Name three uses of a hash map, one line each.")
    win.chats.new_chat()
    question = "Write a Python function that reverses the words of a sentence."
    d.send(question, "standard")
    d.win.side_panel.set_mode("speculative")
    d.answer(win.generation.regenerate)  # version 2 of the answer: speculative, beside the standard one
    first_q = win.chats.messages[0]
    win.chats.edit_message(first_q)
    win.page.composer.setPlainText("Write a Python function that reverses the words of a sentence, keeping punctuation "
                              "attached to its word.")
    d.answer(win.generation.send)  # a second branch of the question
    win.chats.switch_version(win.chats.messages[0], -1)  # back on the first branch: ‹ 1/2 › on the question, 2/2 on the answer
    win.page.chat_view.verticalScrollBar().setValue(0)
    d.shot(out / "chat-branches.png")

    win.chat_list.search.setText("reverses words")
    d.wait(lambda: not win.chat_list.results.isHidden(), 5)
    d.settle(0.4)
    results = win.chat_list.results
    from app.chat_list import HIT

    hit = next((results.item(i) for i in range(results.count())
                if results.item(i).data(HIT)[1] is not None), None)  # a message, not a title
    if hit is not None:
        results.setCurrentItem(hit)
        win.chat_list._hit_clicked(hit)
    d.shot(out / "chat-search.png")
    win.chat_list.clear_search()

    win.chats.new_chat()
    folder = Path(tempfile.mkdtemp(prefix="specdec-attach-"))
    (folder / "prices.py").write_text(CODE)
    win.chats.attach_files([str(folder / "prices.py")])
    win.page.composer.setPlainText("Add type hints and a one-line docstring to both functions. Reply with the whole file.")
    d.settle(0.5)
    d.answer(win.generation.send)
    win.page.chat_view.verticalScrollBar().setValue(0)  # the question with its file's chip, then the answer
    d.shot(out / "chat-attachment.png")
    win.prefs.set_theme_mode("dark")
    d.shot(out / "chat-dark.png")
    win.prefs.set_theme_mode("light")
    d.close()


def killed(args, out: Path) -> None:
    """A child process runs the app and streams an answer; 10 s into it, SIGKILL; then the app
    opened again on the same folder."""
    data = Path(tempfile.mkdtemp(prefix="specdec-killed-"))
    budget = "600" if args.target is not None else "400"  # the tiny target holds 512 tokens
    cmd = [sys.executable, __file__, str(out), "--child", str(data), "--max-new-tokens", budget]
    if args.target is not None:
        cmd += ["--target", args.target, "--draft", args.draft or "none"]
    env = {**os.environ}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    first = None
    for line in proc.stdout:
        if line.startswith("shown ") and int(line.split()[1]) > 0 and first is None:
            first = time.monotonic()
        shown = int(line.split()[1]) if line.startswith("shown ") else 0
        # the kill comes mid-answer on any machine: some seconds in, and a part worth looking at
        if first is not None and time.monotonic() - first >= args.kill_after and shown >= args.kill_tokens:
            print(f"killing the app {time.monotonic() - first:.0f} s into its answer ({line.strip()} tokens)",
                  flush=True)
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(60)
    d = Driver(args, data)
    d.load()
    (chat,) = d.win.store.history.chats()
    d.win.chats.open_chat(chat.id)
    d.shot(out / "chat-killed.png")
    d.close()


def child(args) -> None:
    from app_process import print_shown  # the kill -9 test's app prints the same way

    d = Driver(args, Path(args.child))
    d.load()
    timer = print_shown(d.win, 50)  # noqa: F841 -- runs while the answer streams
    d.win.side_panel.set_mode("speculative")
    d.win.generation.send("Explain how a hash map works, then write a small one in Python with put, get and resize, "
               "and explain its cost.")
    d.wait(lambda: d.state["done"] > 0, 900)  # killed before this, unless the answer was quicker
    d.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder for the PNGs")
    ap.add_argument("--target", default=None)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--kill-after", type=float, default=10.0, help="seconds into the answer the app is killed")
    ap.add_argument("--kill-tokens", type=int, default=80, help="...and not before it has shown this many tokens")
    ap.add_argument("--only", choices=("features", "killed"), default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if args.child:
        child(args)
        return 0
    out = Path(args.out)
    if args.only in (None, "features"):
        branches_search_attachment_dark(args, out)
    if args.only in (None, "killed"):
        killed(args, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
