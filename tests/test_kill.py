"""Nothing lost: a real app process is killed with SIGKILL while an answer streams, and the
answer's part that was on screen is in the chat afterwards -- at most SAVE_TOKENS behind what was
shown, with its colours and sources, marked as cut -- in the history and in a window opened on it."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from PySide6.QtGui import QTextCursor  # noqa: E402

from app.history import History  # noqa: E402
from app.chat_control import CUT_NOTE  # noqa: E402
from app.generation_control import SAVE_TOKENS  # noqa: E402
from app.theme import Theme  # noqa: E402

HELPER = Path(__file__).resolve().parent / "app_process.py"


def kill_mid_answer(data: Path) -> int:
    """Run the app on `data`, send a message, SIGKILL it well into the answer; returns how many
    tokens of the answer it had shown when it printed last."""
    proc = subprocess.Popen([sys.executable, str(HELPER), str(data)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    watchdog = threading.Timer(180, proc.kill)  # a hung app never hangs the test run
    watchdog.start()
    shown, first_at = 0, None
    try:
        for line in proc.stdout:
            if line.startswith("done"):
                pytest.fail(f"the answer ended before the kill ({line.strip()})")
            if line.startswith("shown "):
                shown = int(line.split()[1])
                if shown and first_at is None:
                    first_at = time.monotonic()
                # well into the answer: past several saves, and over a second of streaming
                if shown >= 3 * SAVE_TOKENS and time.monotonic() - first_at > 1.5:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
        proc.wait(30)
    finally:
        watchdog.cancel()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, "the app was not killed mid-answer"
    return shown


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is a POSIX signal")
def test_kill_9_mid_answer_leaves_the_part_shown_in_the_chat(qtbot, make_window, tmp_path):
    data = tmp_path / "app-data"
    shown = kill_mid_answer(data)

    h = History(data)  # opening the file marks the answer that was streaming as cut
    (chat,) = h.chats()
    question, answer = h.messages(chat.id)
    assert question.content == "is the cat on the mat"
    assert answer.cut and answer.role == "assistant"
    n = len(answer.tokens)
    # the window had shown `shown` tokens when it printed last; at most SAVE_TOKENS - 1 of them unsaved
    assert shown - SAVE_TOKENS < n, (shown, n)
    assert answer.content == "".join(t.text for t in answer.tokens) and answer.content
    kinds = {t.kind for t in answer.tokens}
    assert kinds <= {"accepted", "corrected", "bonus", "standard"} and "accepted" in kinds
    assert answer.tokens[0].kind == "standard" and {t.source for t in answer.tokens} <= {"", "draft", "lookup"}
    stats = answer.figures.stats
    assert stats.new_tokens <= n and stats.mode == "speculative"  # the running figures saved
    h.close()

    # a window opened on the folder shows the part, coloured, marked as cut
    win = make_window(data_dir=data, load=False)
    win.chats.open_chat(chat.id)
    bubble = win.page.chat_view.messages[-1]
    assert bubble.error == CUT_NOTE and "cut off" in bubble.meta_label.text()
    assert [t.kind for t in bubble.tokens] == [t.kind for t in answer.tokens]
    idx = next(i for i, t in enumerate(bubble.view.position_tokens) if t >= 0)
    cur = QTextCursor(bubble.view.document())
    cur.setPosition(idx + 1)
    kind = bubble.tokens[bubble.view.position_tokens[idx]].kind
    assert cur.charFormat().background().color().rgb() == Theme(False).kind_bg(kind).rgb()
    assert win.chats.messages[-1].cut and win.chats.conversation.version(win.chats.messages[-1]) == (1, 1)
    assert bubble.view.document().lastBlock().text() == "⚠ " + CUT_NOTE  # a line of its own, under the part
    # the side panel shows the figures saved with the part, as a cut answer's, not as one still being written
    summary = win.side_panel.summary.text()
    assert summary.endswith("cut off: the app ended while it was written") and "generating" not in summary
    assert len(win.side_panel.chart.points) >= 2 and win.side_panel.chart.points == [
        tuple(p) for p in answer.figures.series]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="SIGKILL is a POSIX signal")
def test_an_answer_cut_off_by_kill_9_continues_in_the_same_message(qtbot, make_window, tmp_path):
    """Issue 30: after the restart, Continue writes on in the part that reached the disk."""
    data = tmp_path / "app-data"
    kill_mid_answer(data)
    win = make_window(data_dir=data, max_new=8)
    (chat,) = win.store.chats()
    win.chats.open_chat(chat.id)
    question, answer = win.chats.messages
    old = [(t.token_id, t.kind, t.step) for t in answer.tokens]
    bubble = win.page.chat_view.messages[-1]
    assert answer.cut and bubble.error == CUT_NOTE and bubble.continue_button.isVisibleTo(win)
    requests = []
    original = win.worker.request_generate
    win.worker.request_generate = lambda r: (requests.append(r), original(r))
    with qtbot.waitSignal(win.message_done, timeout=60_000) as done:
        bubble.continue_button.click()
    assert done.args == ["max_new_tokens"] and list(requests[-1].answer_ids) == [t[0] for t in old]
    assert win.chats.messages == [question, answer] and not answer.cut and bubble.error is None
    assert [(t.token_id, t.kind, t.step) for t in answer.tokens][: len(old)] == old
    assert len(answer.tokens) == len(old) + 8 and answer.figures.stats.new_tokens == len(old) + 8
    assert "cut off" not in bubble.meta_label.text() and bubble.meta_label.text().endswith("token limit")
    h = History(data)
    (stored_q, stored_a) = h.messages(chat.id)
    assert stored_a.state == "" and [t.token_id for t in stored_a.tokens] == [t.token_id for t in answer.tokens]
    h.close()
