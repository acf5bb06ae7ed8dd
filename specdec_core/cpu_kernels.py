"""CPU kernels for verification-shaped matmuls.

A verification pass multiplies k+1 rows by every weight matrix. On CPU, torch's default
float32 path (MKL sgemm) is tuned for big matrices: measured here (AMD EPYC, AVX2, 2 threads,
embedded 1.5B target), 5 rows cost 3.4x one row (2383 vs 699 ms), although the work is bound
by reading the weights once either way. oneDNN's linear: one row 460 ms, 3-9 rows ~950 ms,
17 rows 1448 ms -- and faster for the one-row passes of decoding and drafting too. So on CPU
the Linear layers the 4-bit path (int4_linear.py) leaves in float32 run through oneDNN
(weights converted once, at load); `--cpu-kernels onednn` sends every layer here.

Both standard and speculative decoding use the same converted model, so the product's
comparisons stay like for like.
"""

from __future__ import annotations

import torch
from torch import nn


class OneDNNLinear(nn.Module):
    """nn.Linear computed by oneDNN (torch._C._nn.mkldnn_linear) on prepacked weights."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.weight_mkldnn = linear.weight.detach().float().to_mkldnn()
        self.bias_mkldnn = None if linear.bias is None else linear.bias.detach().float().to_mkldnn()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).float().to_mkldnn()
        y = torch._C._nn.mkldnn_linear(x2, self.weight_mkldnn, self.bias_mkldnn).to_dense()
        return y.reshape(*lead, self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, onednn"


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available()


def cpu_linears(model: nn.Module):
    """(parent, attribute, qualified name, layer) for every plain nn.Linear on CPU, listed
    before any is swapped, so a caller may setattr(parent, attribute, ...) as it goes."""
    return [
        (parent, attr, f"{pname}.{attr}" if pname else attr, child)
        for pname, parent in model.named_modules()
        for attr, child in parent.named_children()
        if type(child) is nn.Linear and child.weight.device.type == "cpu"
    ]


def tied_head(model: nn.Module) -> nn.Module | None:
    """The output head when its weight is also the input embedding, else None."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if head is not None and getattr(head, "weight", None) is getattr(emb, "weight", None):
        return head
    return None


def use_onednn_linears(model: nn.Module, include_head: bool = True) -> int:
    """Swap every float32 nn.Linear on CPU for OneDNNLinear, in place; returns how many.

    The output head is skipped when its weight is tied to the input embedding (converting it
    would keep a second copy of the largest matrix) unless include_head is forced.
    """
    if not onednn_available():
        return 0
    tied = tied_head(model)
    swapped = 0
    for parent, attr, _, child in cpu_linears(model):
        if child.weight.dtype != torch.float32 or (child is tied and not include_head):
            continue
        setattr(parent, attr, OneDNNLinear(child))
        swapped += 1
    return swapped


def onednn_bytes(model: nn.Module) -> int:
    """Bytes held by OneDNNLinear weights: oneDNN tensors are neither parameters nor buffers,
    so a model's own memory footprint leaves them out."""
    return sum(4 * m.in_features * (m.out_features + 1) for m in model.modules() if isinstance(m, OneDNNLinear))
