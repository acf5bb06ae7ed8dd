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

from .abi import enum, ptr
from .build import kernel

ROWS, X8 = (enum("sd_layout")[n] for n in ("SD_LAYOUT_ROWS", "SD_LAYOUT_X8"))  # weight layouts (kernels/sdcpu.h)


class GGUFMatrix:
    """A weight matrix as the file holds it: N rows of K values in whole blocks."""

    def __init__(self, data: np.ndarray, ggml_type: int, rows: int, cols: int, row_map: np.ndarray | None = None,
                 layout: int = ROWS):
        self.data = data  # uint8 [rows, row_bytes], a view of the mapped file (or any array)
        self.ggml_type, self.rows, self.cols = int(ggml_type), int(rows), int(cols)
        self.row_bytes = int(data.shape[1])  # a row's bytes in the file's layout, whatever `layout`
        self.row_map = None if row_map is None else np.ascontiguousarray(row_map, dtype=np.int32)
        self.layout = layout  # ROWS: the file's; X8: 8 rows interleaved (kernels/sdcpu.h), see repack()

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def pointer(self):
        """The blocks' address, as the kernel takes it (abi.ptr)."""
        return ptr(self.data)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., cols] float32 -> [..., rows] float32 (batch-invariant per row)."""
        x2 = x.reshape(-1, self.cols)
        if x2.dtype != torch.float32 or not x2.is_contiguous():
            x2 = x2.float().contiguous()
        m = x2.shape[0]
        y = torch.empty(m, self.rows)
        # an interleaved matrix is multiplied in the file's row order, then permuted: each
        # output row's number is its own, so the permutation changes no bit
        row_map = None if self.layout == X8 else self.row_map
        if m:
            rc = kernel().lib.sd_matmul(
                ptr(x2), m, self.cols, self.ggml_type, self.pointer(), self.rows, self.row_bytes, self.layout,
                ptr(row_map), ptr(y), self.rows, torch.get_num_threads(),
            )
            if rc:
                raise RuntimeError(f"CPU kernel refused a {self.rows}x{self.cols} matrix of type {self.ggml_type} (code {rc})")
        if self.layout == X8 and self.row_map is not None:
            y = y[:, torch.from_numpy(self.row_map).long()]
        return y.reshape(*x.shape[:-1], self.rows)

    def rows_as_floats(self, index: torch.Tensor) -> torch.Tensor:
        """Rows `index` (any shape of ids) dequantized: [..., cols] float32."""
        flat = index.reshape(-1).to(torch.int32).contiguous()
        if self.row_map is not None:
            flat = torch.from_numpy(self.row_map)[flat.long()].contiguous()
        out = torch.empty(flat.numel(), self.cols)
        rc = kernel().lib.sd_dequantize(self.ggml_type, self.pointer(), self.row_bytes, self.layout, ptr(flat),
                                        flat.numel(), self.cols, ptr(out))
        if rc:
            raise RuntimeError(f"CPU kernel could not dequantize a matrix of type {self.ggml_type} (code {rc})")
        return out.reshape(*index.shape, self.cols)

    def interleavable(self) -> bool:
        """Whether repack() would interleave it: a type with x8 kernels in the running build,
        rows a multiple of 8."""
        lib = kernel().lib
        return self.layout == ROWS and not self.rows % 8 and bool(lib.sd_x8_native() and lib.sd_x8_supported(self.ggml_type))

    def repack(self, nthreads: int = 1, release: bool = False) -> "GGUFMatrix":
        """The same matrix in the interleaved layout (8 rows side by side, kernels/sdcpu.h), a
        new array in memory; self where interleavable() says no (the file's rows stay).
        release: hand the mapped file's pages under each slice back to the OS as soon as its
        copy is made (a later read of them, e.g. an embedding lookup, faults them in again
        from the page cache): resident memory grows by a slice at a time, not by a matrix."""
        if not self.interleavable():
            return self
        out = np.empty((self.rows, self.row_bytes), np.uint8)
        step = max(8, (_SLICE_BYTES // self.row_bytes) // 8 * 8)
        for r0 in range(0, self.rows, step):
            r1 = min(self.rows, r0 + step)
            rc = kernel().lib.sd_repack(self.ggml_type, ptr(self.data[r0:r1]), self.row_bytes, r1 - r0, self.cols,
                                        ptr(out[r0:r1]), X8, nthreads)
            if rc:
                raise RuntimeError(f"CPU kernel could not repack a {self.rows}x{self.cols} matrix of type "
                                   f"{self.ggml_type} (code {rc})")
            if release:
                release_pages(self.data[r0:r1])
        if release:
            release_pages(self.data)  # the pages the slices' edges shared
        return GGUFMatrix(out, self.ggml_type, self.rows, self.cols, self.row_map, X8)

    def release_pages(self) -> None:
        """Hand the mapped file's pages under this matrix back to the OS (see repack)."""
        release_pages(self.data)


_SLICE_BYTES = 16 << 20  # what repack copies before it releases the file's pages under it


def release_pages(data: np.ndarray) -> None:
    """madvise(MADV_DONTNEED) on the whole pages under `data` where it is a view of a read-only
    np.memmap (the GGUF reader's); anything else is left alone."""
    import mmap

    if not isinstance(data, np.memmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    root = data
    while isinstance(root.base, np.memmap):  # views of views: the array the mapping was made for
        root = root.base
    raw = getattr(root, "_mmap", None)
    if raw is None:
        return
    # np.memmap maps from the allocation granule below its offset: that is where the map starts
    start = data.ctypes.data - root.ctypes.data + int(root.offset or 0) % mmap.ALLOCATIONGRANULARITY
    page = mmap.PAGESIZE
    lo, hi = -(-start // page) * page, (start + data.nbytes) // page * page
    if hi > lo:
        raw.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


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
