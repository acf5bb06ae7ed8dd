"""Models already on this computer: what the Models dialog and `specdec models` list.

Four places: the embedded default pair, the app's cache (GGUF files in <cache>/gguf/ beside the
pair's), the Hugging Face cache (models downloaded by any HF tool, ours included), and the
recently opened .gguf files and folders (recent.py). Each model is described from its files
alone -- size on disk, format, quantization, architecture, parameter count -- by reading
headers (a GGUF's metadata without its token list, a safetensors file's JSON header), never a
tensor, so listing a dozen models takes well under a second.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import cache, recent
from .errors import ModelError

# safetensors dtype names -> bytes per element
ST_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
_MAX_HEADER = 100 * 2**20  # a safetensors header larger than this is not one


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    nbytes: int  # as stored
    dtype: str = ""  # safetensors dtype name ("BF16", ...); "" for GGUF (its types are block formats)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class LocalModel:
    spec: str  # what --target / --draft take
    name: str
    origin: str  # "embedded" | "app cache" | "hf cache" | "recent"
    format: str  # "GGUF" | "safetensors" | "pickle" | "?"
    quantization: str  # "Q4_K_M", "bfloat16", "nf4 (bitsandbytes)", ...
    bytes: int  # on disk
    architecture: str = ""
    params: int | None = None
    path: str | None = None
    role: str | None = None  # the embedded models: "default" means the role's model
    error: str | None = None  # why it cannot be used (missing, truncated, no weights): shown greyed
    loaded: dict = field(default_factory=dict)  # what it last loaded as (recent.py), if known
    where: str = ""  # its folder, shown when another model listed has the same name (set by scan)

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------- headers


def safetensors_header(path: Path) -> list[Tensor]:
    """The tensor table of one .safetensors file: its header is a length-prefixed JSON."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ModelError(f"{path.name} is not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_HEADER:
            raise ModelError(f"{path.name} is not a safetensors file (header length {n})")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise ModelError(f"{path.name} has a damaged safetensors header") from None
    out = []
    for name, t in header.items():
        if name == "__metadata__" or not isinstance(t, dict):
            continue
        start, end = t.get("data_offsets", (0, 0))
        out.append(Tensor(name, tuple(int(d) for d in t.get("shape", ())), int(end) - int(start), str(t.get("dtype", ""))))
    return out


def folder_tensors(folder: Path) -> list[Tensor]:
    tensors: list[Tensor] = []
    for f in sorted(folder.glob("*.safetensors")):
        tensors += safetensors_header(f)
    return tensors


def gguf_header(path: Path) -> tuple[dict, list[Tensor], int]:
    """(metadata without the token list, tensors, data start): the CPU backend's header walk
    (0.1 s for the embedded target, where the token strings would take seconds)."""
    from ..cpu.reader import GGUFFile

    f = GGUFFile(path, check_size=False)  # describe_gguf says "truncated" itself
    tensors = []
    start = min((t.offset for t in f.tensors.values()), default=0)
    for t in f.tensors.values():
        x = Tensor(t.name, t.shape, t.nbytes)
        x.offset = t.offset - start  # type: ignore[attr-defined]
        x.ggml_type = t.ggml_type  # type: ignore[attr-defined]
        tensors.append(x)
    return f.meta, tensors, start


# ---------------------------------------------------------------- describing one model


def _gguf_quant(meta: dict, tensors: list[Tensor]) -> str:
    from ..cpu.model import file_type_name

    return file_type_name(meta, [getattr(t, "ggml_type", 0) for t in tensors if len(t.shape) == 2])


def describe_gguf(path: Path, origin: str, spec: str | None = None) -> LocalModel:
    path = Path(path)
    size = path.stat().st_size if path.is_file() else 0
    m = LocalModel(spec or str(path), path.stem, origin, "GGUF", "?", size, path=str(path))
    if not path.is_file():
        m.error = "file not found"
        return m
    try:
        meta, tensors, data_start = gguf_header(path)
    except Exception as e:  # noqa: BLE001 -- not a GGUF, damaged header: say so, keep listing
        m.error = f"not a readable GGUF ({type(e).__name__})"
        return m
    name = meta.get("general.name")
    m.name = name if isinstance(name, str) and name else path.stem
    m.architecture = str(meta.get("general.architecture", ""))
    m.quantization = _gguf_quant(meta, tensors)
    m.params = sum(t.numel for t in tensors)
    end = max((data_start + t.offset + t.nbytes for t in tensors), default=data_start)  # type: ignore[attr-defined]
    if end > size:
        m.error = f"truncated: {size:,} of {end:,} bytes"
    return m


def _folder_quant(config: dict, tensors: list[Tensor]) -> str:
    q = config.get("quantization_config")
    if isinstance(q, dict):
        method = str(q.get("quant_method", "")).lower()
        if method == "bitsandbytes" or q.get("load_in_4bit") or q.get("load_in_8bit"):
            if q.get("load_in_8bit"):
                return "int8 (bitsandbytes)"
            return f"{q.get('bnb_4bit_quant_type', 'nf4')} (bitsandbytes)"
        return method or "quantized"
    counts: dict[str, int] = {}
    for t in tensors:
        counts[t.dtype] = counts.get(t.dtype, 0) + t.numel
    if counts:
        common = max(counts, key=counts.get)
        return ST_NAMES.get(common, common.lower())
    dtype = config.get("torch_dtype") or config.get("dtype")
    return str(dtype) if dtype else "?"


def describe_folder(folder: Path, origin: str, spec: str | None = None, name: str | None = None) -> LocalModel:
    from .hub_files import has_weights

    folder = Path(folder)
    m = LocalModel(spec or str(folder), name or folder.name, origin, "?", "?", 0, path=str(folder))
    if not folder.is_dir():
        m.error = "folder not found"
        return m
    files = [p for p in folder.iterdir() if p.is_file()]
    m.bytes = sum(p.stat().st_size for p in files)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        m.error = "no config.json: not a model folder"
        return m
    m.architecture = str(config.get("model_type") or (config.get("architectures") or [""])[0])
    tensors: list[Tensor] = []
    if any(p.suffix == ".safetensors" for p in files):
        m.format = "safetensors"
        try:
            tensors = folder_tensors(folder)
            m.params = sum(t.numel for t in tensors)
        except (OSError, ModelError) as e:
            m.error = str(e)
    elif any(p.suffix in (".bin", ".pt", ".pth") for p in files):
        m.format = "pickle"
    m.quantization = _folder_quant(config, tensors)
    if m.error is None and not has_weights(folder, allow_pickle=True):
        m.error = "no weights (or an incomplete download)"
    return m


def describe(spec_or_path: str, origin: str = "recent") -> LocalModel:
    """One local .gguf file or model folder, as the dialog lists it."""
    p = Path(spec_or_path).expanduser()
    if p.is_dir():
        return describe_folder(p, origin)
    if p.suffix.lower() == ".gguf":
        return describe_gguf(p, origin)
    return LocalModel(spec_or_path, p.name or spec_or_path, origin, "?", "?", 0, path=str(p),
                      error="not found" if not p.exists() else "not a .gguf file or a model folder")


# ---------------------------------------------------------------- the four places


def embedded_models() -> list[LocalModel]:
    from . import default_pair

    out = []
    for role in ("target", "draft"):
        em = default_pair.embedded(role)
        path = default_pair.assembled_path(em)
        quant = em.name.rsplit("(", 1)[-1].rstrip(")") if em.name.endswith(")") else "?"  # "... (Q4_K_M)"
        m = LocalModel("default", em.name, "embedded", "GGUF", quant, em.size, path=str(path), role=role)
        if path.is_file() and path.stat().st_size == em.size:
            d = describe_gguf(path, "embedded", spec="default")
            m.params, m.architecture, m.quantization = d.params, d.architecture, d.quantization
        else:
            missing = [p for p in em.parts if default_pair.find_part(p) is None]
            if missing:
                m.error = f"not installed ({default_pair._install_hint()})"
            else:
                m.architecture = "qwen2"  # assembled from the installed parts on first use
        out.append(m)
    return out


def app_cache_models() -> list[LocalModel]:
    """GGUF files in the app's cache other than the embedded pair's own."""
    from . import default_pair

    own = {default_pair.assembled_path(em).name for em in default_pair.EMBEDDED.values()}
    folder = cache.gguf_dir()
    if not folder.is_dir():
        return []
    return [describe_gguf(p, "app cache") for p in sorted(folder.glob("*.gguf")) if p.name not in own]


def hf_cache_models() -> list[LocalModel]:
    """Every model in the Hugging Face cache that holds weights: a repo's safetensors snapshot
    (SPEC: its hub id, which loads from the cache) and each of its .gguf files (owner/repo/file)."""
    from huggingface_hub import constants, scan_cache_dir

    from .hub_files import has_weights

    try:
        # explicitly: scan_cache_dir's default is the value HF_HUB_CACHE had at import time
        info = scan_cache_dir(constants.HF_HUB_CACHE)
    except Exception:  # noqa: BLE001 -- no cache yet, or unreadable
        return []
    out = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model":
            continue
        # the revision "main" points at, else the newest one
        revs = sorted(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified), reverse=True)
        if not revs:
            continue
        snap = Path(revs[0].snapshot_path)
        if (snap / "config.json").is_file() and has_weights(snap):
            m = describe_folder(snap, "hf cache", spec=repo.repo_id, name=repo.repo_id)
            m.bytes = sum(f.size_on_disk for f in revs[0].files if not f.file_name.endswith(".gguf"))
            out.append(m)
        for f in sorted(revs[0].files, key=lambda f: f.file_name):
            if f.file_name.lower().endswith(".gguf"):
                rel = Path(f.file_path).relative_to(snap).as_posix()
                out.append(describe_gguf(Path(f.file_path), "hf cache", spec=f"{repo.repo_id}/{rel}"))
    return out


def recent_models(file: Path | None = None) -> list[LocalModel]:
    """The recent files and folders that are still there (a deleted or moved one is not listed;
    its entry stays in the file, so a drive plugged in again brings it back)."""
    out = []
    for item in recent.load(file):
        spec = item["spec"]
        p = Path(spec)
        if p.is_absolute():
            if not p.exists():
                continue
            m = describe(spec, "recent")
        else:  # a hub id: listed from the HF cache when there
            m = LocalModel(spec, spec, "recent", "?", "?", 0, error=None)
        m.loaded = item.get("loaded") or {}
        m.role = item.get("role")
        out.append(m)
    return out


def scan(recent_file: Path | None = None) -> list[LocalModel]:
    """Everything local, each model once: embedded first, then the app cache, the HF cache,
    and recents not already listed (by path or SPEC)."""
    models = embedded_models() + app_cache_models() + hf_cache_models()
    for m in recent_models(recent_file):
        same = [o for o in models if o.origin != "embedded" and (_key(o) == _key(m) or o.spec == m.spec)]
        if same:
            for other in same:  # keep what it last loaded as on the entry already listed
                other.loaded = other.loaded or m.loaded
            continue
        if not m.path:
            continue  # a hub id no longer in the HF cache: nothing local to list
        models.append(m)
    label_places(models)
    return models


def label_places(models: list[LocalModel]) -> None:
    """Models that would be listed under the same name (several folders called "draft") get
    their folder in `where`, so the rows tell them apart."""
    by_name: dict[str, list[LocalModel]] = {}
    for m in models:
        if m.origin != "embedded" and m.path:
            by_name.setdefault(m.name, []).append(m)
    for same in by_name.values():
        if len(same) > 1:
            for m in same:
                m.where = short_folder(Path(m.path).parent)


def short_folder(folder: Path, width: int = 40) -> str:
    """A folder as a row shows it: ~ for the home folder, the last parts when it is long."""
    text = str(folder)
    home = str(Path.home())
    if home not in ("", "/") and (text == home or text.startswith(home + os.sep)):
        text = "~" + text[len(home):]
    if len(text) > width:
        parts = Path(text).parts
        text = "…" + os.sep + os.sep.join(parts[-2:])
    return text


def _key(m: LocalModel) -> str:
    if m.origin == "embedded":
        return f"default:{m.role}"
    if m.path:
        try:
            return str(Path(m.path).resolve())
        except OSError:
            return m.path
    return m.spec
