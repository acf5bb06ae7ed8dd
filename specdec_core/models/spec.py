"""Parsing a model SPEC: 'default', a local folder, a .gguf file, or a hub id.

A string that exists on disk is always a local model (so a folder named like a hub id,
"Qwen/Qwen2.5-0.5B-Instruct", wins over the hub). A string that looks like a path but does
not exist is a missing path, not a hub id, so a typo is reported as such.
A hub id may name one GGUF file inside the repo: "owner/repo/file.gguf".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError

# Hugging Face repo ids: "name" (legacy, no owner) is not accepted here, to keep typos of
# local paths from turning into network requests.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_HUB_GGUF = re.compile(r"^([A-Za-z0-9][\w.-]*/[\w.-]+)/([\w./-]+\.gguf)$", re.IGNORECASE)


@dataclass(frozen=True)
class Spec:
    kind: str  # "default" | "folder" | "gguf" | "hub" | "hub-gguf"
    value: str  # the SPEC as given
    path: Path | None = None  # for folder/gguf
    repo_id: str | None = None  # for hub/hub-gguf
    filename: str | None = None  # for hub-gguf


def _looks_like_path(s: str) -> bool:
    return s.startswith((".", "/", "~", "\\")) or (len(s) > 1 and s[1] == ":") or s.count("/") > 1 or "\\" in s


def parse_spec(spec: str) -> Spec:
    s = (spec or "").strip()
    if not s:
        raise ModelError("empty model SPEC; give a folder, a .gguf file, a hub id (owner/name) or 'default'")
    if s.lower() == "default":
        return Spec("default", s)

    path = Path(s).expanduser()
    if path.exists():
        if path.is_dir():
            return Spec("folder", s, path=path)
        if path.suffix.lower() == ".gguf":
            return Spec("gguf", s, path=path)
        raise ModelError(f"{s} is a file but not a .gguf; give a .gguf file or a model folder (with config.json)")

    m = _HUB_GGUF.match(s)
    if m and not s.startswith((".", "/", "~")):
        return Spec("hub-gguf", s, repo_id=m.group(1), filename=m.group(2))
    if _HUB_ID.match(s) and not s.lower().endswith(".gguf"):
        return Spec("hub", s, repo_id=s)
    if _looks_like_path(s) or s.lower().endswith(".gguf"):
        raise ModelError(f"model path not found: {s}")
    raise ModelError(
        f"{s!r} is not a model folder, a .gguf file, a hub id (owner/name) or 'default'"
    )
