"""A GGUF's 4-bit codes, read as they are (not dequantized), for the int4 CPU kernel.

Q4_K (the bulk of a Q4_K_M file) and Q4_0 store each group of 32 weights as 4-bit codes with
one scale and one offset, exactly the form `int4_linear.Int4Codes` holds:
- Q4_K: super-blocks of 256 = 8 sub-blocks of 32; w = (d * sc_j) * q - (dmin * m_j), with fp16
  d, dmin and 6-bit sc_j, m_j packed in 12 bytes (unpacked by gguf-py's own helper);
- Q4_0: blocks of 32; w = d * (q - 8).
Other types (Q6_K, Q8_0, Q5_0, ...) hold more than 4 bits and are not read here: those
layers keep their dequantized float weights.

The decoded values equal what gguf-py's dequantize (and so transformers' GGUF import) gives,
bit for bit (tests/test_int4.py); the caller still checks each against the loaded weight,
because some architectures permute rows on import.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..int4_linear import GROUP, Int4Codes

_NIBBLES = np.array([0, 4], dtype=np.uint8)


def decode_q4_k(blocks: np.ndarray, rows: int, cols: int) -> Int4Codes:
    """blocks: uint8 [rows * cols / 256, 144] -> codes [rows, cols], scale/offset [rows, cols / 32]."""
    from gguf.quants import Q4_K

    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)  # [B, 1]
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)  # [B, 1]
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16])  # [B, 8] each, 6-bit
    # 4 chunks of 32 bytes; low nibbles are sub-block 2c, high nibbles sub-block 2c+1
    qs = blocks[:, 16:].reshape(-1, 4, 1, 32) >> _NIBBLES.reshape(1, 1, 2, 1)
    codes = (qs & 0x0F).reshape(rows, cols)
    scale = (d * sc.astype(np.float32)).reshape(rows, cols // GROUP)
    offset = (dmin * m.astype(np.float32)).reshape(rows, cols // GROUP)
    return Int4Codes(torch.from_numpy(codes), torch.from_numpy(scale), torch.from_numpy(offset))


def decode_q4_0(blocks: np.ndarray, rows: int, cols: int) -> Int4Codes:
    """blocks: uint8 [rows * cols / 32, 18] -> codes, scale, offset (offset = 8 * scale)."""
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)  # [B, 1]
    # low nibbles are elements 0..15, high nibbles 16..31
    qs = blocks[:, 2:].reshape(-1, 1, 16) >> _NIBBLES.reshape(1, 2, 1)
    codes = (qs & 0x0F).reshape(rows, cols)
    scale = d.reshape(rows, cols // GROUP)
    return Int4Codes(torch.from_numpy(codes), torch.from_numpy(scale), torch.from_numpy(8 * scale))


_DECODERS = {"Q4_K": (decode_q4_k, 144), "Q4_0": (decode_q4_0, 18)}


def read_int4_codes(path: Path | str, model: torch.nn.Module) -> dict[str, Int4Codes]:
    """module name -> codes, for every nn.Linear of `model` whose GGUF tensor is Q4_K or Q4_0."""
    import gguf

    from .gguf_file import read_header

    meta, table, data_start = read_header(Path(path))
    arch = next((a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == meta.get("general.architecture")), None)
    if arch is None:
        return {}
    name_map = gguf.get_tensor_name_map(arch, model.config.get_text_config().num_hidden_layers)
    tensors = {t.name: t for t in table}
    blob = np.memmap(path, dtype=np.uint8, mode="r")
    out: dict[str, Int4Codes] = {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        base = name_map.get_name(name)
        t = tensors.get(f"{base}.weight") if base else None
        kind = gguf.GGMLQuantizationType(t.ggml_type).name if t is not None else None
        if kind not in _DECODERS or len(t.shape) != 2:
            continue
        decode, block_bytes = _DECODERS[kind]
        rows, cols = t.shape
        raw = blob[data_start + t.offset : data_start + t.offset + t.nbytes]
        out[name] = decode(np.asarray(raw).reshape(-1, block_bytes), rows, cols)
    return out
