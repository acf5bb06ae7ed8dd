"""The 4-bit layers of a model, saved once so later starts skip decoding and packing.

Turning the embedded target's Q4_K tensors into the int4 kernel's packed layout takes ~6 s and
requantizing the draft a few more, at every start. The packed tensors are saved as one
safetensors file per (GGUF file, mode, torch version) -- the packed layout is torch's own and
may change between versions -- next to the converted models, and loaded with mmap next time.
The native kernel's layers (native_linear.py) are saved the same way, in files of their own
(mode "native-exact" / "native-draft"): codes, scale and offset per layer; the codes' dtype
says 4-bit (uint8) or 8-bit (int8).
A file that does not fit the model (other shapes, missing layers) is ignored and rewritten.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from .int4_linear import GROUP, Int4Linear, Int4Report
from .native_linear import GROUP8, NativeLinear, fits

_PACKED, _SZ = ".packed", ".scales_and_zeros"
_NATIVE = (".codes", ".scale", ".offset")


def cache_file(folder: Path, key: str, mode: str) -> Path:
    """mode: "exact" (a GGUF's own codes only) or "draft" (requantized where needed), with a
    "native-" prefix for native_linear's layers."""
    return folder / f"{key[:16]}-int4-{mode}-torch{torch.__version__.replace('+', '_')}.safetensors"


def save(model: nn.Module, report: Int4Report, path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {}
    for name, m in model.named_modules():
        if isinstance(m, Int4Linear):
            tensors[name + _PACKED] = m.packed
            tensors[name + _SZ] = m.scales_and_zeros
        elif isinstance(m, NativeLinear):
            tensors.update({f"{name}.{k}": t for k, t in m.saved_tensors().items()})
    if not tensors:
        return
    meta = {"exact": str(report.exact), "requantized": str(report.requantized), "kept": str(report.kept),
            "exact8": str(report.exact8)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.partial-{os.getpid()}")
    try:
        save_file(tensors, str(tmp), metadata=meta)
        os.replace(tmp, path)  # never a half-written file under the real name
    except OSError:
        tmp.unlink(missing_ok=True)  # a cache is an optimisation: a full disk must not stop a load


def _native_layer(f, name: str, lin: nn.Linear) -> NativeLinear | None:
    """Rebuild one native layer from the file, or None when its shapes do not fit `lin`."""
    keys = set(f.keys())
    t = {k[1:]: f.get_tensor(name + k) for k in _NATIVE if name + k in keys}
    bits = 4 if t["codes"].dtype == torch.uint8 else 8
    n, k = lin.out_features, lin.in_features
    group = GROUP if bits == 4 else GROUP8
    want = {"codes": (n // 16, k, 8 if bits == 4 else 16), "scale": (n // 16, k // group, 16)}
    if bits == 4:
        want["offset"] = want["scale"]
    dtypes_ok = t["codes"].dtype in (torch.uint8, torch.int8) and all(
        v.dtype == torch.float32 for key, v in t.items() if key != "codes")
    if not fits(n, k, bits) or not dtypes_ok or {key: tuple(v.shape) for key, v in t.items()} != want:
        return None
    return NativeLinear(bits, t, k, n, lin.bias)


def load(model: nn.Module, path: Path, dense: bool = False) -> Int4Report | None:
    """Swap the saved layers into `model`; None (model untouched) when the file does not fit.
    dense: as in use_int4_linears (torch's int4 layers only)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            native = any(k.endswith(".codes") for k in f.keys())
            suffix = ".codes" if native else _PACKED
            names = sorted({k[: -len(suffix)] for k in f.keys() if k.endswith(suffix)})
            swaps = []
            for name in names:
                try:
                    lin = model.get_submodule(name)
                except AttributeError:
                    return None
                if type(lin) is not nn.Linear:
                    return None
                if native:
                    new = _native_layer(f, name, lin)
                    if new is None:
                        return None
                    swaps.append((name, lin, new))
                    continue
                sz = f.get_tensor(name + _SZ)
                if tuple(sz.shape[:2]) != (lin.in_features // 32, lin.out_features):
                    return None
                swaps.append((name, lin, (f.get_tensor(name + _PACKED), sz)))
    except Exception:  # noqa: BLE001 -- unreadable or foreign file: rebuild it
        return None
    for name, lin, new in swaps:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if not isinstance(new, NativeLinear):
            new = Int4Linear.from_packed(*new, lin.in_features, lin.bias)
            if dense:
                new.keep_dense(lin)
        setattr(parent, child, new)
    return Int4Report(*(int(meta.get(k, 0)) for k in ("exact", "requantized", "kept", "exact8")))
