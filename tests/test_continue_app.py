"""Answers that run until the model ends them, and Continue (issue 30, item 1), in a real window on
tiny models (tests/app_fixtures.py), offscreen.

- "Max new tokens" is off by default: the context is the only bound, and the meter says what it
  leaves; an answer that fills it ends with "context full".
- Continue, after a Stop, a token limit or a full context, writes on in the SAME message: its
  tokens are the old ones followed by the new ones (kinds and steps kept), its figures the two
  parts' joined, and at temperature 0 the whole is exactly the answer never stopped.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from app.history import History  # noqa: E402
from app.side_panel import SidePanel  # noqa: E402
from app.theme import Theme  # noqa: E402
from app.worker import LoadRequest, default_settings  # noqa: E402
from app_fixtures import tiny_factory  # noqa: E402

TIMEOUT = 60_000


def send_and_wait(qtbot, win, text):
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as blocker:
        assert win.generation.send(text)
    return blocker.args[0]


def continue_and_wait(qtbot, win, how=None):
    """Continue the last answer (by `how`, a callable, else the controller) and wait for its end."""
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as blocker:
        if how is None:
            assert win.generation.continue_answer()
        else:
            how()
    return blocker.args[0]


def ids(message):
    return [t.token_id for t in message.tokens]


def as_tuples(tokens):
    return [(t.token_id, t.text, t.kind, t.step, t.draft_position, t.source) for t in tokens]


def test_max_new_tokens_is_off_by_default_and_the_context_bounds_the_answer(qtbot, make_window):
    panel = SidePanel(Theme(False))
    qtbot.addWidget(panel)
    assert panel.max_new.value() == 0 and panel.max_new.text() == "off"
    assert panel.settings().max_new_tokens is None and default_settings().max_new_tokens is None
    panel.max_new.setValue(300)  # a user may still set one
    assert panel.settings().max_new_tokens == 300

    # a target whose context is 80 tokens: the answer runs until it is full
    win = make_window(request=LoadRequest(factory=tiny_factory(max_positions=80)), max_new=0)
    assert send_and_wait(qtbot, win, "is the cat on the mat") == "context"
    q, a = win.chats.messages
    prompt = win.worker.engine.count_tokens([{"role": "user", "content": q.content}])
    assert len(a.tokens) == 80 - prompt and a.figures.stats.new_tokens == len(a.tokens)
    w = win.page.chat_view.messages[-1]
    assert w.meta_label.text().endswith("context full") and w.continue_button.isVisibleTo(win)
    assert win.side_panel.summary.text().endswith("context full")
    # the meter: what the chat takes, and nothing left for an answer
    win.context.schedule()
    qtbot.waitUntil(lambda: win.page.meter.count is not None and win.page.meter.count.job_id == win.context.job
                    and not win.context.timer.isActive() and win.page.meter.count.prompt_tokens is not None
                    and win.page.meter.count.prompt_tokens > 70, timeout=TIMEOUT)
    assert "left for the answer" in win.page.meter.label.text()
    # Continue on a full context: said at once, nothing computed, nothing lost
    win.generation.continue_answer()
    qtbot.waitUntil(lambda: win.generation.context_dialog is not None, timeout=TIMEOUT)
    box = win.generation.context_dialog
    assert "leaves no room for more of an answer" in box.text() and box.drop_button is None
    assert win.chats.messages == [q, a] and len(a.tokens) == 80 - prompt and a.state == ""
    assert w.meta_label.text().endswith("context full") and w.continue_button.isVisibleTo(win)
    box.close()


def test_continue_after_stop_is_one_message_the_old_tokens_then_the_new(qtbot, make_window, tmp_path):
    win = make_window(request=LoadRequest(factory=tiny_factory(delay=0.02)), max_new=0)
    win.side_panel.adaptive.setChecked(False)  # a fixed k: every kind shows up in a short answer
    win.side_panel.k_spin.setValue(3)
    w = None
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        win.generation.send("is the cat on the mat")
        w = win.page.chat_view.messages[-1]
        assert not w.continue_button.isVisibleTo(win)  # not while it streams
        qtbot.waitUntil(lambda: len(win.generation.active.events) >= 9, timeout=TIMEOUT)
        win.generation.stop()
    answer = win.chats.messages[-1]
    old = as_tuples(answer.tokens)
    old_fig = answer.figures
    assert answer.figures.stats.stop_reason == "cancelled" and w.meta_label.text().endswith("stopped")
    assert w.continue_button.isVisibleTo(win)

    # Continue (the button beside the mark): the same message grows
    requests = []
    original = win.worker.request_generate
    win.worker.request_generate = lambda r: (requests.append(r), original(r))
    win.side_panel.max_new.setValue(10)
    assert continue_and_wait(qtbot, win, w.continue_button.click) == "max_new_tokens"
    req = requests[-1]
    assert req.continuing and list(req.answer_ids) == [t[0] for t in old]
    assert req.messages[-1] == {"role": "assistant", "content": "".join(t[1] for t in old)}
    assert win.chats.messages[-1] is answer and win.chats.conversation.version(answer) == (1, 1)
    assert len(win.chats.conversation.messages) == 2 and len(win.page.chat_view.messages) == 2
    new = as_tuples(answer.tokens)
    assert new[: len(old)] == old and len(new) == len(old) + 10
    assert min(t[3] for t in new[len(old):]) > max(t[3] for t in old)  # steps numbered on
    assert answer.content == "".join(t[1] for t in new) and answer.state == ""
    # one message's figures: both parts joined
    fig, s, old_stats = answer.figures, answer.figures.stats, old_fig.stats
    assert s.new_tokens == len(new) and fig.continued == 1 and s.stop_reason == "max_new_tokens"
    assert s.seconds > old_stats.seconds and s.target_forward_passes > old_stats.target_forward_passes
    assert len(fig.series) > len(old_fig.series) and fig.series[: len(old_fig.series)] == old_fig.series
    assert win.side_panel.summary.text().startswith(f"{len(new)} tokens")
    # the bubble shows the whole, coloured by kind, with the mark of the new end
    assert as_tuples(w.tokens) == new and w.meta_label.text().endswith("token limit") and w.error is None
    # on disk: one answer, its tokens and figures
    h = History(tmp_path / "data")
    (stored_q, stored_a) = h.messages(win.chats.chat_id)
    assert as_tuples(stored_a.tokens) == new and stored_a.figures.stats.new_tokens == len(new)
    assert len(h.all_messages(win.chats.chat_id)) == 2
    h.close()
    # greedy: the continued answer is, token for token, the answer never stopped
    win.side_panel.max_new.setValue(len(new))
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        win.generation.regenerate()
    again = win.chats.messages[-1]
    assert again is not answer and ids(again) == ids(answer) and again.content == answer.content


def test_continue_after_a_token_limit_from_the_button_the_menu_and_the_keyboard(qtbot, make_window):
    win = make_window(max_new=6)
    assert send_and_wait(qtbot, win, "the cat") == "max_new_tokens"
    answer = win.chats.messages[-1]
    w = win.page.chat_view.messages[-1]
    assert w.meta_label.text().endswith("token limit") and w.continue_button.isVisibleTo(win)
    continue_and_wait(qtbot, win, w.continue_button.click)
    assert len(answer.tokens) == 12 and win.chats.messages[-1] is answer
    # the message's context menu offers it too
    menu = win.actions.menu(w)
    actions = {a.text(): a for a in menu.actions() if a.text()}
    assert actions["Continue"].isEnabled() and actions["Regenerate"].isEnabled()
    continue_and_wait(qtbot, win, actions["Continue"].trigger)
    assert len(answer.tokens) == 18 and answer.figures.continued == 2 and answer.figures.stats.new_tokens == 18
    # Chat ▸ Continue the last answer
    act = next(a for a in win.menuBar().actions()[1].menu().actions() if a.text().startswith("Co&ntinue"))
    assert act.shortcut().toString() == "Ctrl+Shift+Return"
    continue_and_wait(qtbot, win, act.trigger)
    assert len(answer.tokens) == 24
    # once a question follows, Continue there is a new version of the answer (tests/test_continue_versions.py)
    send_and_wait(qtbot, win, "the hat")
    assert w.continue_button.isVisibleTo(win) and "new version" in w.continue_button.text()
    actions = {a.text(): a for a in win.actions.menu(w).actions() if a.text()}
    assert "Continue" not in actions and actions["Continue as a new version"].isEnabled()
    assert actions["Regenerate"].isEnabled()


def test_an_answer_the_model_ended_offers_no_continue(qtbot, make_window):
    """The model's end of turn: the tiny target's third greedy token made its eos."""
    from specdec_core.settings import DecodeSettings

    probe = tiny_factory(report=False)(lambda *_a: None)
    said = probe.generate(probe.encode_chat([{"role": "user", "content": "the cat"}]),
                          DecodeSettings(3, mode="standard")).run().token_ids
    win = make_window(request=LoadRequest(factory=tiny_factory(eos=(said[2],))), max_new=0)
    assert send_and_wait(qtbot, win, "the cat") == "eos"
    answer = win.chats.messages[-1]
    w = win.page.chat_view.messages[-1]
    assert ids(answer)[-1] == said[2] and len(answer.tokens) <= 3
    assert not w.continue_button.isVisibleTo(win) and "stopped" not in w.meta_label.text()
    assert not {a.text(): a for a in win.actions.menu(w).actions() if a.text()}["Continue"].isEnabled()
    assert not win.generation.continue_answer(answer) and len(answer.tokens) <= 3


def test_continue_on_a_full_context_offers_to_leave_the_oldest_turns_out(qtbot, make_window):
    win = make_window(request=LoadRequest(factory=tiny_factory(max_positions=96)), max_new=12)
    send_and_wait(qtbot, win, "the cat")
    win.side_panel.max_new.setValue(0)
    assert send_and_wait(qtbot, win, "is the cat on the mat") == "context"
    q1, a1, q2, answer = win.chats.messages
    before = [t.token_id for t in answer.tokens]
    requests = []
    original = win.worker.request_generate
    win.worker.request_generate = lambda r: (requests.append(r), original(r))
    assert win.generation.continue_answer()
    qtbot.waitUntil(lambda: win.generation.context_dialog is not None, timeout=TIMEOUT)
    box = win.generation.context_dialog
    assert "Leave out the oldest 2 message(s)" in box.informativeText()
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as done:
        box.drop_button.click()
    assert done.args == ["context"] and requests[-1].continuing and requests[-1].dropped == 2
    # the same message, longer by what the two left-out messages made room for
    assert win.chats.messages == [q1, a1, q2, answer] and ids(answer)[: len(before)] == before
    assert len(answer.tokens) > len(before) and answer.figures.continued == 1
    assert [w.left_out_label.isVisibleTo(win) for w in win.page.chat_view.messages] == [True, True, False, False]
