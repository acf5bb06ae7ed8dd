"""A chat as a JSON file: everything the app keeps of it, so it can be imported elsewhere as it
was. The schema is documented in docs/chat-json.md ("format": "specdec-chat", "version": 2; a
version-1 file, whose figures had three older names, is read too).

What a file holds: the title, the system prompt, the pin, and every message on every branch
(edited questions and regenerated answers are siblings under the same parent), each with its
attachments (name, text, size), and an answer with each token's kind, step, draft position and
source and its figures (the engine's Stats, the settings it was written with, its tok/s curve);
and which branch the chat shows. Messages are listed parents first and refer to their parent by
the `id` they have in the file (not the database's).

Reading is strict: a file that is not JSON, not ours, from a newer format, or holds a value the
window could not show is refused with one line saying where (ChatFileError), before anything is
written. Plain Python: no Qt, no torch.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass

from specdec_core.events import Stats, TokenKind
from specdec_core.renamed_figures import STATS_RENAMED, renamed_keys

from . import figures
from .answer_figures import AnswerFigures
from .history import Attachment, Message, StoredToken

FORMAT = "specdec-chat"
VERSION = 2  # 2: the figures proposed_tokens, accepted_tokens, tokens_per_speculative_step renamed
MAX_BYTES = 256 * 1024 * 1024  # a chat file past this is refused before it is read
KINDS = tuple(k.value for k in TokenKind)
ROLES = ("user", "assistant")
STATES = ("", "cut")  # "streaming" in a file (exported mid-answer) is read as "cut"
ORIGINS = ("file", "paste")


class ChatFileError(ValueError):
    """A file that cannot be imported; the message says why in one line."""


@dataclass(eq=False)
class ChatFile:
    """A chat as read from a file: its messages linked to their parents, not yet saved."""

    title: str
    system_prompt: str
    messages: list[Message]  # every branch, parents first
    leaf: Message | None  # the last message of the branch shown
    pinned: bool = False


# -- writing ------------------------------------------------------------------------------
def _token(t: StoredToken) -> dict:
    out = {"id": t.token_id, "text": t.text, "kind": t.kind, "step": t.step, "draft_position": t.draft_position}
    if t.source is not None:
        out["source"] = t.source
    return out


def encode(chat: ChatFile, app_version: str = "") -> dict:
    """The file's content as a JSON value (see docs/chat-json.md)."""
    ids = {id(m): i for i, m in enumerate(chat.messages)}
    messages = []
    for i, m in enumerate(chat.messages):
        if m.parent is not None and ids.get(id(m.parent), i) >= i:
            raise ValueError("a message's parent comes before it")
        messages.append({
            "id": i,
            "parent": ids[id(m.parent)] if m.parent is not None else None,
            "role": m.role,
            "content": m.content,
            "state": "cut" if m.state == "streaming" else m.state,  # what had streamed when it was exported
            "attachments": [a.to_dict() for a in m.attachments],
            "tokens": [_token(t) for t in m.tokens],
            "stats": m.figures.to_dict() if m.figures is not None else {},
        })
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "app_version": app_version,
        "chat": {
            "title": chat.title,
            "system_prompt": chat.system_prompt,
            "pinned": chat.pinned,
            "leaf": ids[id(chat.leaf)] if chat.leaf is not None else None,
            "messages": messages,
        },
    }


def dumps(chat: ChatFile, app_version: str = "") -> str:
    return json.dumps(encode(chat, app_version), ensure_ascii=False, indent=1) + "\n"


# -- reading ------------------------------------------------------------------------------
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and v == v  # NaN is no figure


def _need(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise ChatFileError(f"{where} {what}")


def _str(d: dict, key: str, where: str, default: str | None = None) -> str:
    v = d.get(key, default)
    _need(isinstance(v, str), where, f"needs a text \"{key}\"")
    return v


# The Stats fields by the type their annotation names, and the figures the app adds beside them:
# a value of another type would break the message's header or the side panel when shown. Whole
# numbers are checked as numbers: a count written as 3.0 shows as well as 3 does.
_CHECKS = {
    "int": _is_number,
    "float": _is_number,
    "str": lambda v: isinstance(v, str),
    "int | None": lambda v: v is None or _is_number(v),
    "str | None": lambda v: v is None or isinstance(v, str),
    "list[int]": lambda v: isinstance(v, list) and all(_is_number(x) for x in v),
    "dict[str, int]": lambda v: isinstance(v, dict) and all(_is_number(x) for x in v.values()),
    "dict[str, float]": lambda v: isinstance(v, dict) and all(_is_number(x) for x in v.values()),
}
STATS_TYPES = {f.name: str(f.type) for f in dataclasses.fields(Stats)}
STATS_TYPES.update({name: "float" for name in ("tokens_per_second", "decode_tokens_per_second", "acceptance_rate",
                                                "tokens_per_speculative_step", "plain_step_share",
                                                "mean_plain_step_seconds")})
STATS_TYPES["plain_steps"] = "int"
_APP_CHECKS = {
    "per_position_acceptance": lambda v: isinstance(v, list) and all(_is_number(x) for x in v),
    "series": lambda v: isinstance(v, list) and all(isinstance(p, list) and len(p) == 2
                                                    and all(_is_number(x) for x in p) for p in v),
    "settings": lambda v: isinstance(v, dict),
    "server": lambda v: isinstance(v, dict),
    "error": lambda v: isinstance(v, str),
}


def _renamed_in(version: int) -> dict[str, str]:
    """The figures a file of `version` names otherwise than today -> today's names: a version-1
    file's draft_tokens, accepted_draft_tokens, mean_accepted_per_step (docs/chat-json.md, Versions)."""
    return STATS_RENAMED if version == 1 else {}


def _stats(v, where: str, version: int) -> AnswerFigures | None:
    _need(isinstance(v, dict), where, "needs \"stats\" as an object")
    renamed = _renamed_in(version)
    for key, value in v.items():  # the file's own names in what is said
        check = _APP_CHECKS.get(key) or _CHECKS.get(STATS_TYPES.get(renamed.get(key, key), ""))
        _need(check is None or check(value), where, f"has a figure \"{key}\" of the wrong type")
    try:  # the typed figures, and what the window writes from them: the header, the side panel's numbers
        fig = AnswerFigures.from_dict(renamed_keys(v, renamed))
        if fig is not None:
            s = fig.stats
            figures.meta_line(fig), figures.sources(s), figures.alpha(s), figures.tau(s), figures.draft_length(s)
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
        raise ChatFileError(f"{where} has figures the app cannot show ({type(exc).__name__}: {exc})") from None
    return fig


def _tokens(v, where: str) -> list[StoredToken]:
    _need(isinstance(v, list), where, "needs \"tokens\" as a list")
    out = []
    for j, t in enumerate(v):
        at = f"{where}, token {j + 1},"
        _need(isinstance(t, dict), at, "is not an object")
        _need(_is_int(t.get("id")), at, "needs a whole-number \"id\"")
        _need(t.get("kind") in KINDS, at, f"has kind {t.get('kind')!r}, not one of {', '.join(KINDS)}")
        _need(_is_int(t.get("step")), at, "needs a whole-number \"step\"")
        pos = t.get("draft_position")
        _need(pos is None or _is_int(pos), at, "needs \"draft_position\" as a whole number or null")
        source = t.get("source")
        _need(source is None or isinstance(source, str), at, "needs \"source\" as a text")
        out.append(StoredToken(t["id"], _str(t, "text", at), t["kind"], t["step"], pos, source))
    return out


def _attachments(v, where: str) -> list[Attachment]:
    _need(isinstance(v, list), where, "needs \"attachments\" as a list")
    out = []
    for j, a in enumerate(v):
        at = f"{where}, attachment {j + 1},"
        _need(isinstance(a, dict), at, "is not an object")
        size = a.get("bytes", 0)
        _need(_is_int(size) and size >= 0, at, "needs \"bytes\" as a whole number")
        origin = a.get("origin", "file")
        _need(origin in ORIGINS, at, f"has origin {origin!r}, not one of {', '.join(ORIGINS)}")
        out.append(Attachment(_str(a, "name", at), _str(a, "text", at), size, origin))
    return out


def _message(d, n: int, by_id: dict, version: int) -> Message:
    where = f"message {n}"
    _need(isinstance(d, dict), where, "is not an object")
    mid, parent = d.get("id"), d.get("parent")
    _need(_is_int(mid), where, "needs a whole-number \"id\"")
    _need(mid not in by_id, where, f"repeats id {mid}")
    _need(parent is None or (_is_int(parent) and parent in by_id), where,
          f"follows message id {parent!r}, which is not listed before it")
    role = d.get("role")
    _need(role in ROLES, where, f"has role {role!r}, not one of {', '.join(ROLES)}")
    state = {"streaming": "cut"}.get(d.get("state", ""), d.get("state", ""))
    _need(state in STATES, where, f"has state {d.get('state')!r}")
    stats = _stats(d.get("stats", {}), where, version)
    m = Message(role, _str(d, "content", where), _tokens(d.get("tokens", []), where), stats, None,
                by_id.get(parent) if parent is not None else None, _attachments(d.get("attachments", []), where), state)
    by_id[mid] = m
    return m


def decode(data) -> ChatFile:
    """A parsed JSON value as a chat, or ChatFileError naming the first thing wrong."""
    _need(isinstance(data, dict) and data.get("format") == FORMAT, "This file",
          "is not a SpecDec Chat export (its \"format\" is not \"specdec-chat\")")
    version = data.get("version")
    _need(_is_int(version) and version >= 1, "This file", f"has no valid format version ({version!r})")
    _need(version <= VERSION, "This file", f"was written by a newer SpecDec Chat (format version {version}; "
                                           f"this one reads up to {VERSION}): update the app to import it")
    chat = data.get("chat")
    _need(isinstance(chat, dict), "This file", "holds no \"chat\" object")
    msgs = chat.get("messages", [])
    _need(isinstance(msgs, list), "The chat", "needs \"messages\" as a list")
    by_id: dict[int, Message] = {}
    messages = [_message(d, n, by_id, version) for n, d in enumerate(msgs, 1)]
    leaf = chat.get("leaf")
    _need(leaf is None or (_is_int(leaf) and leaf in by_id), "The chat", f"shows message id {leaf!r}, which it lacks")
    pinned = chat.get("pinned", False)
    _need(isinstance(pinned, bool), "The chat", "needs \"pinned\" as true or false")
    return ChatFile(_str(chat, "title", "The chat", ""), _str(chat, "system_prompt", "The chat", ""), messages,
                    by_id[leaf] if leaf is not None else (messages[-1] if messages else None), pinned)


def loads(raw: bytes | str) -> ChatFile:
    """A file's bytes as a chat, or ChatFileError."""
    if len(raw) > MAX_BYTES:
        raise ChatFileError(f"This file is {len(raw) / 2**20:.0f} MB, more than a chat file can be "
                            f"({MAX_BYTES // 2**20} MB)")
    try:
        text = raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise ChatFileError("This file is not text (UTF-8): not a SpecDec Chat export") from None
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and the recursion a maliciously deep file provokes
        where = f" (line {exc.lineno}, column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ChatFileError(f"This file is not JSON{where}: not a SpecDec Chat export") from None
    except RecursionError:
        raise ChatFileError("This file nests too deeply to be a SpecDec Chat export") from None
    return decode(data)
