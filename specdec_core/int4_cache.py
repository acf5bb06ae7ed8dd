"""The 4-bit layers of a model, saved once so later starts skip decoding and packing.

Turning the embedded target's Q4_K tensors into the int4 kernel's packed layout takes ~6 s and
requantizing the draft a few more, at every start. The packed tensors are saved as one
safetensors file per (GGUF file, mode, torch version) -- the packed layout is torch's own and
may change between versions -- next to the converted models, and loaded with mmap next time.
A file that does not fit the model (other shapes, missing layers) is ignored and rewritten.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from .int4_linear import Int4Linear, Int4Report

_PACKED, _SZ = ".packed", ".scales_and_zeros"


def cache_file(folder: Path, key: str, mode: str) -> Path:
    """mode: "exact" (a GGUF's own codes only) or "draft" (requantized where needed)."""
    return folder / f"{key[:16]}-int4-{mode}-torch{torch.__version__.replace('+', '_')}.safetensors"


def save(model: nn.Module, report: Int4Report, path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {}
    for name, m in model.named_modules():
        if isinstance(m, Int4Linear):
            tensors[name + _PACKED] = m.packed
            tensors[name + _SZ] = m.scales_and_zeros
    if not tensors:
        return
    meta = {"exact": str(report.exact), "requantized": str(report.requantized), "kept": str(report.kept)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.partial-{os.getpid()}")
    try:
        save_file(tensors, str(tmp), metadata=meta)
        os.replace(tmp, path)  # never a half-written file under the real name
    except OSError:
        tmp.unlink(missing_ok=True)  # a cache is an optimisation: a full disk must not stop a load


def load(model: nn.Module, path: Path, dense: bool = False) -> Int4Report | None:
    """Swap the saved layers into `model`; None (model untouched) when the file does not fit.
    dense: as in use_int4_linears."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            names = sorted({k[: -len(_PACKED)] for k in f.keys() if k.endswith(_PACKED)})
            swaps = []
            for name in names:
                try:
                    lin = model.get_submodule(name)
                except AttributeError:
                    return None
                sz = f.get_tensor(name + _SZ)
                if type(lin) is not nn.Linear or tuple(sz.shape[:2]) != (lin.in_features // 32, lin.out_features):
                    return None
                swaps.append((name, lin, f.get_tensor(name + _PACKED), sz))
    except Exception:  # noqa: BLE001 -- unreadable or foreign file: rebuild it
        return None
    for name, lin, packed, sz in swaps:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        new = Int4Linear.from_packed(packed, sz, lin.in_features, lin.bias)
        if dense:
            new.keep_dense(lin)
        setattr(parent, child, new)
    return Int4Report(int(meta.get("exact", 0)), int(meta.get("requantized", 0)), int(meta.get("kept", 0)))
