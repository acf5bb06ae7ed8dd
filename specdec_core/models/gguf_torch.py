"""A GGUF through transformers' own import: every tensor dequantized, in memory.

The path for a GPU (the CPU backend's kernel is for CPUs) and for a CPU where that kernel
cannot be built (no C compiler): slow to load (about a minute for the embedded target on 2
cores) and 4-8x the file's size in memory, but it runs anything transformers can import.
Nothing is written to disk.

Earlier versions cached that dequantized model under <cache>/converted/ (9 GB for the embedded
pair). `old_conversions()` finds what such a version left, for `specdec models` to report and
`specdec models --remove-old-cache` to delete.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from . import cache
from .errors import ModelError
from .types import Progress


def old_conversions() -> list[dict]:
    """[{path, bytes}] for everything an earlier version left under <cache>/converted/."""
    root = cache.converted_dir()
    if not root.is_dir():
        return []
    return [{"path": str(p), "bytes": cache.dir_size(p)} for p in sorted(root.iterdir())]


def remove_old_conversions() -> int:
    """Delete <cache>/converted/; returns the bytes freed."""
    freed = sum(c["bytes"] for c in old_conversions())
    shutil.rmtree(cache.converted_dir(), ignore_errors=True)
    return freed


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


def load_gguf_with_transformers(path: Path, dtype: str, progress: Progress | None, tokenizer_cache: Path | None):
    """(model, tokenizer, eos ids): every tensor dequantized to `dtype` by transformers."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    from ..cpu.model import eos_ids, tokenizer_from_gguf
    from ..cpu.reader import GGUFFile

    f = GGUFFile(path)
    if f.architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ModelError(f"{path.name}: GGUF architecture {f.architecture!r} is not supported by transformers")
    if progress:
        progress(f"reading the tokenizer of {path.name}", None)
    tokenizer = tokenizer_from_gguf(path, tokenizer_cache)
    label = f"dequantizing {path.name} to {dtype} (this path keeps no copy on disk)"
    if progress:
        progress(label, None)
    with _dequantize_progress(progress, label):
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=getattr(torch, dtype))
    eos = eos_ids(f, tokenizer)
    model.generation_config = GenerationConfig(
        eos_token_id=eos if len(eos) > 1 else eos[0],
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=model.config.bos_token_id,
    )
    return model, tokenizer
