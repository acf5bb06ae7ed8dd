"""A GGUF's 4-bit and 6-bit codes, read as they are (not dequantized), for the CPU kernels.

Q4_K (the bulk of a Q4_K_M file) and Q4_0 store each group of 32 weights as 4-bit codes with
one scale and one offset, exactly the form `int4_linear.Int4Codes` holds:
- Q4_K: super-blocks of 256 = 8 sub-blocks of 32; w = (d * sc_j) * q - (dmin * m_j), with fp16
  d, dmin and 6-bit sc_j, m_j packed in 12 bytes (unpacked by gguf-py's own helper);
- Q4_0: blocks of 32; w = d * (q - 8).
- Q6_K (the output head and half the ffn_down / attn_v of a Q4_K_M file): super-blocks of 256
  = 16 sub-blocks of 16; w = (d * sc_j) * (q - 32), fp16 d, int8 sc_j, 6-bit q -- held as
  `native_linear.Int8Codes` (code q - 32, scale d * sc_j), for the native kernel only.
Other types (Q8_0, Q5_0, ...) are not read here: those layers keep their dequantized float
weights.

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


def decode_q6_k(blocks: np.ndarray, rows: int, cols: int):
    """blocks: uint8 [rows * cols / 256, 210] -> Int8Codes: codes [rows, cols], scale [rows, cols / 16].

    Block layout: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8 scales, fp16 d.
    Each 128-element half uses 64 low-nibble bytes (low nibbles: elements 0..63 of the half in
    two runs of 32 -- l and l+32; high nibbles: l+64 and l+96) and 32 high-pair bytes (bits
    0-1, 2-3, 4-5, 6-7 go to l, l+32, l+64, l+96)."""
    from ..native_linear import Int8Codes

    ql = blocks[:, :128].reshape(-1, 2, 1, 64) >> _NIBBLES.reshape(1, 1, 2, 1)  # [B, half, 2, 64]
    low = (ql & 0x0F).reshape(-1, 2, 4, 32)  # runs of 32: l, l+32, l+64, l+96
    qh = blocks[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    high = (qh & 0x03).reshape(-1, 2, 4, 32)
    codes = ((low | (high << 4)).astype(np.int16) - 32).astype(np.int8).reshape(rows, cols)
    sc = blocks[:, 192:208].copy().view(np.int8).astype(np.float32)  # [B, 16]
    d = blocks[:, 208:210].copy().view(np.float16).astype(np.float32)  # [B, 1]
    scale = (d * sc).reshape(rows, cols // 16)
    return Int8Codes(torch.from_numpy(codes), torch.from_numpy(scale))


_DECODERS = {"Q4_K": (decode_q4_k, 144), "Q4_0": (decode_q4_0, 18)}
_DECODERS_6BIT = {"Q6_K": (decode_q6_k, 210)}


def read_int4_codes(path: Path | str, model: torch.nn.Module, six_bit: bool = False) -> dict[str, Int4Codes]:
    """module name -> codes, for every nn.Linear of `model` whose GGUF tensor is Q4_K or Q4_0
    (and, with six_bit, Q6_K as native_linear.Int8Codes)."""
    import gguf

    from .gguf_file import read_header

    meta, table, data_start = read_header(Path(path))
    arch = next((a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == meta.get("general.architecture")), None)
    if arch is None:
        return {}
    name_map = gguf.get_tensor_name_map(arch, model.config.get_text_config().num_hidden_layers)
    tensors = {t.name: t for t in table}
    blob = np.memmap(path, dtype=np.uint8, mode="r")
    decoders = {**_DECODERS, **_DECODERS_6BIT} if six_bit else _DECODERS
    out: dict[str, Int4Codes] = {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        base = name_map.get_name(name)
        t = tensors.get(f"{base}.weight") if base else None
        kind = gguf.GGMLQuantizationType(t.ggml_type).name if t is not None else None
        if kind not in decoders or len(t.shape) != 2:
            continue
        decode, block_bytes = decoders[kind]
        rows, cols = t.shape
        raw = blob[data_start + t.offset : data_start + t.offset + t.nbytes]
        out[name] = decode(np.asarray(raw).reshape(-1, block_bytes), rows, cols)
    return out
