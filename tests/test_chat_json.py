"""A chat as a JSON file (app/chat_json.py, docs/chat-json.md), without a window: the exact
shape of a file, a round trip of a chat with branches, versions, every kind of token, figures and
attachments, the files it refuses (each with its one-line reason), and an import written to the
History in one transaction."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from app import chat_json, figures
from app.answer_figures import AnswerFigures
from app.chat_json import ChatFile, ChatFileError
from app.conversation import Conversation
from app.history import Attachment, History, Message, SaveError, StoredToken
from specdec_core.events import Stats

DOC = Path(__file__).resolve().parent.parent / "docs" / "chat-json.md"


def shape(messages: list[Message], leaf: Message | None):
    """A chat's tree as plain values: each message's parent by index, and everything it holds."""
    index = {id(m): i for i, m in enumerate(messages)}
    rows = [(index.get(id(m.parent)) if m.parent is not None else None, m.role, m.content, m.state,
             [(t.token_id, t.text, t.kind, t.step, t.draft_position, t.source) for t in m.tokens],
             m.figures, [a.to_dict() for a in m.attachments]) for m in messages]
    return rows, index.get(id(leaf)) if leaf is not None else None


def file_shape(chat: ChatFile):
    return chat.title, chat.system_prompt, chat.pinned, shape(chat.messages, chat.leaf)


def branched_chat() -> ChatFile:
    """A question edited once (two versions), the first with two regenerated answers, the
    second answered; every token kind, a token without a recorded source, an attachment, a cut
    answer, the figures the window saves."""
    conv = Conversation()
    q1 = conv.add(Message("user", "the cat", attachments=[Attachment("notes.txt", "mat\nhat\n", 8, "file"),
                                                          Attachment("paste 1", "x" * 30, 30, "paste")]), None)
    stats = {"mode": "speculative", "proposer": "lookup+draft", "new_tokens": 4, "seconds": 0.5,
             "prefill_seconds": 0.1, "proposed_tokens": 3, "accepted_tokens": 2, "speculative_steps": 1,
             "speculative_step_tokens": 3, "target_forward_passes": 2, "acceptance_rate": 2 / 3,
             "tokens_per_speculative_step": 3.0, "plain_step_share": 0.5, "plain_steps": 1, "last_draft_length": 3,
             "per_position_acceptance": [1.0, 1.0, 0.0], "steps_by_source": {"draft": 1},
             "proposed_by_source": {"draft": 3}, "accepted_by_source": {"draft": 2}, "stop_reason": "eos",
             "decode_tokens_per_second": 7.5, "tokens_per_second": 8.0,
             "settings": {"max_new_tokens": 256, "temperature": 0.0, "top_k": 0, "top_p": 1.0,
                          "draft_tokens": "adaptive", "seed": 0},
             "series": [[0.2, 5.0], [0.5, 7.5]]}
    conv.add(Message("assistant", " sat on the", [
        StoredToken(10, " sat", "standard", 0, None, ""), StoredToken(11, " on", "accepted", 1, 0, "draft"),
        StoredToken(12, " the", "accepted", 1, 1, "lookup"), StoredToken(13, "", "corrected", 1, 2, "draft")],
        AnswerFigures.from_dict(stats)), q1)
    a2 = conv.add(Message("assistant", " ran", [StoredToken(14, " ran", "bonus", 3, 2, None)],
                          AnswerFigures.from_dict({"mode": "standard", "stop_reason": "cancelled", "new_tokens": 1}),
                          state="cut"), q1)
    q2 = conv.add(Message("user", "the hat"), None)  # an edit of the first question: its sibling
    conv.add(Message("assistant", " is red", [StoredToken(15, " is", "server", 0, None),
                                              StoredToken(16, " red", "server", 1, None)],
                     AnswerFigures.from_dict({"mode": "speculative", "server": {"engine": "llama.cpp"},
                                              "error": "connection reset"})), q2)
    conv.show(a2)  # the branch shown: the first question's second answer
    return ChatFile("the cat ✓", "You are concise.\nAlways.", conv.messages, conv.leaf, pinned=True)


# -- the file's shape ---------------------------------------------------------------------------
def test_a_small_chat_is_written_exactly_as_documented():
    q = Message("user", "hi", attachments=[Attachment("a.py", "print(1)\n", 9, "file")])
    stats = Stats(mode="speculative", new_tokens=1)
    a = Message("assistant", " yo", [StoredToken(5, " yo", "accepted", 1, 0, "draft")], AnswerFigures(stats),
                parent=q)
    data = chat_json.encode(ChatFile("t", "sp", [q, a], a), "9.9")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", data.pop("exported_at"))
    assert data == {
        "format": "specdec-chat", "version": 2, "app_version": "9.9",
        "chat": {"title": "t", "system_prompt": "sp", "pinned": False, "leaf": 1, "messages": [
            {"id": 0, "parent": None, "role": "user", "content": "hi", "state": "",
             "attachments": [{"name": "a.py", "text": "print(1)\n", "bytes": 9, "origin": "file"}],
             "tokens": [], "stats": {}},
            {"id": 1, "parent": 0, "role": "assistant", "content": " yo", "state": "", "attachments": [],
             "tokens": [{"id": 5, "text": " yo", "kind": "accepted", "step": 1, "draft_position": 0,
                         "source": "draft"}],
             "stats": {**stats.to_dict(), "series": []}}]}}


def test_the_documented_example_imports():
    block = DOC.read_text(encoding="utf-8").split("```json", 1)[1].split("```", 1)[0]
    chat = chat_json.loads(block)
    assert chat.title == "the cat" and [m.role for m in chat.messages] == ["user", "assistant"]
    assert [t.kind for t in chat.leaf.tokens] == ["standard", "accepted"] and chat.leaf.parent is chat.messages[0]


# -- round trip ---------------------------------------------------------------------------------
def test_a_branched_chat_comes_back_identical():
    chat = branched_chat()
    text = chat_json.dumps(chat, "1.0")
    back = chat_json.loads(text.encode("utf-8"))
    assert file_shape(back) == file_shape(chat)
    assert back.leaf.content == " ran" and back.leaf.state == "cut"
    # the tree itself, not only its listing: versions and the branch shown
    conv = Conversation(back.messages, back.leaf)
    assert [m.content for m in conv.path()] == ["the cat", " ran"]
    assert conv.version(conv.path()[0]) == (1, 2) and conv.version(back.leaf) == (2, 2)
    # and once more: a file read and written again is the same file (but for its date)
    again = json.loads(chat_json.dumps(back, "1.0"))
    first = json.loads(text)
    again.pop("exported_at"), first.pop("exported_at")
    assert again == first


def test_an_answer_exported_while_it_streams_is_read_as_cut():
    q = Message("user", "q")
    a = Message("assistant", "part", [StoredToken(1, "part", "standard", 0, None)], parent=q, state="streaming")
    data = chat_json.encode(ChatFile("t", "", [q, a], a))
    assert data["chat"]["messages"][1]["state"] == "cut"
    data["chat"]["messages"][1]["state"] = "streaming"  # another writer's file
    assert chat_json.decode(data).leaf.state == "cut"


# -- what is refused --------------------------------------------------------------------------
def good() -> dict:
    return chat_json.encode(branched_chat())


def broken(change) -> dict:
    data = good()
    change(data)
    return data


def set_in(path, value):
    def change(data):
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return change


REFUSED = [
    (b"# Chat\n\n## You\n\nhi\n", "not JSON \\(line 1, column 1\\)"),
    (b"\xff\xfe\x00garbage", "not text"),
    ("[" * 100_000 + "]" * 100_000, "not JSON|nests too deeply"),
    ({"messages": []}, "not a SpecDec Chat export"),
    (broken(set_in(["format"], "other-chat")), "not a SpecDec Chat export"),
    (broken(set_in(["version"], 3)), "newer SpecDec Chat \\(format version 3; this one reads up to 2\\)"),
    (broken(set_in(["version"], "1")), "no valid format version"),
    (broken(set_in(["chat"], [])), "no \"chat\" object"),
    (broken(set_in(["chat", "messages"], {})), "\"messages\" as a list"),
    (broken(set_in(["chat", "messages", 1, "parent"], 4)), "message 2 follows message id 4, which is not listed"),
    (broken(set_in(["chat", "messages", 1, "parent"], [0])), "message 2 follows message id \\[0\\]"),
    (broken(set_in(["chat", "messages", 1, "id"], 0)), "message 2 repeats id 0"),
    (broken(set_in(["chat", "messages", 0, "role"], "system")), "message 1 has role 'system'"),
    (broken(set_in(["chat", "messages", 1, "tokens", 2, "kind"], "magic")),
     "message 2, token 3, has kind 'magic', not one of standard"),
    (broken(set_in(["chat", "messages", 1, "tokens", 0, "text"], None)), "message 2, token 1, needs a text \"text\""),
    (broken(set_in(["chat", "messages", 1, "tokens", 0, "step"], 1.5)), "whole-number \"step\""),
    (broken(set_in(["chat", "messages", 1, "stats", "seconds"], "fast")), "figure \"seconds\" of the wrong type"),
    (broken(set_in(["chat", "messages", 1, "stats", "series"], [[1, "x"]])), "figure \"series\""),
    (broken(set_in(["chat", "messages", 0, "attachments", 0, "bytes"], -1)), "attachment 1, needs \"bytes\""),
    (broken(set_in(["chat", "messages", 1, "state"], "weird")), "message 2 has state 'weird'"),
    (broken(set_in(["chat", "leaf"], 99)), "shows message id 99, which it lacks"),
    (broken(set_in(["chat", "pinned"], "yes")), "\"pinned\" as true or false"),
]


@pytest.mark.parametrize("content, why", REFUSED, ids=[f"refused-{i}" for i in range(len(REFUSED))])
def test_a_bad_or_foreign_file_is_refused_with_its_reason(content, why):
    raw = content if isinstance(content, (bytes, str)) else json.dumps(content)
    with pytest.raises(ChatFileError, match=why) as info:
        chat_json.loads(raw)
    assert "\n" not in str(info.value)


def test_an_oversized_file_is_refused_before_it_is_parsed(monkeypatch):
    monkeypatch.setattr(chat_json, "MAX_BYTES", 100)
    with pytest.raises(ChatFileError, match="more than a chat file can be"):
        chat_json.loads(b" " * 101)


def test_figures_are_read_typed_and_derived_ones_follow_from_the_counts():
    """A file's "stats" become the typed figures: a derived figure (α, τ, a rate) is the counts'
    (a file that lacks one, or holds a stale one, shows what its counts say); a file saved
    before speculative steps were counted apart shows no τ, and keeps it so when written again."""
    data = good()
    figs = data["chat"]["messages"][1]["stats"]
    del figs["acceptance_rate"]
    figs["tokens_per_speculative_step"] = 99.0  # not what its counts say
    fig = chat_json.decode(data).messages[1].figures
    assert isinstance(fig, AnswerFigures) and isinstance(fig.stats, Stats)
    assert (fig.stats.acceptance_rate, fig.stats.tokens_per_speculative_step) == (2 / 3, 3.0)
    assert fig.settings["draft_tokens"] == "adaptive" and fig.series == [(0.2, 5.0), (0.5, 7.5)]
    old = chat_json.decode(good()).messages[2].figures  # {"mode", "stop_reason", "new_tokens"} only
    assert not old.steps_counted and "τ" not in figures.meta_line(dataclasses.replace(
        old, stats=dataclasses.replace(old.stats, mode="speculative")))
    assert AnswerFigures.from_dict(old.to_dict()) == old and "plain_step_share" not in old.to_dict()


def test_unknown_keys_are_ignored_and_absent_optional_ones_default():
    data = good()
    data["chat"]["future"] = {"x": 1}
    data["chat"]["messages"][0]["reactions"] = ["👍"]
    for key in ("state", "attachments", "tokens", "stats"):
        data["chat"]["messages"][3].pop(key)
    del data["chat"]["messages"][1]["tokens"][0]["source"]
    chat = chat_json.decode(data)
    q2 = chat.messages[3]
    assert (q2.state, q2.attachments, q2.tokens, q2.figures) == ("", [], [], None)
    assert chat.messages[1].tokens[0].source is None


# -- version 1 ---------------------------------------------------------------------------------
# A file the first release wrote: its figures under the three names version 2 renamed.
V1_STATS = {"mode": "speculative", "proposer": "draft", "new_tokens": 5, "seconds": 0.5, "prefill_seconds": 0.1,
            "draft_tokens": 6, "accepted_draft_tokens": 3, "target_forward_passes": 3, "speculative_steps": 2,
            "speculative_step_tokens": 5, "per_position_proposed": [2, 2, 2], "per_position_accepted": [2, 1, 0],
            "stop_reason": "eos", "tokens_per_second": 10.0, "acceptance_rate": 0.5, "mean_accepted_per_step": 2.5,
            "plain_steps": 1, "plain_step_share": 1 / 3,
            "settings": {"max_new_tokens": 32, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "draft_tokens": 3,
                         "seed": 1},
            "series": [[0.5, 10.0]]}
V2_NAMES = {"draft_tokens": "proposed_tokens", "accepted_draft_tokens": "accepted_tokens",
            "mean_accepted_per_step": "tokens_per_speculative_step"}


def v1_file(stats: dict) -> dict:
    return {"format": "specdec-chat", "version": 1, "exported_at": "2025-06-01T10:00:00+0000", "app_version": "0.1.0",
            "chat": {"title": "old", "system_prompt": "", "pinned": False, "leaf": 1, "messages": [
                {"id": 0, "parent": None, "role": "user", "content": "q", "state": "", "attachments": [],
                 "tokens": [], "stats": {}},
                {"id": 1, "parent": 0, "role": "assistant", "content": "a", "state": "", "attachments": [],
                 "tokens": [{"id": 3, "text": "a", "kind": "standard", "step": 0, "draft_position": None}],
                 "stats": stats}]}}


def test_a_version_1_file_reads_back_under_the_new_names_and_is_written_as_version_2():
    """The three renamed figures of a version-1 file read back under their new names, every
    value as written and the settings' k (draft_tokens) untouched; written again, the file is
    version 2 with exactly those keys."""
    fig = chat_json.loads(json.dumps(v1_file(V1_STATS))).leaf.figures
    s = fig.stats
    assert (s.proposed_tokens, s.accepted_tokens, s.acceptance_rate, s.tokens_per_speculative_step) == (6, 3, 0.5, 2.5)
    assert fig.steps_counted and fig.draft_setting == 3 and "τ 2.50" in figures.meta_line(fig)
    chat = chat_json.loads(json.dumps(v1_file(V1_STATS)))
    again = json.loads(chat_json.dumps(chat))
    assert again["version"] == 2
    written = again["chat"]["messages"][1]["stats"]
    want = {V2_NAMES.get(k, k): v for k, v in V1_STATS.items()}
    assert {k: written[k] for k in want} == want and not set(V2_NAMES) & set(written)
    assert written["settings"] == V1_STATS["settings"]  # k keeps its name
    # a wrong type under an old name is still refused, in one line naming the figure as the file does
    bad = v1_file({**V1_STATS, "draft_tokens": "six"})
    with pytest.raises(ChatFileError, match="message 2 has a figure \"draft_tokens\" of the wrong type"):
        chat_json.decode(bad)


def test_a_version_2_file_reads_the_new_names_only():
    """Version 2 writes the new names and nothing under the old ones; an old name in a version-2
    file is a key it does not know (ignored), not a figure."""
    data = good()
    stats = data["chat"]["messages"][1]["stats"]
    assert data["version"] == 2 and (stats["proposed_tokens"], stats["accepted_tokens"]) == (3, 2)
    assert stats["tokens_per_speculative_step"] == 3.0 and not set(V2_NAMES) & set(stats)
    for old, new in V2_NAMES.items():
        stats[old] = stats.pop(new)
    fig = chat_json.decode(data).messages[1].figures
    assert (fig.stats.proposed_tokens, fig.stats.accepted_tokens, fig.stats.acceptance_rate) == (0, 0, 0.0)


# -- written to the History -------------------------------------------------------------------
def test_an_imported_chat_is_saved_whole_and_reads_back_identical(tmp_path):
    h = History(tmp_path)
    chat = chat_json.loads(chat_json.dumps(branched_chat()))
    cid = h.insert_chat(chat.title, chat.system_prompt, chat.messages, chat.leaf, chat.pinned)
    msgs = h.all_messages(cid)
    leaf = next(m for m in msgs if m.id == h.leaf(cid))
    back = ChatFile(h.title(cid), h.system_prompt(cid), msgs, leaf, h.pinned(cid))
    assert file_shape(back) == file_shape(branched_chat())
    assert [m.id for m in chat.messages] == [m.id for m in msgs]
    assert {hit.message_id for hit in h.search("red")} == {msgs[4].id}  # indexed for search too
    h.close()


def test_an_import_the_disk_refuses_writes_nothing(tmp_path):
    h = History(tmp_path)
    h.new_chat("mine")
    pages = h.db.execute("PRAGMA page_count").fetchone()[0]
    h.db.execute(f"PRAGMA max_page_count = {pages}")
    chat = branched_chat()
    chat.messages[0].content = "y" * 50_000
    with pytest.raises(SaveError, match="disk is full"):
        h.insert_chat(chat.title, chat.system_prompt, chat.messages, chat.leaf)
    assert [m.id for m in chat.messages] == [None] * 5
    assert [c.title for c in h.chats()] == ["mine"]
    assert h.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    h.close()
