"""Tests of specdec_core.models on tiny models built in the tests (CPU, no network).

The one test on the real embedded pair is marked slow.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import WORDS, install_embedded, make_model, make_tokenizer, save_gguf, save_pair  # noqa: E402

from specdec_core import models  # noqa: E402
from specdec_core.cpu import build  # noqa: E402
from specdec_core.models import (  # noqa: E402
    LoadedModel,
    ModelError,
    check_compatible,
    default_pair,
    load_model,
    parse_spec,
    resolve_device,
    resolve_dtype,
)
from specdec_core.models import device as device_mod  # noqa: E402
from specdec_core.models import hub as hub_mod  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own cache dir and no network (HF offline mode)."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import huggingface_hub.constants as hf_constants

    # huggingface_hub reads these env vars at import time; patch the constants too.
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    return tmp_path / "cache"


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text and text
    return text


def logits(lm_or_model, tokenizer, text="the cat sat on a mat . is it done"):
    model = lm_or_model.model if isinstance(lm_or_model, LoadedModel) else lm_or_model
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return model(ids).logits


# ---------------------------------------------------------------- tiny factory sanity


def test_tiny_tokenizer_is_small_readable_and_survives_save(tmp_path):
    tok = make_tokenizer()
    assert len(tok) <= 64
    ids = tok("the cat sat on a mat")["input_ids"]
    assert tok.decode(ids) == "the cat sat on a mat"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    target_dir, draft_dir = save_pair(tmp_path)
    from transformers import AutoTokenizer

    again = AutoTokenizer.from_pretrained(target_dir)
    assert again.get_vocab() == tok.get_vocab()
    assert again("the cat sat on a mat")["input_ids"] == ids


# ---------------------------------------------------------------- loading folders


def test_load_folder(tmp_path):
    target_dir, draft_dir = save_pair(tmp_path)
    lm = load_model(str(target_dir), role="target", device="cpu")
    assert not lm.model.training
    assert lm.info.dtype == "float32" and lm.info.device == "cpu" and lm.info.quantization == "none"
    assert lm.info.memory_bytes > 0 and lm.info.load_seconds > 0
    assert lm.eos_token_ids == [0, 2]  # generation_config [<|im_end|>, <|endoftext|>] + tokenizer eos
    reference = make_model(len(make_tokenizer()), seed=0)
    assert torch.equal(logits(lm, lm.tokenizer), logits(reference, lm.tokenizer))
    draft = load_model(str(draft_dir), role="draft", device="cpu")
    check_compatible(lm, draft)


def test_load_folder_explicit_dtype(tmp_path):
    target_dir, _ = save_pair(tmp_path)
    lm = load_model(str(target_dir), device="cpu", dtype="bf16")
    assert lm.info.dtype == "bfloat16"


def test_progress_is_called(tmp_path):
    target_dir, _ = save_pair(tmp_path)
    calls = []
    load_model(str(target_dir), device="cpu", progress=lambda msg, frac: calls.append((msg, frac)))
    assert calls and calls[-1][1] == 1.0
    assert all(isinstance(m, str) and (f is None or 0.0 <= f <= 1.0) for m, f in calls)


# ---------------------------------------------------------------- GGUF


def test_load_gguf_runs_on_its_blocks_and_caches_only_the_tokenizer(tmp_path, isolated_cache):
    tok = make_tokenizer()
    source = make_model(len(tok), seed=0)
    path = save_gguf(tmp_path / "tiny.gguf", source, tok)

    first = load_model(str(path), device="cpu")
    assert first.info.quantization == "gguf(F32)"
    assert first.tokenizer.get_vocab() == tok.get_vocab()
    assert first.eos_token_ids == [0, 2]  # <|im_end|> from the file + <|endoftext|> by name
    # F32 blocks take float activations: only the summation order differs from torch's matmul
    ours, ref = logits(first, tok), logits(source, tok)
    assert (ours - ref).abs().max() <= 1e-4 * ref.abs().max()
    assert first.lean is not None and "lean forward" in first.info.kernels
    assert any("own blocks" in n for n in first.info.notes)
    # nothing but the tokenizer lands in the cache: no converted copy of the weights
    cached = sorted(p.relative_to(isolated_cache).parts[0] for p in isolated_cache.rglob("*") if p.is_file())
    assert set(cached) <= {"tokenizers", "cpu"} and "tokenizers" in cached
    assert not (isolated_cache / "converted").exists()

    second = load_model(str(path), device="cpu")
    assert second.eos_token_ids == first.eos_token_ids
    text = "the cat sat on a mat . is it done"
    assert second.tokenizer(text)["input_ids"] == first.tokenizer(text)["input_ids"]
    assert torch.equal(logits(second, tok), ours)
    check_compatible(first, second)


def test_without_the_cpu_kernel_a_gguf_loads_through_transformers(tmp_path, no_kernel):
    tok = make_tokenizer()
    source = make_model(len(tok), seed=0)
    path = save_gguf(tmp_path / "tiny.gguf", source, tok)
    lm = load_model(str(path), device="cpu")
    assert lm.info.quantization == "gguf-dequantized(F32)" and lm.lean is None
    assert any("CPU kernel unavailable (off for this test)" in n for n in lm.info.notes)
    assert torch.equal(logits(lm, tok), logits(source, tok))  # the dequantized float model itself


def test_load_quantized_gguf_reports_its_quantization(tmp_path):
    tok = make_tokenizer()
    path = save_gguf(tmp_path / "tiny-q8.gguf", make_model(len(tok), seed=0), tok, quantized=True)
    lm = load_model(str(path), device="cpu")
    assert lm.info.quantization == "gguf(Q8_0)"
    assert lm.info.kernels.startswith(build.kernel().described + " kernel: Q8_0 x")


def test_truncated_gguf_is_refused(tmp_path):
    tok = make_tokenizer()
    path = save_gguf(tmp_path / "tiny.gguf", make_model(len(tok), seed=0), tok)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(ModelError, match="truncated"):
        load_model(str(path), device="cpu")
    path.write_bytes(data[:200])  # cut inside the metadata
    with pytest.raises(ModelError, match="truncated or corrupt") as e:
        load_model(str(path), device="cpu")
    one_line(e.value)


def test_not_a_gguf_is_refused(tmp_path):
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"PK\x03\x04 definitely not gguf")
    with pytest.raises(ModelError, match="not a GGUF file") as e:
        load_model(str(path), device="cpu")
    one_line(e.value)


def test_gguf_refuses_bnb_quantization(tmp_path):
    tok = make_tokenizer()
    path = save_gguf(tmp_path / "tiny.gguf", make_model(len(tok), seed=0), tok)
    with pytest.raises(ModelError, match="keeps its own quantization"):
        load_model(str(path), device="cpu", quantization="nf4")


# ---------------------------------------------------------------- compatibility


def _loaded(tok, eos=(2, 0)) -> LoadedModel:
    model = make_model(len(tok), seed=0, eos_token_id=list(eos))
    return LoadedModel(model=model, tokenizer=tok, info=None, eos_token_ids=sorted(set(eos) | {tok.eos_token_id}))


def test_compatible_pair_passes():
    check_compatible(_loaded(make_tokenizer()), _loaded(make_tokenizer()))


def test_draft_with_extra_tokens_passes():
    # The draft may know more ids than the target can emit.
    bigger = make_tokenizer()
    bigger.add_tokens(["<|fim_pad|>"], special_tokens=True)
    check_compatible(_loaded(make_tokenizer()), _loaded(bigger))


def test_different_vocab_names_first_difference():
    other = list(WORDS)
    other[other.index("mat")] = "rat"
    with pytest.raises(ModelError) as e:
        check_compatible(_loaded(make_tokenizer()), _loaded(make_tokenizer(other)))
    msg = one_line(e.value)
    assert "token id" in msg and "'Ġm'" in msg and "'Ġr'" in msg  # the first id that differs


def test_smaller_draft_vocab_is_incompatible():
    with pytest.raises(ModelError, match="only"):
        check_compatible(_loaded(make_tokenizer()), _loaded(make_tokenizer(WORDS[:-3])))


def test_different_eos_is_incompatible():
    with pytest.raises(ModelError, match="ends generation for the target only"):
        check_compatible(_loaded(make_tokenizer(), eos=(2, 0)), _loaded(make_tokenizer(), eos=(2,)))


# ---------------------------------------------------------------- embedded default pair (fake parts)


@pytest.fixture
def fake_embedded(tmp_path, monkeypatch):
    """Three fake data packages holding the parts of a tiny GGUF, installed on sys.path."""
    tok = make_tokenizer()
    gguf_bytes = save_gguf(tmp_path / "whole.gguf", make_model(len(tok), seed=0), tok).read_bytes()
    site = tmp_path / "site"
    cut = [0, len(gguf_bytes) // 3, 2 * len(gguf_bytes) // 3, len(gguf_bytes)]
    model = install_embedded(site, "target", "tiny fake", "tiny-fake.gguf",
                             {f"specdec-fake-part{n}": gguf_bytes[cut[n - 1]: cut[n]] for n in range(1, 4)})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setitem(default_pair.EMBEDDED, "target", model)
    monkeypatch.setitem(default_pair.EMBEDDED, "draft", model)
    return model, site, tok


def test_assembly_verifies_and_stamps(fake_embedded, isolated_cache):
    model, _, _ = fake_embedded
    fractions = []
    path = default_pair.ensure_assembled(model, lambda m, f: fractions.append(f))
    assert path.parent == isolated_cache / "gguf"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == model.sha256
    assert fractions[-1] == 1.0
    status = models.default_pair_status()["target"]
    assert status["installed"] and status["assembled"] and status["verified"]
    # Second call: the stamp matches, nothing is re-read.
    assert default_pair.ensure_assembled(model) == path


def test_stale_partial_files_are_removed(fake_embedded, isolated_cache):
    stale = isolated_cache / "gguf" / "tiny-fake.gguf.partial-999999999"  # no such pid
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half")
    default_pair.ensure_assembled(fake_embedded[0])
    assert not stale.exists()


def test_assembly_refuses_wrong_sha256(fake_embedded, monkeypatch, isolated_cache):
    model, _, _ = fake_embedded
    bad = default_pair.EmbeddedModel(**{**model.__dict__, "sha256": "0" * 64})
    with pytest.raises(ModelError, match="corrupt.*sha256") as e:
        default_pair.ensure_assembled(bad)
    one_line(e.value)
    assert not any((isolated_cache / "gguf").glob("*.gguf*"))  # no half file left behind


def test_assembly_refuses_tampered_part(fake_embedded):
    model, site, _ = fake_embedded
    part = site / model.parts[1].path
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="reinstall"):
        default_pair.ensure_assembled(model)


def test_assembled_file_damaged_later_is_rebuilt(fake_embedded):
    model, _, _ = fake_embedded
    path = default_pair.ensure_assembled(model)
    path.write_bytes(b"GGUF" + b"\0" * 100)  # changes size and mtime: the stamp no longer matches
    again = default_pair.ensure_assembled(model)
    assert hashlib.sha256(again.read_bytes()).hexdigest() == model.sha256


def test_missing_package_says_how_to_install(fake_embedded, monkeypatch):
    model, _, _ = fake_embedded
    missing = default_pair.EmbeddedModel(
        **{**model.__dict__, "parts": model.parts + (default_pair.Part("specdec-nonexistent-part9", "1", "x/y.bin"),)}
    )
    with pytest.raises(ModelError, match=r"not installed.*specdec-nonexistent-part9.*pip install") as e:
        default_pair.ensure_assembled(missing)
    one_line(e.value)


def test_load_default_pair_from_fake_parts(fake_embedded, isolated_cache):
    _, _, tok = fake_embedded
    target, draft = models.load_default_pair(device="cpu")
    assert target.info.source == "default:target" and draft.info.source == "default:draft"
    assert target.info.quantization == "gguf(F32)"
    assert target.tokenizer.get_vocab() == tok.get_vocab()
    # Second start: the tokenizer from the cache, keyed by the file's sha256.
    tokenizers = list((isolated_cache / "tokenizers").iterdir())
    assert [t.name for t in tokenizers] == [default_pair.EMBEDDED["target"].sha256[:16]]
    again = load_model("default", role="target", device="cpu")
    assert torch.equal(logits(again, tok), logits(target, tok))


# ---------------------------------------------------------------- SPEC, device, dtype, errors


def test_parse_spec_kinds(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (tmp_path / "x.gguf").write_bytes(b"GGUF")
    assert parse_spec("default").kind == "default"
    assert parse_spec(str(folder)).kind == "folder"
    assert parse_spec(str(tmp_path / "x.gguf")).kind == "gguf"
    assert parse_spec("Qwen/Qwen2.5-0.5B-Instruct").kind == "hub"
    hub_gguf = parse_spec("Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf")
    assert hub_gguf.kind == "hub-gguf" and hub_gguf.repo_id == "Qwen/Qwen2.5-0.5B-Instruct-GGUF"


@pytest.mark.parametrize("spec", ["./nope", "/no/such/dir", "missing.gguf", "~/nothing/here"])
def test_missing_path(spec):
    with pytest.raises(ModelError, match="not found") as e:
        load_model(spec, device="cpu")
    one_line(e.value)


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelError, match="no config.json"):
        load_model(str(tmp_path), device="cpu")


def test_pickle_only_folder_is_refused(tmp_path):
    target_dir, _ = save_pair(tmp_path)
    model = make_model(len(make_tokenizer()), seed=0)
    (target_dir / "model.safetensors").unlink()
    torch.save(model.state_dict(), target_dir / "pytorch_model.bin")
    with pytest.raises(ModelError, match="pickle.*--allow-pickle") as e:
        load_model(str(target_dir), device="cpu")
    one_line(e.value)
    lm = load_model(str(target_dir), device="cpu", allow_pickle=True)
    assert torch.equal(logits(lm, lm.tokenizer), logits(model, lm.tokenizer))


def test_hub_id_offline_is_one_line():
    with pytest.raises(ModelError, match=r"cannot reach the Hugging Face hub to download Qwen/Qwen2.5-0.5B-Instruct.*offline") as e:
        load_model("Qwen/Qwen2.5-0.5B-Instruct", device="cpu")
    one_line(e.value)


def test_hub_id_uses_local_cache_first(tmp_path, monkeypatch):
    target_dir, _ = save_pair(tmp_path)
    seen = {}

    def fake_snapshot_download(repo_id, allow_patterns=None, local_files_only=False, **kw):
        seen.update(repo_id=repo_id, local=local_files_only, patterns=allow_patterns)
        return str(target_dir)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    lm = load_model("someone/tiny", device="cpu")
    assert seen["local"] is True and "*.bin" not in seen["patterns"]
    assert lm.info.source == "someone/tiny"


def test_hub_gguf_file_uses_local_cache_first(tmp_path, monkeypatch):
    tok = make_tokenizer()
    path = save_gguf(tmp_path / "tiny.gguf", make_model(len(tok), seed=0), tok)
    calls = []

    def fake_hf_hub_download(repo_id, filename, local_files_only=False, **kw):
        calls.append((repo_id, filename, local_files_only))
        return str(path)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_hf_hub_download)
    lm = load_model("someone/tiny-GGUF/tiny.gguf", device="cpu")
    assert calls == [("someone/tiny-GGUF", "tiny.gguf", True)]
    assert lm.info.quantization == "gguf(F32)"


def test_hub_connection_error_is_offline_message(monkeypatch):
    import huggingface_hub
    from huggingface_hub import errors

    def fake(repo_id, local_files_only=False, **kw):
        if local_files_only:
            raise errors.LocalEntryNotFoundError("not cached")
        raise ConnectionError("Max retries exceeded")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    with pytest.raises(ModelError, match="offline"):
        hub_mod.snapshot("someone/tiny", allow_pickle=False)


def test_cuda_requested_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelError, match="no CUDA GPU") as e:
        resolve_device("cuda")
    one_line(e.value)
    with pytest.raises(ModelError, match="no CUDA GPU"):
        load_model("default", device="cuda")
    assert resolve_device("cpu") == "cpu"


def test_dtype_auto_rules(monkeypatch):
    monkeypatch.setattr(device_mod, "cpu_has_fast_bf16", lambda: False)
    assert resolve_dtype("auto", "cpu") == "float32"
    monkeypatch.setattr(device_mod, "cpu_has_fast_bf16", lambda: True)
    assert resolve_dtype("auto", "cpu") == "bfloat16"
    assert resolve_dtype("auto", "mps") == "float16"
    assert resolve_dtype("fp16", "cpu") == "float16"
    with pytest.raises(ModelError, match="unknown dtype"):
        resolve_dtype("float8", "cpu")


def test_quantization_defaults():
    rq = device_mod.resolve_quantization
    assert rq(None, role="target", device="cuda", is_gguf=False) == "nf4"
    assert rq(None, role="draft", device="cuda", is_gguf=False) == "none"
    assert rq(None, role="target", device="cpu", is_gguf=False) == "none"
    assert rq(None, role="target", device="cuda", is_gguf=True) == "none"


def test_out_of_memory_is_one_line(tmp_path, monkeypatch):
    target_dir, _ = save_pair(tmp_path)
    from transformers import AutoModelForCausalLM

    def boom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore text")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", boom)
    with pytest.raises(ModelError, match="out of memory while loading") as e:
        load_model(str(target_dir), device="cpu")
    one_line(e.value)
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: (_ for _ in ()).throw(MemoryError()))
    with pytest.raises(ModelError, match="out of memory"):
        load_model(str(target_dir), device="cpu")


def test_model_error_is_always_one_line():
    assert str(ModelError("a\nb\n  c")) == "a b c"


def test_presets_are_data():
    assert any(p.target == "default" and p.draft == "default" and p.device == "cpu" for p in models.PRESETS)
    assert {p.name for p in models.PRESETS} >= {"cpu-default", "gpu-7b", "gpu-14b"}
    with pytest.raises(ModelError, match="unknown preset"):
        models.get_preset("nope")


def test_import_is_light():
    """Importing the package must not pull torch/transformers (fast `specdec --help`)."""
    import subprocess

    code = "import sys, specdec_core.models; print('transformers' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent.parent, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert out.stdout.split() == ["False", "False"]


# ---------------------------------------------------------------- the real embedded pair


@pytest.mark.slow
def test_real_embedded_pair(monkeypatch):
    """Loads both embedded models, checks hashes and compatibility.

    Uses the real user cache (not the tmp one), so the assembled files are reused across runs.
    """
    monkeypatch.delenv("SPECDEC_CACHE_DIR", raising=False)
    target, draft = models.load_default_pair(device="cpu")
    for role, lm in (("target", target), ("draft", draft)):
        em = default_pair.EMBEDDED[role]
        path = default_pair.assembled_path(em)
        if path.is_file():
            assert path.stat().st_size == em.size
            assert default_pair.sha256_file(path) == em.sha256
        assert lm.info.quantization == "gguf(Q4_K_M)" and lm.lean is not None
        assert 151643 in lm.eos_token_ids and 151645 in lm.eos_token_ids
    assert len(target.tokenizer) == len(draft.tokenizer) == 151936


# ---------------------------------------------------------------- `specdec models`


def test_run_models_report(fake_embedded, tmp_path):
    import io
    import json
    import types

    from specdec_core.cli.models import run as run_models

    default_pair.ensure_assembled(fake_embedded[0])
    from specdec_core.models import cache as cache_mod

    old = cache_mod.converted_dir() / "0123456789abcdef-float32"  # what an earlier version left
    old.mkdir(parents=True)
    (old / "model.safetensors").write_bytes(b"x" * 2048)
    out = io.StringIO()
    assert run_models(types.SimpleNamespace(json=False), out=out) == 0
    text = out.getvalue()
    for needle in ("Presets", "cpu-default", "gpu-7b", "Embedded default pair", "sha256 verified",
                   "specdec cache", "Hugging Face cache", "auto device", "CPU kernel: ",
                   "left by an earlier version, no longer used: 1 dequantized float32 copies (2.00 KiB)",
                   "--remove-old-cache"):
        assert needle in text, needle
    out = io.StringIO()
    assert run_models(types.SimpleNamespace(json=False, remove_old_cache=True), out=out) == 0
    assert "removed the old converted cache (2.00 KiB freed)" in out.getvalue()
    assert not cache_mod.converted_dir().exists() and "left by an earlier version" not in out.getvalue()
    out = io.StringIO()
    run_models(types.SimpleNamespace(json=True), out=out)
    report = json.loads(out.getvalue())
    assert report["default_pair"]["target"]["assembled"] is True


def test_models_report_lists_the_last_loads_notes(tmp_path, capsys):
    """`specdec models` loads nothing; it shows the notes the last load recorded (which kernels,
    what was requantized, why a fallback happened), written by the CLI's own load."""
    import io
    import types

    from specdec_core.cli.models import run as run_models
    from specdec_core.models import last_load
    from tiny_models import save_model

    out = io.StringIO()
    run_models(types.SimpleNamespace(json=False), out=out)
    assert "Last load: none recorded yet" in out.getvalue()
    tok = make_tokenizer()
    folder = save_model(tmp_path / "m", make_model(len(tok), seed=0), tok)
    from specdec_core.cli import main

    assert main(["generate", "--target", str(folder), "--mode", "standard", "--prompt-ids", "1,2",
                 "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err
    record = last_load.read()
    assert record["target"]["notes"] and record["draft"] is None
    for note in record["target"]["notes"]:
        assert f"  - {note}" in err  # the CLI prints the notes under what it loaded
    out = io.StringIO()
    run_models(types.SimpleNamespace(json=False), out=out)
    text = out.getvalue()
    assert "Last load (" in text and f"target: {record['target']['name']}" in text
    for note in record["target"]["notes"]:
        assert f"    - {note}" in text
