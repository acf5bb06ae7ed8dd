"""Loading a GGUF through transformers, and caching the dequantized result.

transformers dequantizes a GGUF to `dtype` on load (for qwen2 it has no packed-GGUF kernels,
and on CPU none at all): about a minute for the embedded 0.5B draft on 2 cores. We save the
result once with save_pretrained (safetensors + tokenizer + generation_config) under
<cache>/converted/<key>-<dtype>/, so later starts are a plain safetensors load.

The key is the file's sha256 when known (the embedded pair), else a fingerprint of the
file's absolute path, size and mtime (hashing a user's multi-GB file on every start would
cost more than it saves). A conversion is written to a temporary folder and renamed into
place, with a `complete.json` written last, so a crash never leaves a half cache that looks
valid.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

from . import cache
from .errors import ModelError
from .gguf_file import GgufSummary, inspect_gguf
from .types import Progress

_MARKER = "complete.json"


def fingerprint(path: Path) -> str:
    st = path.stat()
    text = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    return hashlib.sha256(text.encode()).hexdigest()


def converted_path(key: str, dtype: str) -> Path:
    return cache.converted_dir() / f"{key[:16]}-{dtype}"


def read_marker(folder: Path) -> dict | None:
    try:
        return json.loads((folder / _MARKER).read_text())
    except (OSError, ValueError):
        return None


def converted_entries(key: str | None = None) -> list[dict]:
    """Complete conversions in the cache (those of `key` only, when given)."""
    root = cache.converted_dir()
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(root.iterdir()):
        marker = read_marker(folder)
        if marker is None or (key is not None and not folder.name.startswith(key[:16])):
            continue
        out.append({"path": str(folder), "bytes": cache.dir_size(folder), **marker})
    return out


@contextlib.contextmanager
def _dequantize_progress(progress: Progress | None, label: str):
    """Forward transformers' per-tensor GGUF progress bar to `progress` (the GUI has no terminal).

    The legacy GGUF loader iterates `tqdm(reader.tensors)` through its module-global `tqdm`;
    we swap that name for a wrapper while loading (loads run one at a time) and put it back.
    """
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover -- layout changed: just no fraction
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)
    if progress is None or original is None:
        yield
        return

    def reporting_tqdm(iterable, *args, **kwargs):
        items = list(iterable)
        for i, item in enumerate(original(items, *args, **kwargs)):
            progress(label, i / max(len(items), 1))
            yield item
        progress(label, 1.0)

    gguf_utils.tqdm = reporting_tqdm
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def load_gguf_with_transformers(path: Path, summary: GgufSummary, dtype: str, progress: Progress | None):
    """(model, tokenizer) straight from the GGUF: slow, dequantizes every tensor."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    folder, name = str(path.parent), path.name
    if progress:
        progress(f"reading tokenizer from {name}", None)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    label = f"dequantizing {name} to {dtype} (slow; done once, then cached)"
    if progress:
        progress(label, None)
    with _dequantize_progress(progress, label):
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
    _forget_gguf_quantizer(model)
    # A GGUF carries no generation_config: rebuild the end-of-generation ids (see gguf_file).
    eos = summary.eos_token_ids or [tokenizer.eos_token_id]
    model.generation_config = GenerationConfig(
        eos_token_id=eos if len(eos) > 1 else eos[0],
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=model.config.bos_token_id,
    )
    return model, tokenizer


def _forget_gguf_quantizer(model) -> None:
    """Make a dequantized GGUF model a plain one, so save_pretrained accepts it.

    transformers leaves its GGUF quantizer attached even when every weight was dequantized
    to an ordinary tensor (always for qwen2, which has no packed-GGUF kernels), and refuses
    to save a model with a non-serializable quantizer. With nothing packed, the quantizer
    has nothing left to describe, and removing it is what its own dequantize() does.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    if getattr(quantizer, "packed_modules", None):
        raise ModelError("this GGUF was loaded with packed GGUF kernels, which this app does not support yet")
    quantizer.remove_quantization_config(model)


def save_converted(model, tokenizer, target: Path, marker: dict, progress: Progress | None) -> str | None:
    """Write the converted cache; returns a note on failure instead of failing the load."""
    tmp = target.with_name(f"{target.name}.partial-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if progress:
            progress(f"saving converted model to {target}", None)
        cache.remove_stale_partials(target.parent)
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps(marker, indent=1))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        return None
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        return f"could not cache the converted model ({e.strerror or e}); the next start will be slow again"


def load_converted(folder: Path, dtype: str, device_map):
    """(model, tokenizer) from a converted cache folder."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=getattr(torch, dtype), use_safetensors=True, device_map=device_map
    )
    # Load tokenizer.json exactly as it was saved from the GGUF. AutoTokenizer would rebuild
    # it through Qwen2Tokenizer (transformers forces that class for model_type qwen2), adding
    # an NFC normalizer the GGUF tokenizer does not have -- the second start must tokenize
    # exactly like the first.
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
    return model, tokenizer


def load_gguf(path: Path, *, dtype: str, device: str, key: str | None, progress: Progress | None):
    """(model, tokenizer, quantization label, notes) for a GGUF, via the converted cache.

    `key`: the file's known sha256 (embedded pair) or None for a path/mtime fingerprint.
    """
    device_map = None if device == "cpu" else device

    def from_cache(cache_key: str, name: str):
        """The converted model under cache_key, or None when no complete conversion is there."""
        target = converted_path(cache_key, dtype)
        marker = read_marker(target)
        if marker is None:
            return None
        if progress:
            progress(f"loading converted {marker.get('name', name)}", None)
        model, tokenizer = load_converted(target, dtype, device_map)
        return model, tokenizer, marker["quantization"], [f"loaded from converted cache {target}"]

    # Known content: a complete conversion is enough, the GGUF need not even be read.
    if key is not None and (hit := from_cache(key, path.name)) is not None:
        return hit

    summary = inspect_gguf(path)
    check_gguf_arch(summary)
    if key is None:
        key = fingerprint(path)
        if (hit := from_cache(key, summary.name)) is not None:
            return hit
    target = converted_path(key, dtype)

    model, tokenizer = load_gguf_with_transformers(path, summary, dtype, progress)
    quantization = f"gguf-dequantized({summary.quantization})"
    notes = [f"dequantized {path.name} on load"]
    note = save_converted(
        model,
        tokenizer,
        target,
        {"source": str(path), "name": summary.name, "quantization": quantization, "dtype": dtype,
         "eos_token_ids": summary.eos_token_ids},
        progress,
    )
    notes.append(note or f"cached converted model in {target}")
    if device_map is not None:
        model.to(device)
    return model, tokenizer, quantization, notes


def check_gguf_arch(summary: GgufSummary) -> None:
    """A clear refusal for GGUF architectures transformers cannot load."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if summary.architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ModelError(
            f"{summary.path.name}: GGUF architecture {summary.architecture!r} is not supported by transformers"
        )
