"""The report of the last load, kept so `specdec models` can show its notes.

A load's notes say which kernels each model runs on, what was requantized and why a fallback
happened (ModelInfo.notes); the app's side panel shows them for the pair it holds. Opening a
local pair (engines.open_engine, which every front end uses) calls `save()`, and `specdec
models`, which loads nothing, reads the last one back. Writing it never fails a load.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .cache import cache_dir
from .types import ModelInfo

FILE_NAME = "last-load.json"


def record_path() -> Path:
    return cache_dir() / FILE_NAME


def save(target: ModelInfo, draft: ModelInfo | None = None, path: Path | None = None) -> Path | None:
    """Record the infos of a loaded pair; None when it could not."""
    path = path or record_path()
    data = {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "target": target.to_dict(),
            "draft": draft.to_dict() if draft is not None else None}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.partial-{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache loses the record, never the load
        return None
    return path


def read(path: Path | None = None) -> dict | None:
    """The last recorded load, or None when there is none (or it cannot be read)."""
    path = path or record_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
