#!/usr/bin/env python
"""Open the chat window, run a short chat, save a PNG of the window.

    python scripts/screenshot_chat.py out.png                      # tiny test models (seconds)
    python scripts/screenshot_chat.py out.png --target default --draft default
    python scripts/screenshot_chat.py out.png --target http://127.0.0.1:8080   # a llama-server, vLLM, specdec serve
    xvfb-run -a python scripts/screenshot_chat.py out.png          # under a virtual X server
    python scripts/screenshot_chat.py race.png --race --target default --draft default --prompt "..."
    python scripts/screenshot_chat.py doc.png --target default --draft default --attach notes.md --prompt "..."

Works offscreen (QT_QPA_PLATFORM=offscreen is set when there is no display). The chat runs one
message in standard mode and one in speculative mode so both colourings show. With --attach the
files go with the last message, whose question is begun in the input box first so the target
reads the message ahead while it is "written" (the side panel says how much).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output", help="PNG path")
    ap.add_argument("--target", default=None, help="target SPEC (default: tiny test models)")
    ap.add_argument("--draft", default=None, help="draft SPEC ('none' for no draft)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--prompt", action="append", default=None,
                    help="a user message (repeat for several; default: two short ones)")
    ap.add_argument("--system", default="", help="system prompt")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--theme", default="light", choices=("light", "dark", "auto"))
    ap.add_argument("--size", default="1360x860", help="window size WxH")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--attach", action="append", default=[], metavar="FILE",
                    help="a file attached to the last message (repeat for several)")
    ap.add_argument("--race", action="store_true",
                    help="the Race tab instead: the last --prompt raced, standard against speculative")
    args = ap.parse_args()

    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from app.theme import app_icon, apply_theme
    from app.worker import LoadRequest

    app = QApplication.instance() or QApplication(["specdec-chat"])
    app.setWindowIcon(app_icon())
    theme = apply_theme(app, args.theme)
    if args.target is None:
        from app_fixtures import tiny_factory

        request = LoadRequest(factory=tiny_factory(eos=(2,)))
        prompts = args.prompt or ["is the cat on the mat", "and the hat"]
        max_new = args.max_new_tokens or 60
    else:
        draft = None if (args.draft or "").lower() in ("", "none") else args.draft
        request = LoadRequest(args.target, draft, args.device, args.dtype)
        prompts = args.prompt or [
            "In two sentences: what is speculative decoding?",
            "Write a Python function that reverses a string, with a one-line docstring.",
        ]
        # the app's default: no limit (0, "off"), the answer ends where the model ends it
        max_new = args.max_new_tokens if args.max_new_tokens is not None else 0

    win = MainWindow(tempfile.mkdtemp(prefix="specdec-shot-"), theme, request)
    w, h = (int(x) for x in args.size.split("x"))
    win.resize(w, h)
    win.show()
    state = {"ready": False, "error": None, "done": 0}
    win.models_ready.connect(lambda: state.update(ready=True))
    win.load_error.connect(lambda m: state.update(error=m))
    win.message_done.connect(lambda _r: state.update(done=state["done"] + 1))

    def wait(pred) -> bool:
        end = time.monotonic() + args.timeout
        while time.monotonic() < end and not pred():
            app.processEvents()
            time.sleep(0.01)
        return pred()

    win.models.start_loading()
    if not wait(lambda: state["ready"] or state["error"]) or state["error"]:
        print(f"load failed: {state['error']}", file=sys.stderr)
        win.shutdown()
        return 1
    if args.race:
        race_prompt(win, prompts[-1], wait)
    else:
        chat(win, args, prompts, max_new, wait, state)
    end = time.monotonic() + 0.5  # let the last renders and layouts settle
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    ok = win.grab().save(str(out))
    win.shutdown()
    win.close()
    print(out if ok else "could not save the PNG")
    return 0 if ok else 1


def race_prompt(win, prompt: str, wait) -> None:
    """The Race tab: `prompt` in both lanes, interleaved step by step on the one engine."""
    race = win.race_view
    finished = {"done": False}
    race.race_done.connect(lambda _r: finished.update(done=True))
    win.tabs.setCurrentWidget(race)
    race.prompt.setPlainText(prompt)
    if not wait(lambda: race.ready) or not race.start():
        print("the race did not start", file=sys.stderr)
    elif not wait(lambda: finished["done"]):
        print("race timed out", file=sys.stderr)


def chat(win, args, prompts, max_new, wait, state) -> None:
    win.page.system_prompt.setPlainText(args.system)
    win.side_panel.max_new.setValue(max_new)
    server = win.models.model_info.get("server")
    fixed = server is not None and not server.can_toggle  # a server that decides its own mode: leave the toggle be
    for i, prompt in enumerate(prompts):
        # first message standard, the rest speculative: both colourings in one picture
        if not fixed:
            win.side_panel.set_mode("standard" if (i == 0 and len(prompts) > 1) else "speculative")
        want = state["done"] + 1
        if args.attach and i == len(prompts) - 1:
            write_under_attachments(win, args.attach, prompt, wait)
        win.generation.send(prompt)
        if not wait(lambda: state["done"] >= want):
            print("generation timed out", file=sys.stderr)
            break
    if not fixed:
        win.side_panel.set_mode("speculative")


def write_under_attachments(win, files: list[str], prompt: str, wait) -> None:
    """Attach `files` and begin the question in the input box: the worker's target reads the
    message as it stands (Worker.prompt_read once it is read, or a minute at most)."""
    read = {"tokens": 0}
    win.worker.prompt_read.connect(lambda tokens, _s: read.update(tokens=tokens))
    win.chats.attach_files(files)
    win.page.composer.setPlainText(prompt.split()[0] if prompt.split() else "")
    end = time.monotonic() + 60
    wait(lambda: read["tokens"] > 0 or time.monotonic() > end)


if __name__ == "__main__":
    sys.exit(main())
