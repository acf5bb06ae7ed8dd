"""Recently opened models: the .gguf files, folders and hub ids a user picked or loaded, newest
first, with what each last loaded as (quantization, dtype, device, bytes).

A small JSON file in the user data folder (platformdirs; $SPECDEC_DATA_DIR overrides it, and the
app passes its own --data-dir), written whole to a temporary file and renamed into place, so a
crash never leaves half a list. An unreadable file is an empty list: recents are a convenience,
never a reason for the app not to start.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

ENV_DATA_DIR = "SPECDEC_DATA_DIR"
FILE_NAME = "recent-models.json"
KEEP = 20
LOADED_KEYS = ("name", "quantization", "dtype", "device", "memory_bytes")


def default_file() -> Path:
    override = os.environ.get(ENV_DATA_DIR)
    if override:
        return Path(override).expanduser() / FILE_NAME
    import platformdirs

    return Path(platformdirs.user_data_dir("specdec-chat", appauthor=False)) / FILE_NAME


def _normal(spec: str) -> str:
    """Paths are kept absolute (the app may start elsewhere next time); hub ids as they are."""
    p = Path(spec).expanduser()
    return str(p.resolve()) if p.exists() else spec


def load(file: Path | None = None) -> list[dict]:
    file = file or default_file()
    try:
        data = json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    items = data.get("models") if isinstance(data, dict) else None
    return [m for m in items if isinstance(m, dict) and isinstance(m.get("spec"), str)] if isinstance(items, list) else []


def _save(items: list[dict], file: Path) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f"{file.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"models": items[:KEEP]}, indent=1), encoding="utf-8")
    os.replace(tmp, file)


def remember(spec: str, role: str | None = None, loaded: dict | None = None, file: Path | None = None) -> None:
    """Put `spec` first; `loaded` (a ModelInfo as a dict) records what it loaded as. 'default'
    is not a recent: the embedded pair is always listed."""
    if not spec or spec.strip().lower() == "default":
        return
    file = Path(file or default_file())
    spec = _normal(spec.strip())
    items = load(file)
    old = next((m for m in items if m["spec"] == spec), {})
    entry = {"spec": spec, "when": time.time(), "role": role or old.get("role")}
    if loaded:
        entry["loaded"] = {k: loaded.get(k) for k in LOADED_KEYS}
    elif old.get("loaded"):
        entry["loaded"] = old["loaded"]
    try:
        _save([entry] + [m for m in items if m["spec"] != spec], file)
    except OSError:
        pass  # a read-only data folder: the list is a convenience


def forget(spec: str, file: Path | None = None) -> None:
    file = Path(file or default_file())
    items = load(file)
    kept = [m for m in items if m["spec"] not in (spec, _normal(spec))]
    if len(kept) != len(items):
        try:
            _save(kept, file)
        except OSError:
            pass
