#!/usr/bin/env python
"""Pictures of the Models dialog (and of the window after it loaded an NF4 target), for review.

    xvfb-run -a -s "-screen 0 1400x900x24" python scripts/screenshot_models.py OUT_DIR [--nf4-target DIR]

Scenes, each saved as OUT_DIR/models-<scene>.png:
  pair       the embedded target picked: its drafts checked from their files (the embedded draft
             fits; tiny test models greyed: smaller vocabulary), presets with what they need here
  drafts     a tiny test target: one draft fits, others greyed with the first differing token id
             and an eos mismatch
  download   a hub download in flight from a stand-in hub on 127.0.0.1 (tests/hub_server.py,
             throttled), with bytes, speed, time left and Cancel
  too-big    the dialog for a pair that will not fit: the gpu-14b preset on a machine with 12 GiB
             of 16 GiB free (those two figures are simulated: this machine has more)
  nf4        (with --nf4-target DIR, an HF-format folder) the main window after loading that
             folder as an NF4 target on CPU through the dialog, one answer in standard mode and
             one in speculative mode (prompt lookup)

The embedded pair must be assembled in the user cache (it is after a first start). The HF cache
and recent list are temporary folders; nothing is downloaded from the internet.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def wait(app, cond, timeout=600.0):
    end = time.monotonic() + timeout
    while not cond():
        app.processEvents()
        if time.monotonic() > end:
            raise TimeoutError("scene did not settle")
        time.sleep(0.02)
    for _ in range(20):
        app.processEvents()
        time.sleep(0.01)


def shot(app, widget, path: Path, whole_screen: bool = False) -> None:
    for _ in range(10):
        app.processEvents()
        time.sleep(0.02)
    pix = app.primaryScreen().grabWindow(0) if whole_screen else widget.grab()
    pix.save(str(path))
    print(f"saved {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--nf4-target", type=Path, default=None)
    ap.add_argument("--scenes", default="pair,drafts,download,too-big,nf4")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    scenes = set(args.scenes.split(","))

    tmp = Path(tempfile.mkdtemp(prefix="specdec-shots-"))
    os.environ["HF_HOME"] = str(tmp / "hf")
    os.environ["SPECDEC_DATA_DIR"] = str(tmp / "data")
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    from PySide6.QtWidgets import QApplication

    from app.models_dialog import ModelsDialog
    from app.theme import apply_theme
    from app.worker import LoadRequest
    from hub_server import HubServer, tiny_repo_files
    from specdec_core.models import memory, recent
    from tiny_models import WORDS, make_model, make_tokenizer, save_model

    app = QApplication.instance() or QApplication(["specdec-chat"])
    apply_theme(app, "light")
    recent_file = tmp / "data" / recent.FILE_NAME

    def tiny(name, words=None, eos=(2, 0), **kw):
        tok = make_tokenizer(words)
        return save_model(tmp / name, make_model(len(tok), seed=0, eos_token_id=list(eos), **kw), tok)

    other = list(WORDS)
    other[other.index("mat")] = "rat"
    t_target = tiny("tiny-target")
    for p in (t_target, tiny("tiny-draft", hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32),
              tiny("tiny-other-words", other), tiny("tiny-other-eos", eos=(2,))):
        recent.remember(str(p), file=recent_file)

    def dialog(current=None):
        dlg = ModelsDialog(current or LoadRequest(), recent_file)
        dlg.resize(1240, 700)
        ready = []
        dlg.scan_ready.connect(lambda: ready.append(1))
        dlg.show()
        wait(app, lambda: ready)
        return dlg

    def drafts_done(dlg):
        return lambda: dlg.draft_items() and all(s != "checking" for _, s, *_ in dlg.draft_items()) \
            and dlg.estimate is not None

    if "pair" in scenes:
        dlg = dialog()
        wait(app, drafts_done(dlg))
        shot(app, dlg, args.out / "models-pair.png")
        dlg.close()

    if "drafts" in scenes:
        dlg = dialog()
        dlg.select_target(f"model:{t_target.resolve()}")
        wait(app, drafts_done(dlg))
        shot(app, dlg, args.out / "models-drafts.png")
        dlg.close()

    if "download" in scenes:
        import huggingface_hub.constants as hf_constants

        from specdec_core.models import download

        tok = make_tokenizer()
        files = tiny_repo_files(save_model(tmp / "served", make_model(len(tok), seed=0, hidden=256, intermediate=1024,
                                                                      layers=4), tok))
        with HubServer({"specdec-demo/tiny-qwen2": files}, rate=400_000) as hub:
            hf_constants.ENDPOINT = hub.endpoint
            hf_constants.HUGGINGFACE_CO_URL_TEMPLATE = hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
            hf_constants.HF_HUB_OFFLINE = False
            download.CHUNK_BYTES = 32 << 10
            dlg = dialog()
            dlg.downloads.hub_edit.setText("specdec-demo/tiny-qwen2")
            dlg.downloads.download_button.click()
            wait(app, lambda: "left" in dlg.downloads.dl_detail.text() and dlg.downloads.dl_bar.value() > 350)
            shot(app, dlg, args.out / "models-download.png")
            dlg.downloads.cancel_download()
            hub.release.set()
            dlg.close()

    if "too-big" in scenes:
        real_probe = memory.probe
        memory.probe = lambda gpu=True: memory.Machine(ram_total=16 << 30, ram_available=12 << 30)
        dlg = dialog()
        dlg.select_target("preset:gpu-14b")
        wait(app, drafts_done(dlg))
        dlg.load_button.click()
        wait(app, lambda: dlg.warning_box is not None and dlg.warning_box.isVisible())
        shot(app, dlg, args.out / "models-too-big.png", whole_screen=bool(os.environ.get("DISPLAY")))
        dlg.warning_box.close()
        dlg.close()
        memory.probe = real_probe

    if "nf4" in scenes and args.nf4_target:
        from app.main_window import MainWindow
        from app.theme import Theme

        recent.remember(str(args.nf4_target), file=recent_file)
        win = MainWindow(tmp / "data", Theme(False), LoadRequest(factory=__import__("app_fixtures").tiny_factory()))
        win.resize(1360, 860)
        win.show()
        ready = []
        win.models_ready.connect(lambda: ready.append(1))
        win.models.start_loading()
        wait(app, lambda: ready)
        win.models.load_dialog()
        dlg = win.models.dialog
        scanned = []
        dlg.scan_ready.connect(lambda: scanned.append(1))
        wait(app, lambda: scanned)
        dlg.select_target(f"model:{args.nf4_target.resolve()}")
        wait(app, drafts_done(dlg))
        dlg.draft_list.setCurrentRow(0)  # target only: prompt lookup in speculative mode
        dlg.quant.setCurrentIndex(dlg.quant.findData("nf4"))
        wait(app, lambda: dlg.estimate is not None)
        shot(app, dlg, args.out / "models-nf4-choice.png")
        ready.clear()
        dlg.load_button.click()
        wait(app, lambda: ready, timeout=1800)
        win.side_panel.max_new.setValue(40)
        for mode, prompt in (("standard", "Write a Python function that reverses a string."),
                             ("speculative", "Now write it again, with a docstring.")):
            win.side_panel.set_mode(mode)
            done = []
            win.message_done.connect(lambda _r, d=done: d.append(1))
            win.generation.send(prompt)
            wait(app, lambda d=done: d, timeout=1800)
        shot(app, win, args.out / "models-nf4-window.png")
        win.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
