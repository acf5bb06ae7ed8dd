"""Continue on any answer, not only the chat's last (issue 30, item 1), in a real window on tiny
models (tests/app_fixtures.py), offscreen:

- an answer that later turns follow was read by the model when it wrote them: continued, it is
  not rewritten under them -- the continuation is a NEW VERSION of it (its old tokens, then the
  new ones), and the later turns stay with the old version;
- an edited answer continues from the user's text (the model reads it as the start of its turn)
  and grows in the same version: the text uncoloured, the model's tokens after it;
- the mark offers Continue exactly where the stop reason allows it: a token limit, a full
  context, Stop, a stream cut off, an app that ended mid-answer, an edit not yet written on --
  not where the model ended the answer itself.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from app.answer_figures import AnswerFigures  # noqa: E402
from app.continuation import can_continue  # noqa: E402
from app.history import History, Message, StoredToken  # noqa: E402

TIMEOUT = 60_000


def wait_done(qtbot, win, start):
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as blocker:
        start()
    return blocker.args[0]


def send(qtbot, win, text):
    return wait_done(qtbot, win, lambda: win.generation.send(text))


def bubble_of(win, message):
    return next(w for w in win.page.chat_view.messages if w.message is message)


def ids(message):
    return [t.token_id for t in message.tokens]


def record_requests(win):
    requests = []
    original = win.worker.request_generate
    win.worker.request_generate = lambda r: (requests.append(r), original(r))
    return requests


def greedy_ids(engine, messages, n, continue_final=False):
    """The tiny target's own greedy answer, outside the app: the reference."""
    from specdec_core.settings import DecodeSettings

    prompt = engine.encode_chat(messages, continue_final=continue_final)
    return list(engine.generate(prompt, DecodeSettings(n, mode="standard")).run().token_ids)


def test_continuing_an_answer_later_turns_follow_makes_a_new_version(qtbot, make_window, tmp_path):
    win = make_window(max_new=6)
    send(qtbot, win, "the cat")
    send(qtbot, win, "the hat")
    q1, a1, q2, a2 = win.chats.messages
    before = (list(a1.tokens), a1.content, a1.figures.to_dict())
    w1 = bubble_of(win, a1)
    # the mark beside a1 offers it, and says it will be a new version
    assert a1.figures.stats.stop_reason == "max_new_tokens" and w1.meta_label.text().endswith("token limit")
    assert w1.continue_button.isVisibleTo(win) and w1.continue_button.text() == "Continue ▸ new version"
    assert "NEW VERSION" in w1.continue_button.toolTip() and "stay with the current version" in w1.continue_button.toolTip()
    assert bubble_of(win, a2).continue_button.text() == "Continue ▸"  # the last answer: the same message

    requests = record_requests(win)
    win.side_panel.max_new.setValue(5)
    assert wait_done(qtbot, win, w1.continue_button.click) == "max_new_tokens"
    # the model read the chat up to a1 only, with a1 (its own ids) as the open turn
    req = requests[-1]
    assert req.continuing and list(req.answer_ids) == ids(a1)
    assert req.messages == [{"role": "user", "content": "the cat"}, {"role": "assistant", "content": a1.content}]
    # a new version of a1, shown; a1 and what followed it untouched
    q, new = win.chats.messages
    conv = win.chats.conversation
    assert q is q1 and new is not a1 and new.parent is q1 and conv.version(new) == (2, 2)
    assert (a1.tokens, a1.content, a1.figures.to_dict()) == before
    assert conv.children(a1) == [q2] and conv.children(q2) == [a2]
    assert new.tokens[:6] == before[0] and len(new.tokens) == 11
    assert new.content == before[1] + "".join(t.text for t in new.tokens[6:])
    assert min(t.step for t in new.tokens[6:]) > max(t.step for t in before[0])
    assert new.figures.stats.new_tokens == 11 and new.figures.continued == 1 and new.state == ""
    assert "new version" in win.status_label.text()
    # greedy: the new version is, token for token, the answer never cut at 6
    assert ids(new) == greedy_ids(win.worker.engine, req.messages[:1], 11)
    # ‹ shows the old version with the turns that read it
    bubble_of(win, new).prev_button.click()
    assert win.chats.messages == [q1, a1, q2, a2]
    # on disk: both versions, the later turns under the old one
    h = History(tmp_path / "data")
    stored = h.all_messages(win.chats.chat_id)
    h.close()
    assert len(stored) == 5
    kept = next(m for m in stored if m.id == new.id)
    assert kept.parent.id == q1.id and [t.token_id for t in kept.tokens] == ids(new)
    assert next(m for m in stored if m.id == q2.id).parent.id == a1.id


def test_a_continuation_that_adds_nothing_leaves_no_new_version(qtbot, make_window):
    """Stopped before its first token: the version made for it goes, the branch shown is as it was."""
    win = make_window(max_new=6)
    send(qtbot, win, "the cat")
    send(qtbot, win, "the hat")
    shown = list(win.chats.messages)
    a1 = shown[1]
    win.worker.request_generate = lambda r: None  # the request never reaches the worker: no token comes
    assert win.generation.continue_answer(a1)
    assert win.chats.messages[-1] is not a1 and len(win.chats.conversation.messages) == 5
    wait_done(qtbot, win, win.generation.stop)
    assert win.chats.messages == shown and len(win.chats.conversation.messages) == 4
    assert [w.message for w in win.page.chat_view.messages] == shown
    assert "Nothing was added" in win.status_label.text()


def test_an_edited_answer_continues_from_the_users_text(qtbot, make_window, tmp_path):
    win = make_window(max_new=6)
    send(qtbot, win, "the cat")
    a1 = win.chats.messages[1]
    edited_text = "the cat is on the"
    edited = win.chats.add_edited_answer(a1, edited_text)
    w = bubble_of(win, edited)
    assert can_continue(edited) and w.continue_button.isVisibleTo(win) and "edited text" in w.continue_button.toolTip()

    requests = record_requests(win)
    win.side_panel.max_new.setValue(5)
    assert wait_done(qtbot, win, w.continue_button.click) == "max_new_tokens"
    req = requests[-1]
    # the model read the edited text as its open turn: no ids to give, the template encodes it
    assert req.continuing and req.answer_ids == ()
    assert req.messages[-1] == {"role": "assistant", "content": edited_text}
    # the same version grew: the user's text, then the model's tokens
    assert win.chats.messages[-1] is edited and win.chats.conversation.version(edited) == (2, 2)
    assert len(edited.tokens) == 5 and edited.content == edited_text + "".join(t.text for t in edited.tokens)
    assert ids(edited) == greedy_ids(win.worker.engine, req.messages, 5, continue_final=True)
    fig = edited.figures
    assert fig.edited and not fig.edited_only and fig.continued == 1
    assert fig.stats.new_tokens == 5 and fig.stats.stop_reason == "max_new_tokens"
    assert w.meta_label.text().startswith("edited, then continued") and w.meta_label.text().endswith("token limit")
    # the bubble: the whole text; the edited part belongs to no token (uncoloured), the rest to the model's
    assert w.text == edited.content and len(w.tokens) == 5
    owners = [i for i in w.view.position_tokens if i >= 0]
    assert w.view.position_tokens[0] == -1 and owners and max(owners) == 4
    assert not win.side_panel.summary.text().startswith("an edited answer")  # its figures: the model's part's

    # once more: the text no token wrote still goes first, and is re-encoded (no ids)
    assert wait_done(qtbot, win, lambda: win.generation.continue_answer(edited)) == "max_new_tokens"
    assert requests[-1].answer_ids == () and len(edited.tokens) == 10 and edited.content.startswith(edited_text)
    assert edited.figures.continued == 2 and edited.figures.stats.new_tokens == 10 and edited.figures.edited
    # after a restart: the same text, tokens and mark
    chat_id = win.chats.chat_id
    again = make_window(data_dir=tmp_path / "data", load=False)
    again.chats.open_chat(chat_id)
    m = again.chats.messages[-1]
    wa = bubble_of(again, m)
    assert m.content == edited.content and ids(m) == ids(edited)
    assert wa.text == edited.content and wa.meta_label.text().startswith("edited, then continued")


def saved_chat(tmp_path) -> tuple[int, list[Message]]:
    """A chat on disk, one question and answer per way an answer can end, each answer followed by
    the next question (hand-built rows, as the app writes them)."""
    ends = [("eos", {}), ("max_new_tokens", {}), ("context", {}), ("cancelled", {}), ("error", {"error": "gone"}),
            ("cut", {}), ("edited", {}), ("edited-eos", {})]
    from tiny_models import make_tokenizer  # the tiny target's own tokenizer

    tok = make_tokenizer()
    tok_ids = tok(" the cat sat on the mat")["input_ids"]
    texts = [tok.decode([i]) for i in tok_ids]
    messages, parent = [], None
    for end, extra in ends:
        q = Message("user", f"question {end}", parent=parent)
        tokens = [StoredToken(i, t, "standard", n, None, "") for n, (i, t) in enumerate(zip(tok_ids, texts))]
        stats = {"mode": "standard", "new_tokens": len(tokens), "seconds": 0.1, "stop_reason": end, **extra}
        if end == "cut":  # a row still being written when the app was killed
            stats = {"mode": "standard", "new_tokens": len(tokens), "seconds": 0.1}
        elif end == "edited":
            stats = {"edited": True}
        elif end == "edited-eos":  # an edit the model wrote on until it ended
            stats = dict(stats, stop_reason="eos", edited=True)
        a = Message("assistant", "".join(texts), tokens, AnswerFigures.from_dict(stats), parent=q,
                    state="streaming" if end == "cut" else "")
        if end == "edited":
            a.tokens, a.content = [], "my own words"
        elif end == "edited-eos":
            a.content = "my own words" + a.content
        messages += [q, a]
        parent = a
    last = Message("user", "the end", parent=parent)
    messages.append(last)
    h = History(tmp_path / "data")
    chat_id = h.insert_chat("ends", "", messages, last)
    h.close()
    return chat_id, [m for m in messages if m.role == "assistant"]


def test_the_mark_offers_continue_only_where_the_stop_reason_allows(qtbot, make_window, tmp_path):
    chat_id, answers = saved_chat(tmp_path)
    win = make_window(data_dir=tmp_path / "data")
    win.chats.open_chat(chat_id)
    by_end = {}
    for m in win.chats.messages:
        if m.role == "assistant":
            fig = m.figures
            by_end["edited" if fig.edited_only else
                   "edited-eos" if fig.edited else "cut" if m.cut else fig.stats.stop_reason] = m
    assert len(by_end) == 8
    offered = {end: bubble_of(win, m).continue_button.isVisibleTo(win) for end, m in by_end.items()}
    assert offered == {"eos": False, "max_new_tokens": True, "context": True, "cancelled": True, "error": True,
                       "cut": True, "edited": True, "edited-eos": False}
    marks = {end: bubble_of(win, m).meta_label.text() for end, m in by_end.items()}
    assert marks["cut"].endswith("cut off") and marks["cancelled"].endswith("stopped")
    assert marks["edited"] == "edited" and marks["edited-eos"].startswith("edited, then continued")
    for end, m in by_end.items():  # each followed by a question: Continue is a new version, in the menu too
        menu = {a.text(): a for a in win.actions.menu(bubble_of(win, m)).actions() if a.text()}
        assert menu["Continue as a new version"].isEnabled() == offered[end], end
        if offered[end]:
            assert bubble_of(win, m).continue_button.text() == "Continue ▸ new version"
    # the eos answer is refused, the one cut off by a kill continues (in a new version)
    assert not win.generation.continue_answer(by_end["eos"]) and "can be continued" in win.status_label.text()
    cut = by_end["cut"]
    assert wait_done(qtbot, win, lambda: win.generation.continue_answer(cut)) == "max_new_tokens"
    new = win.chats.messages[-1]
    assert new.parent is cut.parent and new is not cut and cut.cut and new.state == ""
    assert ids(new)[: len(cut.tokens)] == ids(cut) and len(new.tokens) == len(cut.tokens) + 12
    assert bubble_of(win, new).error is None and bubble_of(win, new).meta_label.text().endswith("token limit")


def test_an_edited_texts_tokens_seed_the_continuations_text():
    """The worker tells the engine how many of the prompt's last tokens are the answer so far, so
    its text reads on from theirs: the answer's own ids where it has them, else (an edit) what
    the template's rendering of the text took after the turn opener."""
    from app.worker import GenerateRequest, answer_prefix
    from app_fixtures import tiny_factory

    engine = tiny_factory(report=False)(lambda *_a: None)
    chat = [{"role": "user", "content": "the cat"}, {"role": "user", "content": "the hat"},
            {"role": "assistant", "content": "the cat is on the"}]
    req = GenerateRequest(1, chat, continuing=True, dropped=1)
    fit = engine.fit(chat, 4, 1, **req.fit_options())
    n = answer_prefix(engine, req, fit)
    assert n > 0 and engine.tokenizer.decode(fit.prompt[-n:]) == "the cat is on the"
    assert fit.prompt[:-n] == engine.encode_chat(chat[1:2])  # the rest: the kept turn and the opener
    assert answer_prefix(engine, GenerateRequest(1, chat, continuing=True, answer_ids=(5, 6)), fit) == 2
    assert answer_prefix(engine, GenerateRequest(1, chat), fit) == 0  # a new answer continues nothing
    assert req.generate_options(engine, fit) == {"answer_prefix": n}
