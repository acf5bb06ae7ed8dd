"""4-bit linears on CPU: a quantized model's weights stay 4-bit in memory and in the matmul.

A decode step on CPU is bound by reading the weights. The embedded target is a Q4_K_M GGUF;
dequantizing it to float32 (what transformers does) reads 8x the bytes its 4-bit codes need.
torch ships a CPU kernel for 4-bit weights with per-group scales and offsets
(`aten._weight_int4pack_mm_for_cpu`, the one gpt-fast's int4 path uses): measured on the
project's AVX2 machine, one 8960x1536 matrix, one row, 2 threads, weights out of cache:
1.17 ms, against 3.46 ms for oneDNN float32 and 2.16 ms for bfloat16.

The kernel computes y = x @ W.T with W[n, k] = (code[n, k] - 8) * scale[g, n] + zero[g, n] for
groups g of 32 along k, activations in bfloat16 (its fast path; float32 activations take a slow
one), accumulating in float32. Each output row depends only on its own input row (checked
bitwise in the tests for 1..17 rows), so a verification pass of k+1 rows gives each row the
same logits as a one-row decode step: greedy speculative == standard holds through it.

Codes come from two places:
- exact: a GGUF's Q4_K / Q4_0 blocks decode to (code, scale, offset) with the same values the
  dequantized model holds (models/gguf_int4.py); only scale and offset are rounded to bfloat16;
- requantized: any float weight, min/max per group of 32 (lossy). Used for the *draft*: its
  precision changes which tokens it proposes, never the output, because the target verifies
  against the distribution the draft actually sampled from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch import nn

from .cpu_kernels import OneDNNLinear, cpu_linears, tied_head

GROUP = 32  # elements per scale/offset group (Q4_K's sub-block, Q4_0's block)

# Passes of at least this many rows (a prompt's prefill) may run on a float32 copy through
# oneDNN instead: the int4 kernel dequantizes for every 4-row tile and stays at ~50 GFLOP/s
# however many rows come, while oneDNN's float32 GEMM reaches 90-115 GFLOP/s from ~48 rows
# (one 8960x1536 matrix on the project's 2-core AVX2 machine: 16 rows int4 8.9 ms / oneDNN
# 9.8 ms; 48 rows 26.0 / 15.1; 128 rows 71.6 / 30.9). Verification passes (at most 17 rows
# here, 21 in transformers' assisted generation) stay below it, so every token decided after
# the prompt comes from the 4-bit kernel in both decoding modes.
DENSE_FROM_ROWS = 32


@dataclass
class Int4Codes:
    """W = scale * codes - offset, per group of GROUP along the input dimension.

    codes: uint8 [out, in], values 0..15; scale, offset: float32 [out, in // GROUP].
    """

    codes: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor

    def dequantize(self, rows: slice | None = None) -> torch.Tensor:
        """float32 [out, in] (or the given rows) -- for checks, never on the decode path."""
        rows = rows if rows is not None else slice(None)
        c = self.codes[rows].float()
        n, k = c.shape
        s = self.scale[rows].repeat_interleave(GROUP, dim=1)
        o = self.offset[rows].repeat_interleave(GROUP, dim=1)
        return (s * c - o).reshape(n, k)


def int4_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


def fits_kernel(out_features: int, in_features: int) -> bool:
    """The kernel's shape rules: whole groups along the input, and 16-row tiles of outputs."""
    return in_features % GROUP == 0 and out_features % 16 == 0


def quantize_int4(weight: torch.Tensor) -> Int4Codes:
    """Asymmetric min/max 4-bit quantization per group of 32 (lossy; for drafts)."""
    n, k = weight.shape
    g = weight.detach().float().reshape(n, k // GROUP, GROUP)
    lo, hi = g.amin(-1), g.amax(-1)
    # a constant group has no range: any positive scale codes it exactly as code 0
    scale = ((hi - lo) / 15).clamp_min(torch.finfo(torch.float32).tiny)
    codes = ((g - lo[..., None]) / scale[..., None]).round_().clamp_(0, 15).to(torch.uint8)
    return Int4Codes(codes.reshape(n, k), scale, -lo)


class Int4Linear(nn.Module):
    """nn.Linear with 4-bit weights, computed by torch's int4 CPU kernel."""

    def __init__(self, codes: Int4Codes, bias: torch.Tensor | None):
        out_features, in_features = codes.codes.shape
        if not fits_kernel(out_features, in_features):
            raise ValueError(f"int4 kernel needs in % {GROUP} == 0 and out % 16 == 0, "
                             f"got {out_features}x{in_features}")
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.codes.to(torch.int32), 1)
        # the kernel's (code - 8) * scale + zero == scale * code - offset
        zero = 8 * codes.scale - codes.offset
        # [groups, out, 2] in the activation dtype, as the kernel expects
        sz = torch.stack([codes.scale.t(), zero.t()], dim=-1).contiguous().to(torch.bfloat16)
        self._setup(packed, sz, in_features, out_features, bias)

    def _setup(self, packed, scales_and_zeros, in_features, out_features, bias) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.dense: OneDNNLinear | None = None
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales_and_zeros", scales_and_zeros, persistent=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().float().clone(), requires_grad=False)

    @classmethod
    def from_packed(cls, packed: torch.Tensor, scales_and_zeros: torch.Tensor, in_features: int,
                    bias: torch.Tensor | None) -> "Int4Linear":
        """Rebuild from `packed`/`scales_and_zeros` saved earlier (int4_cache.py): no packing."""
        self = cls.__new__(cls)
        self._setup(packed, scales_and_zeros, in_features, scales_and_zeros.shape[1], bias)
        return self

    def keep_dense(self, linear: nn.Linear) -> None:
        """Also keep `linear`'s float32 weight (through oneDNN) for passes of DENSE_FROM_ROWS
        rows or more. Costs 4 bytes per weight; the choice depends on the pass's shape only."""
        self.dense = OneDNNLinear(linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dense is not None and x.numel() >= DENSE_FROM_ROWS * self.in_features:
            return self.dense(x)
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2, self.packed, GROUP, self.scales_and_zeros)
        y = y.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        dense = f", float32 from {DENSE_FROM_ROWS} rows" if self.dense is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, int4{dense}"


def matches_weight(codes: Int4Codes, weight: torch.Tensor) -> bool:
    """Do the codes decode to this weight? Checked on three rows: a GGUF whose rows were
    permuted on import (llama's q/k) must not be paired with the unpermuted codes."""
    n = weight.shape[0]
    if tuple(codes.codes.shape) != tuple(weight.shape):
        return False
    for r in sorted({0, n // 2, n - 1}):
        got = codes.dequantize(slice(r, r + 1))
        if not torch.allclose(got, weight[r : r + 1].detach().float(), rtol=1e-6, atol=1e-7):
            return False
    return True


@dataclass
class Int4Report:
    exact: int = 0  # linears running on a GGUF's own 4-bit codes
    requantized: int = 0  # linears requantized from their float weights (drafts only)
    kept: int = 0  # linears left as they were (no codes, shape the kernel refuses)
    exact8: int = 0  # linears on a GGUF's own 6-bit codes, held as 8-bit (native kernel only)


def use_int4_linears(model: nn.Module, codes: Mapping[str, Int4Codes], *, requantize: bool,
                     dense: bool = False) -> Int4Report:
    """Swap nn.Linear modules for Int4Linear, in place.

    codes: module name -> exact codes (see models/gguf_int4.py), checked against the module's
    weight before use. requantize: give every other fitting linear min/max 4-bit codes -- only
    for a draft, whose precision does not reach the output.
    A tied output head (its weight is also the input embedding) gets its own 4-bit copy only
    when requantizing; the embedding keeps the float weight. dense: each swapped layer keeps
    its float32 weight for long passes too (Int4Linear.keep_dense).
    """
    report = Int4Report()
    if not int4_available():
        return report
    tied = tied_head(model)
    for parent, attr, name, child in cpu_linears(model):
        if (child is tied and not requantize) or not fits_kernel(child.out_features, child.in_features):
            report.kept += 1
            continue
        exact = codes.get(name)
        if exact is not None and matches_weight(exact, child.weight):
            lin = Int4Linear(exact, child.bias)
            report.exact += 1
        elif requantize:
            lin = Int4Linear(quantize_int4(child.weight), child.bias)
            report.requantized += 1
        else:
            report.kept += 1
            continue
        if dense:
            lin.keep_dense(child)
        setattr(parent, attr, lin)
    return report
