"""The lean forward: one kernel call per pass for the llama family (kernels/forward.c).

transformers' forward costs ~30 ms of Python and small-tensor work per token on a 28-layer
model (speed notes, item 17) -- half of what the matmuls themselves cost on 2 cores. For the
families it covers, forward.c runs the whole pass in C on the same GGUFMatrix blocks the
model's modules hold: norms, RoPE, attention over a positional KV cache, SiLU MLP, head.

It applies where `supports(model)` says so: llama, mistral, qwen2 and qwen3 with SiLU, full
attention, RoPE whose only effect is its inv_freq (default, linear, llama3 scaling), no
MLP or output biases. Its results are its own, not transformers' (float sums in another
order): tests/test_cpu_lean.py checks they agree closely, and that every row's logits are
bitwise the same whatever the pass size. The engine hands it to CachedLM; elsewhere the model
runs transformers' forward on the same modules.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .build import kernel
from .abi import enum, ffi, ptr
from .linear import ROWS, X8, GGUFEmbedding, GGUFLinear, GGUFMatrix

ETOKEN, EUNSUPPORTED = (enum("sd_status")[n] for n in ("SD_ETOKEN", "SD_EUNSUPPORTED"))

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def _llama_permutation(rows: int, heads: int) -> np.ndarray:
    """The row order transformers restores for a llama q/k matrix (its reverse permute)."""
    dim = rows // heads // 2
    return np.arange(rows).reshape(heads, dim, 2).swapaxes(2, 1).reshape(rows)


def supports(model: nn.Module) -> str | None:
    """None when the lean forward runs this model; else why not (one phrase)."""
    cfg = model.config
    if cfg.model_type not in FAMILIES:
        return f"{cfg.model_type} is not a family it covers ({', '.join(FAMILIES)})"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"{cfg.hidden_act} activation"
    if getattr(cfg, "use_sliding_window", False) or getattr(cfg, "sliding_window", None) and cfg.model_type == "mistral":
        return "sliding-window attention"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return "sliding-window attention"
    if getattr(cfg, "mlp_bias", False):
        return "MLP biases"
    inner = model.model
    rope = getattr(inner, "rotary_emb", None)
    if rope is None or float(getattr(rope, "attention_scaling", 1.0)) != 1.0:
        return "RoPE with attention scaling"
    if getattr(rope, "rope_type", "default") not in ("default", "linear", "llama3"):
        return f"{rope.rope_type} RoPE"
    if not isinstance(inner.embed_tokens, GGUFEmbedding) or not isinstance(model.lm_head, GGUFLinear):
        return "embedding or head not on GGUF blocks"
    for layer in inner.layers:
        a, m = layer.self_attn, layer.mlp
        if not all(isinstance(x, GGUFLinear) for x in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj)):
            return "a layer not on GGUF blocks"
        if a.o_proj.bias is not None or m.down_proj.bias is not None:
            return "output biases"
    if model.lm_head.bias is not None:
        return "a head bias"
    return None


class PositionalKV:
    """Keys and values by position: [layers, capacity, kv_heads * head_dim] each. What lies
    past the caller's length is stale and never read; a rollback is only a shorter length."""

    def __init__(self, layers: int, width: int, capacity: int = 256) -> None:
        self.keys = torch.zeros(layers, capacity, width)
        self.values = torch.zeros_like(self.keys)

    @property
    def capacity(self) -> int:
        return self.keys.shape[1]

    def reserve(self, length: int, keep: int) -> None:
        """Room for `length` positions, keeping the first `keep` (doubling: amortised copies)."""
        capacity = self.capacity
        if length <= capacity:
            return
        while capacity < length:
            capacity *= 2
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros(old.shape[0], capacity, old.shape[2])
            new[:, :keep] = old[:, :keep]
            setattr(self, name, new)

    @property
    def nbytes(self) -> int:
        return 2 * self.keys.numel() * 4


def _interleave(model: nn.Module, nthreads: int) -> None:
    """Each linear's matrix repacked to the interleaved layout (kernels/sdcpu.h) where the
    running kernel has one, tensor by tensor, the file's pages under it handed back as soon as
    its copy exists: resident memory stays about one model's bytes. The modules take the new
    matrices (transformers' forward reads them too); the embedding keeps the file's rows (it is
    looked up, not multiplied), also where the head is tied to it."""
    done: dict[int, GGUFMatrix] = {}
    for module in model.modules():
        if not isinstance(module, GGUFLinear):
            continue
        m = module.matrix
        if id(m) not in done:
            done[id(m)] = m.repack(nthreads, release=True)
        module.matrix = done[id(m)]


def _head_rows(head: GGUFMatrix, rows: np.ndarray, nthreads: int, repack: bool) -> GGUFMatrix:
    """A contiguous matrix of the head's `rows` (in the file's layout, then interleaved where it can be)."""
    data = head.data
    if head.layout == X8:  # the file's rows again, to gather from
        data = np.empty_like(head.data)
        rc = kernel().lib.sd_repack(head.ggml_type, head.pointer(), head.row_bytes, head.rows, head.cols,
                                    ptr(data), ROWS, nthreads)
        if rc:
            raise RuntimeError(f"CPU kernel could not unpack the head (code {rc})")
    part = GGUFMatrix(np.ascontiguousarray(np.asarray(data)[rows]), head.ggml_type, len(rows), head.cols)
    return part.repack(nthreads) if repack else part


class LeanForward:
    """The model's forward for decoding: ids at positions start.., logits of the last rows.

    head_rows: None for logits over the whole vocabulary; else a sorted array of distinct token
    ids (FR-Spec: a draft's head limited to its most frequent tokens). The head is then a
    contiguous matrix of just those rows, built here in memory, and a pass returns logits
    [n, len(head_rows)] in the order of head_rows: column j is token head_rows[j], bit for bit
    the logit the full head gives that token. The input side (embeddings) is unchanged.

    repack: False keeps every matrix in the file's row layout (for before/after measurements).
    """

    def __init__(self, model: nn.Module, head_rows=None, repack: bool = True) -> None:
        why = supports(model)
        if why is not None:
            raise ValueError(f"the lean forward cannot run this model: {why}")
        cfg, inner = model.config, model.model
        self.model = model
        nthreads = torch.get_num_threads()
        if repack:
            _interleave(model, nthreads)
        head = model.lm_head.matrix
        self.head_rows = None
        if head_rows is not None:
            rows = np.asarray(head_rows)
            if rows.ndim != 1 or not len(rows) or not np.issubdtype(rows.dtype, np.integer):
                raise ValueError("head_rows: a non-empty 1-D array of token ids")
            if rows[0] < 0 or rows[-1] >= head.rows or (np.diff(rows) <= 0).any():
                raise ValueError(f"head_rows: sorted distinct ids in 0..{head.rows - 1}")
            self.head_rows = rows.astype(np.int64)
            head = _head_rows(head, self.head_rows, nthreads, repack)
        self.vocab = head.rows
        self._keep = []  # every array whose address the C struct holds

        def vec(t):
            if t is None:
                return ffi.NULL
            arr = t.detach().float().contiguous()
            self._keep.append(arr)
            return ffi.cast("float *", arr.data_ptr())

        def mat(m: GGUFMatrix, raw_rows: bool = False) -> dict:
            if m.row_map is not None and not raw_rows:
                raise ValueError("a permuted matrix outside q/k")
            self._keep.append(m)
            return {"data": m.pointer(), "row_bytes": m.row_bytes, "type": m.ggml_type, "rows": m.rows, "cols": m.cols,
                    "layout": m.layout}

        heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        self.kv_width = kv_heads * self.head_dim
        # RoPE: transformers rotates halves of each head; a llama GGUF stores q/k so that
        # llama.cpp rotates adjacent pairs instead. Where the layers carry transformers'
        # permutation, the C side reads the file's rows as they are and rotates pairs.
        q0, k0 = inner.layers[0].self_attn.q_proj.matrix, inner.layers[0].self_attn.k_proj.matrix
        pairs = q0.row_map is not None
        if pairs and not (np.array_equal(q0.row_map, _llama_permutation(q0.rows, heads))
                          and np.array_equal(k0.row_map, _llama_permutation(k0.rows, kv_heads))):
            raise ValueError("q/k rows permuted in an unknown way")
        layers = ffi.new("sd_layer[]", len(inner.layers))  # the structs as sdcpu.h declares them
        for i, layer in enumerate(inner.layers):
            a, m = layer.self_attn, layer.mlp
            q_norm, k_norm = getattr(a, "q_norm", None), getattr(a, "k_norm", None)
            layers[i] = {
                "attn_norm": vec(layer.input_layernorm.weight), "ffn_norm": vec(layer.post_attention_layernorm.weight),
                "wq": mat(a.q_proj.matrix, pairs), "wk": mat(a.k_proj.matrix, pairs), "wv": mat(a.v_proj.matrix),
                "wo": mat(a.o_proj.matrix), "wgate": mat(m.gate_proj.matrix), "wup": mat(m.up_proj.matrix),
                "wdown": mat(m.down_proj.matrix), "bq": vec(a.q_proj.bias), "bk": vec(a.k_proj.bias),
                "bv": vec(a.v_proj.bias), "q_norm": vec(None if q_norm is None else q_norm.weight),
                "k_norm": vec(None if k_norm is None else k_norm.weight),
            }
        self._layers = layers
        self._struct = ffi.new("sd_model *", {
            "n_layers": len(inner.layers), "d_model": cfg.hidden_size, "n_heads": heads, "n_kv_heads": kv_heads,
            "head_dim": self.head_dim, "d_ff": cfg.intermediate_size, "vocab": self.vocab, "rope_neox": 0 if pairs else 1,
            "rms_eps": float(cfg.rms_norm_eps), "attn_scale": float(self.head_dim**-0.5),
            "inv_freq": vec(inner.rotary_emb.inv_freq), "tok_embd": mat(inner.embed_tokens.matrix), "output": mat(head),
            "output_norm": vec(inner.norm.weight), "layers": layers,
        })
        self.n_layers = len(inner.layers)

    def new_cache(self) -> PositionalKV:
        return PositionalKV(self.n_layers, self.kv_width)

    def __call__(self, ids: list[int], start: int, cache: PositionalKV, logits_to_keep: int = 1) -> torch.Tensor:
        """Logits [logits_to_keep, V] for ids fed at positions start..start+len(ids)-1, whose keys
        and values land in `cache`; positions < start must already be there."""
        t = len(ids)
        cache.reserve(start + t, keep=start)
        idv = np.asarray(ids, dtype=np.int32)
        logits = torch.empty(logits_to_keep, self.vocab)
        rc = kernel().lib.sd_forward(self._struct, ptr(cache.keys), ptr(cache.values), cache.capacity, ptr(idv), t, start,
                                     ptr(logits), logits_to_keep, torch.get_num_threads())
        if rc == ETOKEN:
            raise ValueError(f"a token id outside the vocabulary (0..{self._struct.tok_embd.rows - 1})")
        if rc == EUNSUPPORTED:
            raise RuntimeError("the CPU kernel has no dot product for one of the model's matrices (its type or layout)")
        if rc:
            raise RuntimeError(f"the CPU forward failed (code {rc})")
        return logits


def attach(model: nn.Module, head_rows=None) -> tuple[LeanForward | None, str | None]:
    """(the lean forward, None) where it applies, else (None, why not). head_rows: as LeanForward's."""
    why = supports(model)
    if why is not None:
        return None, why
    try:
        return LeanForward(model, head_rows=head_rows), None
    except ValueError as e:
        return None, str(e)
