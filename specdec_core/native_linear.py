"""Linear layers on their 4-bit or 8-bit codes through the native kernel (native/qgemm.c).

The preferred CPU path where the kernel builds (x86-64 with AVX2+FMA and a C compiler): it
covers the target's Q4_K layers *and* its Q6_K layers (the output head and half of the
ffn_down / attn_v matrices, 28% of its weights, which torch's int4 kernel cannot hold and which
ran as float32 through oneDNN), and a verification of k+1 rows costs far less than k+1 steps.

Exact: every weight the kernel forms equals the GGUF's dequantized float32 weight bit for bit
(Q4_K: (d*sc)*q - dmin*m and Q6_K: (d*sc)*q have exact products in float32, so one rounding of
a fused multiply-subtract gives what gguf-py's numpy gives), activations stay float32 (torch's
int4 kernel rounds them, its scales and its outputs to bfloat16), and each output row is
bitwise independent of how many rows share the pass (tests/test_native.py), so greedy
speculative decoding equals standard decoding through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch import nn

from . import native
from .cpu_kernels import cpu_linears
from .int4_linear import GROUP, Int4Codes, Int4Report, matches_weight, quantize_int4

PANEL = 16  # output columns per panel in qgemm.c's layout
GROUP8 = 16  # elements per scale in the 8-bit form (Q6_K's sub-block)


@dataclass
class Int8Codes:
    """W = scale * codes per group of GROUP8 along the input dimension.

    codes: int8 [out, in]; scale: float32 [out, in // GROUP8]."""

    codes: torch.Tensor
    scale: torch.Tensor

    def dequantize(self, rows: slice | None = None) -> torch.Tensor:
        rows = rows if rows is not None else slice(None)
        return self.codes[rows].float() * self.scale[rows].repeat_interleave(GROUP8, dim=1)


def fits(out_features: int, in_features: int, bits: int) -> bool:
    """Whole panels of outputs, whole groups along the input."""
    return out_features % PANEL == 0 and in_features % (GROUP if bits == 4 else GROUP8) == 0


def _panels(t: torch.Tensor) -> torch.Tensor:
    """[out, X] -> [out/16, X, 16]: a panel's 16 columns side by side for each k (or group)."""
    n, x = t.shape
    return t.reshape(n // PANEL, PANEL, x).transpose(1, 2).contiguous()


def pack_int4(codes: Int4Codes) -> dict[str, torch.Tensor]:
    c = codes.codes.to(torch.uint8)
    n, k = c.shape
    p = c.reshape(n // PANEL, PANEL, k)
    # byte j of (panel, k): column j in the low nibble, column j + 8 in the high one
    packed = (p[:, :8] | (p[:, 8:] << 4)).transpose(1, 2).contiguous()
    return {"codes": packed, "scale": _panels(codes.scale.float()), "offset": _panels(codes.offset.float())}


def pack_int8(codes: Int8Codes) -> dict[str, torch.Tensor]:
    return {"codes": _panels(codes.codes.to(torch.int8)), "scale": _panels(codes.scale.float())}


class NativeLinear(nn.Module):
    """nn.Linear whose weight lives as 4- or 8-bit codes, computed by native/qgemm.c."""

    def __init__(self, bits: int, tensors: Mapping[str, torch.Tensor], in_features: int,
                 out_features: int, bias: torch.Tensor | None):
        super().__init__()
        if bits not in (4, 8) or not fits(out_features, in_features, bits):
            raise ValueError(f"native {bits}-bit kernel cannot take a {out_features}x{in_features} layer")
        self.bits, self.in_features, self.out_features = bits, in_features, out_features
        for name in ("codes", "scale", "offset"):
            self.register_buffer(name, tensors.get(name), persistent=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().float().clone(), requires_grad=False)
        # a draft's layers may take the kernel's faster one-row path, whose rounding differs
        # from the exact one (set by allow_grouped_rows; never on a target's layers)
        self.grouped = False

    @classmethod
    def from_codes(cls, codes: Int4Codes | Int8Codes, bias: torch.Tensor | None) -> "NativeLinear":
        out_features, in_features = codes.codes.shape
        bits = 4 if isinstance(codes, Int4Codes) else 8
        if not fits(out_features, in_features, bits):
            raise ValueError(f"native {bits}-bit kernel cannot take a {out_features}x{in_features} layer")
        if bits == 4:
            return cls(4, pack_int4(codes), in_features, out_features, bias)
        return cls(8, pack_int8(codes), in_features, out_features, bias)

    def saved_tensors(self) -> dict[str, torch.Tensor]:
        return {n: t for n, t in (("codes", self.codes), ("scale", self.scale), ("offset", self.offset)) if t is not None}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A one-token step calls ~200 of these, most on small matrices: the wrapper stays thin
        # (one allocation, one ctypes call; ~15 us instead of ~35 us with reshapes and casts).
        if x.dtype is not torch.float32 or not x.is_contiguous():
            return self.forward(x.float().contiguous()).to(x.dtype)
        rows = x.numel() // self.in_features
        y = torch.empty(*x.shape[:-1], self.out_features)
        if rows:
            native.gemm_into(x, rows, y, self.bits, self.codes, self.scale, self.offset, self.grouped)
        if self.bias is not None:
            y += self.bias
        return y

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, native {self.bits}-bit"


def allow_grouped_rows(modules) -> int:
    """Let these NativeLinears take the faster one-row path (a draft's: its rounding differs
    from the exact path, which a draft may). Returns how many."""
    n = 0
    for m in modules:
        if isinstance(m, NativeLinear) and m.bits == 4:
            m.grouped = True
            n += 1
    return n


def native_available() -> bool:
    return native.load() is not None


def use_native_linears(model: nn.Module, codes: Mapping[str, Int4Codes | Int8Codes], *,
                       requantize: bool) -> Int4Report:
    """Swap nn.Linear modules for NativeLinear, in place (the rules of int4_linear.
    use_int4_linears: exact codes checked against each weight; requantize only for a draft)."""
    report = Int4Report()
    if not native_available():
        return report
    for parent, attr, name, child in cpu_linears(model):
        exact = codes.get(name)
        if exact is not None and fits(child.out_features, child.in_features, 4 if isinstance(exact, Int4Codes) else 8) \
                and matches_weight(exact, child.weight):
            lin = NativeLinear.from_codes(exact, child.bias)
            if lin.bits == 4:
                report.exact += 1
            else:
                report.exact8 += 1
        elif requantize and fits(child.out_features, child.in_features, 4):
            # a tied head gets its own 4-bit copy here; the embedding keeps the float weight
            lin = NativeLinear.from_codes(quantize_int4(child.weight), child.bias)
            report.requantized += 1
        else:
            report.kept += 1
            continue
        setattr(parent, attr, lin)
    return report
