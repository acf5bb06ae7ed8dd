"""Hub downloads a desktop user can watch, stop and pick up again.

huggingface_hub 2.x downloads each file to a temporary name of its own and deletes it when the
transfer fails, so a stopped 4 GB download starts again from zero. Here each file is fetched
with huggingface_hub's own pieces -- the file's metadata (get_hf_file_metadata: etag, size, where
to fetch it) and its streaming GET with a Range header (http_get with resume_size) -- into a
partial file we keep under <app cache>/downloads/, named by the file's etag, so a cancelled or
broken download resumes where it stopped (an etag names one exact content: a partial can only be
continued with the same bytes). A finished file is checked against its sha256 (the etag of an
LFS file), moved to where the HF cache keeps that blob, and handed back to huggingface_hub,
which links it into the snapshot exactly as its own download would; a last snapshot_download
records the revision. The result lives in the standard HF cache, shared with every HF tool.

Progress: bytes done of the total (what an earlier attempt kept included), the speed over the
last few seconds, the time left. Cancel: set the threading.Event; the next chunk raises
DownloadCancelled and the partial file stays for next time.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from . import cache
from .errors import ModelError
from .hub_files import file_patterns, hub_error
from .spec import parse_spec

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
SPEED_WINDOW = 3.0  # seconds of transfer the speed is measured over
# huggingface_hub reads the body in 10 MiB pieces and reports (and can be stopped) only between
# them: on a 1 MB/s line that is a bar moving every 10 s and a Cancel that waits as long. 256 KiB
# pieces cost nothing measurable at any speed (set on huggingface_hub's constant per download).
CHUNK_BYTES = 256 << 10
REPORT_EVERY = 0.1  # seconds between progress reports (and always at a file's end)


@dataclass
class DownloadProgress:
    spec: str
    file: str  # the file being fetched now
    done: int  # bytes on disk for this download, kept ones included
    total: int
    speed: float  # bytes per second over the last few seconds; 0 until measured
    eta: float | None  # seconds left at that speed
    files_done: int
    files_total: int

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "fraction": self.fraction}


class DownloadCancelled(Exception):
    """The user stopped the download; `kept` bytes stay on disk for the next attempt."""

    def __init__(self, spec: str, kept: int, total: int):
        super().__init__(f"download of {spec} cancelled; {kept:,} of {total:,} bytes kept, the next download resumes there")
        self.spec, self.kept, self.total = spec, kept, total


@dataclass
class PlannedFile:
    name: str
    size: int
    cached: bool  # already in the HF cache
    partial: int = 0  # bytes kept from an earlier attempt


@dataclass
class Plan:
    spec: str
    repo_id: str
    commit: str
    files: list[PlannedFile] = field(default_factory=list)
    single_file: str | None = None  # owner/repo/file.gguf: just that file

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def have(self) -> int:
        return sum(f.size if f.cached else f.partial for f in self.files)


_HUB_URL = re.compile(r"^https?://(?:www\.)?(?:huggingface\.co|hf\.co)/([^/?#]+/[^/?#]+)"
                      r"(?:/(?:blob|resolve|tree)/[^/?#]+(?:/([^?#]+?))?)?/?(?:[?#].*)?$")


def normalize_hub_id(text: str) -> str:
    """What a user pastes -> a SPEC: a model page's address gives owner/name, a file's address
    (.../blob/main/file.gguf or .../resolve/main/file.gguf) owner/name/file.gguf."""
    text = text.strip()
    m = _HUB_URL.match(text)
    if not m:
        return text
    repo, file = m.group(1), m.group(2)
    return f"{repo}/{file}" if file and file.lower().endswith(".gguf") else repo


def downloads_dir() -> Path:
    return cache.cache_dir() / "downloads"


def _repo_folder(repo_id: str) -> str:
    from huggingface_hub.file_download import repo_folder_name

    return repo_folder_name(repo_id=repo_id, repo_type="model")


def _partial_path(repo_id: str, etag: str) -> Path:
    return downloads_dir() / _repo_folder(repo_id) / f"{etag}.part"


# ---------------------------------------------------------------- planning


def plan(spec: str, allow_pickle: bool = False) -> Plan:
    """What downloading `spec` (a hub id, or owner/repo/file.gguf) involves: the files, their
    sizes, what is already here. Asks the hub (one line on any failure)."""
    from huggingface_hub import HfApi, try_to_load_from_cache
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import filter_repo_objects

    sp = parse_spec(spec)
    if sp.kind not in ("hub", "hub-gguf"):
        raise ModelError(f"{spec} is not a hub id: give owner/name or owner/name/file.gguf")
    api = HfApi()
    try:
        commit = api.model_info(sp.repo_id).sha
        tree = [f for f in api.list_repo_tree(sp.repo_id, recursive=True, revision=commit) if isinstance(f, RepoFile)]
    except Exception as e:  # noqa: BLE001
        raise hub_error(e, sp.repo_id) from None
    sizes = {f.path: (f.lfs.size if f.lfs is not None else f.size) for f in tree}
    ggufs = sorted(n for n in sizes if n.lower().endswith(".gguf"))
    if sp.kind == "hub-gguf":
        if sp.filename not in sizes:
            hint = f"; it has {', '.join(ggufs[:4])}{' ...' if len(ggufs) > 4 else ''}" if ggufs else ""
            raise ModelError(f"{sp.repo_id} has no file {sp.filename}{hint}")
        names = [sp.filename]
    else:
        names = sorted(filter_repo_objects(sizes, allow_patterns=file_patterns(allow_pickle)))
        if not any(n.endswith(".safetensors") for n in names):
            if ggufs:
                listed = ", ".join(f"{n} ({sizes[n] / 2**30:.1f} GiB)" for n in ggufs[:3])
                raise ModelError(f"{sp.repo_id} holds GGUF files, not safetensors weights: pick one as "
                                 f"{sp.repo_id}/FILE.gguf ({listed}{' ...' if len(ggufs) > 3 else ''})")
            if any(n.endswith((".bin", ".pt", ".pth")) for n in sizes) and not allow_pickle:
                raise ModelError(f"{sp.repo_id} has only pickle weights, which can run code when loaded; "
                                 "pick a repo with safetensors weights")
            raise ModelError(f"{sp.repo_id} has no model weights (*.safetensors) on the hub")
    p = Plan(spec, sp.repo_id, commit, single_file=sp.filename if sp.kind == "hub-gguf" else None)
    kept = {m.get("file"): m for m in partial_downloads() if m.get("repo_id") == sp.repo_id}
    for n in names:
        cached = isinstance(try_to_load_from_cache(sp.repo_id, n, revision=commit), str)
        part = kept.get(n, {}).get("bytes", 0) if not cached else 0
        p.files.append(PlannedFile(n, sizes[n], cached, part))
    return p


# ---------------------------------------------------------------- progress


class _Meter:
    """Bytes done, speed over a sliding window, time left; reports at most every REPORT_EVERY s."""

    def __init__(self, p: Plan, report: Callable[[DownloadProgress], None] | None, cancel: threading.Event | None):
        self.plan, self.report, self.cancel = p, report, cancel
        self.done = p.have
        self.files_done = sum(f.cached for f in p.files)
        self.file = ""
        self.samples: deque = deque([(time.monotonic(), 0)])
        self.moved = 0  # bytes transferred in this attempt
        self.last = 0.0

    def speed(self) -> float:
        now = time.monotonic()
        while len(self.samples) > 2 and now - self.samples[1][0] > SPEED_WINDOW:
            self.samples.popleft()
        t0, b0 = self.samples[0]
        return (self.moved - b0) / (now - t0) if now - t0 > 0.2 else 0.0

    def add(self, n: int) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise DownloadCancelled(self.plan.spec, self.done, self.plan.total)
        self.done += n
        self.moved += n
        self.samples.append((time.monotonic(), self.moved))
        self.emit()

    def emit(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.report is None or (not force and now - self.last < REPORT_EVERY):
            return
        self.last = now
        speed = self.speed()
        left = max(self.plan.total - self.done, 0)
        self.report(DownloadProgress(self.plan.spec, self.file, self.done, self.plan.total, speed,
                                     left / speed if speed > 0 else None, self.files_done, len(self.plan.files)))


def _bar_class(meter: _Meter):
    """A tqdm stand-in for huggingface_hub's http_get: it forwards each chunk to the meter."""

    class Bar:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n=1):
            meter.add(int(n or 0))

        def close(self):
            pass

    return Bar


# ---------------------------------------------------------------- downloading


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(8 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fetch(p: Plan, f: PlannedFile, meter: _Meter) -> None:
    """One file into the HF cache, resuming a kept partial."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    url = hf_hub_url(p.repo_id, f.name, revision=p.commit)
    meta = get_hf_file_metadata(url)
    etag, size = meta.etag, meta.size
    if not etag:
        raise ModelError(f"the hub sent no etag for {p.repo_id}/{f.name}; cannot download it safely")
    blob = Path(constants.HF_HUB_CACHE) / _repo_folder(p.repo_id) / "blobs" / etag
    part = _partial_path(p.repo_id, etag)
    if not blob.is_file():
        part.parent.mkdir(parents=True, exist_ok=True)
        for other in part.parent.glob("*.json"):  # a partial of an older version of this file
            try:
                stale = json.loads(other.read_text()).get("file") == f.name and other.stem != etag
            except (OSError, ValueError):
                stale = False
            if stale:
                other.with_suffix(".part").unlink(missing_ok=True)
                other.unlink(missing_ok=True)
        have = part.stat().st_size if part.is_file() else 0
        if size is not None and have > size:  # not a prefix of this file: start again
            part.unlink()
            meter.done -= have
            have = 0
        meter.done += have - f.partial  # the plan counted what it saw; the disk has the last word
        (part.with_suffix(".json")).write_text(json.dumps(
            {"spec": p.spec, "repo_id": p.repo_id, "file": f.name, "size": size, "commit": p.commit, "etag": etag}))
        headers = build_hf_headers()
        if urlsplit(meta.location).netloc != urlsplit(url).netloc:
            headers.pop("authorization", None)  # a signed CDN address: the token is not for it
        with open(part, "ab") as out:
            http_get(meta.location, out, resume_size=have, expected_size=size,
                     headers=headers, tqdm_class=_bar_class(meter), displayed_filename=f.name)
        if _SHA256.match(etag) and _sha256(part) != etag:
            part.unlink(missing_ok=True)
            raise ModelError(f"{p.repo_id}/{f.name} arrived damaged (sha256 differs from the hub's); download it again")
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(part), str(blob))
        part.with_suffix(".json").unlink(missing_ok=True)
    # huggingface_hub links the blob into the snapshot folder, as after its own download
    hf_hub_download(p.repo_id, f.name, revision=p.commit)


def download(spec: str, progress: Callable[[DownloadProgress], None] | None = None,
             cancel: threading.Event | None = None, allow_pickle: bool = False) -> Path:
    """Download a hub model (`owner/name`: its safetensors snapshot; `owner/name/file.gguf`: that
    file) into the HF cache; returns the snapshot folder or the file. Raises ModelError (one
    line) or DownloadCancelled."""
    from huggingface_hub import hf_hub_download, snapshot_download

    from huggingface_hub import constants

    p = plan(spec, allow_pickle)
    constants.DOWNLOAD_CHUNK_SIZE = CHUNK_BYTES
    meter = _Meter(p, progress, cancel)
    meter.emit(force=True)
    try:
        for f in p.files:
            if f.cached:
                continue
            meter.file = f.name
            _fetch(p, f, meter)
            meter.files_done += 1
            meter.emit(force=True)
        # records refs/main (and, for a snapshot, the file listing), so later lookups by hub id
        # find it offline -- every file is in the cache by now, nothing more is fetched
        if p.single_file:
            return Path(hf_hub_download(p.repo_id, p.single_file))
        return Path(snapshot_download(p.repo_id, allow_patterns=[f.name for f in p.files]))
    except (DownloadCancelled, ModelError):
        raise
    except OSError as e:
        if "No space left" in str(e) or getattr(e, "errno", None) == 28:
            raise ModelError(f"no disk space left while downloading {spec}; free space or set HF_HOME elsewhere") from None
        raise hub_error(e, spec) from None
    except Exception as e:  # noqa: BLE001
        raise hub_error(e, spec) from None


# ---------------------------------------------------------------- leftovers


def partial_downloads() -> list[dict]:
    """Partial files kept from stopped downloads: {repo_id, file, bytes, size, path}."""
    root = downloads_dir()
    out = []
    if not root.is_dir():
        return out
    for part in sorted(root.glob("*/*.part")):
        try:
            meta = json.loads(part.with_suffix(".json").read_text())
        except (OSError, ValueError):
            meta = {}
        out.append({"spec": meta.get("spec") or meta.get("repo_id"), "repo_id": meta.get("repo_id"),
                    "file": meta.get("file"), "size": meta.get("size"), "bytes": part.stat().st_size,
                    "path": str(part)})
    return out
