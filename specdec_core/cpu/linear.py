"""nn.Linear and nn.Embedding whose weights stay GGUF blocks, read in place by the kernel.

These make any architecture transformers knows run on the GGUF's own codes: its model is
built on the meta device and these modules take the linears' and the embedding's places
(model.py). A family the lean forward covers (lean.py) skips transformers' forward for
decoding, but runs these same matmuls.

The weight is a uint8 [rows, row_bytes] view of the mapped file, held as a plain attribute,
not a parameter or buffer: it is not the model's to move, cast or save, and torch need not
know it exists. `row_map` reorders output rows where transformers' layout differs from the
file's (llama's q/k projections are stored permuted for llama.cpp's RoPE): the kernel reads
row row_map[n] for output n, so nothing is copied or requantized.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .build import kernel


class GGUFMatrix:
    """A weight matrix as the file holds it: N rows of K values in whole blocks."""

    def __init__(self, data: np.ndarray, ggml_type: int, rows: int, cols: int, row_map: np.ndarray | None = None):
        self.data = data  # uint8 [rows, row_bytes], a view of the mapped file (or any array)
        self.ggml_type, self.rows, self.cols = int(ggml_type), int(rows), int(cols)
        self.row_bytes = int(data.shape[1])
        self.row_map = None if row_map is None else np.ascontiguousarray(row_map, dtype=np.int32)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def pointer(self) -> int:
        return int(self.data.ctypes.data)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., cols] float32 -> [..., rows] float32 (batch-invariant per row)."""
        x2 = x.reshape(-1, self.cols)
        if x2.dtype != torch.float32 or not x2.is_contiguous():
            x2 = x2.float().contiguous()
        m = x2.shape[0]
        y = torch.empty(m, self.rows)
        if m:
            rc = kernel().lib.sd_matmul(
                x2.data_ptr(), m, self.cols, self.ggml_type, self.pointer(), self.rows, self.row_bytes,
                None if self.row_map is None else self.row_map.ctypes.data, y.data_ptr(), self.rows,
                torch.get_num_threads(),
            )
            if rc:
                raise RuntimeError(f"CPU kernel refused a {self.rows}x{self.cols} matrix of type {self.ggml_type} (code {rc})")
        return y.reshape(*x.shape[:-1], self.rows)

    def rows_as_floats(self, index: torch.Tensor) -> torch.Tensor:
        """Rows `index` (any shape of ids) dequantized: [..., cols] float32."""
        flat = index.reshape(-1).to(torch.int32).contiguous()
        if self.row_map is not None:
            flat = torch.from_numpy(self.row_map)[flat.long()].contiguous()
        out = torch.empty(flat.numel(), self.cols)
        kernel().lib.sd_dequantize(self.ggml_type, self.pointer(), self.row_bytes, flat.data_ptr(), flat.numel(),
                                   self.cols, out.data_ptr())
        return out.reshape(*index.shape, self.cols)


class GGUFLinear(nn.Module):
    def __init__(self, matrix: GGUFMatrix, bias: torch.Tensor | None = None):
        super().__init__()
        self.matrix = matrix
        self.in_features, self.out_features = matrix.cols, matrix.rows
        self.bias = None if bias is None else nn.Parameter(bias.float(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.matrix.matmul(x)
        if self.bias is not None:
            y = y + self.bias
        return y if x.dtype == torch.float32 else y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, ggml_type={self.matrix.ggml_type}"


class GGUFEmbedding(nn.Module):
    """Rows looked up and dequantized one by one: the table is never expanded."""

    def __init__(self, matrix: GGUFMatrix, padding_idx: int | None = None):
        super().__init__()
        self.matrix = matrix
        self.num_embeddings, self.embedding_dim = matrix.rows, matrix.cols
        self.padding_idx = padding_idx

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.matrix.rows_as_floats(ids)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, ggml_type={self.matrix.ggml_type}"
