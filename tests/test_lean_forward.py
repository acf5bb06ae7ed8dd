"""The lean forward (specdec_core/lean_forward.py): bitwise the model's own forward.

Exact equalities on a tiny Qwen2 GGUF run on the native kernel: the logits of every kind of
pass a decoder makes (a prompt, one token, a verification of several, after a rollback, past the
cache's first capacity) equal transformers' forward on a DynamicCache bit for bit; the joined
q/k/v and gate/up layers share the originals' memory and leave their outputs unchanged."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from specdec_core import native
from specdec_core.engine import Engine
from specdec_core.lean_forward import ATTR, LeanForward, supports
from specdec_core.lm import CachedLM
from test_native import _tiny_gguf
from tiny_models import make_model

needs_native = pytest.mark.skipif(native.load() is None, reason=f"native kernel: {native.unavailable()}")


def _hf(model, cache, ids, keep):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=keep).logits[0]


@needs_native
@pytest.mark.parametrize("q6k", [False, True])
def test_every_pass_a_decoder_makes_equals_the_models_forward_bit_for_bit(tmp_path, isolated_cache, q6k):
    _, path = _tiny_gguf(tmp_path, q6k)
    engine = Engine.load(str(path), str(path), device="cpu")
    for lm in (engine.target, engine.draft):
        assert isinstance(getattr(lm.model, ATTR, None), LeanForward)
        assert any("lean forward" in n for n in lm.info.notes)
    model = engine.target.model
    ours = CachedLM(model)
    assert ours.lean is not None
    ref = DynamicCache(config=model.config)
    g = torch.Generator().manual_seed(3)
    seq = torch.randint(3, model.config.vocab_size, (400,), generator=g).tolist()
    # prompt; one token at a time; a 5-token verification; a rollback of 3 and a 4-token pass;
    # then one long pass that takes the cache past its first capacity (256 positions)
    plan = [("feed", 40, 1), ("feed", 1, 1), ("feed", 1, 1), ("feed", 5, 5), ("back", 3, None),
            ("feed", 4, 4), ("feed", 1, 1), ("feed", 260, 2), ("feed", 1, 1)]
    at = 0
    for op, n, keep in plan:
        if op == "back":
            at -= n
            ours.rollback(at)
            ref.crop(-n)
            continue
        ids = seq[at : at + n]
        got = ours.forward(ids, logits_to_keep=keep)
        want = _hf(model, ref, ids, keep)
        assert torch.equal(got, want), f"{op} {n} at {at}: max diff {(got - want).abs().max()}"
        at += n
    assert ours.length == at == 310


@needs_native
def test_joined_layers_share_the_originals_memory_and_outputs(tmp_path, isolated_cache):
    _, path = _tiny_gguf(tmp_path, False)
    engine = Engine.load(str(path), None, device="cpu", cpu_kernels="native")
    layer = getattr(engine.target.model, ATTR).layers[0]
    attn, mlp = engine.target.model.model.layers[0].self_attn, engine.target.model.model.layers[0].mlp
    joint = layer.qkv.codes
    assert attn.q_proj.codes.data_ptr() == joint.data_ptr()
    assert attn.v_proj.codes.data_ptr() + attn.v_proj.codes.nbytes == joint.data_ptr() + joint.nbytes
    assert mlp.up_proj.scale.untyped_storage().data_ptr() == layer.gate_up.scale.untyped_storage().data_ptr()
    x = torch.randn(3, attn.q_proj.in_features)
    joined = layer.qkv(x)
    assert torch.equal(joined, torch.cat([attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)], dim=-1))
    fresh = Engine.load(str(path), None, device="cpu", cpu_kernels="native").target.model.model.layers[0]
    assert torch.equal(fresh.mlp.up_proj(x), mlp.up_proj(x))  # same outputs as a second load's


def test_it_applies_only_where_it_reproduces_the_forward(tiny):
    assert supports(tiny.target) == "no layer runs on the native kernel"
    assert CachedLM(tiny.target).lean is None  # transformers' forward, as before
    model = make_model(tiny.vocab, seed=0)
    model.config.model_type = "llama"
    assert supports(model) == "not a Qwen2 model"
    assert supports(make_model(tiny.vocab, seed=0).to(torch.bfloat16)) == "bfloat16 weights"
