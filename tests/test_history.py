"""The chat history (app/history.py) and the branch tree (app/conversation.py), without a window:
the upgrade of a database the previous release wrote, branches, search, attachments, a saved
token's source, answers saved while they stream, and writes the disk refuses."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from app.conversation import Conversation
from specdec_core.events import Stats
from app.history import (HIGHLIGHT, SCHEMA_VERSION, Attachment, History, Message, SaveError, StoredToken,
                         chat_to_markdown, fts_query)

V1 = Path(__file__).resolve().parent / "data" / "history-v1" / "chats.sqlite3"


# the three figures renamed in schema 3 (and chat files of version 2), stated here apart from the
# code under test: the file's key -> the key it reads back under
RENAMED = {"draft_tokens": "proposed_tokens", "accepted_draft_tokens": "accepted_tokens",
           "mean_accepted_per_step": "tokens_per_speculative_step"}


def under_new_names(saved: dict) -> dict:
    """A saved answer's figures as they read back: the three renamed, in place, values as saved;
    nested dicts (its settings, whose draft_tokens is k) untouched."""
    return {RENAMED.get(k, k): v for k, v in saved.items()}


def v1_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "old"
    folder.mkdir()
    shutil.copy(V1, folder / "chats.sqlite3")
    return folder


def raw_v1(path: Path) -> dict:
    """What the previous release's file holds, read with plain SQL: {chat id: (title, system
    prompt, [(id, role, content, tokens, stats), ...])}."""
    db = sqlite3.connect(path)
    out = {}
    for cid, title, sp in db.execute("SELECT id, title, system_prompt FROM chats"):
        rows = db.execute("SELECT id, role, content, tokens, stats FROM messages WHERE chat_id = ? ORDER BY id",
                          (cid,)).fetchall()
        out[cid] = (title, sp, rows)
    db.close()
    return out


# -- the upgrade -----------------------------------------------------------------------------
def test_a_database_of_the_previous_release_opens_with_every_message_and_colour(tmp_path):
    """tests/data/history-v1 was written by the previous release's app (make_history_v1.py):
    after the upgrade every chat, message, token (text, kind, step, draft position) and figure is
    there, each chat one branch in the order it was written, and the old rows carry no source."""
    folder = v1_copy(tmp_path)
    before = raw_v1(folder / "chats.sqlite3")
    assert sum(len(rows) for _, _, rows in before.values()) == 10  # two chats, every kind among them
    h = History(folder)
    assert h.migrated_from == 1
    assert h.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert {c.id for c in h.chats()} == set(before)
    kinds = set()
    for cid, (title, sp, rows) in before.items():
        assert h.title(cid) == title and h.system_prompt(cid) == sp
        path = h.messages(cid)
        assert [m.id for m in path] == [r[0] for r in rows]  # one branch, nothing lost or reordered
        assert [m.id for m in h.all_messages(cid)] == [r[0] for r in rows]
        for m, (mid, role, content, tokens, stats) in zip(path, rows):
            assert (m.role, m.content) == (role, content)
            # every figure that release saved reads back the same through the typed value (the
            # rates and shares recomputed from the counts), under today's names, and is saved
            # again as it was, under them; the row itself now holds exactly that
            saved = json.loads(stats) if stats else None
            assert (m.figures is None) == (saved is None)
            if saved is not None:
                s = m.figures.stats
                assert isinstance(s, Stats) and s.new_tokens == saved["new_tokens"]
                assert (s.proposed_tokens, s.accepted_tokens) == (saved["draft_tokens"], saved["accepted_draft_tokens"])
                assert s.tokens_per_speculative_step == pytest.approx(saved["mean_accepted_per_step"])
                assert m.figures.draft_setting == saved["settings"]["draft_tokens"]  # k keeps its name
                again = m.figures.to_dict()
                want = under_new_names(saved)
                assert {k: again[k] for k in want} == want and not set(RENAMED) & set(again)
                row = h.db.execute("SELECT stats FROM messages WHERE id = ?", (mid,)).fetchone()[0]
                assert json.loads(row) == want
            old = json.loads(tokens) if tokens else []
            assert [[t.token_id, t.text, t.kind, t.step, t.draft_position] for t in m.tokens] == old
            assert all(t.source is None for t in m.tokens)  # not recorded by that release
            assert "".join(t.text for t in m.tokens) == (content if tokens else "")
            kinds |= {t.kind for t in m.tokens}
        assert [m.parent.id if m.parent else None for m in path] == [None] + [r[0] for r in rows[:-1]]
    assert kinds == {"accepted", "corrected", "bonus", "standard"}
    # the stopped answer keeps its mark
    assert any(m.figures and m.figures.stats.stop_reason == "cancelled" for cid in before for m in h.messages(cid))
    h.close()
    # opened again: nothing more to migrate, the same content
    h = History(folder)
    assert h.migrated_from == SCHEMA_VERSION
    assert [m.content for m in h.messages(1)] == [r[2] for r in before[1][2]]
    # and the old file's text is searchable
    assert any(hit.message_id == 7 for hit in h.search("about the mat"))
    h.close()


def test_a_failed_upgrade_leaves_the_old_file_as_it_was(tmp_path, monkeypatch):
    """The migration is one transaction: when it fails midway, nothing of it is kept."""
    import app.history as history

    folder = v1_copy(tmp_path)
    db_file = folder / "chats.sqlite3"
    monkeypatch.setattr(history, "MIGRATION_V2", history.MIGRATION_V2 + "\nSELECT no_such_function();\n")
    with pytest.raises(sqlite3.Error):
        History(folder)
    db = sqlite3.connect(db_file)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 0
    cols = [r[1] for r in db.execute("PRAGMA table_info(messages)")]
    assert "parent_id" not in cols and db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 10
    db.close()
    monkeypatch.undo()
    h = History(folder)  # and the real migration still runs on it
    assert h.migrated_from == 1 and len(h.messages(1)) == 8
    h.close()


def test_a_database_from_a_newer_release_is_refused_not_damaged(tmp_path):
    db = sqlite3.connect(tmp_path / "chats.sqlite3")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(SaveError, match="newer SpecDec Chat"):
        History(tmp_path)


# The previous release's figures as its window saved them (schema 2): Stats.to_dict() under the
# old names with the app's keys beside; an early build's row without the step counts; an edit.
V2_SPECULATIVE = {
    "new_tokens": 9, "seconds": 0.75, "prefill_seconds": 0.125, "draft_tokens": 8, "accepted_draft_tokens": 5,
    "target_forward_passes": 4, "draft_forward_passes": 9, "speculative_steps": 3, "speculative_step_tokens": 8,
    "per_position_proposed": [3, 3, 2], "per_position_accepted": [3, 2, 0], "draft_lengths": [3, 3, 2],
    "last_draft_length": 2, "stop_reason": "eos", "reused_prompt_tokens": 0, "mode": "speculative",
    "proposer": "lookup+draft", "steps_by_source": {"lookup": 1, "draft": 2},
    "proposed_by_source": {"lookup": 3, "draft": 5}, "accepted_by_source": {"lookup": 2, "draft": 3},
    "seconds_by_source": {"lookup": 0.125, "draft": 0.375}, "catchup_seconds": 0.0625, "catchup_tokens": 2,
    "plain_step_seconds": 0.0, "timed_plain_steps": 0, "tokens_per_second": 12.0, "decode_tokens_per_second": 12.8,
    "acceptance_rate": 0.625,
    "mean_accepted_per_step": 8 / 3, "plain_steps": 1, "plain_step_share": 0.25,
    "per_position_acceptance": [1.0, 2 / 3, 0.0], "mean_plain_step_seconds": 0.0,
    "settings": {"max_new_tokens": 64, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "draft_tokens": "adaptive",
                 "seed": 7},
    "series": [[0.25, 8.0], [0.75, 12.8]], "continued": 1}
V2_EARLY = {"new_tokens": 3, "seconds": 0.5, "draft_tokens": 4, "accepted_draft_tokens": 1, "target_forward_passes": 2,
            "mode": "speculative", "stop_reason": "max_new_tokens", "acceptance_rate": 0.25}
V2_EDITED = {"edited": True}


def v2_database(folder: Path) -> Path:
    """A chat file as the previous release left it (schema 2): its tables, then one chat of a
    question and three answers with the rows above."""
    import app.history as history

    folder.mkdir()
    db = sqlite3.connect(folder / "chats.sqlite3")
    db.executescript(history.SCHEMA_V1 + history.MIGRATION_V2 + "PRAGMA user_version = 2;")
    db.execute("INSERT INTO chats(id, title, system_prompt, created, updated) VALUES (1, 'old', '', 0, 0)")
    rows = [(1, "user", "q", None, None), (2, "assistant", "a", json.dumps(V2_SPECULATIVE), 1),
            (3, "assistant", "b", json.dumps(V2_EARLY), 1), (4, "assistant", "c", json.dumps(V2_EDITED), 1)]
    db.executemany("INSERT INTO messages(id, chat_id, role, content, stats, created, parent_id) "
                   "VALUES (?, 1, ?, ?, ?, 0, ?)", rows)
    db.execute("UPDATE chats SET leaf_id = 2")
    db.commit()
    db.close()
    return folder


def test_a_schema_2_database_reads_back_key_for_key_under_the_new_names(tmp_path):
    """Schema 3 renamed three figures (proposed_tokens, accepted_tokens, tokens_per_speculative_step):
    a file the previous release wrote is migrated row by row, every value as it was, the
    settings' k (draft_tokens) untouched, and each answer reads back as it did."""
    h = History(v2_database(tmp_path / "v2"))
    assert h.migrated_from == 2 and h.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    raw = {mid: json.loads(s) for mid, s in h.db.execute("SELECT id, stats FROM messages WHERE stats IS NOT NULL")}
    assert raw == {2: under_new_names(V2_SPECULATIVE), 3: under_new_names(V2_EARLY), 4: V2_EDITED}
    assert raw[2]["settings"]["draft_tokens"] == "adaptive" and "proposed_tokens" not in raw[2]["settings"]
    figs = {m.content: m.figures for m in h.all_messages(1)}
    a = figs["a"]
    assert (a.stats.proposed_tokens, a.stats.accepted_tokens, a.stats.acceptance_rate) == (8, 5, 0.625)
    assert a.stats.tokens_per_speculative_step == 8 / 3 and a.steps_counted and a.draft_setting == "adaptive"
    # key for key: saved again as it reads, with the figures Stats grew since at their defaults
    assert a.to_dict() == under_new_names(V2_SPECULATIVE) | {"idle_read_seconds": 0.0, "idle_read_tokens": 0,
                                                             "prompt_read_ahead_seconds": 0.0,
                                                             "prompt_read_ahead_tokens": 0}
    early = figs["b"]  # saved before steps were counted apart: still no τ
    assert early.stats.proposed_tokens == 4 and not early.steps_counted
    again, want = early.to_dict(), under_new_names(V2_EARLY)
    assert {k: again[k] for k in want} == want and "tokens_per_speculative_step" not in again
    assert figs["c"].edited_only and figs["q"] is None
    h.close()
    h = History(tmp_path / "v2")  # opened again: nothing more to migrate
    assert h.migrated_from == 3 and {m.content: m.figures for m in h.all_messages(1)} == figs
    h.close()


def test_a_failed_rename_leaves_the_schema_2_file_as_it_was(tmp_path, monkeypatch):
    """The rename is part of the one migration transaction: a failure after some rows were
    rewritten keeps none of them, and the version stays 2."""
    import app.history as history

    folder = v2_database(tmp_path / "v2")
    real = history.migrate_v3

    def fails_after_renaming(db):
        real(db)
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(history, "migrate_v3", fails_after_renaming)
    with pytest.raises(sqlite3.Error):
        History(folder)
    db = sqlite3.connect(folder / "chats.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    assert json.loads(db.execute("SELECT stats FROM messages WHERE id = 2").fetchone()[0]) == V2_SPECULATIVE
    db.close()


# -- branches ----------------------------------------------------------------------------------
def test_branches_are_stored_as_a_tree_and_the_chat_reopens_on_its_branch(tmp_path):
    h = History(tmp_path)
    chat = h.new_chat("t")
    conv = Conversation()
    q1 = conv.add(Message("user", "first question"), None)
    h.add_message(chat, q1)
    a1 = conv.add(Message("assistant", "answer one"), q1)
    h.add_message(chat, a1)
    a2 = conv.add(Message("assistant", "answer two"), q1)  # regenerated: a sibling
    h.add_message(chat, a2)
    q2 = conv.add(Message("user", "first question, edited"), None)  # edited: a sibling of q1
    h.add_message(chat, q2)
    a3 = conv.add(Message("assistant", "answer three"), q2)
    h.add_message(chat, a3)
    assert [m.content for m in h.messages(chat)] == ["first question, edited", "answer three"]
    # back to the first question: its newest continuation is shown
    assert conv.switch(q2, -1) is q1 and conv.leaf is a2
    h.set_leaf(chat, conv.leaf.id)
    assert [m.content for m in h.messages(chat)] == ["first question", "answer two"]
    tree = h.all_messages(chat)
    again = Conversation(tree, next(m for m in tree if m.id == h.leaf(chat)))
    by = {m.content: m for m in tree}
    assert again.version(by["answer two"]) == (2, 2) and again.version(by["first question"]) == (1, 2)
    assert again.switch(by["answer two"], -1) is by["answer one"]
    assert [m.content for m in again.path()] == ["first question", "answer one"]
    assert again.switch(by["answer one"], -1) is None  # no version before the first
    # deleting a message takes what follows it on every branch
    h.delete_message(q1.id)
    assert [m.content for m in h.all_messages(chat)] == ["first question, edited", "answer three"]
    assert not [hit for hit in h.search("answer") if hit.message_id in (a1.id, a2.id)]
    h.close()


def test_conversation_remove_and_newest_leaf():
    conv = Conversation()
    q = conv.add(Message("user", "q"), None)
    a = conv.add(Message("assistant", "a"), q)
    q2 = conv.add(Message("user", "q2"), a)
    conv.add(Message("assistant", "a2"), q2)
    b = conv.add(Message("assistant", "b"), q)
    assert conv.newest_leaf(q) is b and conv.path() == [q, b]
    conv.show(a)
    assert [m.content for m in conv.path()] == ["q", "a", "q2", "a2"]
    conv.remove(a)
    assert [m.content for m in conv.messages] == ["q", "b"] and conv.leaf is q


# -- tokens, attachments, streaming ------------------------------------------------------------
def test_tokens_keep_their_source_and_messages_their_attachments(tmp_path):
    h = History(tmp_path)
    chat = h.new_chat("t")
    q = Message("user", "change X", attachments=[Attachment("main.py", "def f():\n    return 1\n", 24)])
    h.add_message(chat, q)
    a = Message("assistant", "def f", [StoredToken(1, "def", "accepted", 1, 0, "lookup"),
                                        StoredToken(2, " f", "corrected", 1, 1, "lookup"),
                                        StoredToken(3, "(", "accepted", 2, 0, "draft"),
                                        StoredToken(4, ")", "standard", 3, None, "")], parent=q)
    h.add_message(chat, a)
    q_back, a_back = h.messages(chat)
    assert q_back.attachments == [Attachment("main.py", "def f():\n    return 1\n", 24, "file")]
    assert [t.source for t in a_back.tokens] == ["lookup", "lookup", "draft", ""]
    md = chat_to_markdown("t", "", h.messages(chat))
    assert "*Attached: main.py*" in md
    h.close()


def test_an_answer_saved_while_it_streams_is_cut_when_the_file_is_next_opened(tmp_path):
    h = History(tmp_path)
    chat = h.new_chat("t")
    q = Message("user", "q")
    h.add_message(chat, q)
    a = Message("assistant", "", parent=q, state="streaming")
    for i in range(3):
        a.tokens.append(StoredToken(i, f"w{i} ", "accepted", i, 0, "draft"))
        a.content += f"w{i} "
        h.save_message(chat, a)  # the first call inserts, the next ones update the same row
    assert h.db.execute("SELECT COUNT(*), MAX(state) FROM messages WHERE role = 'assistant'").fetchone() == (1, "streaming")
    h.close()  # as if the app were killed here
    h = History(tmp_path)
    back = h.messages(chat)[-1]
    assert back.cut and back.content == "w0 w1 w2 " and len(back.tokens) == 3
    assert h.db.execute("SELECT state FROM messages WHERE id = ?", (back.id,)).fetchone() == ("cut",)
    h.close()


# -- search -----------------------------------------------------------------------------------
def test_search_finds_titles_and_text_with_the_match_marked(tmp_path):
    h = History(tmp_path)
    a = h.new_chat("Binary search in C")
    h.add_message(a, Message("user", "Write a binary_search function, please"))
    b = h.new_chat("Travel")
    m = Message("user", "Three days in Lisbon: what to see?")
    h.add_message(b, m)
    hits = h.search("binary")
    assert [(x.chat_id, x.message_id is None) for x in hits] == [(a, True), (a, False)]
    assert HIGHLIGHT[0] + "binary" in hits[1].snippet.lower().replace("binary_search", "binary")
    assert [x.message_id for x in h.search("lisb")] == [m.id]  # a prefix of a word
    assert h.search("days lisbon") and not h.search("days paris")  # every word must occur
    assert h.search('what "to') is not None  # quotes and operators are literal, never an error
    assert h.search("") == [] and h.search("   ") == []
    h.set_title(b, "Portugal trip")
    assert [x.chat_id for x in h.search("portugal")] == [b] and not h.search("travel")
    h.delete_chat(b)
    assert not h.search("lisbon")
    h.close()


def test_fts_query_quotes_every_word():
    assert fts_query('foo-bar "x" AND') == '"foo-bar"* """x"""* "AND"*'


def test_search_without_fts5_falls_back_to_like(tmp_path, monkeypatch):
    import app.history as history

    monkeypatch.setattr(history, "_fts_available", lambda: False)
    h = History(tmp_path)
    assert not h.fts
    c = h.new_chat("Plain")
    m = Message("user", "the quick brown fox")
    h.add_message(c, m)
    hits = h.search("brown")
    assert [x.message_id for x in hits] == [m.id] and HIGHLIGHT[0] + "brown" + HIGHLIGHT[1] in hits[0].snippet
    h.close()
    monkeypatch.undo()
    h = History(tmp_path)  # a Python with FTS5 later: the file is indexed then
    assert h.fts and [x.message_id for x in h.search("fox")] == [m.id]
    h.close()


# -- pins, prefs ---------------------------------------------------------------------------------
def test_pinned_chats_come_first_and_prefs_persist(tmp_path):
    h = History(tmp_path)
    old = h.new_chat("old")
    h.new_chat("new")
    assert [c.title for c in h.chats()] == ["new", "old"]
    h.set_pinned(old, True)
    assert [(c.title, c.pinned) for c in h.chats()] == [("old", True), ("new", False)]
    h.set_pref("theme", "dark")
    h.close()
    h = History(tmp_path)
    assert h.pref("theme") == "dark" and h.pref("nothing", "x") == "x" and h.pinned(old)
    h.close()


# -- writes the disk refuses ------------------------------------------------------------------------
def test_a_full_disk_raises_save_error_and_keeps_the_file_whole(tmp_path):
    """SQLite's own "database or disk is full" (its page limit reached, as on a full disk): the
    write raises SaveError in the user's words, nothing of it lands, and once there is room the
    same write goes through."""
    h = History(tmp_path)
    chat = h.new_chat("t")
    pages = h.db.execute("PRAGMA page_count").fetchone()[0]
    h.db.execute(f"PRAGMA max_page_count = {pages}")
    big = Message("user", "x" * 20000)
    with pytest.raises(SaveError, match="disk is full"):
        h.add_message(chat, big)
    assert big.id is None and h.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    h.db.execute("PRAGMA max_page_count = 1073741823")
    h.add_message(chat, big)
    assert h.messages(chat)[0].content == "x" * 20000
    h.close()


def test_a_read_only_database_raises_save_error(tmp_path):
    h = History(tmp_path)
    chat = h.new_chat("t")
    h.db.execute("PRAGMA query_only = ON")  # SQLite refuses every write, as on a read-only folder
    with pytest.raises(SaveError, match="read-only"):
        h.add_message(chat, Message("user", "hi"))
    h.db.execute("PRAGMA query_only = OFF")
    h.add_message(chat, Message("user", "hi"))
    h.close()


def test_an_answers_figures_are_saved_in_the_form_every_release_wrote(tmp_path):
    """The typed figures (app/answer_figures.py) are saved as the window saved its dict before
    them -- Stats.to_dict() with settings, series, continued, error and server beside -- and a row
    of that form reads back as the same value, key for key; an edited answer is {"edited": true}."""
    from app.answer_figures import AnswerFigures
    from specdec_core.remote.generation import ServerStats

    stats = ServerStats(new_tokens=5, seconds=0.5, prefill_seconds=0.1, proposed_tokens=4, accepted_tokens=3,
                        target_forward_passes=3, speculative_steps=2, speculative_step_tokens=4,
                        per_position_proposed=[2, 2], per_position_accepted=[2, 1], stop_reason="error",
                        mode="speculative", proposer="draft", steps_by_source={"draft": 2},
                        server={"engine": "llama.cpp", "figures": "llama-server timings"})
    row = {**stats.to_dict(), "settings": {"max_new_tokens": None, "temperature": 0.0, "top_k": 0, "top_p": 1.0,
                                           "draft_tokens": "adaptive", "seed": 3},
           "series": [[0.25, 8.0], [0.5, 10.0]], "continued": 2, "error": "the server closed the stream"}
    fig = AnswerFigures.from_dict(json.loads(json.dumps(row)))
    assert (fig.stats.acceptance_rate, fig.stats.tokens_per_speculative_step, fig.stats.plain_steps) == (0.75, 2.0, 1)
    assert (fig.continued, fig.error, fig.server["engine"], fig.draft_setting) == (
        2, "the server closed the stream", "llama.cpp", "adaptive")
    assert fig.to_dict() == row
    # an edited answer the model then wrote on: the model's part's figures, "edited" beside
    written_on = AnswerFigures.from_dict({**row, "edited": True})
    assert written_on.edited and not written_on.edited_only and written_on.to_dict() == {**row, "edited": True}
    assert AnswerFigures.from_dict({"edited": True}).edited_only
    h = History(tmp_path)
    cid = h.new_chat("t")
    q = Message("user", "hi")
    h.add_message(cid, q)
    a = Message("assistant", "yo", [StoredToken(1, "yo", "accepted", 1, 0, "draft")], fig, parent=q)
    e = Message("assistant", "mine", figures=AnswerFigures(edited=True), parent=q)
    h.add_message(cid, a)
    h.add_message(cid, e)
    raw = [json.loads(s) if s else None for (s,) in h.db.execute("SELECT stats FROM messages ORDER BY id")]
    assert raw == [None, row, {"edited": True}]
    back = {m.content: m.figures for m in h.all_messages(cid)}
    assert back == {"hi": None, "yo": fig, "mine": AnswerFigures(edited=True)}
    h.close()
