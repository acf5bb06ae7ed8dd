"""The project's data files -- the app's icon, stylesheet and palette (the colours of the kinds,
docs/architecture.md "Words"), the race presets, the bench's built-in prompts -- from the
top-level assets/ folder.

That folder ships as the package `specdec_assets` (pyproject.toml maps it; the PyInstaller
spec bundles it under that name), and its files are found through importlib.resources: the
same call reads them from a source tree (an editable install), an installed wheel and a
bundle. No torch and no Qt here.
"""

from __future__ import annotations

import atexit
from contextlib import ExitStack
from importlib.resources import as_file, files
from pathlib import Path

PACKAGE = "specdec_assets"
_extracted = ExitStack()  # real files made for path() where the assets are not on disk
atexit.register(_extracted.close)


def read_text(name: str) -> str:
    return (files(PACKAGE) / name).read_text(encoding="utf-8")


def read_bytes(name: str) -> bytes:
    return (files(PACKAGE) / name).read_bytes()


def path(name: str) -> Path:
    """A file system path of asset `name`, for an API that wants one (Qt's icons); it stays
    valid until the process ends."""
    return _extracted.enter_context(as_file(files(PACKAGE) / name))
