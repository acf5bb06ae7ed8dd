"""The chat as users of LM Studio or Jan expect it (issue 23), in a real window on tiny models:
edit and branch, versions of an answer, search, rename and pin, attachments, the context meter,
the theme, saving while an answer streams and when the disk says no, code fences while
streaming, which source proposed each step, the window's size, the keyboard. Offscreen."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import sqlite3  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent, QTextCharFormat, QTextCursor  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QApplication, QLineEdit, QMessageBox  # noqa: E402

from app import figures  # noqa: E402
from app.attachments import MAX_BYTES, PASTE_LINES, attachment_block  # noqa: E402
from app.chat_view import MessageWidget, ViewToken, token_tooltip  # noqa: E402
from app.code_blocks import split  # noqa: E402
from app.history import History  # noqa: E402
from app.theme import Theme  # noqa: E402
from app.worker import LoadRequest  # noqa: E402
from app_fixtures import tiny_factory  # noqa: E402

TIMEOUT = 60_000
SPEC_KINDS = {"accepted", "corrected", "bonus", "standard"}


def send_and_wait(qtbot, win, text=None):
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as blocker:
        assert win.generation.send(text)
    return blocker.args[0]


def wait_count(qtbot, win):
    """The context meter's answer to the chat as it is now (counted in its own thread)."""
    before = win.context.job
    win.context.schedule()
    qtbot.waitUntil(lambda: win.context.job > before and not win.context.timer.isActive()
                    and win.page.meter.count is not None and win.page.meter.count.job_id == win.context.job, timeout=TIMEOUT)
    return win.page.meter.count


def show(qtbot, win):
    """Shown and active: keyboard shortcuts and focus need that."""
    win.show()
    qtbot.waitExposed(win)
    win.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is win, timeout=5000)


def bubble_of(win, message):
    return next(w for w in win.page.chat_view.messages if w.message is message)


# -- 1. edit and branch, versions ---------------------------------------------------------------
def test_editing_a_sent_message_makes_a_branch_and_keeps_the_old_one(qtbot, make_window, tmp_path):
    win = make_window(max_new=6)
    send_and_wait(qtbot, win, "the cat")
    send_and_wait(qtbot, win, "the hat")
    first_q, first_a, second_q, second_a = win.chats.messages
    # Up in the empty input box edits the last message sent
    win.page.composer.setFocus()
    QTest.keyClick(win.page.composer, Qt.Key.Key_Up)
    assert win.chats.editing is second_q and win.page.composer.toPlainText() == "the hat" and not win.page.edit_banner.isHidden()
    win.chats.cancel_edit()
    # Edit on the first question: the rest of the chat becomes the old branch
    bubble_of(win, first_q).edit_button.click()
    assert win.chats.editing is first_q
    win.page.composer.setPlainText("the mat")
    send_and_wait(qtbot, win)
    q, a = win.chats.messages
    assert q.content == "the mat" and q.parent is None and a.parent is q
    assert win.chats.conversation.version(q) == (2, 2)
    w = bubble_of(win, q)
    assert w.version_label.text() == "2/2" and not w.prev_button.isHidden() and not w.next_button.isEnabled()
    assert len(win.page.chat_view.messages) == 2
    # ‹ back to the first version: the old branch, whole, with its answers
    w.prev_button.click()
    assert win.chats.messages == [first_q, first_a, second_q, second_a]
    assert [b.message for b in win.page.chat_view.messages] == win.chats.messages
    assert bubble_of(win, first_q).version_label.text() == "1/2"
    # the request after an edit carries only the new branch
    requests = []
    original = win.worker.request_generate
    win.worker.request_generate = lambda r: (requests.append(r), original(r))
    win.chats.switch_version(first_q, 1)
    send_and_wait(qtbot, win, "and the hat")
    assert [m["content"] for m in requests[-1].messages] == ["the mat", a.content, "and the hat"]
    # saved: every version, and the branch shown, after a restart
    assert win.shutdown()
    again = make_window(data_dir=tmp_path / "data", load=False)
    again.chats.open_chat(win.chats.chat_id)
    assert [m.content for m in again.chats.messages] == ["the mat", a.content, "and the hat", win.chats.messages[-1].content]
    assert len(again.chats.conversation.messages) == 8  # both branches
    assert bubble_of(again, again.chats.messages[0]).version_label.text() == "2/2"


def test_regenerate_keeps_each_version_with_its_own_colours_and_figures(qtbot, make_window):
    """A standard and a speculative answer to one question, side by side in place."""
    # a little slow: each answer's curve of the decode rate has a few points
    win = make_window(request=LoadRequest(factory=tiny_factory(delay=0.01)), max_new=10)
    win.side_panel.adaptive.setChecked(False)  # a fixed k: the tiny draft's proposals are kept, some
    win.side_panel.k_spin.setValue(3)
    win.side_panel.set_mode("standard")
    send_and_wait(qtbot, win, "is the cat on the mat")
    standard = win.chats.messages[-1]
    curves = [[(round(t, 3), round(v, 2)) for t, v in win.side_panel.chart.points]]
    win.side_panel.set_mode("speculative")
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        win.generation.regenerate()
    spec = win.chats.messages[-1]
    curves.append([(round(t, 3), round(v, 2)) for t, v in win.side_panel.chart.points])
    assert all(len(c) >= 2 for c in curves) and curves[0] != curves[1]
    assert spec is not standard and spec.parent is standard.parent
    assert {t.kind for t in standard.tokens} == {"standard"} and "accepted" in {t.kind for t in spec.tokens}
    w = win.page.chat_view.messages[-1]
    assert w.message is spec and w.version_label.text() == "2/2" and "speculative" in w.meta_label.text()
    # back to version 1: its own colours in the bubble, its own figures in the side panel
    w.prev_button.click()
    w = win.page.chat_view.messages[-1]
    assert w.message is standard and w.version_label.text() == "1/2"
    assert [t.kind for t in w.tokens] == [t.kind for t in standard.tokens]
    assert w.meta_label.text().startswith("standard")
    assert win.side_panel.m_alpha.value.text() == "—"  # a standard answer has no α
    assert win.side_panel.m_speed.value.text() == figures.rate(standard.figures.stats.decode_tokens_per_second)
    assert win.side_panel.chart.points == curves[0]  # its own curve, as it was drawn live
    win.chats.switch_last_answer(1)  # Alt+Right
    assert win.chats.messages[-1] is spec and win.side_panel.m_alpha.value.text() == figures.alpha(spec.figures.stats)
    assert win.side_panel.chart.points == curves[1]
    h = History(win.store.history.data_dir)
    kept = [m for m in h.all_messages(win.chats.chat_id) if m.role == "assistant"]
    assert [m.figures.stats.mode for m in kept] == ["standard", "speculative"]
    assert [[t.kind for t in m.tokens] for m in kept] == [[t.kind for t in standard.tokens], [t.kind for t in spec.tokens]]
    h.close()


def test_a_chat_database_of_the_previous_release_opens_in_the_window_with_every_message_and_colour(
        qtbot, make_window, tmp_path):
    """tests/data/history-v1, written by the previous release's app, opened by this one: every chat
    in the list, every message in its bubble, every token's colour its kind's, the stopped answer
    marked -- and nothing to switch between (one branch, one version each)."""
    import json
    import shutil
    from pathlib import Path

    v1 = Path(__file__).resolve().parent / "data" / "history-v1" / "chats.sqlite3"
    folder = tmp_path / "old"
    folder.mkdir()
    shutil.copy(v1, folder / "chats.sqlite3")
    db = sqlite3.connect(folder / "chats.sqlite3")  # what the old file holds, read before the upgrade
    before = {cid: (title, db.execute("SELECT role, content, tokens, stats FROM messages WHERE chat_id = ? "
                                      "ORDER BY id", (cid,)).fetchall())
              for cid, title in db.execute("SELECT id, title FROM chats")}
    db.close()
    win = make_window(data_dir=folder, load=False)
    lst = win.chat_list.chats
    assert sorted(lst.item(i).text() for i in range(lst.count())) == sorted(t for t, _ in before.values())
    light = Theme(False)
    coloured_kinds, stopped = set(), 0
    for i in range(lst.count()):
        lst.itemClicked.emit(lst.item(i))
        title, rows = before[win.chats.chat_id]
        bubbles = win.page.chat_view.messages
        assert [(b.role, b.text) for b in bubbles] == [(role, content) for role, content, _, _ in rows], title
        for b, (role, content, tokens, stats) in zip(bubbles, rows):
            assert b.prev_button.isHidden() and b.version_label.isHidden()
            if role != "assistant":
                continue
            assert [t.kind for t in b.tokens] == [t[2] for t in json.loads(tokens)]
            doc, plain = b.view.document(), b.view.document().toPlainText()
            checked = 0
            for p, idx in enumerate(b.view.position_tokens):
                if idx < 0 or p >= len(plain) or plain[p] in "\u2029\n":
                    continue
                cur = QTextCursor(doc)
                cur.setPosition(p + 1)
                kind = b.tokens[idx].kind
                assert cur.charFormat().background().color().rgb() == light.kind_bg(kind).rgb(), (title, p, kind)
                coloured_kinds.add(kind)
                checked += 1
            assert checked >= len(content.strip()) // 2  # most of the text is coloured, not a few characters
            if json.loads(stats).get("stop_reason") == "cancelled":
                assert "stopped" in b.meta_label.text()
                stopped += 1
    assert coloured_kinds == {"accepted", "corrected", "bonus", "standard"} and stopped == 1


# -- 2. find and name ------------------------------------------------------------------------------
def test_search_finds_every_branch_and_jumps_to_the_message(qtbot, make_window):
    win = make_window(max_new=4)
    send_and_wait(qtbot, win, "the cat on the mat")
    cat_chat = win.chats.chat_id
    old_q = win.chats.messages[0]
    bubble_of(win, old_q).edit_button.click()  # the mat question becomes an old branch
    win.page.composer.setPlainText("the hat on the cat")
    send_and_wait(qtbot, win)
    win.chats.new_chat()
    send_and_wait(qtbot, win, "is it a dog")
    show(qtbot, win)
    QTest.keyClick(win, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert win.chat_list.search.hasFocus()
    with qtbot.waitSignal(win.chat_list.search_changed, timeout=TIMEOUT):
        QTest.keyClicks(win.chat_list.search, "mat")
    results = win.chat_list.results
    assert not results.isHidden() and win.chat_list.chats.isHidden()
    hits = [results.item(i).data(Qt.ItemDataRole.UserRole + 1) for i in range(results.count())]
    assert (cat_chat, None) in hits and (cat_chat, old_q.id) in hits  # the title, and the message on its branch
    label = results.itemWidget(results.item([h[1] for h in hits].index(old_q.id)))
    assert "<b>mat</b>" in label.text()
    # choosing the message opens its chat on its branch, at it
    results.itemClicked.emit(results.item([h[1] for h in hits].index(old_q.id)))
    assert win.chats.chat_id == cat_chat and win.chats.messages[0].id == old_q.id
    w = win.page.chat_view.messages[0]
    assert w.property("found") is True and w.view.textCursor().selectedText() == "mat"
    # nothing found says so
    win.chat_list.search.setText("zebra")
    with qtbot.waitSignal(win.chat_list.search_changed, timeout=TIMEOUT):
        pass
    assert not win.chat_list.no_results.isHidden() and "zebra" in win.chat_list.no_results.text()
    # Esc in the search box clears it (the window's Esc, stop, is not what is meant there)
    win.chat_list.search.setFocus()
    QTest.keyClick(win.chat_list.search, Qt.Key.Key_Escape)
    assert win.chat_list.search.text() == "" and not win.chat_list.chats.isHidden()


def test_a_search_result_with_a_long_identifier_wraps_inside_the_list(qtbot):
    """A snippet of code (one long word to a label) wraps at its underscores and dots instead of
    running past the list's edge, where it was clipped."""
    from app.chat_list import ChatList
    from app.history import HIGHLIGHT, SearchHit

    a, b = HIGHLIGHT
    pane = ChatList()
    qtbot.addWidget(pane)
    pane.resize(192, 600)
    pane.show()
    qtbot.waitExposed(pane)
    pane.show_results("reverses", [SearchHit(1, "parse_price_of_each_line_of_the_receipt", 5, "assistant",
                                             f"def reverse_words_with_punctuation(sentence): {a}Reverses{b} the words")])
    label = pane.results.itemWidget(pane.results.item(0))
    assert label.minimumSizeHint().width() <= label.width() < pane.width()
    assert "<b>Reverses</b>" in label.text()


def test_rename_and_pin_chats(qtbot, make_window):
    win = make_window(max_new=3)
    send_and_wait(qtbot, win, "the cat")
    first = win.chats.chat_id
    win.chats.new_chat()
    send_and_wait(qtbot, win, "the hat")
    lst = win.chat_list.chats
    assert [lst.item(i).data(Qt.ItemDataRole.UserRole) for i in range(lst.count())] == [win.chats.chat_id, first]
    # rename in place (F2 / right-click ▸ Rename): the item's text is edited
    win.chats.start_rename(first)
    item = win.chat_list.item_for(first)
    item.setText("Cats, renamed")
    assert win.store.history.title(first) == "Cats, renamed"
    assert [x.chat_id for x in win.store.history.search("renamed")] == [first]
    # pinned: first in the list, marked
    win.chats.pin_chat(first, True)
    assert lst.item(0).data(Qt.ItemDataRole.UserRole) == first and lst.item(0).text() == "★ Cats, renamed"
    # F2 on a pinned chat, then Esc: nothing renamed, still marked
    win.show()
    qtbot.waitExposed(win)
    win.chats.start_rename(first)
    editor = lst.indexWidget(lst.currentIndex())
    assert isinstance(editor, QLineEdit) and editor.text() == "Cats, renamed"
    QTest.keyClick(editor, Qt.Key.Key_Escape)  # the editor's, not the window's Esc (stop, cancel an edit)
    assert lst.state() != lst.State.EditingState
    assert lst.item(0).text() == "★ Cats, renamed" and win.store.history.title(first) == "Cats, renamed"
    win.chat_list.pin_requested.emit(first, False)
    assert lst.item(0).data(Qt.ItemDataRole.UserRole) == win.chats.chat_id
    # the title of a new chat is still its first message
    assert win.store.history.title(win.chats.chat_id) == "the hat"


# -- 3. attachments -----------------------------------------------------------------------------
def test_attached_files_go_into_the_prompt_and_stay_with_the_message(qtbot, make_window, tmp_path):
    win = make_window(max_new=4)
    code = tmp_path / "cat.py"
    code.write_text("the cat\nthe hat\n")
    binary = tmp_path / "photo.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    huge = tmp_path / "huge.txt"
    huge.write_text("a" * (MAX_BYTES + 1))
    # dropped on the input box: the text file is attached, the others are refused in one dialog
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in (code, binary, huge, tmp_path)])
    win.page.composer.insertFromMimeData(mime)
    assert [a.name for a in win.page.attachment_bar.items] == ["cat.py"]
    box = win.last_error_dialog
    assert box.isVisible() and "photo.png” is not a text file" in box.text()
    assert "huge.txt” is 512.0 KB" in box.text() and "is a folder" in box.text()
    box.close()
    assert "Text and code files up to 512.0 KB" in win.page.attach_button.toolTip()  # the limits, said up front
    # the chip says what it takes of the context, counted by the target's tokenizer
    wait_count(qtbot, win)
    engine = win.worker.engine
    block = attachment_block(win.page.attachment_bar.items[0])
    expected = engine.count_tokens([{"role": "user", "content": block}]) - engine.count_tokens(
        [{"role": "user", "content": ""}])
    assert f"{expected:,} tokens" in win.page.attachment_bar.chips[0].label.text()
    # a long paste becomes a chip, not a wall of text
    paste = QMimeData()
    paste.setText("the mat\n" * PASTE_LINES)  # forty short lines (the tiny target holds 512 tokens)
    win.page.composer.insertFromMimeData(paste)
    assert win.page.composer.toPlainText() == "" and [a.origin for a in win.page.attachment_bar.items] == ["file", "paste"]
    requests = []
    original = win.worker.request_generate
    win.worker.request_generate = lambda r: (requests.append(r), original(r))
    win.page.composer.setPlainText("what is in it")
    send_and_wait(qtbot, win)
    content = requests[-1].messages[-1]["content"]
    assert content.startswith("File `cat.py`:\n```python\nthe cat\nthe hat\n```") and content.endswith("what is in it")
    assert "Pasted text:\n```\nthe mat" in content
    assert not win.page.attachment_bar.items and win.page.attachment_bar.isHidden()
    q = win.chats.messages[0]
    assert [a.name for a in q.attachments] == ["cat.py", "Pasted text"]
    assert bubble_of(win, q).chips.count() == 3  # two chips and the stretch
    h = History(win.store.history.data_dir)
    assert [a.text for a in h.messages(win.chats.chat_id)[0].attachments] == ["the cat\nthe hat\n", paste.text()]
    h.close()
    # editing the message brings its attachments back
    win.chats.edit_message(q)
    assert [a.name for a in win.page.attachment_bar.items] == ["cat.py", "Pasted text"]


def drop_on(win, widget, paths) -> bool:
    """Files dragged from a file manager onto `widget`: enter, move and drop at its centre, sent to
    the window's QWindow, which routes them to the widget under that point (and up to the one that
    takes drops) as it does a real drag. True when the drag was accepted there."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = widget.mapTo(win, widget.rect().center())
    handle = win.windowHandle()
    args = (Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    enter = QDragEnterEvent(pos, *args)
    QApplication.sendEvent(handle, enter)
    move = QDragMoveEvent(pos, *args)
    move.setAccepted(enter.isAccepted())  # as the platform's drag does after an accepted enter
    QApplication.sendEvent(handle, move)
    if not move.isAccepted():
        return False
    QApplication.sendEvent(handle, QDropEvent(QPointF(pos), *args))
    return True


# QDragEnterEvent and QDragMoveEvent are built from a QPoint, which PySide marks deprecated (Qt's
# own constructors, which the platform's drag uses, are those)
@pytest.mark.filterwarnings("ignore:Function.*QDrag.*deprecated:DeprecationWarning")
def test_files_dropped_anywhere_on_the_window_are_attached(qtbot, make_window, tmp_path):
    """Not only on the input box: on the chat, the system prompt (whose text box would otherwise
    type the file's address into the prompt), the chat list, the side panel."""
    win = make_window(max_new=3)
    send_and_wait(qtbot, win, "the cat")
    show(qtbot, win)
    code = tmp_path / "hat.py"
    code.write_text("the hat\n")
    places = {"input box": win.page.composer, "chat": win.page.chat_view.messages[-1].view, "system prompt": win.page.system_prompt,
              "chat list": win.chat_list.chats, "side panel": win.side_panel, "context meter": win.page.meter}
    for where, widget in places.items():
        before = len(win.page.attachment_bar.items)
        assert drop_on(win, widget, [code]), where
        assert len(win.page.attachment_bar.items) == before + 1 and win.page.attachment_bar.items[-1].name == "hat.py", where
    assert win.page.system_prompt.toPlainText() == "" and win.page.composer.toPlainText() == ""


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs a file every read of which fails (Linux)")
def test_an_unreadable_file_gets_a_dialog_not_a_traceback(qtbot, make_window, tmp_path):
    """A file that exists but cannot be read (an I/O error on every read, whoever runs the test:
    permissions do not stop root), and one that went away between the pick and the read."""
    win = make_window(load=False)
    win.chats.attach_files(["/proc/self/mem", str(tmp_path / "gone.txt")])
    box = win.last_error_dialog
    assert box.isVisible() and box.windowTitle() == "Not attached"
    assert "“mem” cannot be read: Input/output error" in box.text() and "“gone.txt” is not there any more" in box.text()
    assert not win.page.attachment_bar.items


# -- 4. the context meter --------------------------------------------------------------------------
def test_the_context_meter_counts_with_the_targets_tokenizer_off_the_gui_thread(qtbot, make_window):
    win = make_window(max_new=200)
    engine = win.worker.engine
    threads = []
    inner = engine.fit

    def fit(*a, **kw):
        threads.append(threading.current_thread())
        return inner(*a, **kw)

    engine.fit = fit
    send_and_wait(qtbot, win, "the cat sat on the mat " * 5)
    win.page.system_prompt.setPlainText("you are a cat")
    win.page.composer.setPlainText("and the hat")
    c = wait_count(qtbot, win)
    want = inner([{"role": "system", "content": "you are a cat"},
                  {"role": "user", "content": win.chats.messages[0].content},
                  {"role": "assistant", "content": win.chats.messages[1].content},
                  {"role": "user", "content": "and the hat"}], 200)
    assert (c.prompt_tokens, c.context, c.fits) == (want.prompt_tokens, 512, True)
    assert win.page.meter.label.text().startswith(f"{want.prompt_tokens:,} + 200 for the answer of 512 tokens")
    assert all(t is not threading.main_thread() for t in threads)  # counted off the GUI thread
    assert win.context.counter.thread() is win.context.counter_thread and win.context.counter_thread is not win.thread
    # a message that would outgrow the context: the meter says which turns would be left out
    win.page.composer.setPlainText("the hat is on the cat " * 30)
    c = wait_count(qtbot, win)
    assert not c.fits and c.drop == 2
    assert "the oldest 2 message(s) would be left out" in win.page.meter.label.text()
    assert [not w.left_out_label.isHidden() for w in win.page.chat_view.messages] == [True, True]
    assert win.page.meter.bar.property("level") == "over"
    win.page.composer.clear()
    c = wait_count(qtbot, win)
    assert c.fits and [w.left_out_label.isHidden() for w in win.page.chat_view.messages] == [True, True]


def test_the_target_reads_a_long_attachment_while_the_question_is_written(qtbot, make_window, tmp_path):
    """What the input box would send goes to the worker with each count: its target reads the
    prompt ahead (Engine.read_prompt), so the send only reads what the question added -- and the
    side panel says how much was read before it, outside the answer's time."""
    win = make_window(max_new=4)
    engine = win.worker.engine
    doc = tmp_path / "notes.txt"
    doc.write_text("the cat sat on the mat and the dog was in the hat\n" * 16)
    win.chats.attach_files([str(doc)])
    win.page.composer.setPlainText("is the")
    qtbot.waitUntil(lambda: engine.decoder.target.length > 150, timeout=TIMEOUT)  # read off the GUI thread
    win.page.composer.setPlainText("is the cat on the mat")
    send_and_wait(qtbot, win)
    stats = win.chats.messages[-1].figures.stats
    assert stats.prompt_read_ahead_tokens > 150 and stats.reused_prompt_tokens >= stats.prompt_read_ahead_tokens
    summary = win.side_panel.summary.text()
    assert f"{stats.prompt_read_ahead_tokens} prompt tokens read while you wrote" in summary
    assert f"{stats.reused_prompt_tokens - stats.prompt_read_ahead_tokens} prompt tokens already cached" in summary


def test_no_input_is_read_ahead_while_an_answer_is_written(qtbot, make_window):
    """The chat an input was counted on grows by the answer being written: a read of it would
    take the answer back out of the cache. Reads are asked for again once the answer is done."""
    win = make_window(request=LoadRequest(factory=tiny_factory(delay=0.05)), max_new=40)
    asked = []
    win.worker.request_read_prompt = lambda messages, *_a: asked.append(messages)
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        assert win.generation.send("the cat sat")
        win.page.composer.setPlainText("the hat is on the cat " * 12)
        wait_count(qtbot, win)
        assert asked == []
    wait_count(qtbot, win)
    assert asked and asked[-1][-2]["role"] == "assistant"  # the answer is in the chat it reads


# -- 5. the theme ----------------------------------------------------------------------------------
def test_dark_theme_toggle_and_following_the_system(qtbot, make_window, monkeypatch):
    import app.theme as theme_module

    win = make_window(max_new=6)
    send_and_wait(qtbot, win, "is the cat on the mat")
    w = win.page.chat_view.messages[-1]

    def bg_of_first_token():
        idx = next(i for i, t in enumerate(w.view.position_tokens) if t >= 0)
        cur = QTextCursor(w.view.document())
        cur.setPosition(idx + 1)
        return cur.charFormat().background().color().rgba(), w.tokens[w.view.position_tokens[idx]].kind

    rgba, kind = bg_of_first_token()
    assert rgba == Theme(False).kind_bg(kind).rgba()
    win.prefs.dark_action.trigger()  # View ▸ Dark theme (Ctrl+Shift+D)
    assert win.theme.dark and win.prefs.switcher.mode == "dark"
    assert QApplication.instance().palette().window().color().name() == Theme(True).values["window"]
    rgba, kind = bg_of_first_token()
    assert rgba == Theme(True).kind_bg(kind).rgba()  # the bubbles took the dark colours
    assert win.store.history.pref("theme") == "dark"
    # following the system: its colour scheme decides, and a change of it is followed
    monkeypatch.setattr(theme_module, "system_prefers_dark", lambda app: False)
    win.prefs.follow_system_action.trigger()
    assert win.prefs.switcher.mode == "auto" and not win.theme.dark and not win.prefs.dark_action.isChecked()
    monkeypatch.setattr(theme_module, "system_prefers_dark", lambda app: True)
    QApplication.instance().styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert win.theme.dark and win.prefs.dark_action.isChecked() and win.prefs.follow_system_action.isChecked()
    assert win.store.history.pref("theme") == "auto"
    monkeypatch.setattr(theme_module, "system_prefers_dark", lambda app: False)
    win.prefs.set_theme_mode("dark")
    # the next start keeps the choice ("saved": what `specdec-chat` passes without --theme)
    again = make_window(data_dir=win.store.history.data_dir, load=False)
    assert not again.theme.dark  # a window told nothing leaves the app's theme alone
    from app.main_window import MainWindow

    later = MainWindow(win.store.history.data_dir, Theme(False), theme_mode="saved")
    qtbot.addWidget(later)
    assert later.theme.dark and later.prefs.switcher.mode == "dark" and later.prefs.dark_action.isChecked()
    assert later.shutdown()
    win.prefs.set_theme_mode("light")
    assert not win.theme.dark


# -- 6. nothing lost -----------------------------------------------------------------------------------
def test_a_streaming_answer_is_on_disk_at_most_32_tokens_behind(qtbot, make_window, tmp_path):
    win = make_window(request=LoadRequest(factory=tiny_factory(delay=0.004)), max_new=150)
    seen = []
    db = sqlite3.connect(tmp_path / "data" / "chats.sqlite3")

    def check(_rid, _evs, _stats):  # after the window took this batch in (the relay comes second)
        if win.generation.active is None:
            return
        row = db.execute("SELECT tokens, state FROM messages WHERE role = 'assistant' ORDER BY id DESC").fetchone()
        on_disk = len(__import__("json").loads(row[0])) if row and row[0] else 0
        seen.append((len(win.generation.active.events), on_disk, row[1] if row else None))

    win.sig.tokens.connect(check)
    send_and_wait(qtbot, win, "is the cat on the mat")
    assert len(seen) >= 5
    assert all(shown - on_disk < 32 for shown, on_disk, _ in seen)
    assert {state for shown, _, state in seen if shown >= 32} == {"streaming"}
    final = db.execute("SELECT state, tokens FROM messages WHERE role = 'assistant'").fetchone()
    assert final[0] == "" and len(__import__("json").loads(final[1])) == 150
    db.close()


def test_a_slow_answer_is_on_disk_at_most_a_second_behind(qtbot, make_window, tmp_path):
    """Fewer than 32 tokens, one every 0.15 s: the time rule alone saves them, so what was on
    screen a second ago (and a little, for the event loop) is on disk while the answer streams."""
    import json
    import time

    from PySide6.QtCore import QTimer

    from app.generation_control import SAVE_SECONDS, SAVE_TOKENS

    win = make_window(request=LoadRequest(factory=tiny_factory(delay=0.15)), max_new=20)
    win.side_panel.set_mode("standard")  # one token a step: one batch every 0.15 s
    assert 20 < SAVE_TOKENS
    db = sqlite3.connect(tmp_path / "data" / "chats.sqlite3")
    samples = []  # (seconds, tokens shown, tokens on disk)

    def sample():
        if win.generation.active is None:
            return
        row = db.execute("SELECT tokens FROM messages WHERE role = 'assistant' ORDER BY id DESC").fetchone()
        samples.append((time.monotonic(), len(win.generation.active.events), len(json.loads(row[0])) if row and row[0] else 0))

    timer = QTimer()
    timer.timeout.connect(sample)
    timer.start(50)
    send_and_wait(qtbot, win, "is the cat on the mat")
    timer.stop()
    db.close()
    assert samples and samples[-1][0] - samples[0][0] > 2.0  # the answer took a while: the rule was needed
    for t, _shown, on_disk in samples:
        shown_before = max((n for s, n, _ in samples if s <= t - SAVE_SECONDS - 0.5), default=0)
        assert on_disk >= shown_before, (t - samples[0][0], on_disk, shown_before)
    assert any(on_disk for _t, _shown, on_disk in samples)  # saved while it streamed


def test_a_full_disk_while_saving_gets_a_dialog_and_saving_resumes(qtbot, make_window, tmp_path):
    """SQLite reports the disk full (its page limit reached): one dialog, the chat stays in the
    window and goes on, and once there is room every message reaches the disk."""
    win = make_window(max_new=40)
    send_and_wait(qtbot, win, "the cat")
    db = win.store.history.db
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
    failures = []
    win.store.saver.failed.connect(failures.append)
    send_and_wait(qtbot, win, "the hat on the mat " * 20)
    send_and_wait(qtbot, win, "and the cat " * 20)
    assert failures == ["the disk is full"]  # one dialog for the whole run of failures
    box = win.save_alerts.save_dialog
    assert box.isVisible() and "not being saved" in box.windowTitle() and "the disk is full" in box.text()
    assert "Nothing is lost" in box.informativeText()
    assert not win.unsaved_label.isHidden() and win.store.saver.pending
    assert [m.role for m in win.chats.messages] == ["user", "assistant"] * 3 and win.chats.messages[-1].tokens
    with qtbot.waitSignal(win.store.saver.resumed, timeout=10_000):
        db.execute("PRAGMA max_page_count = 1073741823")  # room again: the next retry goes through
    assert win.unsaved_label.isHidden() and win.store.saver.pending == 0
    h = History(tmp_path / "data")
    assert [(m.role, m.content) for m in h.messages(win.chats.chat_id)] == [(m.role, m.content) for m in win.chats.messages]
    assert [t.kind for t in h.messages(win.chats.chat_id)[-1].tokens] == [t.kind for t in win.chats.messages[-1].tokens]
    h.close()


def test_a_read_only_database_gets_a_dialog_and_the_chat_goes_on(qtbot, make_window, tmp_path):
    win = make_window(max_new=5)
    win.store.history.db.execute("PRAGMA query_only = ON")  # SQLite refuses every write
    send_and_wait(qtbot, win, "the cat")  # a new chat: not even its row can be written
    assert win.chats.chat_id is None and win.chats.messages[-1].tokens
    assert "the data folder is read-only" in win.save_alerts.save_dialog.text()
    win.store.history.db.execute("PRAGMA query_only = OFF")
    with qtbot.waitSignal(win.store.saver.resumed, timeout=10_000):
        pass
    assert win.chats.chat_id is not None
    assert [m.content for m in win.store.history.messages(win.chats.chat_id)] == [m.content for m in win.chats.messages]
    assert win.chat_list.chats.count() == 1


def test_what_the_user_chose_last_is_what_reaches_the_disk_once_it_takes_writes_again(qtbot, make_window):
    """While every write is refused, the chat is pinned, unpinned and pinned again, and its branch
    is switched, then a message sent on it, then switched again: once the disk takes writes, the
    chat is pinned and reopens on the branch shown last, with every message there."""
    win = make_window(max_new=3)
    send_and_wait(qtbot, win, "the cat")
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        win.generation.regenerate()
    first, second = win.chats.conversation.versions(win.chats.messages[-1])
    win.store.history.db.execute("PRAGMA query_only = ON")
    for on in (True, False, True):
        win.chats.pin_chat(win.chats.chat_id, on)
    win.chats.switch_version(second, -1)  # the first answer's branch...
    send_and_wait(qtbot, win, "the hat")  # ...goes on from the first answer
    win.chats.switch_version(first, 1)  # and the second answer's branch is what the chat shows at the end
    assert win.chats.messages[-1] is second and win.store.saver.pending
    win.store.history.db.execute("PRAGMA query_only = OFF")
    with qtbot.waitSignal(win.store.saver.resumed, timeout=10_000):
        pass
    h = History(win.store.history.data_dir)
    assert h.pinned(win.chats.chat_id)
    assert [m.id for m in h.messages(win.chats.chat_id)] == [m.id for m in win.chats.messages] == [win.chats.messages[0].id, second.id]
    assert len(h.all_messages(win.chats.chat_id)) == 5
    h.close()


def test_an_unopenable_data_folder_keeps_the_chats_in_memory(qtbot, make_window, tmp_path):
    folder = tmp_path / "not-a-folder"
    folder.write_text("a file where the data folder should be")
    win = make_window(data_dir=folder)
    qtbot.waitUntil(lambda: win.last_error_dialog is not None, timeout=5000)
    assert "cannot be opened" in win.last_error_dialog.text()
    send_and_wait(qtbot, win, "the cat")
    assert win.chats.messages[-1].tokens and win.chat_list.chats.count() == 1


# -- 8. streaming that looks finished ------------------------------------------------------------
def test_an_open_code_fence_renders_as_code_while_streaming(qtbot):
    pieces = ["Here", ":\n", "```", "python\n", "# a", " comment\n", "x", " = ", "1\n"]
    w = MessageWidget("assistant", Theme(False))
    qtbot.addWidget(w)
    w.set_streaming(True)
    w.set_tokens([ViewToken(i, p, "accepted", i, 0, "lookup") for i, p in enumerate(pieces)])
    doc = w.view.document()
    plain = doc.toPlainText()
    cur = QTextCursor(doc)
    cur.setPosition(plain.index("# a") + 1)
    assert cur.blockFormat().headingLevel() == 0 and cur.block().blockFormat().nonBreakableLines()
    assert "monospace" in (cur.charFormat().fontFamilies() or [])
    assert "```" not in plain
    assert w.view.position_tokens[plain.index("# a")] == 4  # colours still line up with the tokens
    assert split("a\n```\nb\n```\n")[1].closed
    assert not split("a\n````md\n```\nb")[1].closed  # a shorter fence does not close it


# -- issue 21: which source proposed each step --------------------------------------------------------
def test_lookup_tokens_say_their_source_and_are_marked_in_both_themes(qtbot):
    toks = [ViewToken(1, "copied", "accepted", 1, 0, "lookup"), ViewToken(2, " x", "corrected", 1, 1, "lookup"),
            ViewToken(3, " drafted", "accepted", 2, 0, "draft"), ViewToken(4, " plain", "standard", 3, None, ""),
            ViewToken(5, " old", "accepted", 4, 0, None)]
    tip = token_tooltip(toks[0])
    assert tip.startswith("<b>accepted</b> · proposed by lookup (copied from the conversation)<br>")
    assert "in a step proposed by lookup" in token_tooltip(toks[1])
    assert "proposed by the draft model" in token_tooltip(toks[2])
    assert "proposed by" not in token_tooltip(toks[3]) and "proposed by" not in token_tooltip(toks[4])
    for dark in (False, True):
        theme = Theme(dark)
        w = MessageWidget("assistant", theme)
        qtbot.addWidget(w)
        w.set_tokens(toks)
        plain = w.view.document().toPlainText()

        def fmt(word):
            cur = QTextCursor(w.view.document())
            cur.setPosition(plain.index(word) + 1)
            return cur.charFormat()

        copied = fmt("copied")
        assert copied.underlineStyle() == QTextCharFormat.UnderlineStyle.DotLine
        assert copied.underlineColor().rgb() == theme.kind_fg("accepted").rgb()
        assert copied.background().color().rgb() == theme.kind_bg("accepted").rgb()  # the kind stays the colour
        for word in ("x", "drafted", "plain", "old"):
            assert fmt(word).underlineStyle() == QTextCharFormat.UnderlineStyle.NoUnderline


def test_the_side_panel_shows_steps_and_kept_tokens_per_source_live_and_final(qtbot, make_window):
    win = make_window(request=LoadRequest(factory=tiny_factory(delay=0.002)), max_new=40)
    win.side_panel.adaptive.setChecked(False)
    win.side_panel.k_spin.setValue(3)
    shown = []
    win.sig.tokens.connect(lambda _rid, _evs, stats: shown.append((stats, win.side_panel.sources.text())))
    send_and_wait(qtbot, win, "the cat the cat the cat the cat")
    final = win.chats.messages[-1].figures.stats
    assert final.steps_by_source and sum(final.steps_by_source.values()) == final.speculative_steps
    for stats, text in shown:
        lines = figures.sources(stats)
        assert text == ("" if not lines else text) and all(line in text for line in lines)
    last = win.side_panel.sources.text()
    for src, n in final.steps_by_source.items():
        name = figures.SOURCE_NAMES[src]
        a, p = final.accepted_by_source.get(src, 0), final.proposed_by_source[src]
        assert f"{name}: {n} step{'' if n == 1 else 's'} · {a} of {p} kept" in last
    # the saved tokens carry their source, and the bubble shows it on hover
    tokens = win.chats.messages[-1].tokens
    assert {t.source for t in tokens if t.kind != "standard"} <= set(final.steps_by_source)
    assert {t.source for t in tokens if t.kind == "standard"} == {""}
    h = History(win.store.history.data_dir)
    assert [t.source for t in h.messages(win.chats.chat_id)[-1].tokens] == [t.source for t in tokens]
    h.close()
    assert "copied" in win.page.legend.lookup.text() and "copied from the conversation" in win.page.legend.lookup.toolTip()


# -- 8. the window's size, 9. the keyboard ----------------------------------------------------------
def test_the_window_fits_a_1366x768_screen(qtbot, make_window):
    win = make_window(load=False)
    hint = win.minimumSizeHint()
    assert hint.width() <= 1366 - 16 and hint.height() <= 768 - 60
    win.resize(1366 - 16, 768 - 60)
    win.show()
    qtbot.waitExposed(win)
    panel = win.side_panel
    right = panel.mapTo(win, panel.rect().bottomRight())
    assert right.x() < win.width() and right.y() < win.height()  # the side panel inside the window
    assert panel.widget().minimumSizeHint().width() <= panel.viewport().width()  # nothing cut at its edge


def test_keyboard_shortcuts_and_every_one_in_a_menu(qtbot, make_window):
    win = make_window(max_new=4)
    send_and_wait(qtbot, win, "the cat")
    show(qtbot, win)
    QApplication.clipboard().clear()
    QTest.keyClick(win, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert QApplication.clipboard().text() == win.chats.messages[-1].content
    win.page.composer.setFocus()
    QTest.keyClick(win.page.composer, Qt.Key.Key_Up)
    assert win.chats.editing is win.chats.messages[0]
    QTest.keyClick(win, Qt.Key.Key_Escape)  # Esc cancels the edit when nothing streams
    assert win.chats.editing is None and not win.page.composer.toPlainText()
    QTest.keyClick(win, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert win.chat_list.search.hasFocus()
    listed = set(win.shortcut_texts())
    for key in ("Enter", "Shift+Enter", "Esc", "Up", "Ctrl+F", "Ctrl+Shift+C", "Ctrl+R", "Ctrl+N", "Ctrl+O",
                "Ctrl+E", "F2", "Ctrl+L", "Ctrl+Q", "Ctrl+M", "Ctrl+T", "Ctrl+Shift+D", "Alt+Left", "Alt+Right"):
        assert key in listed, key


def test_quitting_with_unsaved_changes_asks_first(qtbot, make_window):
    win = make_window(max_new=3)
    win.store.history.db.execute("PRAGMA query_only = ON")
    send_and_wait(qtbot, win, "the cat")
    win.show()
    qtbot.waitExposed(win)
    win.close()
    box = win.save_alerts.quit_dialog
    assert box.isVisible() and "could not be written" in box.text() and win.isVisible()  # asked, still open
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert win.isVisible()
    win.close()
    quit_button = next(b for b in win.save_alerts.quit_dialog.buttons() if b.text() == "Quit without saving")
    quit_button.click()
    assert not win.isVisible() and win._closed
