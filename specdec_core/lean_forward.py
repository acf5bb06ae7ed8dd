"""A lean forward pass for Qwen2-family models on the native kernel.

Why: with the matmuls on the native kernel, a one-token step of the 0.5B draft spent ~25% of
its time outside them -- in transformers' per-module plumbing (output capture, mask creation,
`DynamicCache.update`'s concatenation) and in separate q/k/v and gate/up calls. This pass runs
the same operations in the same order on the same modules, so its logits are bitwise those of
the model's own forward (tests/test_lean_forward.py checks it), with three differences:
- q, k and v are one native call, and gate and up another: their codes are concatenated along
  the output dimension and the original layers keep views into the joint tensors (no copy);
  each output column is computed exactly as before;
- keys and values are written by position into preallocated tensors (gpt-fast's cache), so a
  rollback is only a shorter length and a step copies nothing old;
- no hooks, output objects or masks beyond the one a multi-token pass needs.

`attach(model)` builds it where it applies (a Qwen2 architecture whose linears run on the
native kernel) and `CachedLM` uses it when present; anything else runs the model's forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .native_linear import NativeLinear

ATTR = "specdec_lean"  # where attach() leaves the LeanForward on the model


def supports(model: nn.Module) -> str | None:
    """None when the lean pass reproduces this model's forward; else why it does not."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "qwen2":
        return "not a Qwen2 model"
    if getattr(cfg, "use_sliding_window", False) or any(t != "full_attention" for t in getattr(cfg, "layer_types", [])):
        return "sliding-window attention"
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return f"{rope.get('rope_type')} RoPE"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"{cfg.hidden_act} activation"
    dtype = next(model.parameters()).dtype
    if dtype != torch.float32:  # the pass skips Qwen2RMSNorm's casts, which are no-ops only here
        return f"{str(dtype).removeprefix('torch.')} weights"
    if not any(isinstance(m, NativeLinear) for m in model.modules()):
        return "no layer runs on the native kernel"
    return None


def _joint(layers: list[nn.Module]) -> nn.Module | None:
    """One NativeLinear for layers that share an input, or None where they cannot be joined."""
    if not all(isinstance(m, NativeLinear) for m in layers) or len({(m.bits, m.in_features) for m in layers}) != 1:
        return None
    first = layers[0]
    names = [n for n in ("codes", "scale", "offset") if getattr(first, n) is not None]
    joint = {n: torch.cat([getattr(m, n) for m in layers]) for n in names}
    biases = [m.bias for m in layers]
    bias = None
    if any(b is not None for b in biases):
        bias = torch.cat([b if b is not None else torch.zeros(m.out_features) for b, m in zip(biases, layers)])
    out = NativeLinear(first.bits, joint, first.in_features, sum(m.out_features for m in layers), bias)
    out.grouped = all(m.grouped for m in layers)  # a draft's joined layer takes its parts' path
    # the originals keep views into the joint tensors: the weights exist once
    at = 0
    for m in layers:
        panels = getattr(m, names[0]).shape[0]
        for n in names:
            setattr(m, n, joint[n][at : at + panels])
        at += panels
    return out


class _Layer:
    def __init__(self, layer: nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.ln1, self.ln2 = layer.input_layernorm, layer.post_attention_layernorm
        self.qkv = _joint([attn.q_proj, attn.k_proj, attn.v_proj])
        self.q, self.k, self.v, self.o = attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj
        self.gate_up = _joint([mlp.gate_proj, mlp.up_proj])
        self.gate, self.up, self.down = mlp.gate_proj, mlp.up_proj, mlp.down_proj


def _rms(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    # Qwen2RMSNorm's operations, in its order (float32 models: its casts are no-ops)
    variance = x.pow(2).mean(-1, keepdim=True)
    return norm.weight * (x * torch.rsqrt(variance + norm.variance_epsilon))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class PositionalKV:
    """Every layer's keys and values, written by position: [layers, 1, kv_heads, capacity, head_dim].
    What lies past the caller's length is stale and never read."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int = 256) -> None:
        self.keys = torch.zeros(layers, 1, kv_heads, capacity, head_dim)
        self.values = torch.zeros_like(self.keys)

    def reserve(self, length: int, keep: int) -> None:
        """Room for `length` positions, keeping the first `keep` (doubling: amortised copies)."""
        capacity = self.keys.shape[3]
        if length <= capacity:
            return
        while capacity < length:
            capacity *= 2
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = old.new_zeros(*old.shape[:3], capacity, old.shape[4])
            new[:, :, :, :keep] = old[:, :, :, :keep]
            setattr(self, name, new)


class LeanForward:
    """The model's forward for decoding: ids at positions start.., logits of the last rows."""

    def __init__(self, model: nn.Module) -> None:
        cfg = model.config
        self.model = model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.intermediate = cfg.intermediate_size
        self.scaling = self.head_dim**-0.5
        self.layers = [_Layer(layer) for layer in model.model.layers[: cfg.num_hidden_layers]]

    def new_cache(self) -> PositionalKV:
        return PositionalKV(len(self.layers), self.kv_heads, self.head_dim)

    @torch.inference_mode()
    def __call__(self, ids: list[int], start: int, cache: PositionalKV, logits_to_keep: int = 1) -> torch.Tensor:
        """Logits [logits_to_keep, V] for ids fed at positions start..start+len(ids)-1, whose
        keys and values land in `cache`; positions < start must already be there."""
        m, t, end = self.model.model, len(ids), start + len(ids)
        cache.reserve(end, keep=start)
        x = m.embed_tokens(torch.tensor([ids], dtype=torch.long))  # [1, t, hidden]
        # RoPE as Qwen2RotaryEmbedding computes it (attention_scaling is 1 for default RoPE)
        freqs = torch.arange(start, end, dtype=torch.float32)[None, :, None] * m.rotary_emb.inv_freq.float()
        angles = torch.cat((freqs, freqs), dim=-1)  # [1, t, head_dim]
        cos, sin = angles.cos()[:, None], angles.sin()[:, None]  # [1, 1, t, head_dim]
        # one new token sees every cached one; several see the cache and their own past
        mask = None if t == 1 else torch.arange(end)[None, :] <= torch.arange(start, end)[:, None]
        hq, hkv, d = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.head_dim
        for i, layer in enumerate(self.layers):
            h = _rms(x, layer.ln1)
            if layer.qkv is not None:
                q, k, v = layer.qkv(h).split((hq, hkv, hkv), dim=-1)
            else:
                q, k, v = layer.q(h), layer.k(h), layer.v(h)
            q = q.view(1, t, self.heads, d).transpose(1, 2)  # [1, heads, t, d]
            k = k.view(1, t, self.kv_heads, d).transpose(1, 2)  # [1, kv_heads, t, d]
            v = v.view(1, t, self.kv_heads, d).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            cache.keys[i, :, :, start:end] = k
            cache.values[i, :, :, start:end] = v
            a = F.scaled_dot_product_attention(q, cache.keys[i, :, :, :end], cache.values[i, :, :, :end],
                                               attn_mask=mask, scale=self.scaling, enable_gqa=True)
            x = x + layer.o(a.transpose(1, 2).reshape(1, t, hq))
            h = _rms(x, layer.ln2)
            if layer.gate_up is not None:
                g, u = layer.gate_up(h).split((self.intermediate, self.intermediate), dim=-1)
            else:
                g, u = layer.gate(h), layer.up(h)
            x = x + layer.down(F.silu(g) * u)
        x = _rms(x[:, -logits_to_keep:], m.norm)
        return self.model.lm_head(x)[0]


def attach(model: nn.Module) -> str | None:
    """Give the model a LeanForward (CachedLM uses it); returns why not where it does not apply."""
    why = supports(model)
    if why is None:
        setattr(model, ATTR, LeanForward(model))
    return why
