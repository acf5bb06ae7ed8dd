"""The Models dialog, offscreen, on tiny models: presets with what they need here, local models,
drafts that fit and the reason the others do not, opening a .gguf, a hub download with progress
against the local stand-in hub (cancel, resume), the too-big dialog, and the main window loading
what the dialog chose."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

sys.path.insert(0, str(Path(__file__).parent))
from hub_server import tiny_repo_files  # noqa: E402
from tiny_models import (  # noqa: E402
    WORDS,
    install_embedded,
    make_model,
    make_tokenizer,
    save_folder,
    save_gguf,
    save_model,
)

from app.models_dialog import NO_DRAFT, ModelsDialog  # noqa: E402
from app.worker import LoadRequest  # noqa: E402
from specdec_core.models import default_pair, local, memory, recent  # noqa: E402

TIMEOUT = 30_000


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Own caches and data folder, no network, and an embedded pair of tiny GGUFs installed as
    fake data packages (the real pair would be assembled: half a gigabyte)."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    tok = make_tokenizer()
    site = tmp_path / "site"
    for role, seed, hidden in (("target", 0, 32), ("draft", 1, 16)):
        data = save_gguf(tmp_path / f"{role}.gguf", make_model(len(tok), seed=seed, hidden=hidden), tok).read_bytes()
        monkeypatch.setitem(default_pair.EMBEDDED, role, install_embedded(
            site, role, f"tiny embedded {role}", f"tiny-{role}.gguf", {f"specdec-fake-{role}": data}))
    monkeypatch.syspath_prepend(str(site))
    return tmp_path


@pytest.fixture
def open_dialog(qtbot, env):
    made = []

    def make(current: LoadRequest | None = None, freeable: int = 0) -> ModelsDialog:
        dlg = ModelsDialog(current or LoadRequest(), env / "data" / recent.FILE_NAME, freeable)
        qtbot.addWidget(dlg)
        made.append(dlg)
        with qtbot.waitSignal(dlg.scan_ready, timeout=TIMEOUT):
            dlg.show()
        return dlg

    yield make
    for dlg in made:
        dlg.shutdown()


def top_texts(dlg) -> dict[str, list[str]]:
    out = {}
    for i in range(dlg.tree.topLevelItemCount()):
        top = dlg.tree.topLevelItem(i)
        out[top.text(0)] = [" | ".join(top.child(j).text(c) for c in range(5)) for j in range(top.childCount())]
    return out


def pick_target(qtbot, dlg, key: str) -> None:
    with qtbot.waitSignal(dlg.drafts_checked, timeout=TIMEOUT):
        dlg.select_target(key)
    qtbot.waitUntil(lambda: dlg.estimate is not None, timeout=TIMEOUT)


# ---------------------------------------------------------------- listing


def test_lists_presets_with_needs_and_the_local_models(qtbot, open_dialog, env):
    gguf = save_gguf(env / "mine.gguf", make_model(len(make_tokenizer()), seed=3), make_tokenizer(), quantized=True)
    recent.remember(str(gguf), file=env / "data" / recent.FILE_NAME)
    default_pair.ensure_assembled(default_pair.EMBEDDED["target"])  # the draft stays in its parts
    dlg = open_dialog()
    assert dlg.machine_label.text().startswith("This machine: RAM ") and "free of" in dlg.machine_label.text()
    lists = top_texts(dlg)
    presets = lists["Presets (known-good pairs)"]
    assert [p.split(":")[0] for p in presets] == ["cpu-default", "gpu-7b", "gpu-14b", "gpu-coder-7b"]
    assert all("GiB RAM" in p or "GiB VRAM" in p for p in presets[1:])
    assert presets[0].endswith("| ?")  # cpu-default: this fake pair's draft is not assembled, its size unknown
    here = lists["On this computer"]
    assert here[0].startswith("tiny embedded target  (embedded target) | GGUF | F32 | ") and here[0].endswith("KiB RAM  ✓")
    # the embedded draft, not assembled yet, cannot be a target by path (it is the pair's draft)
    assert here[1].startswith("tiny embedded draft  (embedded draft) | GGUF | ?")
    assert any(r.startswith("tiny-qwen2  (recent) | GGUF | Q8_0") and r.endswith("KiB RAM  ✓") for r in here)
    # the dialog opens on what is loaded now: the embedded pair
    assert dlg.selected_target_key() == "model:default:target"
    qtbot.waitUntil(lambda: dlg.selected_draft_key() == "model:default:draft", timeout=TIMEOUT)
    assert dlg.request() == LoadRequest("default", "default", "auto", "auto", None)


def test_recents_that_are_gone_drop_out_and_same_names_show_their_folder(qtbot, open_dialog, env):
    """Several folders called "draft" in the recent list are told apart by their folders; a recent
    whose files were deleted is not listed (its entry stays in the file: a drive plugged in again
    brings it back)."""
    import shutil

    file = env / "data" / recent.FILE_NAME
    a = save_folder(env / "qwen-a", "draft", hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32)
    b = save_folder(env / "qwen-b", "draft", hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32)
    gone = save_folder(env / "old", "target")
    for p in (gone, a, b):
        recent.remember(str(p), file=file)
    shutil.rmtree(gone)
    dlg = open_dialog()
    here = top_texts(dlg)["On this computer"]
    assert not any(r.startswith("target  (recent") for r in here)
    rows = [r.split(" | ")[0] for r in here if r.startswith("draft  (recent")]
    assert sorted(rows) == sorted(f"draft  (recent · {local.short_folder(p.parent)})" for p in (a, b))
    assert local.short_folder(a.parent) != local.short_folder(b.parent)
    assert len(recent.load(file)) == 3  # nothing forgotten
    # the draft list tells them apart too
    pick_target(qtbot, dlg, "model:default:target")
    names = [text.split("\n")[0] for _, _, _, text in dlg.draft_items()]
    assert sum("draft (" in n for n in names) == 2 and len({n for n in names if "draft (" in n}) == 2


def test_short_folder_names_home_and_keeps_the_last_parts():
    home = Path.home()
    assert local.short_folder(home / "models" / "qwen") == str(Path("~") / "models" / "qwen")
    long = Path("/") / ("x" * 30) / ("y" * 30) / "qwen-b"
    assert local.short_folder(long) == "…" + os.sep + os.sep.join(long.parts[-2:])


# ---------------------------------------------------------------- drafts


def test_drafts_that_fit_come_first_and_the_others_say_why(qtbot, open_dialog, env):
    other = list(WORDS)
    other[other.index("mat")] = "rat"
    paths = {
        "target": save_folder(env, "target"),
        "fits": save_folder(env, "fits", hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32),
        "words": save_folder(env, "words", other),
        "eos": save_folder(env, "eos", eos=(2,)),
        "small": save_folder(env, "small", WORDS[:-3]),
    }
    for p in paths.values():
        recent.remember(str(p), file=env / "data" / recent.FILE_NAME)
    dlg = open_dialog()
    pick_target(qtbot, dlg, f"model:{paths['target'].resolve()}")
    items = dlg.draft_items()
    assert items[0][:3] == (NO_DRAFT, "none", True)  # target only, always offered
    statuses = [s for _, s, _, _ in items[1:]]
    assert statuses == sorted(statuses, key=["ok", "unknown", "no"].index)  # fitting ones first
    by_key = {k: (s, enabled, text) for k, s, enabled, text in items}
    fits = by_key[f"model:{paths['fits'].resolve()}"]
    assert fits[0] == "ok" and fits[1] and fits[2].startswith("✓")
    assert by_key["model:default:draft"][0] == "ok"  # the embedded draft, same tokenizer
    words = by_key[f"model:{paths['words'].resolve()}"]
    assert words[:2] == ("no", False) and "does not fit: token id" in words[2] and "'Ġm' in the target but 'Ġr'" in words[2]
    eos = by_key[f"model:{paths['eos'].resolve()}"]
    assert eos[:2] == ("no", False) and "ends generation for the target only" in eos[2]
    small = by_key[f"model:{paths['small'].resolve()}"]
    assert small[:2] == ("no", False) and "tokens but the draft only" in small[2]
    # with no draft asked for, the smallest that fits is chosen; a greyed one cannot be
    assert dlg.selected_draft_key() in ("model:default:draft", f"model:{paths['fits'].resolve()}")
    before = dlg.selected_draft_key()
    row = [k for k, *_ in items].index(f"model:{paths['words'].resolve()}")
    rect = dlg.draft_list.visualItemRect(dlg.draft_list.item(row))
    from PySide6.QtCore import Qt as QtCore_Qt

    qtbot.mouseClick(dlg.draft_list.viewport(), QtCore_Qt.MouseButton.LeftButton, pos=rect.center())
    assert dlg.selected_draft_key() == before
    dlg.draft_list.setCurrentRow(row)  # not even from code
    assert dlg.selected_draft_key() == before
    dlg.draft_list.setCurrentRow(0)
    assert dlg.request().draft is None and dlg.request().target == str(paths["target"].resolve())
    # a safetensors target may be quantized; the choice reaches the request
    assert dlg.quant.isEnabled()
    dlg.quant.setCurrentIndex(dlg.quant.findData("nf4"))
    assert dlg.request().quantization == "nf4"


def test_a_preset_not_downloaded_keeps_its_own_draft_and_says_why_others_wait(qtbot, open_dialog, env):
    recent.remember(str(save_folder(env, "t")), file=env / "data" / recent.FILE_NAME)
    dlg = open_dialog()
    pick_target(qtbot, dlg, "preset:gpu-7b")  # offline, nothing of it downloaded
    assert "cannot be checked yet: cannot reach the Hugging Face hub" in dlg.drafts_title.text()
    items = {k: (s, enabled, text) for k, s, enabled, text in dlg.draft_items()}
    own = items["model:Qwen/Qwen2.5-0.5B-Instruct"]
    assert own[0] == "ok" and "known-good pair" in own[2]
    assert dlg.selected_draft_key() == "model:Qwen/Qwen2.5-0.5B-Instruct"
    assert items[f"model:{(env / 't').resolve()}"][:2] == ("unknown", True)


def test_open_gguf_file_lists_and_picks_it(qtbot, open_dialog, env):
    dlg = open_dialog()
    gguf = save_gguf(env / "opened.gguf", make_model(len(make_tokenizer()), seed=4), make_tokenizer())
    dlg.open_path(str(gguf))
    qtbot.waitUntil(lambda: dlg.selected_target_key() == f"model:{gguf.resolve()}", timeout=TIMEOUT)
    assert not dlg.quant.isEnabled()  # a GGUF keeps its own quantization
    assert recent.load(env / "data" / recent.FILE_NAME)[0]["spec"] == str(gguf.resolve())
    qtbot.waitUntil(lambda: any(k == "model:default:draft" and s == "ok" for k, s, *_ in dlg.draft_items()),
                    timeout=TIMEOUT)
    junk = env / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    dlg.open_path(str(junk))
    qtbot.waitUntil(lambda: "not a readable GGUF" in dlg.status.text(), timeout=TIMEOUT)
    assert dlg.selected_target_key() == f"model:{gguf.resolve()}"  # a broken file cannot be picked


# ---------------------------------------------------------------- downloads


def test_download_with_progress_cancel_and_resume(qtbot, open_dialog, env, local_hub, monkeypatch):
    from specdec_core.models import download

    monkeypatch.setattr(download, "CHUNK_BYTES", 16 << 10)
    tok = make_tokenizer()
    files = tiny_repo_files(save_model(env / "served", make_model(len(tok), seed=0, hidden=64, intermediate=256), tok))
    hub = local_hub({"tiny/model": files}, rate=250_000)
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(env / "hf" / "hub"))
    dlg = open_dialog()
    dl = dlg.downloads
    dl.hub_edit.setText("tiny/model")
    dl.download_button.click()
    assert not dl.download_button.isEnabled() and dl.dl_panel.isVisible()
    qtbot.waitUntil(lambda: "/s ·" in dl.dl_detail.text() and "left" in dl.dl_detail.text()
                    and "model.safetensors" in dl.dl_detail.text() and dl.dl_bar.value() > 100, timeout=TIMEOUT)
    assert " of " in dl.dl_detail.text() and dl.dl_bar.value() > 0
    with qtbot.waitSignal(dlg.download_finished, timeout=TIMEOUT) as sig:
        dl.dl_cancel.click()
    assert sig.args == ["cancelled"] and "kept" in dl.dl_detail.text() and "resume" in dl.dl_detail.text()
    # listed under the stopped downloads, from where Resume picks it up
    qtbot.waitUntil(lambda: dl.partial_row.isVisible(), timeout=TIMEOUT)
    assert dl.partial_combo.currentData() == "tiny/model" and "kept" in dl.partial_combo.currentText()
    hub.rate = None
    dl.hub_edit.setText("")
    with qtbot.waitSignal(dlg.download_finished, timeout=TIMEOUT) as sig:
        dl.resume_button.click()
    assert sig.args == ["done"] and dl.dl_bar.value() == 1000 and dl.hub_edit.text() == "tiny/model"
    assert hub.ranges("model.safetensors")[-1].startswith("bytes=")  # resumed, not restarted
    qtbot.waitUntil(lambda: dlg.selected_target_key() == "model:tiny/model", timeout=TIMEOUT)
    assert any(r.startswith("tiny/model  (Hugging Face cache) | safetensors | float32") for r in
               top_texts(dlg)["On this computer"])
    assert not dl.partial_row.isVisible()
    dl.hub_edit.setText("https://huggingface.co/nobody/nothing")  # a pasted address works too
    with qtbot.waitSignal(dlg.download_finished, timeout=TIMEOUT) as sig:
        dl.download_button.click()
    assert sig.args == ["failed"] and dl.dl_detail.text().startswith("no model nobody/nothing on the Hugging Face hub")
    assert dl.hub_edit.text() == "nobody/nothing"


# ---------------------------------------------------------------- memory


def test_too_big_gets_numbers_and_a_smaller_preset(qtbot, open_dialog, monkeypatch):
    machine = memory.Machine(ram_total=16 << 30, ram_available=12 << 30)
    monkeypatch.setattr(memory, "probe", lambda gpu=True: machine)
    dlg = open_dialog()
    pick_target(qtbot, dlg, "preset:gpu-14b")
    assert dlg.request().quantization == "nf4" and dlg.request().draft == "Qwen/Qwen2.5-0.5B-Instruct"
    assert "does not fit" in dlg.memory_label.text()
    dlg.load_button.click()
    box = dlg.warning_box
    assert box is not None and box.isVisible()
    text = box.text()
    assert "needs about 15.4 GiB of RAM" in text and "12.0 GiB free of 16.0 GiB" in text
    assert "The gpu-7b preset" in text
    use = next(b for b in box.buttons() if b.text() == "Use gpu-7b")
    with qtbot.waitSignal(dlg.drafts_checked, timeout=TIMEOUT):
        use.click()
    assert dlg.selected_target_key() == "preset:gpu-7b" and dlg.result() == 0  # still open, nothing loaded
    qtbot.waitUntil(lambda: dlg.estimate is not None, timeout=TIMEOUT)
    assert "fits" in dlg.memory_label.text()
    with qtbot.waitSignal(dlg.accepted, timeout=TIMEOUT):
        dlg.load_button.click()  # fits: no warning, straight to loading


def test_load_anyway_is_the_users_call(qtbot, open_dialog, monkeypatch, env):
    monkeypatch.setattr(memory, "probe", lambda gpu=True: memory.Machine(1 << 30, 10_000))
    t = save_folder(env, "t")
    recent.remember(str(t), file=env / "data" / recent.FILE_NAME)
    dlg = open_dialog()
    pick_target(qtbot, dlg, f"model:{t.resolve()}")
    dlg.load_button.click()
    assert "None of the presets fits" in dlg.warning_box.text()
    assert [b.text() for b in dlg.warning_box.buttons() if b.text().startswith("Use")] == []
    anyway = next(b for b in dlg.warning_box.buttons() if b.text() == "Load anyway")
    with qtbot.waitSignal(dlg.accepted, timeout=TIMEOUT):
        anyway.click()


# ---------------------------------------------------------------- in the main window


def test_main_window_loads_what_the_dialog_chose(qtbot, env, tmp_path):
    from app.main_window import MainWindow
    from app.theme import Theme
    from app_fixtures import tiny_factory

    t = save_folder(env, "t")
    d = save_folder(env, "d", hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32)
    data = tmp_path / "windata"
    for p in (t, d):
        recent.remember(str(p), file=data / recent.FILE_NAME)
    win = MainWindow(data, Theme(False), LoadRequest(factory=tiny_factory()))
    qtbot.addWidget(win)
    with qtbot.waitSignal(win.models_ready, timeout=TIMEOUT):
        win.models.start_loading()
    win.models.load_dialog()
    dlg = win.models.dialog
    assert dlg.isVisible() and dlg.freeable > 0  # the tiny models loaded now count as freeable
    qtbot.waitSignal(dlg.scan_ready, timeout=TIMEOUT).wait()
    pick_target(qtbot, dlg, f"model:{t.resolve()}")
    dlg.draft_list.setCurrentRow([k for k, *_ in dlg.draft_items()].index(f"model:{d.resolve()}"))
    qtbot.waitUntil(lambda: dlg.estimate is not None, timeout=TIMEOUT)
    with qtbot.waitSignal(win.models_ready, timeout=120_000):
        dlg.load_button.click()
    assert win.models.load_request.target == str(t.resolve()) and win.models.load_request.draft == str(d.resolve())
    assert win.models.model_info["target"]["source"] == str(t.resolve())
    saved = {m["spec"]: m for m in json.loads((data / recent.FILE_NAME).read_text())["models"]}
    assert saved[str(t.resolve())]["role"] == "target" and saved[str(t.resolve())]["loaded"]["device"] == "cpu"
    assert win.generation.send("the cat")
    qtbot.waitSignal(win.message_done, timeout=120_000).wait()
    win.close()


def test_side_panel_names_bitsandbytes_weights(qtbot):
    from app.side_panel import SidePanel
    from app.theme import Theme

    panel = SidePanel(Theme(False))
    qtbot.addWidget(panel)
    panel.set_models({"name": "t", "dtype": "float32", "quantization": "nf4", "device": "cpu",
                      "memory_bytes": 300 << 20}, {"name": "d", "dtype": "float32", "quantization": "int8",
                                                   "device": "cpu", "memory_bytes": 5 << 20})
    assert "NF4 4-bit (bitsandbytes) · float32 compute · cpu" in panel.target_label.text()
    assert "memory 300.0 MB" in panel.target_label.text()
    assert "int8 (bitsandbytes) · float32 compute · cpu" in panel.draft_label.text()


def test_closing_the_window_with_the_dialog_open_ends_its_threads(qtbot, env, tmp_path):
    from app.main_window import MainWindow
    from app.theme import Theme
    from app_fixtures import tiny_factory

    win = MainWindow(tmp_path / "d", Theme(False), LoadRequest(factory=tiny_factory()))
    qtbot.addWidget(win)
    win.models.load_dialog()
    dlg = win.models.dialog
    threads = (dlg.inspect_thread, dlg.downloads.thread)
    assert all(t.isRunning() for t in threads)
    win.close()
    assert win.shutdown_ok and not any(t.isRunning() for t in threads)
