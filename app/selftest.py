"""`specdec-chat --self-test`: open the main window offscreen, load the pair, generate a few
tokens in standard and in speculative mode, check the token kinds; one line per check; 0 or 1.

Speculative mode's first token comes from the target's prefill alone, so it is "standard" there
too; a bonus token needs all of a step's proposals accepted, so never more bonus than accepted."""

from __future__ import annotations

import sys
import tempfile
import time

SPECULATIVE_KINDS = {"accepted", "corrected", "bonus", "standard"}


def _wait(app, predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        app.processEvents()
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def run_self_test(load_request, data_dir: str | None = None, timeout: float = 900.0, out=None) -> int:
    """Open the window on `load_request` (the models the command line named), chats under
    `data_dir` (None: a fresh temporary folder)."""
    from PySide6.QtWidgets import QApplication

    from .gui_gc import GuiThreadCollector
    from .main_window import MainWindow
    from .theme import apply_theme

    out = out or sys.stdout
    failures = 0

    def check(name: str, ok: bool, detail: str = "") -> None:
        nonlocal failures
        failures += 0 if ok else 1
        print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""), file=out, flush=True)

    app = QApplication.instance() or QApplication(["specdec-chat"])
    collector = GuiThreadCollector(app)  # as in the app: cycles collected in the GUI thread only
    theme = apply_theme(app, "light")
    data_dir = data_dir or tempfile.mkdtemp(prefix="specdec-selftest-")
    win = MainWindow(data_dir, theme, load_request)
    win.show()
    check("window opens", win.isVisible())
    state = {"loaded": False, "error": None}
    win.models_ready.connect(lambda: state.update(loaded=True))
    win.load_error.connect(lambda m: state.update(error=m))
    t0 = time.monotonic()
    win.models.start_loading()
    _wait(app, lambda: state["loaded"] or state["error"], timeout)
    check("models load", state["loaded"], state["error"] or f"{time.monotonic() - t0:.1f} s")
    if state["loaded"]:  # which kernels the bundle runs on (the CPU kernel's build this CPU chose)
        for role in ("target", "draft"):
            kernels = (win.models.model_info.get(role) or {}).get("kernels")
            if kernels:
                print(f"     {role} kernels: {kernels}", file=out, flush=True)
        win.side_panel.max_new.setValue(12)
        for mode, expected in (("standard", {"standard"}), ("speculative", SPECULATIVE_KINDS)):
            win.side_panel.set_mode(mode)
            if mode == "speculative" and not win.side_panel.has_draft:
                win.side_panel.proposer.setCurrentIndex(win.side_panel.proposer.findData("prompt-lookup"))
            done = {"reason": None}
            conn = win.message_done.connect(lambda r: done.update(reason=r))
            sent = win.generation.send("Say hello in five words.")
            _wait(app, lambda: done["reason"] is not None, timeout)
            win.message_done.disconnect(conn)
            kinds = [t.kind for t in win.chats.messages[-1].tokens] if sent and done["reason"] else []
            check(f"{mode}: tokens generated", bool(kinds), f"{len(kinds)} tokens, stop {done['reason']}")
            ok = bool(kinds) and set(kinds) <= expected and kinds.count("bonus") <= kinds.count("accepted")
            check(f"{mode}: token kinds", ok, ", ".join(f"{k} {kinds.count(k)}" for k in sorted(set(kinds))))
    ended = win.shutdown()
    win.close()
    collector.stop()
    check("worker stops", ended)
    print(f"self-test: {'PASSED' if failures == 0 else f'{failures} check(s) FAILED'}", file=out, flush=True)
    return 0 if failures == 0 else 1
