"""Chats in SQLite under the user data folder (platformdirs), used from the GUI thread only.

A message is written once, when it is complete: a user message when it is sent, an assistant
message when it finishes or is stopped. Each assistant token is stored with its kind, step and
draft position, so colours come back after a restart. Each write is its own transaction, so a
crash or kill mid-stream loses at most the message in flight.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from .figures import meta_line

APP_NAME = "specdec-chat"
DB_NAME = "chats.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL DEFAULT '',
    system_prompt TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    tokens TEXT,            -- JSON [[token_id, text, kind, step, draft_position], ...] (assistant)
    stats TEXT,             -- JSON Stats.to_dict() plus mode/proposer (assistant)
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, id);
"""


def default_data_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP_NAME, appauthor=False))


@dataclass
class StoredToken:
    token_id: int
    text: str
    kind: str
    step: int
    draft_position: int | None


def _stored_token(token_id: int, text: str, kind: str, step: int, draft_position: int | None) -> StoredToken:
    """A saved token as the engine names it today. Earlier builds saved a plain step's
    token (k = 0: the prefill, a step the controller left to the target) as "bonus"; a bonus
    token always fills position k >= 1, so "bonus" at position 0 is exactly such a plain step,
    shown as what it was: "standard". The row itself is left as saved."""
    if kind == "bonus" and draft_position == 0:
        return StoredToken(token_id, text, "standard", step, None)
    return StoredToken(token_id, text, kind, step, draft_position)


@dataclass
class Message:
    role: str
    content: str
    tokens: list[StoredToken] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    id: int | None = None


@dataclass
class ChatSummary:
    id: int
    title: str
    updated: float


class History:
    def __init__(self, data_dir: Path | str | None = None):
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.data_dir / DB_NAME
        self.db = sqlite3.connect(self.path)
        self.db.execute("PRAGMA foreign_keys = ON")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.executescript(SCHEMA)
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    # -- chats ----------------------------------------------------------------------------
    def new_chat(self, title: str = "", system_prompt: str = "") -> int:
        now = time.time()
        with self.db:
            cur = self.db.execute(
                "INSERT INTO chats(title, system_prompt, created, updated) VALUES (?, ?, ?, ?)",
                (title, system_prompt, now, now),
            )
        return int(cur.lastrowid)

    def chats(self) -> list[ChatSummary]:
        rows = self.db.execute("SELECT id, title, updated FROM chats ORDER BY updated DESC, id DESC").fetchall()
        return [ChatSummary(r[0], r[1], r[2]) for r in rows]

    def set_title(self, chat_id: int, title: str) -> None:
        with self.db:
            self.db.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    def set_system_prompt(self, chat_id: int, system_prompt: str) -> None:
        with self.db:
            self.db.execute("UPDATE chats SET system_prompt = ? WHERE id = ?", (system_prompt, chat_id))

    def system_prompt(self, chat_id: int) -> str:
        row = self.db.execute("SELECT system_prompt FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else ""

    def title(self, chat_id: int) -> str:
        row = self.db.execute("SELECT title FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else ""

    def delete_chat(self, chat_id: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM messages WHERE chat_id = ?", (chat_id,))
            self.db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    # -- messages -------------------------------------------------------------------------
    def add_message(self, chat_id: int, message: Message) -> int:
        tokens = (
            json.dumps([[t.token_id, t.text, t.kind, t.step, t.draft_position] for t in message.tokens])
            if message.tokens
            else None
        )
        stats = json.dumps(message.stats) if message.stats else None
        now = time.time()
        with self.db:
            cur = self.db.execute(
                "INSERT INTO messages(chat_id, role, content, tokens, stats, created) VALUES (?, ?, ?, ?, ?, ?)",
                (chat_id, message.role, message.content, tokens, stats, now),
            )
            self.db.execute("UPDATE chats SET updated = ? WHERE id = ?", (now, chat_id))
        message.id = int(cur.lastrowid)
        return message.id

    def delete_message(self, message_id: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def messages(self, chat_id: int) -> list[Message]:
        rows = self.db.execute(
            "SELECT id, role, content, tokens, stats FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,)
        ).fetchall()
        out = []
        for mid, role, content, tokens, stats in rows:
            toks = [_stored_token(*t) for t in json.loads(tokens)] if tokens else []
            out.append(Message(role, content, toks, json.loads(stats) if stats else {}, mid))
        return out


def chat_to_markdown(title: str, system_prompt: str, messages: list[Message]) -> str:
    """A chat as a Markdown document (what File > Export writes)."""
    lines = [f"# {title or 'Chat'}", ""]
    if system_prompt.strip():
        lines += ["> **System:** " + system_prompt.strip().replace("\n", "\n> "), ""]
    for m in messages:
        who = {"user": "You", "assistant": "Assistant", "system": "System"}.get(m.role, m.role)
        lines += [f"## {who}", "", m.content.rstrip(), ""]
        if m.role == "assistant" and m.stats:
            lines += ["<sub>" + meta_line(m.stats) + "</sub>", ""]
    return "\n".join(lines).rstrip() + "\n"
