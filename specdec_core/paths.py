"""Where the app keeps its files (shared by the models layer and the CPU backend)."""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "specdec-chat"
ENV_CACHE_DIR = "SPECDEC_CACHE_DIR"  # overrides the platform default; the tests point it at tmp


def cache_dir() -> Path:
    """The user cache dir (platformdirs), or $SPECDEC_CACHE_DIR when set. Not created here."""
    override = os.environ.get(ENV_CACHE_DIR)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))
