"""GGUF blocks for the CPU backend's tests: valid random blocks of every type the kernel reads,
gguf-py's own dequantization as the reference, and tiny GGUF models whose float twin is
exactly what their blocks decode to.

gguf-py quantizes Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the float types, but not the K-quants: those
blocks are random bytes with sane fp16 scales, and the test model is then defined as what they
decode to (its float weights are replaced by the decoded values).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch

QUANTIZABLE = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
K_QUANTS = ("Q4_K", "Q5_K", "Q6_K")
ALL_TYPES = QUANTIZABLE + K_QUANTS


def type_id(name: str) -> int:
    return int(gguf.GGMLQuantizationType[name])


def _fp16_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(-1, 2)


def random_blocks(name: str, rows: int, cols: int, rng: np.random.Generator, scale: float = 0.05) -> np.ndarray:
    """uint8 [rows, row_bytes] of valid blocks of type `name` for a [rows, cols] matrix."""
    qt = gguf.GGMLQuantizationType[name]
    if name in QUANTIZABLE:
        w = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        return quantize(w, name)
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    nb = rows * cols // be
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    # fp16 super-block scales: positive, small enough that weights are ~`scale`
    d = np.abs(rng.standard_normal(nb)) * scale / 20 + scale / 200
    if name == "Q6_K":
        raw[:, 208:210] = _fp16_bytes(d / 4)
    else:
        raw[:, 0:2] = _fp16_bytes(d)
        raw[:, 2:4] = _fp16_bytes(d)
    return raw.reshape(rows, -1)


def quantize(w: np.ndarray, name: str) -> np.ndarray:
    """A float32 matrix quantized to `name`, as uint8 [rows, row_bytes]: gguf-py's quantizer
    where it has one, else quantize_k's simple K-quant rounding."""
    if name in K_QUANTS:
        return quantize_k(w, name)
    q = gguf.quants.quantize(np.ascontiguousarray(w, dtype=np.float32), gguf.GGMLQuantizationType[name])
    return np.ascontiguousarray(q).view(np.uint8).reshape(w.shape[0], -1)


def quantize_k(w: np.ndarray, name: str) -> np.ndarray:
    """A plain round-to-nearest K-quant of w (no importance search, unlike llama.cpp's): enough
    for models that behave like quantized ones. Packs the bytes as llama.cpp lays them out."""
    rows, cols = w.shape
    sb = w.astype(np.float32).reshape(-1, 256)  # super-blocks
    nb = sb.shape[0]
    if name == "Q6_K":
        g = sb.reshape(nb, 16, 16)
        gscale = np.abs(g).max(-1) / 31  # [nb, 16]: q - 32 in -31..31
        d = (gscale.max(-1) / 127).astype(np.float16).astype(np.float32)  # [nb]
        sc = np.where(d[:, None] > 0, np.round(gscale / np.where(d[:, None] > 0, d[:, None], 1)), 0).clip(-128, 127)
        step = d[:, None] * sc
        q = np.where(step[..., None] > 0, np.round(g / np.where(step[..., None] > 0, step[..., None], 1)), 0)
        q = (q + 32).clip(0, 63).astype(np.uint8).reshape(nb, 2, 4, 32)  # half, quarter, l
        ql = np.empty((nb, 2, 64), np.uint8)
        ql[:, :, :32] = (q[:, :, 0] & 0xF) | ((q[:, :, 2] & 0xF) << 4)
        ql[:, :, 32:] = (q[:, :, 1] & 0xF) | ((q[:, :, 3] & 0xF) << 4)
        qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
        out = np.concatenate([ql.reshape(nb, 128), qh.reshape(nb, 64), sc.astype(np.int8).view(np.uint8),
                              _fp16_bytes(d)], axis=1)
        return out.reshape(rows, -1)
    levels = 31 if name == "Q5_K" else 15
    sub = sb.reshape(nb, 8, 32)
    offset = np.maximum(-sub.min(-1), 0)  # w = d*sc*q - dmin*m, q >= 0
    scale = (sub.max(-1) + offset) / levels
    d = (scale.max(-1) / 63).astype(np.float16).astype(np.float32)
    dmin = (offset.max(-1) / 63).astype(np.float16).astype(np.float32)
    safe = lambda v: np.where(v > 0, v, 1)  # noqa: E731
    sc = np.where(d[:, None] > 0, np.round(scale / safe(d[:, None])), 0).clip(0, 63).astype(np.uint8)
    mn = np.where(dmin[:, None] > 0, np.round(offset / safe(dmin[:, None])), 0).clip(0, 63).astype(np.uint8)
    step = d[:, None] * sc
    q = np.where(step[..., None] > 0, np.round((sub + (dmin[:, None] * mn)[..., None]) / safe(step[..., None])), 0)
    q = q.clip(0, levels).astype(np.uint8)  # [nb, 8, 32]
    scales = np.empty((nb, 12), np.uint8)
    scales[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = (mn[:, :4] & 63) | ((mn[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 0xF) | ((mn[:, 4:] & 0xF) << 4)
    pairs = q.reshape(nb, 4, 2, 32)  # chunk c: sub-blocks 2c (low nibbles) and 2c+1 (high)
    qs = ((pairs[:, :, 0] & 0xF) | ((pairs[:, :, 1] & 0xF) << 4)).reshape(nb, 128)
    parts = [_fp16_bytes(d), _fp16_bytes(dmin), scales]
    if name == "Q5_K":
        qh = np.zeros((nb, 32), np.uint8)
        for j in range(8):
            qh |= ((q[:, j] >> 4) & 1) << j
        parts.append(qh)
    parts.append(qs)
    return np.concatenate(parts, axis=1).reshape(rows, -1)


def dequantize(raw: np.ndarray, name: str, cols: int) -> np.ndarray:
    """gguf-py's dequantization (the reference): float32 [rows, cols]."""
    out = gguf.quants.dequantize(np.ascontiguousarray(raw), gguf.GGMLQuantizationType[name])
    return np.asarray(out, dtype=np.float32).reshape(raw.shape[0], cols)


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The row order llama.cpp's converter stores llama's q/k projections in (for its RoPE)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: Path | str, model, tokenizer, types: dict[str, str] | None = None, seed: int = 0) -> Path:
    """Write `model` (tiny qwen2 or llama) as a GGUF whose matrices have the given types
    (GGUF tensor-name suffix -> type name, e.g. {"ffn_down": "Q6_K"}; others F32), and make
    `model` exactly what the file decodes to. Returns the path."""
    from tiny_models import save_gguf

    rng = np.random.default_rng(seed)
    types = types or {}
    cfg = model.config
    arch = cfg.model_type
    overrides = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() != 2:
                continue
            gname = _gguf_name(name)
            kind = gname.split(".")[-2] if gname.startswith("blk.") else gname.split(".")[0]
            qtype = types.get(kind)
            if qtype is None and arch == "llama" and kind in ("attn_q", "attn_k"):
                qtype = "F32"  # still written through here: a llama file holds these rows permuted
            if qtype is None:
                continue
            rows, cols = p.shape
            raw = quantize(p.detach().numpy(), qtype)
            p.copy_(torch.from_numpy(dequantize(raw, qtype, cols)))  # the model is what the file decodes to
            if arch == "llama" and kind in ("attn_q", "attn_k"):
                # llama.cpp's converter stores these rows permuted (for its RoPE); whole rows move
                heads = cfg.num_attention_heads if kind == "attn_q" else cfg.num_key_value_heads
                raw = llama_permute(raw, heads)
            overrides[gname] = (raw, qtype)
    return save_gguf(path, model, tokenizer, overrides=overrides)


def _gguf_name(hf: str) -> str:
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf in names:
        return names[hf]
    per_layer = {
        "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    _, _, i, rest = hf.split(".", 3)
    module, suffix = rest.rsplit(".", 1)
    return f"blk.{i}.{per_layer[module]}.{suffix}"


def make_llama(vocab_size: int, seed: int, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
               intermediate: int = 128):
    """A tiny random LlamaForCausalLM (float32, eval), weights scaled up like tiny_models'."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=None,
                         eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(25.0)
    model.generation_config = GenerationConfig(eos_token_id=[2, 0], pad_token_id=0)
    return model.eval()


# ---------------------------------------------------------------- golden numbers
# What the kernel computed before the interleaved layouts (issue 21): stored bits that every
# later layout must reproduce, so the committed quality report stays valid. The inputs are
# rebuilt from seeds; their sha256 is stored too, so a change of inputs (a new numpy or gguf)
# reads as such, not as a change of the kernel's numbers.

GOLDEN_DIR = Path(__file__).with_name("data")


def golden_matmul_case(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(raw blocks [40, row_bytes], x [17, K]) for a type: 896 columns for the 32-element and
    float types (a partial last group of 8 blocks, the 0.5B's width), 1024 for the K-quants."""
    rng = np.random.default_rng(1000 + ALL_TYPES.index(name))
    kdim = 1024 if name in K_QUANTS else 896
    raw = random_blocks(name, 40, kdim, rng)
    x = rng.standard_normal((17, kdim)).astype(np.float32)
    x[3] *= 100
    x[11] = 0.0  # a row of zeros
    return raw, x


def sha(*arrays: np.ndarray) -> str:
    import hashlib

    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
