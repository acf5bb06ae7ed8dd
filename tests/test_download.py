"""Hub downloads against a real HTTP server on 127.0.0.1 standing in for the hub (hub_server.py,
reached through HF_ENDPOINT): bytes, speed and time left as they come; cancel, then resume from
the kept bytes with a Range request; one line for an unknown id or no network; the downloaded
model listed locally and loaded offline afterwards."""

from __future__ import annotations

import hashlib
import sys
import threading
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from hub_server import tiny_repo_files  # noqa: E402
from tiny_models import make_model, make_tokenizer, save_gguf, save_model  # noqa: E402

from specdec_core.models import ModelError, download, load_model, local, vocab  # noqa: E402


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    """A ~0.5 MB model folder's files (hidden 64: big enough to watch a throttled download)."""
    tok = make_tokenizer()
    folder = save_model(tmp_path_factory.mktemp("tiny") / "m", make_model(len(tok), seed=0, hidden=64,
                                                                          intermediate=256), tok)
    return tiny_repo_files(folder)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Progress (and cancel) every 16 KiB, as the app's 256 KiB are on a real model's files."""
    monkeypatch.setattr(download, "CHUNK_BYTES", 16 << 10)


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text and text
    return text


def test_download_reports_bytes_speed_and_time_left(local_hub, tiny_files, monkeypatch):
    hub = local_hub({"tiny/model": tiny_files}, rate=500_000)
    seen = []
    folder = download.download("tiny/model", seen.append)
    total = sum(len(b) for b in tiny_files.values())
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == tiny_files
    assert seen[0].done == 0 and seen[-1].done == total == seen[-1].total
    assert [p.done for p in seen] == sorted(p.done for p in seen)
    assert seen[-1].files_done == seen[-1].files_total == len(tiny_files)
    mid = [p for p in seen if 0 < p.done < total and p.speed > 0]
    assert mid, "no progress report in flight"
    # measured speed is the server's rate (500 kB/s), give or take scheduling; time left follows from it
    assert any(0.1e6 < p.speed < 1.5e6 for p in mid)
    assert all(p.eta is None or abs(p.eta - (p.total - p.done) / p.speed) < 1e-6 for p in mid)
    assert "model.safetensors" in {p.file for p in mid}
    assert hub.ranges("model.safetensors") == [""]  # a fresh download: no Range

    # it lives in the HF cache now: listed locally, loaded offline, same weights as served
    import huggingface_hub.constants as hf_constants

    listed = [m for m in local.hf_cache_models() if m.spec == "tiny/model"]
    assert len(listed) == 1 and listed[0].format == "safetensors" and listed[0].error is None
    assert listed[0].bytes == total and listed[0].quantization == "float32"
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    lm = load_model("tiny/model", device="cpu")
    ref = make_model(len(make_tokenizer()), seed=0, hidden=64, intermediate=256)
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        assert torch.equal(lm.model(ids).logits, ref(ids).logits)


def test_cancel_keeps_the_bytes_and_the_next_download_resumes(local_hub, tiny_files):
    hub = local_hub({"tiny/model": tiny_files}, rate=400_000)
    cancel = threading.Event()
    first = []

    def report(p):
        first.append(p)
        if p.file == "model.safetensors" and p.done > 0.3 * p.total:
            cancel.set()

    with pytest.raises(download.DownloadCancelled) as e:
        download.download("tiny/model", report, cancel)
    kept = download.partial_downloads()
    assert len(kept) == 1 and kept[0]["repo_id"] == "tiny/model" and kept[0]["file"] == "model.safetensors"
    assert 0 < kept[0]["bytes"] < len(tiny_files["model.safetensors"])
    assert e.value.kept >= kept[0]["bytes"] and "resumes" in one_line(e.value)

    # the plan knows what is here; the second download starts from there with a Range request
    plan = download.plan("tiny/model")
    assert plan.have >= kept[0]["bytes"]
    hub.rate = None
    second = []
    folder = download.download("tiny/model", second.append)
    assert second[0].done == plan.have  # progress starts at the kept bytes, not at zero
    assert hub.ranges("model.safetensors")[-1] == f"bytes={kept[0]['bytes']}-"
    data = (folder / "model.safetensors").read_bytes()
    assert hashlib.sha256(data).digest() == hashlib.sha256(tiny_files["model.safetensors"]).digest()
    assert download.partial_downloads() == []


def test_a_damaged_partial_is_caught_by_its_sha256(local_hub, tiny_files):
    hub = local_hub({"tiny/model": tiny_files}, rate=400_000)
    cancel = threading.Event()
    with pytest.raises(download.DownloadCancelled):
        download.download("tiny/model", lambda p: p.done > 100_000 and cancel.set(), cancel)
    part = Path(download.partial_downloads()[0]["path"])
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    hub.rate = None
    with pytest.raises(ModelError, match="arrived damaged") as e:
        download.download("tiny/model")
    one_line(e.value)
    assert download.partial_downloads() == []  # the next try starts clean
    assert (download.download("tiny/model") / "model.safetensors").read_bytes() == tiny_files["model.safetensors"]


def test_unknown_id_and_no_network_are_one_line(local_hub, tiny_files, monkeypatch, tmp_path):
    local_hub({"tiny/model": tiny_files})
    with pytest.raises(ModelError, match="no model nobody/nothing on the Hugging Face hub") as e:
        download.download("nobody/nothing")
    one_line(e.value)
    with pytest.raises(ModelError, match="is not a hub id"):
        download.plan(str(tmp_path))  # a local folder is not something to download

    import socket

    import huggingface_hub.constants as hf_constants

    with socket.socket() as s:  # a port nothing listens on: the network is "down"
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setattr(hf_constants, "ENDPOINT", dead)
    monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE", dead + "/{repo_id}/resolve/{revision}/{filename}")
    with pytest.raises(ModelError, match="cannot reach the Hugging Face hub") as e:
        download.download("tiny/model")
    one_line(e.value)
    import time

    t0 = time.monotonic()
    with pytest.raises(ModelError, match="cannot reach the Hugging Face hub"):
        vocab.read_vocab("tiny/model")  # a draft check fails at once, without huggingface_hub's retries
    assert time.monotonic() - t0 < 5
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelError, match="cannot reach the Hugging Face hub.*offline") as e:
        download.download("tiny/model")
    one_line(e.value)


def test_gguf_repos(local_hub, tmp_path):
    tok = make_tokenizer()
    gguf = save_gguf(tmp_path / "tiny-q8.gguf", make_model(len(tok), seed=0), tok, quantized=True).read_bytes()
    local_hub({"tiny/model-GGUF": {"README.md": b"# tiny", "tiny-q8.gguf": gguf}})
    with pytest.raises(ModelError, match=r"holds GGUF files.*tiny/model-GGUF/FILE.gguf.*tiny-q8.gguf") as e:
        download.download("tiny/model-GGUF")
    one_line(e.value)
    with pytest.raises(ModelError, match="has no file nope.gguf; it has tiny-q8.gguf"):
        download.download("tiny/model-GGUF/nope.gguf")
    path = download.download("tiny/model-GGUF/tiny-q8.gguf")
    assert path.read_bytes() == gguf
    listed = [m for m in local.hf_cache_models() if m.spec == "tiny/model-GGUF/tiny-q8.gguf"]
    assert len(listed) == 1 and listed[0].format == "GGUF" and listed[0].quantization == "Q8_0"
    lm = load_model("tiny/model-GGUF/tiny-q8.gguf", device="cpu")  # from the cache, no second download
    assert lm.info.quantization == "gguf(Q8_0)"


def test_loading_a_hub_id_downloads_it_with_a_fraction(local_hub, tiny_files):
    local_hub({"tiny/model": tiny_files})
    calls = []
    lm = load_model("tiny/model", device="cpu", progress=lambda m, f: calls.append((m, f)))
    fractions = [f for m, f in calls if m == "downloading tiny/model" and f is not None]
    assert fractions and fractions[-1] == 1.0 and fractions == sorted(fractions)
    assert lm.info.source == "tiny/model"


def test_a_hub_models_vocabulary_needs_only_its_tokenizer_files(local_hub, tiny_files, tmp_path):
    hub = local_hub({"tiny/model": tiny_files})
    v = vocab.read_vocab("tiny/model")
    fetched = {p.rsplit("/", 1)[-1] for m, p, _ in hub.log if m == "GET" and "/resolve/" in p}
    assert "model.safetensors" not in fetched and "tokenizer.json" in fetched
    folder = tmp_path / "same"
    folder.mkdir()
    for name, data in tiny_files.items():
        (folder / name).write_bytes(data)
    assert v.tokens == vocab.read_vocab(str(folder)).tokens and v.eos_ids == (0, 2)
    # tokenizer files alone are not the model: loading it still downloads the weights
    lm = load_model("tiny/model", device="cpu")
    assert "model.safetensors" in {p.rsplit("/", 1)[-1] for m, p, _ in hub.log if m == "GET"}
    assert lm.info.source == "tiny/model"


@pytest.mark.parametrize("text, spec", [
    ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    ("  https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct  ", "Qwen/Qwen2.5-0.5B-Instruct"),
    ("https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/tree/main", "Qwen/Qwen2.5-0.5B-Instruct"),
    ("https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/blob/main/qwen2.5-0.5b-instruct-q4_k_m.gguf",
     "Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf"),
    ("https://hf.co/owner/name/resolve/main/sub/x.gguf?download=true", "owner/name/sub/x.gguf"),
    ("https://example.com/owner/name", "https://example.com/owner/name"),  # not the hub: left as typed
])
def test_pasted_hub_addresses_become_specs(text, spec):
    assert download.normalize_hub_id(text) == spec
