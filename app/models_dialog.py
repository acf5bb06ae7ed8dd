"""The Models dialog: pick a target and a draft the way a desktop app lets you pick models.

Left, the targets: the presets with what each needs against this machine's RAM / VRAM, and the
models on this computer (the embedded pair, the app's cache, the Hugging Face cache, recently
opened files and folders) with format, quantization and size; "Open .gguf file…", "Open folder…",
and a hub id to download, with bytes, speed, time left and Cancel (a cancelled download resumes).
Right, the drafts for the chosen target: the ones that fit first, each one that does not greyed
with the reason (the first differing token id and both strings, an eos mismatch, a smaller
vocabulary), checked from the files before anything loads; target only (prompt lookup) is always
there. Below, the target's quantization and the device, and the pair's memory need against what
is free. Load checks that need first: a pair that will not fit gets a dialog with the numbers and
a smaller preset instead of an out-of-memory crash.

The target list (app/model_targets.py), the draft list (app/model_drafts.py) and the hub
download part (app/download_panel.py) are widgets of their own; this module chooses, checks and
loads. Everything slow runs in app/models_worker.py's threads; this module never imports torch.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSplitter,
    QVBoxLayout,
)

from .download_panel import DownloadPanel
from .model_drafts import NO_DRAFT, DraftList, draft_candidates
from .model_targets import KEY, TargetTree, gib_text
from .models_worker import (
    DraftsJob,
    EstimateJob,
    InspectWorker,
    start_in_thread,
    stop_thread,
)
from .worker import LoadRequest

QUANTS = (("Automatic (NF4 on a GPU, none on CPU)", None), ("None (full precision)", "none"),
          ("NF4 4-bit (bitsandbytes)", "nf4"), ("int8 (bitsandbytes)", "int8"))


class ModelsDialog(QDialog):
    """Choose a target and a draft. `request()` is the LoadRequest to load after Accepted."""

    drafts_checked = Signal()  # every candidate of the current target has an answer (tests)
    estimate_ready = Signal()
    scan_ready = Signal()
    download_finished = Signal(str)  # "done" | "failed" | "cancelled" (tests)

    def __init__(self, current: LoadRequest | None = None, recent_file: Path | None = None,
                 freeable_bytes: int = 0, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.current = current or LoadRequest()
        self.recent_file = recent_file
        self.freeable = freeable_bytes
        self.machine: dict = {}
        self.presets: list[dict] = []
        self.local: list[dict] = []
        self.targets: dict[str, dict] = {}  # key -> {"spec", "name", "kind", ...}
        self.drafts: dict[str, dict] = {}  # key -> {"spec", "role", "name", "status", "reason", ...}
        self.estimate: dict | None = None
        self.warning_box: QMessageBox | None = None
        self._job = 0
        self._drafts_job: DraftsJob | None = None
        self._select_after_scan: str | None = None
        self._wanted_draft: str | None = None
        self._estimate_id = 0
        self._estimated_for: tuple | None = None
        self._first_scan = True
        self._closed = False
        self._server_request: LoadRequest | None = None  # "Server…": a server instead of a model

        self.inspector = InspectWorker()
        self.inspect_thread = start_in_thread(self.inspector, "specdec-models-inspect", self)
        self.inspector.scanned.connect(self._on_scanned)
        self.inspector.described.connect(self._on_described)
        self.inspector.draft_checked.connect(self._on_draft_checked)
        self.inspector.drafts_done.connect(self._on_drafts_done)
        self.inspector.target_unreadable.connect(self._on_target_unreadable)
        self.inspector.estimated.connect(self._on_estimated)
        self.inspector.failed.connect(lambda msg: self._set_status(msg, error=True))

        self._build()
        self.resize(1240, 700)
        self.rescan()

    # -- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        outer = QVBoxLayout(self)
        self.machine_label = QLabel("This machine: measuring…")
        self.machine_label.setObjectName("Muted")
        outer.addWidget(self.machine_label)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        outer.addWidget(split, 1)
        split.addWidget(self._targets_box())
        split.addWidget(self._drafts_box())
        split.setSizes([760, 480])
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.load_button = self.buttons.addButton("Load", QDialogButtonBox.ButtonRole.AcceptRole)
        self.load_button.setDefault(True)
        self.load_button.setEnabled(False)
        self.buttons.accepted.connect(self.try_load)
        self.buttons.rejected.connect(self.reject)
        outer.addWidget(self.buttons)

    def _targets_box(self) -> QGroupBox:
        """Left: the target list, the ways to add one (a file, a folder, a server, the hub), the status."""
        box = QGroupBox("Target")
        lay = QVBoxLayout(box)
        self.tree = TargetTree()
        self.tree.currentItemChanged.connect(lambda *_: self._on_target_changed())
        lay.addWidget(self.tree, 1)
        row = QHBoxLayout()
        self.open_file_button = self._button("Open .gguf file…", self._open_file)
        self.open_folder_button = self._button("Open folder…", self._open_folder)
        self.server_button = self._button("Server…", self._ask_server,
                                          "a llama-server or vLLM server as the target: it decodes with its own draft")
        self.rescan_button = self._button("Refresh", self.rescan, "look again at the caches and recent files")
        for b in (self.open_file_button, self.open_folder_button, self.server_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.rescan_button)
        lay.addLayout(row)
        self.downloads = DownloadPanel(self)
        self.downloads.finished.connect(self._on_download_finished)
        lay.addWidget(self.downloads)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        return box

    @staticmethod
    def _button(text: str, slot, tip: str = "") -> QPushButton:
        b = QPushButton(text)
        if tip:
            b.setToolTip(tip)
        b.clicked.connect(slot)
        return b

    def _drafts_box(self) -> QGroupBox:
        """Right: the drafts for the chosen target, the target's quantization and the device, and
        the pair's memory need."""
        box = QGroupBox("Draft")
        lay = QVBoxLayout(box)
        self.drafts_title = QLabel("Pick a target to see which drafts fit it.")
        self.drafts_title.setWordWrap(True)
        lay.addWidget(self.drafts_title)
        self.draft_list = DraftList()
        self.draft_list.currentItemChanged.connect(self._on_draft_selected)
        lay.addWidget(self.draft_list, 1)
        form = QFormLayout()
        self.quant = QComboBox()
        for label, value in QUANTS:
            self.quant.addItem(label, value)
        self.quant.setToolTip("bitsandbytes quantization of a safetensors target (a GGUF keeps its own). "
                              "On CPU it runs through bitsandbytes' CPU backend: it works, but slowly.")
        self.quant.currentIndexChanged.connect(lambda *_: self._on_options_changed())
        self.device = QComboBox()
        self.device.addItem("Automatic", "auto")
        self.device.addItem("CPU", "cpu")
        self.device.currentIndexChanged.connect(lambda *_: self._request_estimate())
        form.addRow("Target quantization", self.quant)
        form.addRow("Device", self.device)
        lay.addLayout(form)
        self.memory_label = QLabel("")
        self.memory_label.setWordWrap(True)
        self.memory_label.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(self.memory_label)
        return box

    # -- scanning -------------------------------------------------------------------------
    def rescan(self) -> None:
        if self._closed:
            return
        self.machine_label.setText(self.machine_label.text() if self.machine else "This machine: measuring…")
        self.rescan_button.setEnabled(False)
        self.inspector.request_scan(self.recent_file)

    def _on_scanned(self, result: dict) -> None:
        self.machine = result["machine"]
        self.presets = result["presets"]
        self.local = result["local"]
        self.machine_label.setText(f"This machine: {self.machine['summary']}")
        if self.machine.get("gpus") and self.device.findData("cuda") < 0:
            self.device.addItem("CUDA GPU", "cuda")
        self.rescan_button.setEnabled(True)
        self.downloads.set_partials(result.get("partial") or [])
        keep = self._select_after_scan or self.selected_target_key()
        if self._first_scan:
            keep = keep or self._key_for_spec(self.current.target, "target")
        self._fill_targets(keep)
        self._first_scan = False
        self._select_after_scan = None
        self.scan_ready.emit()

    def _on_described(self, m: dict) -> None:
        self.local = [x for x in self.local if x.get("path") != m.get("path")] + [m]
        key = f"model:{m['spec']}"
        self._fill_targets(self.selected_target_key() if m.get("error") else key)  # a broken file: listed, greyed
        if m.get("error"):
            self._set_status(f"{m['path']}: {m['error']}", error=True)
        else:
            self._set_status("")

    def _key_for_spec(self, spec: str | None, role: str) -> str | None:
        if not spec:
            return None
        if spec == "default":
            return f"model:default:{role}"
        for p in self.presets:
            if role == "target" and p["target"] == spec:
                return f"preset:{p['name']}"
        try:
            resolved = str(Path(spec).expanduser().resolve()) if Path(spec).expanduser().exists() else spec
        except OSError:
            resolved = spec
        return f"model:{resolved}"

    def _free(self, device: str) -> int:
        if device.startswith("cuda"):
            return sum(g["free"] for g in self.machine.get("gpus", [])) + self.freeable
        return self.machine.get("ram_available", 0) + self.freeable

    def _fill_targets(self, select_key: str | None) -> None:
        self.targets = self.tree.fill(self.presets, self.local, self.machine, self._free, self.palette())
        if select_key and select_key in self.targets:
            self.select_target(select_key)
        elif self.selected_target_key() is None:
            self._on_target_changed()

    # -- choosing -------------------------------------------------------------------------
    def select_target(self, key: str) -> None:
        item = self.tree.item_for(key)
        if item is not None and item.flags() & Qt.ItemFlag.ItemIsEnabled:
            self.tree.setCurrentItem(item)

    def selected_target_key(self) -> str | None:
        key = self.tree.current_key()
        return key if key in self.targets else None

    def selected_target(self) -> dict | None:
        key = self.selected_target_key()
        return self.targets.get(key) if key else None

    def _on_target_changed(self) -> None:
        t = self.selected_target()
        if self._drafts_job is not None:
            self._drafts_job.cancel.set()
        self.drafts = {}
        if t is None or not t.get("spec"):
            self.drafts_title.setText("Pick a target to see which drafts fit it.")
            self._fill_drafts(None)
            self._update_load()
            return
        safetensors = t["format"] == "safetensors"
        self.quant.blockSignals(True)
        self.quant.setEnabled(safetensors)
        wanted = t["preset"]["target_quantization"] if t["kind"] == "preset" else None
        self.quant.setCurrentIndex(max(0, self.quant.findData(wanted)) if safetensors else 0)
        self.quant.blockSignals(False)
        if t["kind"] == "preset" and t["preset"]["device"] == "cuda" and self.device.findData("cuda") >= 0:
            self.device.setCurrentIndex(self.device.findData("cuda"))
        self.drafts_title.setText(f"Drafts for <b>{html.escape(t['name'])}</b>: checked from their files "
                                  "(same token ids, same end-of-generation ids) before anything loads.")
        cands = draft_candidates(t, self.local, self._key_for_spec)
        self.drafts = cands
        self._fill_drafts(self._preferred_draft(t))
        self._job += 1
        target_role = "target"
        to_check = {k: (c["spec"], c["role"]) for k, c in cands.items() if c["status"] == "checking"}
        self._drafts_job = DraftsJob(self._job, (t["spec"], target_role), to_check)
        if to_check and not self._closed:
            self.inspector.request_drafts(self._drafts_job)
        else:
            self.drafts_checked.emit()
        self._request_estimate()

    def _preferred_draft(self, t: dict) -> str | None:
        if t["kind"] == "preset":
            d = t["preset"]["draft"]
            return "model:default:draft" if d == "default" else self._key_for_spec(d, "draft")
        if self._first_choice_pending():
            if self.current.draft is None:
                return NO_DRAFT
            return self._key_for_spec(self.current.draft, "draft")
        keep = self._wanted_draft  # the same draft for the next target, when it is listed there
        return keep if keep in self.drafts or keep == NO_DRAFT else None

    def _first_choice_pending(self) -> bool:
        key = self.selected_target_key()
        return key is not None and key == self._key_for_spec(self.current.target, "target")

    def _on_draft_checked(self, job_id: int, key: str, status: str, reason: str) -> None:
        if job_id != self._job or key not in self.drafts:
            return
        self.drafts[key].update(status=status, reason=reason)
        self._fill_drafts()

    def _on_target_unreadable(self, job_id: int, reason: str) -> None:
        """No draft can be compared with a target whose tokenizer is not here (a hub model not
        downloaded, offline): say so once, and leave the candidates selectable but unchecked."""
        if job_id != self._job:
            return
        t = self.selected_target()
        name = html.escape(t["name"]) if t else "this target"
        self.drafts_title.setText(f"Drafts for <b>{name}</b> cannot be checked yet: {html.escape(reason)}")
        for c in self.drafts.values():
            if c["status"] == "checking":
                c.update(status="unknown", reason="the target's tokenizer is not here yet (loading checks the pair)")
        self._fill_drafts()

    def _on_drafts_done(self, job_id: int) -> None:
        if job_id == self._job:
            self.drafts_checked.emit()

    def _on_draft_selected(self, item, previous=None) -> None:
        """The user picked a draft: that stays the choice while other checks come in. One that
        does not fit (greyed) cannot be the choice, however it was reached."""
        if item is not None and not item.flags() & Qt.ItemFlag.ItemIsEnabled:
            self.draft_list.blockSignals(True)
            self.draft_list.setCurrentItem(previous if previous is not None else self.draft_list.item(0))
            self.draft_list.blockSignals(False)
            return
        self._wanted_draft = item.data(KEY) if item is not None else None
        self._request_estimate()

    def _fill_drafts(self, wanted: str | None = "keep") -> None:
        """List the drafts: target only first, then those that fit (smallest first), those being
        checked or not checkable, and last the ones that do not fit, greyed, with the reason.
        `wanted`: the draft to select (kept across refills until the user picks another); with
        none wanted, the smallest one that fits."""
        if wanted != "keep":
            self._wanted_draft = wanted
        self.draft_list.fill(self.drafts, self._wanted_draft)
        self._request_estimate()

    def selected_draft_key(self) -> str | None:
        return self.draft_list.current_key()

    def selected_draft_spec(self) -> str | None:
        key = self.selected_draft_key()
        if key in (None, NO_DRAFT) or key not in self.drafts:
            return None
        return self.drafts[key]["spec"]

    def draft_items(self) -> list[tuple[str, str, bool, str]]:
        """(key, status, enabled, text) of each listed draft, in order (tests, screenshots)."""
        return self.draft_list.rows(self.drafts)

    # -- memory ---------------------------------------------------------------------------
    def _on_options_changed(self) -> None:
        self._request_estimate()

    def _request_estimate(self) -> None:
        if self._closed:
            return
        t = self.selected_target()
        if t is None or not t.get("spec"):
            self.estimate, self._estimated_for = None, None
            self.memory_label.setText("")
            self._update_load()
            return
        what = (t["spec"], self.selected_draft_spec(), self.device.currentData(), self.quant.currentData())
        if what == self._estimated_for:
            return  # the same pair: the estimate shown (or on its way) stands
        self._estimated_for = what
        self.estimate = None
        self._update_load()
        self._estimate_id += 1
        self.memory_label.setText("Estimating memory…")
        self.inspector.request_estimate(EstimateJob(self._estimate_id, *what, self.freeable))

    def _on_estimated(self, job_id: int, result: dict) -> None:
        if job_id != self._estimate_id:
            return
        self.estimate = result
        pair = result.get("pair")
        if pair is None:
            self.memory_label.setText(f"Memory: could not estimate ({html.escape(result.get('error', '?'))})")
        elif pair["bytes"] is None:
            hows = [x["how"] for x in (pair["target"], pair["draft"]) if x and x["bytes"] is None]
            self.memory_label.setText(f"Memory: unknown ({html.escape('; '.join(hows))}); "
                                      f"{gib_text(result['free'])} of {pair['place']} free.")
        else:
            parts = f"target {gib_text(pair['target']['bytes'])}"
            if pair["draft"]:
                parts += f" + draft {gib_text(pair['draft']['bytes'])}"
            fits = result["too_big"] is None
            colour = "#1a7f37" if fits else "#c62828"
            verdict = "fits" if fits else "does not fit"
            self.memory_label.setText(
                f"Needs about <b>{gib_text(pair['bytes'])}</b> of {pair['place']} on {pair['device']} ({parts}); "
                f"{gib_text(result['free'])} free of {gib_text(result['total'])}: "
                f"<b style='color:{colour}'>{verdict}</b>.")
            self.memory_label.setToolTip("\n".join(x["how"] for x in (pair["target"], pair["draft"]) if x))
        self._update_load()
        self.estimate_ready.emit()

    def _update_load(self) -> None:
        t = self.selected_target()
        self.load_button.setEnabled(t is not None and bool(t.get("spec")) and self.estimate is not None)

    # -- loading --------------------------------------------------------------------------
    def _ask_server(self) -> None:
        from .server_target import ServerDialog

        current = self.current.target if str(self.current.target).startswith("http") else ""
        dlg = ServerDialog(current, self)
        if dlg.exec() == QDialog.DialogCode.Accepted and dlg.url.text().strip():
            self.use_server(dlg.url.text().strip(), dlg.key.text().strip() or None)

    def use_server(self, url: str, api_key: str | None = None) -> None:
        """Load the server at `url` as the target: no memory to check."""
        self._server_request = LoadRequest(url, None, api_key=api_key)
        self.accept()

    def request(self) -> LoadRequest:
        if self._server_request is not None:
            return self._server_request
        t = self.selected_target()
        r = self.current
        quant = self.quant.currentData() if t and t["format"] == "safetensors" else None
        return LoadRequest(t["spec"], self.selected_draft_spec(), self.device.currentData(), r.dtype, quant)

    def try_load(self) -> None:
        """Load, unless the estimate says it will not fit: then a dialog with the numbers."""
        if not self.load_button.isEnabled():
            return
        too_big = (self.estimate or {}).get("too_big")
        if not too_big:
            self.accept()
            return
        box = QMessageBox(QMessageBox.Icon.Warning, "Not enough memory", too_big, QMessageBox.StandardButton.NoButton, self)
        box.setInformativeText("Loading it anyway would likely end in an out-of-memory crash.")
        smaller = self.estimate.get("smaller")
        use = box.addButton(f"Use {smaller}", QMessageBox.ButtonRole.AcceptRole) if smaller else None
        anyway = box.addButton("Load anyway", QMessageBox.ButtonRole.DestructiveRole)
        back = box.addButton("Back", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(use or back)
        box.setWindowModality(Qt.WindowModality.WindowModal)

        def done(_result: int) -> None:
            clicked = box.clickedButton()
            if clicked is anyway:
                self.accept()
            elif use is not None and clicked is use:
                self.select_target(f"preset:{smaller}")

        box.finished.connect(done)
        box.open()
        self.warning_box = box

    # -- files and folders ----------------------------------------------------------------
    def _open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model", str(Path.home()),
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self.open_path(path)

    def _open_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a Hugging Face model folder (config.json + *.safetensors)",
                                                str(Path.home()))
        if path:
            self.open_path(path)

    def open_path(self, path: str) -> None:
        """Describe a .gguf file or a model folder, list it (and remember it) and pick it as target."""
        from specdec_core.models import recent  # plain JSON, no torch

        resolved = str(Path(path).expanduser().resolve())
        recent.remember(resolved, file=self.recent_file)
        self._set_status(f"Reading {resolved}…")
        if not self._closed:
            self.inspector.request_describe(resolved)

    def _on_download_finished(self, status: str, spec: str) -> None:
        """A finished download is listed and picked as the target; a stopped one is listed under
        the stopped downloads (both need a new look at the caches)."""
        if status == "done":
            from specdec_core.models import recent  # plain JSON, no torch

            recent.remember(spec, file=self.recent_file)
            self._select_after_scan = f"model:{spec}"
        if status in ("done", "cancelled"):
            self.rescan()
        self.download_finished.emit(status)

    # -- misc -----------------------------------------------------------------------------
    def _set_status(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet("color: #c62828;" if error else "")

    def shutdown(self) -> None:
        """Stop the workers: a running download is cancelled (its bytes stay for next time)."""
        if self._closed:
            return
        self._closed = True
        # answers still queued for this dialog are dropped: it asks nothing more of the workers
        for name in ("scanned", "described", "draft_checked", "drafts_done", "target_unreadable", "estimated",
                     "failed"):
            try:
                getattr(self.inspector, name).disconnect()
            except (RuntimeError, TypeError):
                pass
        if self._drafts_job is not None:
            self._drafts_job.cancel.set()
        self.downloads.shutdown()
        stop_thread(self.inspect_thread, 30000)

    def done(self, result: int) -> None:
        self.shutdown()
        super().done(result)
