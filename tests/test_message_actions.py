"""One message's actions (issue 30, item 3), in a real window on tiny models, offscreen: delete any
message (asked first; what follows it goes with it, another version takes its place), edit an
answer (a new version, marked edited; the original keeps its colours and figures), regenerate
any answer, not only the last. Each checked in the window and in the file after a restart."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint  # noqa: E402
from PySide6.QtWidgets import QApplication, QMenu, QMessageBox  # noqa: E402

from app.history import History  # noqa: E402

TIMEOUT = 60_000


def send_and_wait(qtbot, win, text):
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        assert win.generation.send(text)


def bubble_of(win, message):
    return next(w for w in win.page.chat_view.messages if w.message is message)


def menu_actions(win, message):
    return {a.text(): a for a in win.actions.menu(bubble_of(win, message)).actions() if a.text()}


def two_turns(qtbot, win):
    send_and_wait(qtbot, win, "the cat")
    send_and_wait(qtbot, win, "the hat")
    return win.chats.messages


def reopened(make_window, tmp_path, win):
    chat_id = win.chats.chat_id
    assert win.shutdown()
    again = make_window(data_dir=tmp_path / "data", load=False)
    again.chats.open_chat(chat_id)
    return again


def test_deleting_a_message_asks_first_and_takes_what_follows_with_it(qtbot, make_window, tmp_path):
    win = make_window(max_new=5)
    q1, a1, q2, a2 = two_turns(qtbot, win)
    # Cancel: nothing changes
    menu_actions(win, a1)["Delete…"].trigger()
    box = win.actions.delete_dialog
    assert box.isVisible() and "this answer" in box.text()
    assert "The 2 messages after it" in box.informativeText()
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert win.chats.messages == [q1, a1, q2, a2]
    # Delete: the answer and both messages after it
    menu_actions(win, a1)["Delete…"].trigger()
    win.actions.delete_dialog.delete_button.click()
    assert win.chats.messages == [q1] and [w.message for w in win.page.chat_view.messages] == [q1]
    assert win.status_label.text() == "Deleted 3 messages"
    # the chat goes on from the question: a new answer follows it
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        win.generation.regenerate()
    answer = win.chats.messages[-1]
    assert win.chats.messages == [q1, answer] and answer.parent is q1 and answer is not a1
    # on disk and after a restart: the same
    again = reopened(make_window, tmp_path, win)
    assert [m.content for m in again.chats.messages] == ["the cat", answer.content]
    h = History(tmp_path / "data")
    assert not {a1.id, q2.id, a2.id} & {m.id for m in h.all_messages(again.chats.chat_id)}
    h.close()


def test_deleting_one_version_shows_the_other_in_its_place(qtbot, make_window, tmp_path):
    win = make_window(max_new=5)
    send_and_wait(qtbot, win, "the cat")
    q, first = win.chats.messages
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        win.generation.regenerate()
    second = win.chats.messages[-1]
    assert win.chats.conversation.version(second) == (2, 2)
    win.actions.ask_delete(second)
    assert "Its other version stays" in win.actions.delete_dialog.informativeText()
    win.actions.delete_dialog.delete_button.click()
    assert win.chats.messages == [q, first] and win.chats.conversation.version(first) == (1, 1)
    assert bubble_of(win, first).version_label.isHidden()
    # the first message of the chat: the chat is empty, and stays a chat
    win.actions.ask_delete(q)
    assert "The 1 message after it" in win.actions.delete_dialog.informativeText()
    win.actions.delete_dialog.delete_button.click()
    assert win.chats.messages == [] and not win.page.chat_view.messages and win.chats.chat is not None
    again = reopened(make_window, tmp_path, win)
    assert again.chats.messages == []


def test_an_answer_in_the_middle_can_be_regenerated(qtbot, make_window, tmp_path):
    win = make_window(max_new=5)
    q1, a1, q2, a2 = two_turns(qtbot, win)
    requests = []
    original = win.worker.request_generate
    win.worker.request_generate = lambda r: (requests.append(r), original(r))
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        menu_actions(win, a1)["Regenerate"].trigger()
    assert [m["content"] for m in requests[-1].messages] == ["the cat"]  # written from its own question
    q, new = win.chats.messages
    assert q is q1 and new is not a1 and new.parent is q1 and win.chats.conversation.version(new) == (2, 2)
    assert new.figures.settings["seed"] == a1.figures.settings["seed"] + 1  # a seed of its own
    # the first version keeps what followed it
    bubble_of(win, new).prev_button.click()
    assert win.chats.messages == [q1, a1, q2, a2]
    again = reopened(make_window, tmp_path, win)
    assert [m.content for m in again.chats.messages] == [q1.content, a1.content, q2.content, a2.content]
    assert len(again.chats.conversation.messages) == 5


def test_editing_an_answer_keeps_it_as_a_version_marked_edited(qtbot, make_window, tmp_path):
    win = make_window(max_new=6)
    q1, a1, q2, a2 = two_turns(qtbot, win)
    w = bubble_of(win, a1)
    assert w.edit_button.isVisibleTo(win)  # Edit on an answer too
    w.edit_button.click()
    dlg = win.actions.edit_dialog
    assert dlg.isVisible() and dlg.text() == a1.content
    dlg.editor.setPlainText("the cat is on the mat.")
    dlg.buttons.button(dlg.buttons.StandardButton.Save).click()
    q, edited = win.chats.messages
    assert q is q1 and edited.content == "the cat is on the mat."
    assert edited.figures.edited and edited.figures.to_dict() == {"edited": True}
    assert win.chats.conversation.version(edited) == (2, 2) and not edited.tokens
    we = bubble_of(win, edited)
    assert we.meta_label.text() == "edited" and we.text == "the cat is on the mat."
    assert win.side_panel.summary.text().startswith("an edited answer") and win.side_panel.m_speed.value.text() == "—"
    assert we.continue_button.isVisibleTo(win)  # the model may write on from the user's text
    assert "edited text" in we.continue_button.toolTip()
    # the model's version: its colours and figures, and what followed it
    we.prev_button.click()
    assert win.chats.messages == [q1, a1, q2, a2] and bubble_of(win, a1).tokens and "edited" not in \
        bubble_of(win, a1).meta_label.text()
    win.chats.switch_version(a1, 1)
    # the next question reads the edited answer
    requests = []
    original = win.worker.request_generate
    win.worker.request_generate = lambda r: (requests.append(r), original(r))
    send_and_wait(qtbot, win, "and the hat")
    assert requests[-1].messages[1] == {"role": "assistant", "content": "the cat is on the mat."}
    # the menu's entry and the dialog's Cancel: nothing changes
    menu_actions(win, edited)["Edit answer…"].trigger()
    win.actions.edit_dialog.reject()
    assert len(win.chats.conversation.versions(edited)) == 2
    again = reopened(make_window, tmp_path, win)
    assert [m.content for m in again.chats.messages][:2] == ["the cat", "the cat is on the mat."]
    assert bubble_of(again, again.chats.messages[1]).meta_label.text() == "edited"


def test_the_context_menu_opens_on_the_bubble_with_the_texts_own_actions(qtbot, make_window):
    win = make_window(max_new=5)
    send_and_wait(qtbot, win, "the cat")
    q, a = win.chats.messages
    win.show()
    qtbot.waitExposed(win)
    w = bubble_of(win, a)
    shown = []
    original = QMenu.popup
    QMenu.popup = lambda self, pos, at=None: shown.append(self)
    try:
        w.view.customContextMenuRequested.emit(QPoint(5, 5))
        bubble_of(win, q).customContextMenuRequested.emit(QPoint(5, 5))
    finally:
        QMenu.popup = original
    texts = [[a.text() for a in m.actions() if a.text()] for m in shown]
    assert any("Select All" in t or "Copy" in t for t in texts[0][:3])  # the text's own first
    assert texts[0][-5:] == ["Copy message", "Continue", "Regenerate", "Edit answer…", "Delete…"]
    assert texts[1] == ["Copy message", "Edit and resend…", "Delete…"]
    # while an answer is written, nothing of the chat changes under it
    win.side_panel.max_new.setValue(0)
    win.generation.send("the hat")
    acts = menu_actions(win, a)
    assert not acts["Delete…"].isEnabled() and not acts["Regenerate"].isEnabled()
    assert not win.chats.delete_message(a) and a in win.chats.messages
    win.generation.stop()
    for m in shown:
        m.deleteLater()
    QApplication.processEvents()
