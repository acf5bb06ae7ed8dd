"""Loading a GGUF: on a CPU, the CPU backend runs it on its own blocks; elsewhere transformers.

CPU (specdec_core/cpu): tensors memory-mapped, quantized layers read in place by the integer
kernel, the lean forward for the families it covers; the cache gets only the tokenizer
(~7 MB) and the built kernel. Without a kernel (no C compiler, SPECDEC_CPU_KERNEL=off), or
for an architecture the backend cannot map, it falls back to transformers' import (gguf_torch:
dequantized in memory) and the notes say why. On a GPU, transformers' import.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import cache, draft_vocab
from .errors import ModelError
from .gguf_file import inspect_gguf
from .types import Progress


def fingerprint(path: Path) -> str:
    """A key for a user's file without hashing gigabytes: its path, size and mtime."""
    st = path.stat()
    return hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()


def tokenizer_folder(key: str) -> Path:
    return cache.cache_dir() / "tokenizers" / key[:16]


@dataclass
class GgufLoad:
    model: object
    tokenizer: object
    quantization: str  # "gguf(Q4_K_M)" on the kernel, "gguf-dequantized(Q4_K_M)" through transformers
    notes: list[str] = field(default_factory=list)
    lean: object | None = None  # cpu.lean.LeanForward where it applies
    kernels: str = ""
    memory_bytes: int | None = None  # bytes the model reads (None: measure the model's parameters)


def _describe(cm, lean, why_not, kernel_name: str) -> tuple[str, list[str]]:
    types = ", ".join(f"{n} x{c}" for n, c in sorted(cm.report.types.items()))
    kernels = f"{kernel_name} kernel: {types} (GGUF blocks, 8-bit activations)"
    notes = [f"{sum(cm.report.types.values())} matrices run on the GGUF's own blocks ({types}), read in place "
             f"from the mapped file; activations are quantized to 8 bits per row"]
    if lean is not None:
        kernels += " + lean forward"
        notes.append("decoding runs the lean forward: one kernel call per pass (norms, RoPE, attention, MLP in C)")
    else:
        notes.append(f"decoding runs transformers' forward on those matrices ({why_not})")
    t = cm.seconds
    notes.append(f"load: header {t['header']:.1f} s, tokenizer {t['tokenizer']:.1f} s, modules {t['modules']:.1f} s")
    return kernels, notes


def load_gguf(path: Path, *, device: str, dtype: str, key: str | None, progress: Progress | None,
              role: str = "target") -> GgufLoad:
    """key: the file's sha256 when known (the embedded pair), else a fingerprint is taken.
    role "draft": on the CPU kernel, matrices wider than 4 bits are requantized to Q4_0."""
    from ..cpu import build

    summary = inspect_gguf(path)  # a damaged file: one line, before any slow work
    tok_cache = tokenizer_folder(key or fingerprint(path))
    notes = []
    if device == "cpu":
        why = build.unavailable()
        if why is None:
            from ..cpu import lean as lean_mod
            from ..cpu import model as cpu_model

            try:
                cm = cpu_model.load(path, tok_cache, progress)
            except cpu_model.GGUFUnsupported as e:
                notes.append(f"the CPU kernel cannot run this file ({e}): transformers' import instead, dequantized in memory")
            except cpu_model.GGUFError as e:
                raise ModelError(str(e)) from None
            else:
                if dtype != "float32":
                    notes.append(f"--dtype {dtype} does not apply: the GGUF runs on its own blocks")
                if role == "draft":
                    n, before, after = cpu_model.requantize_for_draft(cm.model, cm.file)
                    if n:
                        cm.report.matrix_bytes += after - before
                        notes.append(f"{n} of the draft's matrices requantized to Q4_0 in memory ({before / 2**20:.0f} -> "
                                     f"{after / 2**20:.0f} MiB read per drafted token; a draft's precision changes "
                                     f"what it proposes, never the output)")
                # FR-Spec (models/draft_vocab.py): a draft on the lean forward proposes from its most
                # frequent tokens only; the target still scores every token
                head = getattr(getattr(cm.model, "lm_head", None), "matrix", None)
                head_rows = None
                if (role == "draft" and head is not None and lean_mod.supports(cm.model) is None
                        and os.environ.get("SPECDEC_DRAFT_HEAD", "").lower() != "full"):
                    head_rows = draft_vocab.head_tokens(cm.tokenizer, head.rows)
                lean, why_not = lean_mod.attach(cm.model, head_rows=head_rows)
                if lean is not None and head_rows is not None:
                    notes.append(f"the draft's head limited to the {len(head_rows):,} most frequent tokens of "
                                 f"{head.rows:,} (FR-Spec: the target still scores every token)")
                kernels, more = _describe(cm, lean, why_not, build.kernel().described)
                return GgufLoad(cm.model, cm.tokenizer, f"gguf({cm.quantization})", notes + more, lean, kernels,
                                cm.report.matrix_bytes + cm.report.float_bytes)
        else:
            notes.append(f"CPU kernel unavailable ({why}): transformers' import instead, dequantized to "
                         f"{dtype} in memory -- slower, and several times the file's size in memory")
    from .gguf_torch import load_gguf_with_transformers

    model, tokenizer = load_gguf_with_transformers(path, dtype, progress, tok_cache)
    if device != "cpu":
        model.to(device)
    return GgufLoad(model, tokenizer, f"gguf-dequantized({summary.quantization})",
                    notes + [f"dequantized {path.name} to {dtype} on load"])
