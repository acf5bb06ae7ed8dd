"""Text and code files attached to a message: reading them, refusing what is not text, and
putting them into the prompt. No Qt.

A file is read whole when it is attached (up to MAX_BYTES) and its text travels with the message
(history.Attachment): the model sees it in a fenced block under its name, before the typed text,
so prompt lookup can copy from it ("here is my code, change X" is where lookup pays most).
"""

from __future__ import annotations

import codecs
from pathlib import Path

from .history import Attachment

MAX_BYTES = 512 * 1024  # a text file this large is ~130k tokens: more than the embedded target's context
# a paste at least this long becomes an attachment chip instead of text in the input box
PASTE_CHARS = 2000
PASTE_LINES = 40
_SNIFF = 8192

LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript",
    ".tsx": "tsx", ".jsx": "jsx", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".cs": "csharp", ".java": "java", ".kt": "kotlin", ".go": "go", ".rs": "rust", ".rb": "ruby",
    ".php": "php", ".swift": "swift", ".sh": "bash", ".bash": "bash", ".zsh": "bash", ".ps1": "powershell",
    ".sql": "sql", ".html": "html", ".htm": "html", ".css": "css", ".scss": "scss", ".json": "json",
    ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini", ".xml": "xml", ".md": "markdown",
    ".tex": "latex", ".r": "r", ".lua": "lua", ".pl": "perl", ".scala": "scala", ".dart": "dart",
}


class AttachmentError(ValueError):
    """A file that cannot be attached; the message says why, in the user's words."""


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / 1024 / 1024:.1f} MB"


def limits_text() -> str:
    """The limits, said before anything is attached (the Attach button's tooltip, the picker)."""
    return (f"Text and code files up to {human_size(MAX_BYTES)} each; each one shows the tokens it takes "
            "of the target's context before you send")


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return True
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return bool(head) and controls / len(head) > 0.05


def decode_text(data: bytes) -> str | None:
    """The text of a file's bytes (UTF-8, UTF-16 with its mark, else Windows-1252 for old text
    files), None when they are not text."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            return None
    if _looks_binary(data[:_SNIFF]):
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return None


def read_file(path: Path | str) -> Attachment:
    """A file as an attachment; AttachmentError (never an OSError) for what cannot be one."""
    p = Path(path)
    name = p.name or str(p)
    try:
        if p.is_dir():
            raise AttachmentError(f"“{name}” is a folder: attach the files inside it one by one")
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise AttachmentError(f"“{name}” is {human_size(size)}; a file can be attached up to "
                                  f"{human_size(MAX_BYTES)} (larger files do not fit the model's context)")
        with p.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except AttachmentError:
        raise
    except FileNotFoundError:
        raise AttachmentError(f"“{name}” is not there any more") from None
    except PermissionError:
        raise AttachmentError(f"“{name}” cannot be read: permission denied") from None
    except OSError as exc:
        raise AttachmentError(f"“{name}” cannot be read: {exc.strerror or exc}") from None
    text = decode_text(data)
    if text is None:
        raise AttachmentError(f"“{name}” is not a text file (its bytes look like an image, an archive or a "
                              "program); only text and code files can be attached")
    return Attachment(name, text, len(data), "file")


def from_paste(text: str, number: int = 1) -> Attachment:
    return Attachment(f"Pasted text {number}" if number > 1 else "Pasted text", text,
                      len(text.encode("utf-8")), "paste")


def is_long_paste(text: str) -> bool:
    return len(text) >= PASTE_CHARS or text.count("\n") + 1 >= PASTE_LINES


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks inside the text, so the text cannot close it."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def attachment_block(a: Attachment) -> str:
    """How the model sees one attachment: its name, then its text in a fenced block."""
    lang = LANGUAGES.get(Path(a.name).suffix.lower(), "") if a.origin == "file" else ""
    fence = _fence(a.text)
    head = f"File `{a.name}`:" if a.origin == "file" else f"{a.name}:"
    return f"{head}\n{fence}{lang}\n{a.text.rstrip(chr(10))}\n{fence}"


def prompt_content(text: str, attachments: list[Attachment]) -> str:
    """A user message as the model reads it: every attachment, then the typed text."""
    blocks = [attachment_block(a) for a in attachments]
    if text.strip():
        blocks.append(text)
    return "\n\n".join(blocks)
