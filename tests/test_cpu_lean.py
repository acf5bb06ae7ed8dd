"""The lean forward (specdec_core/cpu/lean.py + kernels/forward.c): one kernel call per pass.

Its numbers are its own (float sums in the kernel's order, not torch's), so against
transformers' forward on the same GGUF modules it is checked to agree closely; against itself
it must be exact: every row's logits bitwise the same whatever the pass size, the chunking of
a long prompt, the thread count, or a rollback. That is what makes greedy speculative decoding
equal standard decoding through Engine.load, checked last.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import soften
from gguf_blocks import GOLDEN_DIR, make_llama, sha, write_gguf
from specdec_core.cpu import lean as lean_mod
from specdec_core.cpu import model as cm
from specdec_core.cpu.linear import ROWS, X8
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


@pytest.mark.parametrize("heads,kv_heads,head_dim", [(4, 4, 16), (6, 2, 16), (20, 2, 16), (8, 2, 16), (10, 2, 16),
                                                     (12, 2, 16), (14, 2, 16), (14, 2, 64), (12, 2, 128)])
def test_attention_is_the_reference_on_every_build(tmp_path, tok, heads, kv_heads, head_dim):
    """kernels/attention.c: the x86 builds attend with the heads of a key-value head together
    (up to 8 a tile: a group of 1, of 3, of 10 split in two; groups of 4-7 with only their own
    lanes computed, the rest all 8), the 512-bit build two keys a register, and up to 8 rows
    of a pass together over blocks of 64 keys (their sums parked between blocks) once a key-value
    head's cache outgrows 512 KB; every row's logits equal the portable build's, which takes a
    head at a time -- a prefill of 150 rows (odd and even lengths, past one chunk), then 1 and 9
    more, on 1, 2 and 3 threads (which group the rows differently). Head widths 64 and 128 are
    the embedded pair's (the 512-bit build's several blocks of values a sweep, the 256-bit
    builds' two for groups of up to 6 heads); at 128 the prefill is 630 rows, so that its last
    chunks and the 9 rows attend in groups."""
    from specdec_core.cpu import abi, build
    from test_cpu_kernel import SIMD

    twin = soften(make_model(len(tok), seed=3, hidden=head_dim * heads, intermediate=96, heads=heads,
                             kv_heads=kv_heads, tie_word_embeddings=False, max_positions=1024), 5.0)
    loaded = cm.load(write_gguf(tmp_path / "a.gguf", twin, tok, SMALL_TYPES), None)
    lean = lean_mod.LeanForward(loaded.model)
    assert lean.head_dim == head_dim
    n = 640 if head_dim == 128 else 160
    ids = np.asarray((_ids(tok, 16) * 40)[:n], np.int32)

    def passes(lib, threads=2):
        cache = lean.new_cache()
        cache.reserve(len(ids), keep=0)
        out = []
        for start, rows in ((0, n - 10), (n - 10, 1), (n - 9, 9)):
            logits = torch.empty(rows, lean.vocab)
            assert lib.sd_forward(lean._struct, abi.ptr(cache.keys), abi.ptr(cache.values), cache.capacity,
                                  abi.ptr(ids[start:]), rows, start, abi.ptr(logits), rows, threads) == 0
            out.append(logits)
        return torch.cat(out)

    reference = passes(build.load_variant(build.BY_NAME["portable"]).lib)
    assert torch.isfinite(reference).all()
    for variant in SIMD:
        lib = build.load_variant(variant).lib
        for threads in (1, 2, 3):
            assert torch.equal(passes(lib, threads), reference), (variant.name, threads)


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


def test_a_head_of_chosen_tokens_gives_their_logits_bit_for_bit(tok, k_model):
    """FR-Spec's head: LeanForward(head_rows=ids) returns logits over those ids only, each
    equal to the full head's logit for that id (16 ids: interleaved; 13: the file's rows)."""
    full = lean_mod.LeanForward(k_model.model)
    ids = _ids(tok, 12)
    ref = full(ids, 0, full.new_cache(), 12)
    for rows in (np.array([0, 3, 5, 8, 9, 10, 17, 33, 40, 41, 50, 55, 57, 58, 59, 60]), np.arange(2, 60, 9)[:13]):
        part = lean_mod.LeanForward(k_model.model, head_rows=rows)
        got = part(ids, 0, part.new_cache(), 12)
        assert got.shape == (12, len(rows)) and part.vocab == len(rows)
        assert torch.equal(got, ref[:, torch.from_numpy(rows).long()])
    for bad in ([], [3, 2], [1, 1], [-1, 4], [0, len(tok)], [[1, 2]]):
        with pytest.raises(ValueError, match="head_rows"):
            lean_mod.LeanForward(k_model.model, head_rows=np.array(bad, dtype=np.int64))


def test_ids_outside_the_vocabulary_are_refused(tok, k_model):
    lean = lean_mod.LeanForward(k_model.model)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        lean([len(tok) + 1000], 0, lean.new_cache(), 1)


def test_a_matrix_without_a_dot_product_is_refused_before_the_pass(tok, k_model):
    """A type id the kernel's table has no entry for, an interleaved layout on a type without
    one (Q5_K), a layout id that is neither, or an interleaved embedding: the pass is refused
    (SD_EUNSUPPORTED, one clear error) before anything is computed -- never another type's
    kernel on those blocks -- and the cache is as it was; the model, put back, runs."""
    lean = lean_mod.LeanForward(k_model.model)
    ids = _ids(tok, 6)
    cache = lean.new_cache()
    want = lean(ids[:4], 0, cache, 1)
    keys = cache.keys.clone()
    up, embd = lean._struct.layers[1].wup, lean._struct.tok_embd
    q5_k = 13  # sd_type's SD_Q5_K: no interleaved layout
    for mat, changes in ((up, {"type": 9}), (up, {"type": 31}), (up, {"type": -1}), (up, {"type": q5_k, "layout": X8}),
                         (up, {"layout": 7}), (embd, {"layout": X8})):
        before = {k: getattr(mat, k) for k in changes}
        for k, v in changes.items():
            setattr(mat, k, v)
        with pytest.raises(RuntimeError, match="no dot product"):
            lean(ids[4:6], 4, cache, 2)
        for k, v in before.items():
            setattr(mat, k, v)
        assert torch.equal(cache.keys, keys), changes  # not even the keys of positions 4 and 5
    again = lean.new_cache()
    assert torch.equal(lean(ids[:4], 0, again, 1), want)


def test_families_it_does_not_cover_keep_transformers_forward(tmp_path, tok):
    loaded = cm.load(write_gguf(tmp_path / "q.gguf", make_model(len(tok), seed=3), tok), None)
    loaded.model.config.hidden_act = "gelu"
    assert lean_mod.attach(loaded.model) == (None, "gelu activation")
    loaded.model.config.hidden_act = "silu"
    loaded.model.config.model_type = "gemma"
    assert "not a family it covers" in lean_mod.supports(loaded.model)


@pytest.mark.parametrize("draft_tokens", [1, 3, 8, "adaptive"])
def test_greedy_speculative_equals_standard_through_engine_load(tmp_path_factory, tok, draft_tokens, isolated_cache,
                                                                monkeypatch):
    """The whole shipped path on a tiny pair: Engine.load -> CPU kernel -> lean forwards. The
    costs the adaptive controller decides from are pinned (a target pass ten times a draft
    token's): on the wall clock, whether it started the draft hung on how busy the machine was."""
    from clocks import WorkClock
    from specdec_core.settings import DecodeSettings
    from specdec_core.engine import Engine

    root = tmp_path_factory.mktemp("pair")
    target = soften(make_model(len(tok), seed=4, hidden=256, intermediate=512, tie_word_embeddings=False), 5.0)
    draft = soften(make_model(len(tok), seed=5, hidden=64, layers=1, heads=2, kv_heads=1, intermediate=128), 5.0)
    t_path = write_gguf(root / "t.gguf", target, tok, K_TYPES)
    d_path = write_gguf(root / "d.gguf", draft, tok, SMALL_TYPES)
    loaded = Engine.load(str(t_path), str(d_path), device="cpu")
    clock = WorkClock({loaded.target.model: (0.02, 0.0005), loaded.draft.model: (0.002, 0.0002)}).install(monkeypatch)
    engine = Engine(loaded.target, loaded.draft, clock=clock)
    assert engine.target.lean is not None and engine.draft.lean is not None
    assert "lean forward" in engine.target.info.kernels and engine.target.info.quantization.startswith("gguf(")
    settings = DecodeSettings(max_new_tokens=40, draft_tokens=draft_tokens)
    for prompt in ("the cat sat on", "is it done and", "a hat too"):
        ids = engine.encode_prompt(prompt)
        standard = engine.generate(ids, settings.replace(mode="standard")).run()
        spec = engine.generate(ids, settings).run()
        assert spec.token_ids == standard.token_ids, prompt
        assert spec.stats.proposed_tokens > 0
    assert clock.passes > 0  # the lean forwards ran on the pinned clock


def test_a_draft_with_a_reduced_head_proposes_only_its_tokens_and_changes_nothing(
        tmp_path_factory, tok, isolated_cache, monkeypatch):
    """FR-Spec through Engine.load: the draft's head keeps the tokens models/draft_vocab.py
    names (here every other id, so the target often picks one the draft cannot propose); the
    draft's logits come back at their ids with -inf elsewhere, it proposes only head tokens, the
    load notes say so, and greedy speculative output is standard's token for token."""
    from specdec_core.engine import Engine
    from specdec_core.models import draft_vocab
    from specdec_core.settings import DecodeSettings

    head = np.arange(0, len(tok), 2, dtype=np.int64)
    monkeypatch.setattr(draft_vocab, "head_tokens", lambda tokenizer, vocab_size, n=0: head[head < vocab_size])
    root = tmp_path_factory.mktemp("frspec")
    target = soften(make_model(len(tok), seed=4, hidden=256, intermediate=512, tie_word_embeddings=False), 5.0)
    t_path = str(write_gguf(root / "t.gguf", target, tok, K_TYPES))
    engine = Engine.load(t_path, t_path, device="cpu")  # the target as its own draft: it agrees where it can
    assert engine.target.lean.head_rows is None  # the target always scores every token
    assert np.array_equal(engine.draft.lean.head_rows, head)
    assert any("FR-Spec" in n for n in engine.draft.info.notes)

    from specdec_core.lm import CachedLM

    lm = CachedLM(engine.draft.model, engine.vocab_size, lean=engine.draft.lean)  # the draft's own view
    got = lm.forward(engine.encode_prompt("the cat sat on"), 1)[0]
    assert got.shape == (engine.vocab_size,)
    off = np.setdiff1d(np.arange(engine.vocab_size), head)
    assert torch.isinf(got[torch.from_numpy(off)]).all() and torch.isfinite(got[torch.from_numpy(head)]).all()
    settings = DecodeSettings(max_new_tokens=40, draft_tokens=3, proposer="draft")
    drafted = []
    for prompt in ("the cat sat on", "is it done and", "a hat too"):
        ids = engine.encode_prompt(prompt)
        standard = engine.generate(ids, settings.replace(mode="standard")).run()
        spec = engine.generate(ids, settings).run()
        assert spec.token_ids == standard.token_ids, prompt
        drafted += [e.token_id for e in spec.events if e.kind == "accepted"]  # (bonus: the target's own)
    assert drafted and all(t % 2 == 0 for t in drafted), drafted


# ---------------------------------------------------------------- the numbers of before
# SPECDEC_WRITE_CPU_GOLDEN=1 rewrites them from the code as it is (a reviewed change only)
WRITE_GOLDEN = bool(os.environ.get("SPECDEC_WRITE_CPU_GOLDEN"))
GOLDEN_TINY = GOLDEN_DIR / "cpu_golden_lean.npz"
GOLDEN_REAL = GOLDEN_DIR / "cpu_golden_embedded.json"


def _golden_models(root: Path, tok) -> dict[str, Path]:
    """Two tiny qwen2 files: K-quants at a width of 256 (a 64-token head: whole groups of 8
    rows), and the 32-element types at a width of 224 (7 blocks: a partial group; a 61-token
    head: rows not a multiple of 8)."""
    k = soften(make_model(64, seed=11, hidden=256, intermediate=512, heads=4, kv_heads=2,
                          tie_word_embeddings=False), 5.0)
    small = soften(make_model(len(tok), seed=12, hidden=224, intermediate=160, heads=4, kv_heads=2,
                              tie_word_embeddings=False), 5.0)
    return {"k": write_gguf(root / "k.gguf", k, tok, K_TYPES), "small": write_gguf(root / "s.gguf", small, tok, SMALL_TYPES)}


def test_lean_logits_equal_the_stored_numbers(tmp_path, tok):
    """The lean forward's logits (20 rows in one pass, then 1, 3 and 9 rows on a cache) equal
    the bits stored from the kernel before the interleaved layouts."""
    ids = _ids(tok, 33)
    got = {}
    for tag, path in _golden_models(tmp_path, tok).items():
        loaded = cm.load(path, None)
        lean = lean_mod.LeanForward(loaded.model)
        layouts = {n: m.matrix.layout for n, m in loaded.model.named_modules() if hasattr(m, "matrix")}
        # every linear interleaved where the running kernel has x8 for its type and its rows are
        # a multiple of 8; the embedding never (looked up, not multiplied); a 61-row head not
        native = bool(lean_mod.kernel().lib.sd_x8_native())
        assert layouts["model.embed_tokens"] == ROWS
        assert layouts["lm_head"] == (X8 if native and tag == "k" else ROWS)
        assert layouts["model.layers.0.mlp.up_proj"] == (X8 if native and tag == "k" else ROWS)  # Q4_1 has none
        assert layouts["model.layers.0.self_attn.v_proj"] == (X8 if native else ROWS)
        cache = lean.new_cache()
        got[f"{tag}.inputs"] = np.array(sha(np.fromfile(path, np.uint8)))
        got[f"{tag}.prefill"] = lean(ids[:20], 0, cache, 20).numpy()
        got[f"{tag}.steps"] = torch.cat([lean(ids[20:21], 20, cache, 1), lean(ids[21:24], 21, cache, 3),
                                         lean(ids[24:33], 24, cache, 9)]).numpy()
    if WRITE_GOLDEN:
        np.savez_compressed(GOLDEN_TINY, **got)
    stored = np.load(GOLDEN_TINY)
    for key, value in got.items():
        if key.endswith(".inputs"):
            assert str(stored[key]) == str(value), f"{key}: the tiny model changed (torch or gguf-py?), not the kernel"
        else:
            assert np.array_equal(value.view(np.uint32), stored[key].view(np.uint32)), key


def _embedded(role: str) -> Path:
    from specdec_core.models.default_pair import EMBEDDED

    folder = Path.home() / ".cache" / "specdec-chat" / "gguf"
    return folder / EMBEDDED[role].filename  # where the first Engine.load assembled it


@pytest.mark.slow
@pytest.mark.parametrize("role", ["target", "draft"])
def test_the_embedded_pair_gives_the_stored_numbers(role):
    """The real pair, as Engine.load runs it (the draft requantized), gives the logits it gave
    before the interleaved layouts: a 64-row prefill, then passes of 9 and 1 rows (sha256 of
    their bits; skipped where the assembled files are absent)."""
    path = _embedded(role)
    if not path.is_file():
        pytest.skip(f"{path} not assembled")
    loaded = cm.load(path, None)
    if role == "draft":
        cm.requantize_for_draft(loaded.model, loaded.file)
    lean = lean_mod.LeanForward(loaded.model)
    ids = [(7919 * i + 13) % 150_000 for i in range(74)]
    cache = lean.new_cache()
    passes = [lean(ids[:64], 0, cache, 64), lean(ids[64:73], 64, cache, 9), lean(ids[73:74], 73, cache, 1)]
    got = {"prefill": sha(passes[0].numpy()), "rows9": sha(passes[1].numpy()), "rows1": sha(passes[2].numpy()),
           "top": [int(i) for i in passes[1].argmax(-1)]}
    stored = json.loads(GOLDEN_REAL.read_text()) if GOLDEN_REAL.is_file() else {}
    if WRITE_GOLDEN:
        stored[role] = got
        GOLDEN_REAL.write_text(json.dumps(stored, indent=1) + "\n")
    assert got == stored[role]


def test_a_prompt_read_while_the_user_writes_changes_no_number_of_the_answer(tmp_path_factory, tok, isolated_cache):
    """Engine.read_prompt reads the input box's prompt in passes of 128 rows before the send; the
    kernels are batch-invariant, so the answer decoded on that cache is the one a send with no
    read ahead gives, token for token and log-probability for log-probability."""
    from specdec_core.engine import PROMPT_READ_ROWS, Engine
    from specdec_core.settings import DecodeSettings

    root = tmp_path_factory.mktemp("pair")
    target = soften(make_model(len(tok), seed=4, hidden=256, intermediate=512, tie_word_embeddings=False), 5.0)
    draft = soften(make_model(len(tok), seed=5, hidden=64, layers=1, heads=2, kv_heads=1, intermediate=128), 5.0)
    engine = Engine.load(str(write_gguf(root / "t.gguf", target, tok, K_TYPES)),
                         str(write_gguf(root / "d.gguf", draft, tok, SMALL_TYPES)), device="cpu")
    assert engine.target.lean is not None
    body = "the cat sat on the mat and the dog was in the hat " * 24
    sent = engine.encode_chat([{"role": "user", "content": body + "is it done"}])
    writing = engine.encode_chat([{"role": "user", "content": body + "is"}])
    assert len(writing) > 2 * PROMPT_READ_ROWS
    for settings in (DecodeSettings(24, mode="standard", logprobs=2), DecodeSettings(24, draft_tokens=3, logprobs=2)):
        fresh = engine.generate(sent, settings).run()  # the whole prompt in one pass
        engine.generate(engine.encode_chat([{"role": "user", "content": "a hat"}]), settings).run()  # another chat
        read, _ = engine.read_prompt(writing)
        ahead = engine.generate(sent, settings, reuse_cache=True).run()
        same = next(i for i, (a, b) in enumerate(zip(writing, sent)) if a != b)  # where the typing went on
        start = len(writing) - 1 - read  # the template's head, which the other chat left cached
        assert read > 2 * PROMPT_READ_ROWS and ahead.stats.prompt_read_ahead_tokens == same - start
        assert ahead.token_ids == fresh.token_ids
        assert [e.logprobs for e in ahead.events] == [e.logprobs for e in fresh.events]
