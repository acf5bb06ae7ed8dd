"""The lean forward (specdec_core/cpu/lean.py + kernels/forward.c): one kernel call per pass.

Its numbers are its own (float sums in the kernel's order, not torch's), so against
transformers' forward on the same GGUF modules it is checked to agree closely; against itself
it must be exact: every row's logits bitwise the same whatever the pass size, the chunking of
a long prompt, the thread count, or a rollback. That is what makes greedy speculative decoding
equal standard decoding through Engine.load, checked last.
"""

from __future__ import annotations

import pytest
import torch

from conftest import soften
from gguf_blocks import make_llama, write_gguf
from specdec_core.cpu import lean as lean_mod
from specdec_core.cpu import model as cm
from tiny_models import make_model, make_tokenizer

K_TYPES = {"attn_q": "Q4_K", "attn_k": "Q4_K", "attn_v": "Q6_K", "attn_output": "Q4_K", "ffn_gate": "Q4_K",
           "ffn_up": "Q4_K", "ffn_down": "Q6_K", "output": "Q6_K", "token_embd": "Q4_K"}
SMALL_TYPES = {"attn_q": "Q5_0", "attn_k": "Q5_0", "attn_v": "Q8_0", "attn_output": "Q5_0", "ffn_gate": "Q4_0",
               "ffn_up": "Q4_1", "ffn_down": "Q5_1", "output": "Q8_0", "token_embd": "Q5_0"}


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


@pytest.fixture(scope="module")
def k_model(tmp_path_factory, tok):
    twin = soften(make_model(len(tok), seed=0, hidden=256, intermediate=512, heads=4, kv_heads=2,
                             tie_word_embeddings=False), 5.0)
    path = write_gguf(tmp_path_factory.mktemp("k") / "k.gguf", twin, tok, K_TYPES)
    return cm.load(path, None)


def _ids(tok, n: int) -> list[int]:
    words = "the cat sat on a mat . is it done and not the hat too".split()
    return tok(" ".join(words[i % len(words)] for i in range(n)))["input_ids"][:n]


def _hf(model, ids):
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0]


def test_lean_agrees_with_transformers_forward_on_the_same_blocks(tmp_path, tok, k_model):
    f32 = cm.load(write_gguf(tmp_path / "f.gguf", make_model(len(tok), seed=1), tok), None)
    llama = cm.load(write_gguf(tmp_path / "l.gguf", make_llama(len(tok), seed=2), tok), None)
    for loaded, tol in ((f32, 1e-4), (llama, 1e-4), (k_model, 0.05)):
        lean, why = lean_mod.attach(loaded.model)
        assert why is None
        ids = _ids(tok, 12)
        ours = lean(ids, 0, lean.new_cache(), len(ids))
        ref = _hf(loaded.model, ids)
        assert ((ours - ref).abs().amax(-1) <= tol * ref.abs().amax(-1)).all(), loaded.model.config.model_type
        assert torch.equal(ours.argmax(-1), ref.argmax(-1))
    assert lean_mod.LeanForward(llama.model)._struct.rope_neox == 0  # pairs, on the file's own rows


def test_every_row_is_the_same_whatever_shares_its_pass(tok, k_model):
    lean = lean_mod.LeanForward(k_model.model)
    ids = _ids(tok, 70)  # more than one internal chunk of 64 rows
    whole = lean(ids, 0, lean.new_cache(), len(ids))
    for step in (1, 3, 17):
        cache, parts = lean.new_cache(), []
        for s in range(0, len(ids), step):
            parts.append(lean(ids[s : s + step], s, cache, len(ids[s : s + step])))
        assert torch.equal(torch.cat(parts), whole), step
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(lean(ids, 0, lean.new_cache(), len(ids)), whole)
    finally:
        torch.set_num_threads(threads)


def test_rollback_is_a_shorter_length(tok, k_model):
    lean = lean_mod.LeanForward(k_model.model)
    ids = _ids(tok, 20)
    cache = lean.new_cache()
    lean(ids[:15], 0, cache, 1)
    lean([5, 6, 7], 15, cache, 3)  # a rejected draft: its keys are left past the length
    again = lean(ids[15:], 15, cache, 5)
    fresh = lean(ids, 0, lean.new_cache(), 5)
    assert torch.equal(again, fresh)


def test_the_cache_grows_past_its_first_capacity(tok, k_model):
    lean = lean_mod.LeanForward(k_model.model)
    cache = lean.new_cache()
    ids = (_ids(tok, 40) * 8)[:300]
    first = cache.capacity
    out = [lean(ids[:250], 0, cache, 1)] + [lean([t], 250 + i, cache, 1) for i, t in enumerate(ids[250:])]
    assert cache.capacity > first >= 250 - 10
    assert torch.equal(out[-1], lean(ids, 0, lean.new_cache(), 1))


def test_ids_outside_the_vocabulary_are_refused(tok, k_model):
    lean = lean_mod.LeanForward(k_model.model)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        lean([len(tok) + 1000], 0, lean.new_cache(), 1)


def test_families_it_does_not_cover_keep_transformers_forward(tmp_path, tok):
    loaded = cm.load(write_gguf(tmp_path / "q.gguf", make_model(len(tok), seed=3), tok), None)
    loaded.model.config.hidden_act = "gelu"
    assert lean_mod.attach(loaded.model) == (None, "gelu activation")
    loaded.model.config.hidden_act = "silu"
    loaded.model.config.model_type = "gemma"
    assert "not a family it covers" in lean_mod.supports(loaded.model)


@pytest.mark.parametrize("draft_tokens", [1, 3, 8, "adaptive"])
def test_greedy_speculative_equals_standard_through_engine_load(tmp_path_factory, tok, draft_tokens, isolated_cache):
    """The whole shipped path on a tiny pair: Engine.load -> CPU kernel -> lean forwards."""
    from specdec_core.settings import DecodeSettings
    from specdec_core.engine import Engine

    root = tmp_path_factory.mktemp("pair")
    target = soften(make_model(len(tok), seed=4, hidden=256, intermediate=512, tie_word_embeddings=False), 5.0)
    draft = soften(make_model(len(tok), seed=5, hidden=64, layers=1, heads=2, kv_heads=1, intermediate=128), 5.0)
    t_path = write_gguf(root / "t.gguf", target, tok, K_TYPES)
    d_path = write_gguf(root / "d.gguf", draft, tok, SMALL_TYPES)
    engine = Engine.load(str(t_path), str(d_path), device="cpu")
    assert engine.target.lean is not None and engine.draft.lean is not None
    assert "lean forward" in engine.target.info.kernels and engine.target.info.quantization.startswith("gguf(")
    settings = DecodeSettings(max_new_tokens=40, draft_tokens=draft_tokens)
    for prompt in ("the cat sat on", "is it done and", "a hat too"):
        ids = engine.encode_prompt(prompt)
        standard = engine.generate(ids, settings.replace(mode="standard")).run()
        spec = engine.generate(ids, settings).run()
        assert spec.token_ids == standard.token_ids, prompt
        assert spec.stats.draft_tokens > 0
