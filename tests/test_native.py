"""The native 4-/8-bit kernel (specdec_core/native/qgemm.c) and its layers (native_linear.py).

Hand-built: one-hot inputs read the kernel's weights back bit for bit. Exact equalities: every
row of a pass equals the same row computed alone, for each code path of the kernel (1-4 rows in
registers, 5+ through the buffer, partial tiles and chunks); greedy speculative == standard on
GGUFs run through it. The engine falls back to torch's int4 kernel, with a note, when the
native one is unavailable.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from specdec_core import native
from specdec_core.decoder import DecodeSettings
from specdec_core.engine import Engine, EngineError
from specdec_core.int4_linear import Int4Linear, quantize_int4
from specdec_core.models.gguf_int4 import decode_q4_k, decode_q6_k
from specdec_core.native_linear import Int8Codes, NativeLinear, use_native_linears
from test_int4 import _q4_k_blocks
from tiny_models import make_model, make_tokenizer, save_gguf

needs_native = pytest.mark.skipif(native.load() is None, reason=f"native kernel: {native.unavailable()}")


def _q6_k_blocks(rows: int, cols: int, seed: int) -> np.ndarray:
    """Random valid Q6_K super-blocks (gguf-py cannot quantize to Q6_K): any bytes for the
    codes and int8 scales, a small positive fp16 d."""
    rng = np.random.default_rng(seed)
    n = rows * cols // 256
    blocks = rng.integers(0, 256, size=(n, 210), dtype=np.uint8)
    blocks[:, 208:210] = rng.uniform(1e-5, 1e-4, (n, 1)).astype(np.float16).view(np.uint8)
    return blocks


def _int8_codes(rows: int, cols: int, seed: int) -> Int8Codes:
    g = torch.Generator().manual_seed(seed)
    return Int8Codes(torch.randint(-32, 32, (rows, cols), generator=g, dtype=torch.int8),
                     torch.rand(rows, cols // 16, generator=g) * 1e-2)


def test_q6_k_decode_equals_gguf_dequantize():
    import gguf

    rows, cols = 32, 512
    blocks = _q6_k_blocks(rows, cols, seed=0)
    codes = decode_q6_k(blocks, rows, cols)
    ref = gguf.quants.dequantize(blocks.reshape(rows, -1), gguf.GGMLQuantizationType.Q6_K)
    assert codes.codes.dtype == torch.int8 and -32 <= int(codes.codes.min()) and int(codes.codes.max()) <= 31
    assert torch.equal(codes.dequantize(), torch.from_numpy(ref))


@needs_native
@pytest.mark.parametrize("kind", ["q4_k", "q6_k"])
@pytest.mark.parametrize("rows", [1, 64])  # one row: the in-register path; 64: the buffered one
def test_one_hot_inputs_read_back_the_gguf_weights_bit_for_bit(kind, rows):
    import gguf

    n, k = 48, 256
    if kind == "q4_k":
        blocks = _q4_k_blocks(n, k, seed=3)
        codes, qtype = decode_q4_k(blocks, n, k), gguf.GGMLQuantizationType.Q4_K
    else:
        blocks = _q6_k_blocks(n, k, seed=3)
        codes, qtype = decode_q6_k(blocks, n, k), gguf.GGMLQuantizationType.Q6_K
    want = torch.from_numpy(gguf.quants.dequantize(blocks.reshape(n, -1), qtype))  # [n, k]
    layer = NativeLinear.from_codes(codes, None)
    cols = torch.arange(rows) * (k // rows) + (k // rows - 1)  # spread over groups and chunks
    x = torch.zeros(rows, k)
    x[torch.arange(rows), cols] = 1.0
    # y[r, :] = sum over k of fma(x, w, acc): only the one-hot term is nonzero and 1 * w is exact
    assert torch.equal(layer(x), want[:, cols].t())


@needs_native
@pytest.mark.parametrize("bits,n,k", [(4, 80, 288), (4, 112, 544), (8, 80, 336), (8, 48, 560)])
def test_every_row_is_the_same_alone_or_in_any_pass(bits, n, k):
    """Panels not a multiple of 4 (the one-row path walks 4 at a time), K not a multiple of the
    256-value chunk, tiles of 6 rows with remainders: each of rows 1..17 bitwise equal."""
    torch.manual_seed(bits + n)
    codes = quantize_int4(torch.randn(n, k)) if bits == 4 else _int8_codes(n, k, seed=n)
    layer = NativeLinear.from_codes(codes, torch.randn(n))
    x = torch.randn(17, k)
    full = layer(x)
    for m in range(1, 18):
        assert torch.equal(layer(x[:m]), full[:m]), m
        assert torch.equal(layer(x[m - 1 : m]), full[m - 1 : m]), m
    ref = x.double() @ codes.dequantize().double().t() + layer.bias.double()
    assert torch.allclose(full.double(), ref, rtol=1e-5, atol=1e-4)


@needs_native
@pytest.mark.parametrize("n,k", [(16, 32), (48, 288), (80, 896), (112, 544)])
def test_the_grouped_one_row_path_is_the_same_product_in_another_rounding(n, k):
    """A draft's one-row path (qgemm.c q4_gemv_grouped): 1, 3, 5 and 7 panels (the path walks
    4 at a time), within float32 rounding of the exact product; passes of 2+ rows and layers
    not marked keep the exact path bit for bit."""
    torch.manual_seed(n + k)
    codes = quantize_int4(torch.randn(n, k))
    layer = NativeLinear.from_codes(codes, torch.randn(n))
    x = torch.randn(3, k)
    exact_one, exact_three = layer(x[:1]), layer(x)
    layer.grouped = True
    grouped = layer(x[:1])
    ref = x[:1].double() @ codes.dequantize().double().t() + layer.bias.double()
    assert torch.allclose(grouped.double(), ref, rtol=1e-5, atol=1e-4)
    assert not torch.equal(grouped, exact_one) or n == 16  # another rounding, not the same path
    assert torch.equal(layer(x), exact_three)


@needs_native
def test_only_a_drafts_layers_take_the_grouped_path(tmp_path, isolated_cache):
    _, path = _tiny_gguf(tmp_path, True)
    engine = Engine.load(str(path), str(path), device="cpu")
    assert engine.draft.info.kernels.endswith("grouped one-row path")
    for lm, want in ((engine.target, False), (engine.draft, True)):
        lean = getattr(lm.model, "specdec_lean")
        joined = [m for layer in lean.layers for m in (layer.qkv, layer.gate_up) if m is not None]
        layers = [m for m in lm.model.modules() if isinstance(m, NativeLinear)] + joined
        assert layers and {m.grouped for m in layers} == {want}


@needs_native
def test_shapes_dtypes_and_empty_passes():
    torch.manual_seed(0)
    layer = NativeLinear.from_codes(quantize_int4(torch.randn(32, 64)), None)
    x = torch.randn(2, 3, 64)
    y = layer(x)
    assert y.shape == (2, 3, 32) and torch.equal(y.reshape(6, 32), layer(x.reshape(6, 64)))
    assert torch.equal(layer(x.transpose(0, 1)).transpose(0, 1), y)  # non-contiguous input
    assert layer(x.to(torch.bfloat16)).dtype == torch.bfloat16
    assert layer(torch.randn(0, 64)).shape == (0, 32)
    with pytest.raises(ValueError):
        NativeLinear.from_codes(quantize_int4(torch.randn(24, 64)), None)  # not whole panels of 16


@needs_native
def test_requantized_layers_match_torch_int4_within_its_rounding():
    """The same codes through both kernels: torch's rounds activations and outputs to bfloat16,
    ours stays float32, so they agree to bfloat16 precision and ours is the closer one."""
    torch.manual_seed(0)
    src = nn.Linear(256, 64)
    codes = quantize_int4(src.weight)
    ours, theirs = NativeLinear.from_codes(codes, src.bias), Int4Linear(codes, src.bias)
    x = torch.randn(5, 256)
    ref = x.double() @ codes.dequantize().double().t() + src.bias.double()
    assert torch.allclose(ours(x), theirs(x), rtol=2e-2, atol=2e-2)
    assert (ours(x).double() - ref).abs().max() < (theirs(x).double() - ref).abs().max()


@needs_native
def test_use_native_linears_requantizes_only_for_a_draft():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 8))  # 8 outputs: not a whole panel
    target = use_native_linears(model, {}, requantize=False)
    assert (target.exact, target.requantized, target.kept) == (0, 0, 2)
    draft = use_native_linears(model, {}, requantize=True)
    assert (draft.requantized, draft.kept) == (1, 1)
    assert isinstance(model[0], NativeLinear) and type(model[1]) is nn.Linear


def _tiny_gguf(tmp_path, q6k: bool = False):
    tok = make_tokenizer()
    model = make_model(len(tok), seed=0, intermediate=256)  # rows of 256: Q6_K's super-block
    overrides = {}
    if q6k:  # a Q4_K_M-like file: one ffn_down held as Q6_K
        rows, cols = model.model.layers[0].mlp.down_proj.weight.shape
        overrides["blk.0.ffn_down.weight"] = (_q6_k_blocks(rows, cols, seed=5), "Q6_K")
    return tok, save_gguf(tmp_path / "tiny-q4.gguf", model, tok, quantized=True, quant_type="Q4_0",
                          overrides=overrides)


@needs_native
@pytest.mark.parametrize("q6k", [False, True])
def test_engine_runs_a_gguf_on_the_native_kernel_exactly(tmp_path, isolated_cache, q6k):
    _, path = _tiny_gguf(tmp_path, q6k)
    engine = Engine.load(str(path), str(path), device="cpu")
    six = " + native 6-bit x1 (GGUF codes)" if q6k else ""
    n4 = 13 if q6k else 14
    assert engine.target.info.kernels == f"native 4-bit x{n4} (GGUF codes){six} + oneDNN x1 (float32)"
    reference = Engine.load(str(path), None, device="cpu", cpu_kernels="default")  # float32, torch's matmul
    for prompt in (engine.encode_prompt("the cat sat on"),
                   engine.encode_prompt("the cat sat on the mat and the dog ran to the cat " * 4)):
        std = engine.generate(prompt, DecodeSettings(max_new_tokens=12), mode="standard").run()
        spec = engine.generate(prompt, DecodeSettings(max_new_tokens=12, draft_tokens=3)).run()
        assert spec.token_ids == std.token_ids
        assert spec.stats.acceptance_rate > 0
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            ours = engine.target.model(ids).logits
            ref = reference.target.model(ids).logits
        # the same float32 weights, summed in another order
        assert torch.allclose(ours, ref, rtol=1e-4, atol=1e-4)
    again = Engine.load(str(path), str(path), device="cpu")
    assert any("coded layers loaded from" in n for n in again.target.info.notes)
    assert again.target.info.kernels == engine.target.info.kernels
    assert again.generate(prompt, DecodeSettings(max_new_tokens=12, draft_tokens=3)).run().token_ids == std.token_ids


def test_without_the_native_kernel_auto_falls_back_to_torch_int4(tmp_path, isolated_cache, no_native):
    _, path = _tiny_gguf(tmp_path)
    engine = Engine.load(str(path), None, device="cpu")
    assert engine.target.info.kernels.startswith("int4 4-bit x14 (GGUF codes)")
    assert any("native 4-bit kernel off (off for this test)" in n for n in engine.target.info.notes)
    with pytest.raises(EngineError, match="native: off for this test"):
        Engine.load(str(path), None, device="cpu", cpu_kernels="native")


def test_a_failed_build_is_a_reason_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "_why", None)
    monkeypatch.setattr(native, "cpu_supported", lambda: True)
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a compiler that always fails
    assert native.load() is None
    assert native.unavailable().startswith("could not build or load the kernel: false failed")
    assert not list(tmp_path.rglob("*.partial-*"))  # nothing half-written left behind


@needs_native
def test_a_native_cache_file_that_does_not_fit_is_ignored(tmp_path):
    from specdec_core import int4_cache

    torch.manual_seed(0)
    src = nn.Linear(64, 32)
    model = nn.Sequential(nn.Linear(64, 32))
    model[0].load_state_dict(src.state_dict())
    report = use_native_linears(model, {}, requantize=True)
    int4_cache.save(model, report, tmp_path / "n.safetensors")
    other = nn.Sequential(nn.Linear(96, 32))  # same names, other shapes
    assert int4_cache.load(other, tmp_path / "n.safetensors") is None and type(other[0]) is nn.Linear
    same = nn.Sequential(nn.Linear(64, 32))
    same[0].load_state_dict(src.state_dict())
    loaded = int4_cache.load(same, tmp_path / "n.safetensors")
    assert loaded.requantized == 1 and isinstance(same[0], NativeLinear)
    x = torch.randn(3, 64)
    assert torch.equal(same(x), model(x))
