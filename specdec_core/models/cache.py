"""Where the models layer keeps its files: assembled GGUFs and their converted forms."""

from __future__ import annotations

from pathlib import Path

from ..paths import cache_dir


def gguf_dir() -> Path:
    """Assembled GGUF files of the embedded default pair."""
    return cache_dir() / "gguf"


def converted_dir() -> Path:
    """Converted (dequantized, save_pretrained) forms of GGUF files, keyed by sha256 + dtype."""
    return cache_dir() / "converted"


def dir_size(path: Path) -> int:
    """Total bytes of the files under path (0 when missing)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def remove_stale_partials(directory: Path) -> None:
    """Delete `*.partial-<pid>` left by a writer that died (a half conversion is GBs)."""
    import os
    import shutil

    import psutil

    if not directory.is_dir():
        return
    for p in directory.glob("*.partial-*"):
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not psutil.pid_exists(int(pid)):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
