"""Chats in SQLite under the user data folder (platformdirs), used from the GUI thread only.

What is stored (schema version 3; `migrate` brings any earlier file there, in one transaction):

- chats: title, system prompt, pinned, and `leaf_id`, the last message of the branch the chat
  shows (its other branches stay in the file);
- messages: a tree. Each message has a `parent_id` (the message it follows; NULL for a chat's
  first), so an edited question or a regenerated answer is a sibling of the one it replaces, and
  every version stays reachable. Each assistant token is stored with its kind, step, draft
  position and source ("lookup", "draft", "" for a plain step; absent in rows written before the
  source was recorded), so colours come back after a restart, and an answer's figures (the
  typed AnswerFigures' saved form, JSON). A user message keeps its attached files (name and
  text). `state` is "streaming" while an answer is being written: it is saved as it grows, and
  a row still "streaming" when the file is next opened is an answer the app could not finish
  (killed, a power cut): it is marked "cut", with everything that reached the disk;
- messages_fts / chats_fts: an FTS5 index of message text and chat titles, kept by this module
  in the same transaction as each write (no triggers: a Python without FTS5 can still open the
  file and searches it with LIKE);
- prefs: small key/value settings that belong with the chats: the theme, the side panel's
  settings and the models loaded last (app/user_memory.py), the saved system prompts
  (app/saved_prompts.py).

Every write is its own transaction; a failing write (disk full, a read-only folder) raises
SaveError and changes nothing, so the caller (app/saver.py) can keep the chat in memory and try
again later.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from specdec_core.renamed_figures import STATS_RENAMED, stats_under_current_names

from .answer_figures import AnswerFigures
from .answer_token import AnswerToken
from .figures import meta_line

APP_NAME = "specdec-chat"
DB_NAME = "chats.sqlite3"
SCHEMA_VERSION = 3

# Version 1: the schema of the first releases (no PRAGMA user_version). Kept verbatim: a new file
# is created as version 1 and goes through the same migrations as a user's old one.
SCHEMA_V1 = """
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
    tokens TEXT,            -- JSON [[token_id, text, kind, step, draft_position(, source)], ...] (assistant)
    stats TEXT,             -- JSON Stats.to_dict() plus mode/proposer/settings (assistant)
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_chat ON messages(chat_id, id);
"""

MIGRATION_V2 = """
ALTER TABLE chats ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE chats ADD COLUMN leaf_id INTEGER;
ALTER TABLE messages ADD COLUMN parent_id INTEGER;
ALTER TABLE messages ADD COLUMN attachments TEXT;   -- JSON [{"name", "text", "bytes", "origin"}] (user)
ALTER TABLE messages ADD COLUMN state TEXT NOT NULL DEFAULT '';  -- '' | 'streaming' | 'cut'
-- a version-1 chat is one line of messages: each follows the one before it
UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p
                                 WHERE p.chat_id = messages.chat_id AND p.id < messages.id);
UPDATE chats SET leaf_id = (SELECT MAX(m.id) FROM messages m WHERE m.chat_id = chats.id);
CREATE INDEX IF NOT EXISTS messages_parent ON messages(chat_id, parent_id);
CREATE TABLE IF NOT EXISTS prefs (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# Version 3: three of the figures a message's `stats` holds renamed to say what they are
# (draft_tokens -> proposed_tokens, accepted_draft_tokens -> accepted_tokens, mean_accepted_per_step
# -> tokens_per_speculative_step; specdec_core/renamed_figures.py): each saved row rewritten under
# the new names (migrate_v3), its values and its other keys as they were -- "settings" keeps k as
# `draft_tokens`. No table changes.


FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content, tokenize = 'unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE IF NOT EXISTS chats_fts USING fts5(title, tokenize = 'unicode61 remove_diacritics 2');
"""
FTS_FILL = """
DELETE FROM messages_fts;
DELETE FROM chats_fts;
INSERT INTO messages_fts(rowid, content) SELECT id, content FROM messages;
INSERT INTO chats_fts(rowid, title) SELECT id, title FROM chats;
"""

HIGHLIGHT = ("\x02", "\x03")  # around each matched term in a search snippet


class SaveError(OSError):
    """A write did not reach the disk (disk full, a read-only folder, an I/O error); nothing of
    it was kept. The message says what happened, in the user's words."""


def default_data_dir() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP_NAME, appauthor=False))


StoredToken = AnswerToken  # one token type: the chat view colours what the store keeps


def _stored_token(token_id: int, text: str, kind: str, step: int, draft_position: int | None,
                  source: str | None = None) -> StoredToken:
    """A saved token as the engine names it today. Earlier builds saved a plain step's
    token (k = 0: the prefill, a step the controller left to the target) as "bonus"; a bonus
    token always fills position k >= 1, so "bonus" at position 0 is exactly such a plain step,
    shown as what it was: "standard". The row itself is left as saved."""
    if kind == "bonus" and draft_position == 0:
        return StoredToken(token_id, text, "standard", step, None, source)
    return StoredToken(token_id, text, kind, step, draft_position, source)


@dataclass
class Attachment:
    """A text file (or a long paste) sent with a user message: its content goes into the prompt
    under its name (app/attachments.py)."""

    name: str
    text: str
    bytes: int = 0
    origin: str = "file"  # "file" | "paste"

    def to_dict(self) -> dict:
        return {"name": self.name, "text": self.text, "bytes": self.bytes, "origin": self.origin}

    @classmethod
    def from_dict(cls, d: dict) -> Attachment:
        return cls(str(d.get("name", "")), str(d.get("text", "")), int(d.get("bytes") or 0), str(d.get("origin", "file")))


@dataclass(eq=False)  # identity: a message is one node of its chat's tree
class Message:
    role: str
    content: str
    tokens: list[StoredToken] = field(default_factory=list)
    figures: AnswerFigures | None = None  # an answer's (None: a question, or an answer saved without)
    id: int | None = None
    parent: Message | None = field(default=None, repr=False)  # the message it follows (None: the chat's first)
    attachments: list[Attachment] = field(default_factory=list)
    state: str = ""  # "" complete | "streaming" (being written) | "cut" (the app ended while it streamed)

    @property
    def cut(self) -> bool:
        return self.state == "cut"


@dataclass
class ChatSummary:
    id: int
    title: str
    updated: float
    pinned: bool = False


@dataclass
class SearchHit:
    chat_id: int
    title: str
    message_id: int | None  # None: the title matched
    role: str
    snippet: str  # the matched text around the terms, each term between HIGHLIGHT marks


def _fts_available() -> bool:
    try:
        sqlite3.connect(":memory:").execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return True
    except sqlite3.Error:
        return False


def fts_query(text: str) -> str:
    """A user's search words as an FTS5 query: every word must occur, each as a prefix
    ("rev" finds "reverse"); quotes keep FTS5's operators and punctuation literal."""
    words = text.split()
    return " ".join('"' + w.replace('"', '""') + '"*' for w in words)


def _write_error(exc: sqlite3.Error) -> SaveError:
    text = str(exc)
    low = text.lower()
    if "full" in low:
        why = "the disk is full"
    elif "readonly" in low or "read-only" in low or "read only" in low:
        why = "the data folder is read-only"
    elif "locked" in low or "busy" in low:
        why = "another program holds the chat database"
    else:
        why = text
    return SaveError(why)


class History:
    def __init__(self, data_dir: Path | str | None = None, *, memory: bool = False):
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.path = self.data_dir / DB_NAME
        if memory:
            self.db = sqlite3.connect(":memory:")
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path)
            self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA foreign_keys = ON")
        # every commit reaches the disk before it returns: a power cut loses at most the write
        # in flight (a streaming answer is committed at least once a second, app/generation_control)
        self.db.execute("PRAGMA synchronous = FULL")
        self.fts = _fts_available()
        self.migrated_from = migrate(self.db, self.fts)
        self._mark_cut()

    @classmethod
    def in_memory(cls, data_dir: Path | str | None = None) -> History:
        """Chats for this session only (the data folder could not be opened)."""
        return cls(data_dir, memory=True)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def _transaction(self):
        """One transaction: all of its statements reach the file or none does (SaveError)."""
        try:
            with self.db:
                yield self.db
        except sqlite3.Error as exc:
            raise _write_error(exc) from exc

    def _write(self, ops: list[tuple[str, tuple]]) -> None:
        with self._transaction() as db:
            for sql, args in ops:
                db.execute(sql, args)

    def _mark_cut(self) -> None:
        """Answers that were still streaming when the app last ended (killed, a power cut): kept
        with what reached the disk, marked as cut."""
        try:
            with self.db:
                self.db.execute("UPDATE messages SET state = 'cut' WHERE state = 'streaming'")
        except sqlite3.Error:
            pass  # a read-only file: they are shown as cut all the same (messages())

    # -- chats ----------------------------------------------------------------------------
    def new_chat(self, title: str = "", system_prompt: str = "") -> int:
        now = time.time()
        with self._transaction() as db:
            chat_id = int(db.execute("INSERT INTO chats(title, system_prompt, created, updated) VALUES (?, ?, ?, ?)",
                                     (title, system_prompt, now, now)).lastrowid)
            if self.fts:
                db.execute("INSERT INTO chats_fts(rowid, title) VALUES (?, ?)", (chat_id, title))
        return chat_id

    def chats(self) -> list[ChatSummary]:
        """Pinned chats first, then the most recently updated."""
        rows = self.db.execute("SELECT id, title, updated, pinned FROM chats "
                               "ORDER BY pinned DESC, updated DESC, id DESC").fetchall()
        return [ChatSummary(r[0], r[1], r[2], bool(r[3])) for r in rows]

    def set_title(self, chat_id: int, title: str) -> None:
        ops = [("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))]
        if self.fts:
            ops += [("DELETE FROM chats_fts WHERE rowid = ?", (chat_id,)),
                    ("INSERT INTO chats_fts(rowid, title) VALUES (?, ?)", (chat_id, title))]
        self._write(ops)

    def set_pinned(self, chat_id: int, pinned: bool) -> None:
        self._write([("UPDATE chats SET pinned = ? WHERE id = ?", (int(pinned), chat_id))])

    def pinned(self, chat_id: int) -> bool:
        row = self.db.execute("SELECT pinned FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return bool(row and row[0])

    def set_system_prompt(self, chat_id: int, system_prompt: str) -> None:
        self._write([("UPDATE chats SET system_prompt = ? WHERE id = ?", (system_prompt, chat_id))])

    def system_prompt(self, chat_id: int) -> str:
        row = self.db.execute("SELECT system_prompt FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else ""

    def title(self, chat_id: int) -> str:
        row = self.db.execute("SELECT title FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else ""

    def set_leaf(self, chat_id: int, message_id: int | None) -> None:
        """The last message of the branch the chat shows."""
        self._write([("UPDATE chats SET leaf_id = ? WHERE id = ?", (message_id, chat_id))])

    def leaf(self, chat_id: int) -> int | None:
        row = self.db.execute("SELECT leaf_id FROM chats WHERE id = ?", (chat_id,)).fetchone()
        return row[0] if row else None

    def delete_chat(self, chat_id: int) -> None:
        ops = []
        if self.fts:
            ops += [("DELETE FROM messages_fts WHERE rowid IN (SELECT id FROM messages WHERE chat_id = ?)", (chat_id,)),
                    ("DELETE FROM chats_fts WHERE rowid = ?", (chat_id,))]
        ops += [("DELETE FROM messages WHERE chat_id = ?", (chat_id,)), ("DELETE FROM chats WHERE id = ?", (chat_id,))]
        self._write(ops)

    def insert_chat(self, title: str, system_prompt: str, messages: list[Message], leaf: Message | None,
                    pinned: bool = False) -> int:
        """A whole chat in one transaction (an imported file: all of it or nothing); `messages`
        parents first. Sets each message's id; returns the chat's."""
        now = time.time()
        try:
            with self._transaction() as db:
                chat_id = int(db.execute(
                    "INSERT INTO chats(title, system_prompt, created, updated, pinned) VALUES (?, ?, ?, ?, ?)",
                    (title, system_prompt, now, now, int(pinned))).lastrowid)
                if self.fts:
                    db.execute("INSERT INTO chats_fts(rowid, title) VALUES (?, ?)", (chat_id, title))
                for m in messages:
                    content, tokens, stats, attachments, state = self._columns(m)
                    parent_id = m.parent.id if m.parent is not None else None
                    m.id = int(db.execute(
                        "INSERT INTO messages(chat_id, role, content, tokens, stats, created, parent_id, attachments, "
                        "state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (chat_id, m.role, content, tokens, stats, now, parent_id, attachments, state)).lastrowid)
                    if self.fts:
                        db.execute("INSERT INTO messages_fts(rowid, content) VALUES (?, ?)", (m.id, m.content))
                leaf_id = leaf.id if leaf is not None else None
                db.execute("UPDATE chats SET leaf_id = ? WHERE id = ?", (leaf_id, chat_id))
        except BaseException:
            for m in messages:  # rolled back: none of them is saved
                m.id = None
            raise
        return chat_id

    # -- messages -------------------------------------------------------------------------
    @staticmethod
    def _columns(message: Message) -> tuple:
        tokens = (json.dumps([[t.token_id, t.text, t.kind, t.step, t.draft_position]
                              + ([] if t.source is None else [t.source]) for t in message.tokens])
                  if message.tokens else None)
        stats = json.dumps(message.figures.to_dict()) if message.figures is not None else None
        attachments = json.dumps([a.to_dict() for a in message.attachments]) if message.attachments else None
        return message.content, tokens, stats, attachments, message.state

    def add_message(self, chat_id: int, message: Message) -> int:
        """Insert `message` after its parent (which must be saved already); sets message.id."""
        parent_id = message.parent.id if message.parent is not None else None
        if message.parent is not None and parent_id is None:
            raise ValueError("a message's parent is saved before it")
        content, tokens, stats, attachments, state = self._columns(message)
        now = time.time()
        with self._transaction() as db:
            mid = int(db.execute(
                "INSERT INTO messages(chat_id, role, content, tokens, stats, created, parent_id, attachments, state) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (chat_id, message.role, content, tokens, stats, now, parent_id, attachments, state)).lastrowid)
            db.execute("UPDATE chats SET updated = ?, leaf_id = ? WHERE id = ?", (now, mid, chat_id))
            if self.fts:
                db.execute("INSERT INTO messages_fts(rowid, content) VALUES (?, ?)", (mid, content))
        message.id = mid
        return mid

    def update_message(self, message: Message) -> None:
        """Write what `message` holds now (a streaming answer as it grows, then finished)."""
        content, tokens, stats, attachments, state = self._columns(message)
        ops = [("UPDATE messages SET content = ?, tokens = ?, stats = ?, attachments = ?, state = ? WHERE id = ?",
                (content, tokens, stats, attachments, state, message.id))]
        if self.fts:
            ops += [("DELETE FROM messages_fts WHERE rowid = ?", (message.id,)),
                    ("INSERT INTO messages_fts(rowid, content) VALUES (?, ?)", (message.id, content))]
        self._write(ops)

    def save_message(self, chat_id: int, message: Message) -> int:
        """Insert a new message, or write an existing one's current content."""
        if message.id is None:
            return self.add_message(chat_id, message)
        self.update_message(message)
        return message.id

    def delete_message(self, message_id: int) -> None:
        """A message and every message that follows it on any branch."""
        ids = [r[0] for r in self.db.execute(
            "WITH RECURSIVE sub(id) AS (SELECT ? UNION ALL SELECT m.id FROM messages m JOIN sub ON m.parent_id = sub.id) "
            "SELECT id FROM sub", (message_id,))]
        marks = ",".join("?" * len(ids))
        ops = [(f"DELETE FROM messages WHERE id IN ({marks})", tuple(ids))]
        if self.fts:
            ops.append((f"DELETE FROM messages_fts WHERE rowid IN ({marks})", tuple(ids)))
        self._write(ops)

    def all_messages(self, chat_id: int) -> list[Message]:
        """Every message of the chat, on every branch, oldest first, each linked to its parent."""
        rows = self.db.execute(
            "SELECT id, role, content, tokens, stats, parent_id, attachments, state FROM messages "
            "WHERE chat_id = ? ORDER BY id", (chat_id,)).fetchall()
        by_id: dict[int, Message] = {}
        out = []
        for mid, role, content, tokens, stats, parent_id, attachments, state in rows:
            toks = [_stored_token(*t) for t in json.loads(tokens)] if tokens else []
            atts = [Attachment.from_dict(a) for a in json.loads(attachments)] if attachments else []
            figures = AnswerFigures.from_dict(json.loads(stats)) if stats else None
            m = Message(role, content, toks, figures, mid, by_id.get(parent_id), atts,
                        "cut" if state == "streaming" else state)
            by_id[mid] = m
            out.append(m)
        return out

    def messages(self, chat_id: int) -> list[Message]:
        """The branch the chat shows: from its first message to its leaf."""
        msgs = self.all_messages(chat_id)
        leaf_id = self.leaf(chat_id)
        leaf = next((m for m in msgs if m.id == leaf_id), msgs[-1] if msgs else None)
        path = []
        while leaf is not None:
            path.append(leaf)
            leaf = leaf.parent
        return path[::-1]

    # -- search ---------------------------------------------------------------------------
    def search(self, text: str, limit: int = 50) -> list[SearchHit]:
        """Chats whose title, and messages whose text, hold every word of `text` (as prefixes),
        best matches first; titles before messages."""
        if not text.split():
            return []
        if self.fts:
            q = fts_query(text)
            a, b = HIGHLIGHT
            try:
                titles = self.db.execute(
                    "SELECT c.id, c.title, highlight(chats_fts, 0, ?, ?) FROM chats_fts f JOIN chats c ON c.id = f.rowid "
                    "WHERE chats_fts MATCH ? ORDER BY rank LIMIT ?", (a, b, q, limit)).fetchall()
                msgs = self.db.execute(
                    "SELECT m.chat_id, c.title, m.id, m.role, snippet(messages_fts, 0, ?, ?, '…', 14) "
                    "FROM messages_fts f JOIN messages m ON m.id = f.rowid JOIN chats c ON c.id = m.chat_id "
                    "WHERE messages_fts MATCH ? ORDER BY rank LIMIT ?", (a, b, q, limit)).fetchall()
            except sqlite3.Error:
                return []
            return ([SearchHit(cid, title, None, "", snip) for cid, title, snip in titles]
                    + [SearchHit(cid, title, mid, role, snip) for cid, title, mid, role, snip in msgs])
        return self._search_like(text, limit)

    def _search_like(self, text: str, limit: int) -> list[SearchHit]:
        """Without FTS5: substring matches of the whole text, newest first."""
        pat = "%" + text.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        titles = self.db.execute("SELECT id, title FROM chats WHERE title LIKE ? ESCAPE '\\' ORDER BY updated DESC "
                                 "LIMIT ?", (pat, limit)).fetchall()
        msgs = self.db.execute(
            "SELECT m.chat_id, c.title, m.id, m.role, m.content FROM messages m JOIN chats c ON c.id = m.chat_id "
            "WHERE m.content LIKE ? ESCAPE '\\' ORDER BY m.id DESC LIMIT ?", (pat, limit)).fetchall()
        return ([SearchHit(cid, t, None, "", t) for cid, t in titles]
                + [SearchHit(cid, t, mid, role, _like_snippet(content, text.strip())) for cid, t, mid, role, content in msgs])

    # -- prefs ----------------------------------------------------------------------------
    def pref(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM prefs WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_pref(self, key: str, value: str) -> None:
        self._write([("INSERT INTO prefs(key, value) VALUES (?, ?) "
                      "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))])


def _like_snippet(content: str, term: str, width: int = 60) -> str:
    i = content.lower().find(term.lower())
    if i < 0:
        return content[:width]
    lo, hi = max(0, i - width // 2), i + len(term)
    a, b = HIGHLIGHT
    return ("…" if lo else "") + content[lo:i] + a + content[i:hi] + b + content[hi:hi + width // 2] + (
        "…" if hi + width // 2 < len(content) else "")


def schema_version(db: sqlite3.Connection) -> int:
    """1 for a file of the first releases (which set no version), 0 for an empty one."""
    v = db.execute("PRAGMA user_version").fetchone()[0]
    if v:
        return v
    has_chats = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chats'").fetchone()
    return 1 if has_chats else 0


def migrate(db: sqlite3.Connection, fts: bool) -> int:
    """Bring the file to SCHEMA_VERSION in one transaction (all of it or nothing: a failed
    migration leaves the old file as it was). Returns the version it started from."""
    start = schema_version(db)
    if start > SCHEMA_VERSION:
        raise SaveError(f"the chat database was written by a newer SpecDec Chat (schema {start}); "
                        "update the app to open it")
    if start == SCHEMA_VERSION:
        if fts and not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts'").fetchone():
            with db:  # written by a Python without FTS5: index it now
                _executescript(db, FTS_SCHEMA + FTS_FILL)
        return start
    script = ""
    if start < 1:
        script += SCHEMA_V1
    if start < 2:
        script += MIGRATION_V2
    if fts:
        script += FTS_SCHEMA + FTS_FILL
    with db:
        _executescript(db, script)
        if start < 3:
            migrate_v3(db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return start


def migrate_v3(db: sqlite3.Connection) -> None:
    """Every saved answer's figures under today's names (inside the caller's transaction). A row
    that is not a JSON object is left as it was: the migration renames, it does not judge."""
    rows = db.execute("SELECT id, stats FROM messages WHERE stats IS NOT NULL").fetchall()
    for mid, stats in rows:
        try:
            saved = json.loads(stats)
        except ValueError:
            continue
        if isinstance(saved, dict) and any(old in saved for old in STATS_RENAMED):
            renamed = json.dumps(stats_under_current_names(saved))
            db.execute("UPDATE messages SET stats = ? WHERE id = ?", (renamed, mid))


def _executescript(db: sqlite3.Connection, script: str) -> None:
    """Statement by statement inside the caller's transaction (executescript would commit first)."""
    db.execute("BEGIN")
    for stmt in _statements(script):
        db.execute(stmt)


def _statements(script: str) -> list[str]:
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        buf += line.split("--", 1)[0] + ("\n" if "--" in line else "")
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def chat_to_markdown(title: str, system_prompt: str, messages: list[Message]) -> str:
    """A chat (the branch it shows) as a Markdown document (what File > Export writes)."""
    lines = [f"# {title or 'Chat'}", ""]
    if system_prompt.strip():
        lines += ["> **System:** " + system_prompt.strip().replace("\n", "\n> "), ""]
    for m in messages:
        who = {"user": "You", "assistant": "Assistant", "system": "System"}.get(m.role, m.role)
        lines += [f"## {who}", ""]
        for a in m.attachments:
            lines += [f"*Attached: {a.name}*", ""]
        lines += [m.content.rstrip(), ""]
        if m.role == "assistant" and m.figures is not None:
            lines += ["<sub>" + meta_line(m.figures) + "</sub>", ""]
    return "\n".join(lines).rstrip() + "\n"
