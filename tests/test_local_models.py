"""What the Models dialog knows before anything loads: vocabularies read from files (and the
reason a draft does not fit), local models described from their headers, recents, and memory
estimates against this machine. Tiny models built in the tests; no network."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import WORDS, make_model, make_tokenizer, save_folder, save_gguf  # noqa: E402

from specdec_core.models import (  # noqa: E402
    ModelError,
    check_compatible,
    default_pair,
    load_model,
    local,
    memory,
    recent,
    vocab,
)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path / "data"))
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))


# ---------------------------------------------------------------- vocabularies and the reason


def test_folder_and_gguf_vocab_equal_what_the_loader_gives(tmp_path):
    f = save_folder(tmp_path, "m")
    v = vocab.read_vocab(str(f))
    lm = load_model(str(f), device="cpu")
    assert v == vocab.of_tokenizer(lm.tokenizer, lm.eos_token_ids, str(f.resolve()))
    tok = make_tokenizer()
    g = save_gguf(tmp_path / "m.gguf", make_model(len(tok), seed=0), tok)
    gv = vocab.read_vocab(str(g))
    glm = load_model(str(g), device="cpu")
    assert gv.tokens == vocab.of_tokenizer(glm.tokenizer, glm.eos_token_ids, "").tokens
    assert gv.eos_ids == tuple(glm.eos_token_ids) == (0, 2)
    # a GGUF target and a folder draft of the same tokenizer fit, either way round
    assert vocab.incompatibility(gv, v) is None and vocab.incompatibility(v, gv) is None
    assert vocab.read_vocab(str(g)) is gv  # read once per file and modification time


def test_the_reasons_name_the_first_difference(tmp_path):
    target = vocab.read_vocab(str(save_folder(tmp_path, "t")))
    other = list(WORDS)
    other[other.index("mat")] = "rat"
    why = vocab.incompatibility(target, vocab.read_vocab(str(save_folder(tmp_path, "other", other))))
    assert why.startswith("token id ") and "'Ġm' in the target but 'Ġr' in the draft" in why
    smaller = vocab.read_vocab(str(save_folder(tmp_path, "small", WORDS[:-3])))
    why = vocab.incompatibility(target, smaller)
    assert why == (f"the target has {len(target):,} tokens but the draft only {len(smaller):,} "
                   f"(first missing id {len(smaller)}, {target.tokens[len(smaller)]!r})")
    why = vocab.incompatibility(target, vocab.read_vocab(str(save_folder(tmp_path, "eos", eos=(2,)))))
    assert why == "token id 0 ('<|endoftext|>') ends generation for the target only (target eos ids [0, 2], draft [2])"
    # a bigger draft vocabulary is fine: the draft never proposes ids the target lacks
    bigger = vocab.Vocab(target.tokens + ("<|extra|>",), target.eos_ids, "x")
    assert vocab.incompatibility(target, bigger) is None


def test_loaded_check_says_what_the_file_check_says(tmp_path):
    other = list(WORDS)
    other[other.index("cat")] = "cow"
    t, d = save_folder(tmp_path, "t"), save_folder(tmp_path, "d", other)
    before = vocab.incompatibility(vocab.read_vocab(str(t)), vocab.read_vocab(str(d)))
    with pytest.raises(ModelError) as e:
        check_compatible(load_model(str(t), device="cpu"), load_model(str(d), device="cpu"))
    assert before and before in str(e.value)


def test_unreadable_sources_are_one_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 10)
    with pytest.raises(ModelError, match="not a readable GGUF"):
        vocab.read_vocab(str(bad))
    broken = save_folder(tmp_path, "broken")
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot read the tokenizer"):
        vocab.read_vocab(str(broken))
    with pytest.raises(ModelError, match="cannot reach the Hugging Face hub"):  # offline, not cached
        vocab.read_vocab("someone/not-here")


# ---------------------------------------------------------------- describing local models


def test_describe_folder_and_gguf(tmp_path):
    f = save_folder(tmp_path, "m", hidden=64, intermediate=256)
    m = local.describe(str(f))
    model = make_model(len(make_tokenizer()), seed=0, hidden=64, intermediate=256)
    assert (m.format, m.quantization, m.architecture, m.error) == ("safetensors", "float32", "qwen2", None)
    assert m.params == sum(p.numel() for p in model.parameters())
    assert m.bytes == sum(p.stat().st_size for p in f.iterdir())
    tok = make_tokenizer()
    g = save_gguf(tmp_path / "q.gguf", make_model(len(tok), seed=0), tok, quantized=True)
    d = local.describe(str(g))
    assert (d.format, d.quantization, d.architecture, d.name, d.error) == ("GGUF", "Q8_0", "qwen2", "tiny-qwen2", None)
    assert d.params == sum(p.numel() for p in make_model(len(tok), seed=0).parameters())
    data = g.read_bytes()
    g.write_bytes(data[:-64])
    assert local.describe(str(g)).error.startswith("truncated")
    (tmp_path / "junk.gguf").write_bytes(b"nope")
    assert "not a readable GGUF" in local.describe(str(tmp_path / "junk.gguf")).error
    (f / "model.safetensors").unlink()
    assert "no weights" in local.describe(str(f)).error
    assert local.describe(str(tmp_path / "gone.gguf")).error == "file not found"


def test_bnb_saved_folder_reports_its_quantization(tmp_path):
    f = save_folder(tmp_path, "q")
    cfg = json.loads((f / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    (f / "config.json").write_text(json.dumps(cfg))
    assert local.describe(str(f)).quantization == "nf4 (bitsandbytes)"


def test_scan_lists_each_place_once(tmp_path, monkeypatch):
    # the embedded pair, as on a machine where its data packages are not installed
    fake = default_pair.EmbeddedModel("target", "fake target", "fake.gguf", 10, "0" * 64,
                                      (default_pair.Part("specdec-nonexistent", "1", "x/y.bin"),))
    monkeypatch.setitem(default_pair.EMBEDDED, "target", fake)
    monkeypatch.setitem(default_pair.EMBEDDED, "draft", default_pair.EmbeddedModel(**{**fake.__dict__, "role": "draft"}))
    tok = make_tokenizer()
    local.cache.gguf_dir().mkdir(parents=True)
    cached = save_gguf(local.cache.gguf_dir() / "extra.gguf", make_model(len(tok), seed=0), tok)
    f = save_folder(tmp_path, "mine")
    recent.remember(str(f), "target", {"name": "mine", "quantization": "nf4", "dtype": "float32", "device": "cpu",
                                       "memory_bytes": 1234})
    recent.remember(str(cached), "draft")
    recent.remember(str(tmp_path / "mine"), "target")  # the same folder again: still one entry
    models = local.scan()
    by_origin = [(m.origin, m.role) for m in models]
    assert by_origin == [("embedded", "target"), ("embedded", "draft"), ("app cache", None), ("recent", "target")]
    assert all("not installed" in m.error for m in models[:2])
    assert models[2].loaded == {}  # listed from the app cache; the recent entry added nothing
    assert models[3].loaded["quantization"] == "nf4" and models[3].loaded["memory_bytes"] == 1234
    assert models[3].spec == str(f.resolve())


# ---------------------------------------------------------------- recents


def test_recents_newest_first_bounded_and_forgiving(tmp_path):
    file = tmp_path / "data" / recent.FILE_NAME
    for i in range(recent.KEEP + 5):
        recent.remember(f"owner/model-{i}")
    items = recent.load()
    assert len(items) == recent.KEEP and items[0]["spec"] == f"owner/model-{recent.KEEP + 4}"
    recent.remember("default")  # the embedded pair is always listed: never a recent
    assert recent.load()[0]["spec"] != "default"
    recent.forget(f"owner/model-{recent.KEEP + 4}")
    assert recent.load()[0]["spec"] == f"owner/model-{recent.KEEP + 3}"
    file.write_text("{broken")
    assert recent.load() == []
    recent.remember("owner/again")
    assert [m["spec"] for m in recent.load()] == ["owner/again"]


# ---------------------------------------------------------------- memory


@pytest.mark.parametrize("quant", ["none", "nf4", "int8"])
def test_estimate_matches_the_loaded_bytes(tmp_path, quant):
    pytest.importorskip("bitsandbytes")
    f = save_folder(tmp_path, "m", hidden=64, intermediate=256)
    est = memory.estimate(str(f), "target", dtype="float32", quantization=quant)
    lm = load_model(str(f), device="cpu", quantization=quant)
    weights = est.bytes / (1 + memory.OVERHEAD)
    assert abs(weights - lm.info.memory_bytes) <= 0.05 * lm.info.memory_bytes, (weights, lm.info.memory_bytes)
    assert est.how.endswith(f"+ {memory.OVERHEAD:.0%}") and ("nf4" in est.how) == (quant == "nf4")


def test_estimate_gguf_hub_and_unknown(tmp_path):
    tok = make_tokenizer()
    g = save_gguf(tmp_path / "q.gguf", make_model(len(tok), seed=0), tok, quantized=True)
    params = local.describe(str(g)).params
    est = memory.estimate(str(g), "target", dtype="float32", quantization="none")  # CPU: read in place
    assert est.bytes == int(g.stat().st_size * (1 + memory.OVERHEAD))
    gpu = memory.estimate(str(g), "target", dtype="bfloat16", quantization="none", device="cuda")
    assert gpu.bytes == int(params * 2 * (1 + memory.OVERHEAD))  # dequantized by transformers for a GPU
    known = memory.estimate("Qwen/Qwen2.5-7B-Instruct", "target", dtype="bfloat16", quantization="nf4")
    total, linear = memory.KNOWN_SHAPES["Qwen/Qwen2.5-7B-Instruct"]
    assert known.bytes == int((linear * memory.NF4_BYTES_PER_WEIGHT + (total - linear) * 2) * 1.1)
    assert 5 * 2**30 < known.bytes < 7 * 2**30  # what the gpu-7b preset promises, draft aside
    unknown = memory.estimate("someone/unheard-of", "target", dtype="float32", quantization="none")
    assert unknown.bytes is None and "not downloaded" in unknown.how
    assert memory.fits(None, "cpu", memory.Machine(1, 1))  # unknown is let through


def test_too_big_names_the_numbers_and_a_smaller_preset():
    machine = memory.Machine(ram_total=16 << 30, ram_available=12 << 30)
    big = memory.estimate_pair("Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", machine, quantization="nf4")
    assert big.device == "cpu" and big.bytes > 12 << 30
    msg = memory.too_big_message(big, machine)
    assert f"needs about {memory.gib(big.bytes)} of RAM" in msg
    assert "12.0 GiB free of 16.0 GiB" in msg
    assert "The cpu-default preset" in msg or "The gpu-7b preset" in msg
    # the embedded pair runs in place, about its 1.6 GiB of GGUF: even a 4 GiB machine takes it
    assert "The cpu-default preset" in memory.too_big_message(big, memory.Machine(4 << 30, 2 << 30))
    small = memory.Machine(ram_total=2 << 30, ram_available=1 << 30)
    assert "None of the presets fits" in memory.too_big_message(big, small)
    # memory the models loaded now will give back counts as free
    assert memory.too_big_message(big, machine, freeable=20 << 30) is None
    gpu = memory.Machine(64 << 30, 60 << 30, [{"index": 0, "name": "GPU", "total": 8 << 30, "free": 7 << 30}])
    on_gpu = memory.estimate_pair("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", gpu, quantization="nf4")
    assert on_gpu.device == "cuda" and "VRAM" in (memory.too_big_message(on_gpu, gpu) or "VRAM fits")
    assert gpu.free("cuda") == 7 << 30 and gpu.free("cpu") == 60 << 30
