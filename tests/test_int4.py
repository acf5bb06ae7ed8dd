"""4-bit linears: the GGUF decoders give gguf-py's own values bit for bit, the kernel gives each
row the same result whatever the batch, and the decoder stays exact on a 4-bit model
(speculative greedy == standard greedy == transformers' generate on that same model)."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from specdec_core.decoder import DecodeSettings, Decoder
from specdec_core.engine import Engine
from specdec_core.int4_linear import (DENSE_FROM_ROWS, Int4Linear, int4_available, matches_weight,
                                      quantize_int4, use_int4_linears)
from specdec_core.models import load_model
from specdec_core.models.gguf_int4 import decode_q4_0, decode_q4_k, read_int4_codes
from specdec_core.proposers import DraftModelProposer
from test_decoder import PROMPTS, eos_of, hf_greedy
from tiny_models import make_model, make_tokenizer, save_gguf

pytestmark = pytest.mark.skipif(not int4_available(), reason="torch has no int4 CPU kernel")


def _q4_k_blocks(rows: int, cols: int, seed: int) -> np.ndarray:
    """Random but valid Q4_K super-blocks (gguf-py cannot quantize to Q4_K): fp16 d and dmin,
    12 bytes of packed 6-bit scales/mins, 128 bytes of nibbles -- every byte pattern is legal."""
    rng = np.random.default_rng(seed)
    n = rows * cols // 256
    blocks = rng.integers(0, 256, size=(n, 144), dtype=np.uint8)
    blocks[:, 0:2] = rng.uniform(1e-4, 1e-2, (n, 1)).astype(np.float16).view(np.uint8)
    blocks[:, 2:4] = rng.uniform(1e-4, 1e-2, (n, 1)).astype(np.float16).view(np.uint8)
    return blocks


def test_q4_k_decode_equals_gguf_dequantize():
    import gguf

    rows, cols = 48, 512
    blocks = _q4_k_blocks(rows, cols, seed=0)
    codes = decode_q4_k(blocks, rows, cols)
    ref = gguf.quants.dequantize(blocks.reshape(rows, -1), gguf.GGMLQuantizationType.Q4_K)
    assert codes.codes.dtype == torch.uint8 and int(codes.codes.max()) <= 15
    assert torch.equal(codes.dequantize(), torch.from_numpy(ref))


def test_q4_0_decode_equals_gguf_dequantize():
    import gguf

    rows, cols = 32, 96
    w = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_0)
    codes = decode_q4_0(raw.reshape(-1, 18), rows, cols)
    ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_0)
    assert torch.equal(codes.dequantize(), torch.from_numpy(ref))


@pytest.mark.parametrize("bias", [True, False])
def test_int4_linear_computes_its_dequantized_weight(bias):
    torch.manual_seed(0)
    codes = quantize_int4(torch.randn(64, 96))
    b = torch.randn(64) if bias else None
    lin = Int4Linear(codes, b)
    x = torch.randn(2, 5, 96)
    # the kernel's arithmetic: bfloat16 activations, scale and zero; float32 sums; a bfloat16
    # result (the bias is added after, in float32)
    s = codes.scale.bfloat16().float().repeat_interleave(32, dim=1)
    z = (8 * codes.scale - codes.offset).bfloat16().float().repeat_interleave(32, dim=1)
    w = (codes.codes.float() - 8) * s + z
    ref = nn.functional.linear(x.bfloat16().float(), w).bfloat16().float()
    if b is not None:
        ref = ref + b
    torch.testing.assert_close(lin(x), ref, rtol=8e-3, atol=1e-3)


def test_int4_rows_do_not_depend_on_the_batch():
    """What makes verification exact: row i of a k+1-row pass == a one-row pass on row i."""
    torch.manual_seed(0)
    lin = Int4Linear(quantize_int4(torch.randn(128, 256)), torch.randn(128))
    x = torch.randn(17, 256)
    full = lin(x)
    for m in range(1, 18):
        assert torch.equal(lin(x[:m]), full[:m])
    for i in range(17):
        assert torch.equal(lin(x[i : i + 1])[0], full[i])


def test_quantize_int4_error_is_at_most_half_a_step():
    torch.manual_seed(0)
    w = torch.randn(32, 64)
    w[3, :32] = 0.7  # a constant group: no range, still coded exactly
    codes = quantize_int4(w)
    step = codes.scale.repeat_interleave(32, dim=1)
    assert ((codes.dequantize() - w).abs() <= step / 2 + 1e-6).all()
    assert torch.allclose(codes.dequantize()[3, :32], w[3, :32])


def test_codes_for_permuted_rows_are_refused():
    torch.manual_seed(0)
    codes = quantize_int4(torch.randn(32, 64))
    w = codes.dequantize()
    assert matches_weight(codes, w)
    assert not matches_weight(codes, w.flip(0))  # llama's q/k permutation would look like this
    lin = nn.Linear(64, 32, bias=False)
    with torch.no_grad():
        lin.weight.copy_(w.flip(0))
    model = nn.Sequential(lin)
    report = use_int4_linears(model, {"0": codes}, requantize=False)
    assert (report.exact, report.kept) == (0, 1) and type(model[0]) is nn.Linear


def _as_int4_model(model):
    """A copy of `model` whose weights are exactly 4-bit, running on Int4Linear."""
    m = copy.deepcopy(model)
    codes = {}
    with torch.no_grad():
        for name, mod in m.named_modules():
            if type(mod) is nn.Linear and mod.out_features % 16 == 0 and mod.in_features % 32 == 0:
                codes[name] = quantize_int4(mod.weight)
                mod.weight.copy_(codes[name].dequantize())
    report = use_int4_linears(m, codes, requantize=False)
    assert report.exact == len(codes) > 0
    return m


def test_decoder_exact_on_int4_models(tiny):
    target = _as_int4_model(tiny.target)
    draft = copy.deepcopy(tiny.near_draft)
    use_int4_linears(draft, {}, requantize=True)  # a lossy draft: only acceptance may change
    dec = Decoder(target, tiny.tokenizer)
    for prompt in PROMPTS[:3]:
        ref = hf_greedy(target, prompt, 16, eos_of(target))
        std = dec.generate(prompt, DecodeSettings(max_new_tokens=16)).run()
        for k in (1, 3, 6):
            spec = dec.generate(prompt, DecodeSettings(max_new_tokens=16, draft_tokens=k),
                                DraftModelProposer(draft, tiny.vocab)).run()
            assert spec.token_ids == std.token_ids == ref


def test_engine_runs_a_q4_0_gguf_on_its_own_codes(tmp_path, isolated_cache, monkeypatch, no_native):
    monkeypatch.setattr("specdec_core.engine.DENSE_HEADROOM_BYTES", 0)  # whatever the host has free
    tok = make_tokenizer()
    source = make_model(len(tok), seed=0)
    path = save_gguf(tmp_path / "tiny-q4.gguf", source, tok, quantized=True, quant_type="Q4_0")
    lm = load_model(str(path), device="cpu")
    assert lm.gguf_path == path
    codes = read_int4_codes(path, lm.model)
    # every matrix with rows of 32 was written as Q4_0 and decodes to the loaded weight
    assert codes and all(matches_weight(c, lm.model.get_submodule(n).weight) for n, c in codes.items())

    engine = Engine.load(str(path), str(path), device="cpu")
    assert any("own 4-bit codes" in n for n in engine.target.info.notes)
    # the draft is the same Q4_0 file: its own codes too; the 61-row head does not fit the kernel
    assert engine.target.info.kernels == engine.draft.info.kernels == (
        "int4 4-bit x14 (GGUF codes) + float32 prefill from 32 rows + oneDNN x1 (float32)")
    for prompt in (engine.encode_prompt("the cat sat on"),  # prefill on the 4-bit kernel
                   engine.encode_prompt("the cat sat on the mat and the dog ran to the cat " * 4)):  # float32
        std = engine.generate(prompt, DecodeSettings(max_new_tokens=12), mode="standard").run()
        spec = engine.generate(prompt, DecodeSettings(max_new_tokens=12, draft_tokens=3)).run()
        assert spec.token_ids == std.token_ids
        assert spec.stats.acceptance_rate > 0  # the draft is the same file, requantized or not
    assert len(prompt) >= DENSE_FROM_ROWS

    # a second start takes the packed layers from the cache and computes the same tokens
    again = Engine.load(str(path), str(path), device="cpu")
    assert any("coded layers loaded from" in n for n in again.target.info.notes)
    assert any("coded layers loaded from" in n for n in again.draft.info.notes)
    assert again.generate(prompt, DecodeSettings(max_new_tokens=12, draft_tokens=3)).run().token_ids == std.token_ids


def test_a_cache_file_that_does_not_fit_is_ignored(tmp_path):
    from specdec_core import int4_cache

    torch.manual_seed(0)
    src = nn.Linear(64, 32)
    small = nn.Sequential(copy.deepcopy(src))
    report = use_int4_linears(small, {}, requantize=True)
    int4_cache.save(small, report, tmp_path / "c.safetensors")
    other = nn.Sequential(nn.Linear(96, 32))  # same names, other shapes
    assert int4_cache.load(other, tmp_path / "c.safetensors") is None and type(other[0]) is nn.Linear
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    assert int4_cache.load(other, tmp_path / "junk.safetensors") is None
    same = nn.Sequential(copy.deepcopy(src))  # the bias comes from the model, as from a converted cache
    assert int4_cache.load(same, tmp_path / "c.safetensors").requantized == 1
    x = torch.randn(3, 64)
    assert torch.equal(same(x), small(x))


def test_long_passes_run_on_the_float32_copy_and_short_ones_stay_4bit():
    torch.manual_seed(0)
    src = nn.Linear(64, 32)
    plain = nn.Sequential(copy.deepcopy(src))
    use_int4_linears(plain, {}, requantize=True)
    dense = nn.Sequential(copy.deepcopy(src))
    use_int4_linears(dense, {}, requantize=True, dense=True)
    assert dense[0].dense is not None and plain[0].dense is None
    short = torch.randn(1, DENSE_FROM_ROWS - 1, 64)  # a verification pass: the same bits as 4-bit alone
    assert torch.equal(dense(short), plain(short))
    long = torch.randn(1, DENSE_FROM_ROWS, 64)  # a prefill: the float32 weight, not the 4-bit one
    want = src(long)
    assert torch.allclose(dense(long), want, atol=1e-5)
    assert not torch.allclose(plain(long), want, atol=1e-3)  # 4-bit rounding is visible


def test_engine_int4_mode_keeps_no_float32_copies(tmp_path, isolated_cache):
    tok = make_tokenizer()
    path = save_gguf(tmp_path / "tiny-q4.gguf", make_model(len(tok), seed=0), tok, quantized=True, quant_type="Q4_0")
    engine = Engine.load(str(path), None, device="cpu", cpu_kernels="int4")
    layers = [m for m in engine.target.model.modules() if type(m) is Int4Linear]
    assert layers and all(m.dense is None for m in layers)
    assert engine.target.info.kernels == "int4 4-bit x14 (GGUF codes) + oneDNN x1 (float32)"


def test_auto_keeps_no_float32_copies_without_memory_to_spare(tmp_path, isolated_cache, monkeypatch, no_native):
    monkeypatch.setattr("specdec_core.engine.DENSE_HEADROOM_BYTES", 1 << 60)  # no machine has this
    tok = make_tokenizer()
    path = save_gguf(tmp_path / "tiny-q4.gguf", make_model(len(tok), seed=0), tok, quantized=True, quant_type="Q4_0")
    engine = Engine.load(str(path), None, device="cpu")
    assert all(m.dense is None for m in engine.target.model.modules() if type(m) is Int4Linear)
    assert any("prompt prefill stays on the 4-bit kernel" in n for n in engine.target.info.notes)


def test_cpu_kernels_default_leaves_the_model_alone(tmp_path, isolated_cache):
    tok = make_tokenizer()
    path = save_gguf(tmp_path / "tiny-q4.gguf", make_model(len(tok), seed=0), tok, quantized=True, quant_type="Q4_0")
    engine = Engine.load(str(path), None, device="cpu", cpu_kernels="default")
    assert all(type(m) is not Int4Linear for m in engine.target.model.modules())
    # torch's own kernels: every linear is still a plain nn.Linear, and no kernel is reported
    linears = [m for m in engine.target.model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is nn.Linear for m in linears) and engine.target.info.kernels == ""


def test_side_panel_names_the_kernels():
    from app.side_panel import _model_html

    html = _model_html("target", {"name": "t", "kernels": "int4 x168 (GGUF codes) + oneDNN x29 (float32)"})
    assert "kernels int4 x168 (GGUF codes)" in html
    assert "kernels" not in _model_html("target", {"name": "t", "kernels": ""})
