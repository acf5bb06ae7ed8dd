"""NF4 and int8 targets through bitsandbytes' CPU backend, for real: a tiny random Qwen2 saved
as safetensors, loaded quantized, decoded in both modes.

Tier 1: what the load reports (quantization, bytes, device, the slow-on-CPU note) and the layers
it really has. Tier 2: standard greedy equals transformers' generate() on the same quantized
model, token for token; speculative greedy equals standard, or where a batched verification
rounds differently from one-row steps the first divergence is a near-tie whose top-2 margin is
within the measured batch-vs-row logit difference (a flip needs one; a larger margin is a bug).
The same on the real embedded 0.5B written out as safetensors (slow).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import make_model, make_tokenizer, save_model  # noqa: E402

from specdec_core.settings import DecodeSettings  # noqa: E402
from specdec_core.engine import Engine  # noqa: E402
from specdec_core.events import first_divergence  # noqa: E402
from specdec_core.models import ModelError, load_model  # noqa: E402
from specdec_core.sampling import SamplingParams  # noqa: E402

bnb = pytest.importorskip("bitsandbytes")

QUANTS = ("nf4", "int8")
PROMPT = "the cat sat on a mat . is it done"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(target folder, draft folder): the draft is the target plus a little noise, so a
    speculative run has accepted runs and multi-row verifications, not only rejections."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("bnb")
    tok = make_tokenizer()
    # 64 wide: bitsandbytes' CPU kernels on a CPU with AVX512 (its Intel path) take NF4 blocks of
    # 64 weights along the input and fail on a 32-wide layer ("shape [32, 0] is invalid")
    target = make_model(len(tok), seed=0, hidden=64, intermediate=128)
    draft = make_model(len(tok), seed=0, hidden=64, intermediate=128)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05 * p.abs().mean())
    return save_model(root / "target", target, tok), save_model(root / "draft", draft, tok)


def batch_vs_rows(model, ids: list[int]) -> float:
    """Largest |logit| difference between one pass over `ids` and the same positions computed
    one row at a time with a KV cache (how a verification pass and decoding steps differ)."""
    from transformers import DynamicCache

    x = torch.tensor([ids])
    with torch.no_grad():
        whole = model(x).logits[0]
        cache = DynamicCache(config=model.config)
        rows = [model(x[:, i:i + 1], cache=cache, use_cache=True).logits[0, -1] for i in range(len(ids))]
    return float((whole - torch.stack(rows)).abs().max())


def hf_greedy(model, prompt, n, eos):
    from transformers import GenerationConfig

    cfg = GenerationConfig(do_sample=False, max_new_tokens=n, eos_token_id=eos, pad_token_id=0)
    out = model.generate(torch.tensor([prompt]), generation_config=cfg)
    return out[0, len(prompt):].tolist()


def assert_same_or_near_tie(std, spec, tolerance: float) -> None:
    d = first_divergence(std.events, spec.events)
    if d is None:
        assert spec.token_ids == std.token_ids
        return
    assert d.margin is not None, d
    # two logits that differ by at most `tolerance` each can swap order only if they were
    # within 2 * tolerance of each other
    assert d.margin <= 2 * tolerance, f"divergence at {d.position} with margin {d.margin} > 2 x {tolerance}"


# ---------------------------------------------------------------- loading


@pytest.mark.parametrize("quant", QUANTS)
def test_quantized_target_loads_on_cpu(pair, quant):
    target_dir, _ = pair
    plain = load_model(str(target_dir), device="cpu", quantization="none")
    lm = load_model(str(target_dir), device="cpu", quantization=quant)
    info = lm.info
    assert info.quantization == quant and info.device == "cpu" and info.dtype == "float32"
    layer_type = bnb.nn.Linear4bit if quant == "nf4" else bnb.nn.Linear8bitLt
    layers = [m for m in lm.model.modules() if isinstance(m, layer_type)]
    assert len(layers) == 2 * 7  # q, k, v, o, gate, up, down in each of the 2 layers
    # bytes: the packed linears are smaller than float32 ones, the rest (embeddings, norms) is not
    linear_f32 = sum(m.weight.numel() * 4 for m in plain.model.modules() if isinstance(m, torch.nn.Linear)
                     and m is not plain.model.get_output_embeddings())
    saved = plain.info.memory_bytes - info.memory_bytes
    assert 0 < saved < linear_f32
    assert any("bitsandbytes' CPU backend" in n and "slow" in n for n in info.notes)
    assert "quantization " + quant in info.summary() and "on cpu" in info.summary()


def test_quantization_on_mps_is_refused(monkeypatch):
    from specdec_core.models import device as device_mod

    with pytest.raises(ModelError, match="CUDA GPU or the CPU"):
        device_mod.resolve_quantization("nf4", role="target", device="mps", is_gguf=False)
    assert device_mod.resolve_quantization("int8", role="target", device="cpu", is_gguf=False) == "int8"
    assert device_mod.resolve_quantization(None, role="target", device="cpu", is_gguf=False) == "none"


# ---------------------------------------------------------------- decoding


@pytest.mark.parametrize("quant", QUANTS)
def test_quantized_target_decodes_in_both_modes(pair, quant):
    target_dir, draft_dir = pair
    engine = Engine.load(str(target_dir), str(draft_dir), device="cpu", quantization=quant)
    assert engine.target.info.quantization == quant
    assert engine.draft.info.quantization == "none"  # the draft is never quantized by the flag
    prompt = engine.encode_prompt(PROMPT)
    n = 24
    std = engine.generate(prompt, DecodeSettings(max_new_tokens=n, mode="standard")).run()
    # tier 2: the engine's standard greedy is transformers' greedy on the same quantized model
    assert std.token_ids == hf_greedy(engine.target.model, prompt, n, engine.target.eos_token_ids)
    tolerance = batch_vs_rows(engine.target.model, prompt + std.token_ids)
    accepted = 0
    for k in (1, 4, "adaptive"):
        spec = engine.generate(prompt, DecodeSettings(max_new_tokens=n, draft_tokens=k)).run()
        accepted += spec.stats.accepted_tokens
        assert_same_or_near_tie(std, spec, tolerance)
        lookup = engine.generate(prompt, DecodeSettings(max_new_tokens=n, draft_tokens=k,
                                                              proposer="prompt-lookup")).run()
        assert_same_or_near_tie(std, lookup, tolerance)
    # verification passes of several rows ran: some proposals were kept (the draft is float32,
    # the target quantized, so they agree less often than their float32 forms would)
    assert accepted > 0
    # sampling runs too (its exactness is the decoder's, tested on float32 models)
    s = DecodeSettings(max_new_tokens=12, sampling=SamplingParams(0.8, 0, 1.0), seed=3)
    sampled = engine.generate(prompt, s).run()
    assert len(sampled.token_ids) == 12 or sampled.stats.stop_reason == "eos"


def test_nf4_on_cpu_through_the_cli(pair, capsys):
    from specdec_core.cli import main

    target_dir, draft_dir = pair
    rc = main(["generate", "--target", str(target_dir), "--draft", str(draft_dir), "--device", "cpu",
               "--quantization", "nf4", "--prompt", "the cat", "--max-new-tokens", "6", "--json"])
    err = capsys.readouterr().err
    assert rc == 0
    assert "quantization nf4" in err and "on cpu" in err
    assert "bitsandbytes' CPU backend" in err  # the one-line note that it is slow there
    # `specdec models` shows what it loaded as: NF4, bytes, device
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert f"target: {target_dir.resolve()}" in out
    line = out.split(f"target: {target_dir.resolve()}", 1)[1].splitlines()[1]
    assert line.strip().startswith("loaded as nf4 (float32 compute) on cpu, ") and "KiB" in line
    import json

    assert main(["models", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    mine = [m for m in report["local_models"] if m["spec"] == str(target_dir.resolve())]
    assert len(mine) == 1 and mine[0]["loaded"]["quantization"] == "nf4" and mine[0]["loaded"]["device"] == "cpu"
    assert mine[0]["loaded"]["memory_bytes"] > 0 and mine[0]["format"] == "safetensors"
    assert {"machine", "presets", "local_models", "recent", "partial_downloads", "hf_cache_models"} <= set(report)
    assert all("estimate" in p and "fits" in p for p in report["presets"])


# ---------------------------------------------------------------- a real model (slow)


@pytest.mark.slow
def test_real_0_5b_nf4_on_cpu(tmp_path):
    """The embedded 0.5B draft, written out once as safetensors from its GGUF (transformers
    dequantizes it), loaded NF4 on CPU as a target: greedy standard and speculative (prompt
    lookup, and the same model's float32 load as a draft) agree or part at a measured near-tie."""
    import time

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specdec_core.models import EMBEDDED, ensure_assembled

    gguf = ensure_assembled(EMBEDDED["draft"])
    folder = tmp_path / "qwen-0.5b"
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # every tensor was dequantized, but transformers leaves its GGUF quantizer attached, and
    # save_pretrained refuses a model with one; with nothing packed it has nothing to describe
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    save_model(folder, model, tok)
    del model

    from specdec_core.models import memory, vocab

    # the vocabulary read from the folder's tokenizer is the one read from the GGUF's header
    assert vocab.read_vocab(str(folder)).tokens == vocab.read_vocab(str(gguf)).tokens
    engine = Engine.load(str(folder), str(folder), device="cpu", quantization="nf4")  # an HF folder: torch's own layers (no GGUF blocks)
    info = engine.target.info
    assert info.quantization == "nf4" and info.device == "cpu"
    assert info.memory_bytes < 0.6 * engine.draft.info.memory_bytes  # 4-bit linears; embeddings stay float32
    # the estimate the Models dialog shows before loading is what loading took
    est = memory.estimate(str(folder), "target", dtype="float32", quantization="nf4").bytes / (1 + memory.OVERHEAD)
    assert abs(est - info.memory_bytes) < 0.02 * info.memory_bytes
    prompt = engine.encode_prompt("Write a Python function that returns the n-th Fibonacci number.")
    n = 32
    t = time.perf_counter()
    std = engine.generate(prompt, DecodeSettings(max_new_tokens=n, mode="standard")).run()
    print(f"nf4 0.5B on CPU: standard {len(std.token_ids) / (time.perf_counter() - t):.2f} tok/s")
    tolerance = batch_vs_rows(engine.target.model, prompt + std.token_ids)
    for proposer in ("prompt-lookup", "draft"):
        spec = engine.generate(prompt, DecodeSettings(max_new_tokens=n, proposer=proposer)).run()
        print(f"nf4 0.5B on CPU: speculative ({proposer}) {spec.stats.tokens_per_second:.2f} tok/s, "
              f"acceptance {spec.stats.acceptance_rate:.2f}")
        assert_same_or_near_tie(std, spec, tolerance)
    assert std.text.strip()
