"""The Models dialog's hub downloads: a hub id field, a progress bar with bytes, speed and time
left, Cancel, and the downloads stopped part-way with Resume (specdec_core/models/download.py
keeps their bytes). The download runs in a DownloadWorker thread (app/models_worker.py); this
widget only shows what it reports. `finished(status, spec)` tells the dialog: "done" (the model is
in the Hugging Face cache), "cancelled" or "failed" (the one-line reason is shown here).
"""

from __future__ import annotations

import html

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QVBoxLayout, QWidget

from .models_worker import DownloadJob, DownloadWorker, start_in_thread, stop_thread


def size_text(n: int | float | None) -> str:
    """Decimal units, as download sizes and speeds are usually given: 15.8 MB, 400 KB/s."""
    if not n:
        return ""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "time left unknown"
    if seconds < 60:
        return f"{seconds:.0f} s left"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min left"
    return f"{seconds / 3600:.1f} h left"


def progress_text(p: dict) -> str:
    """'12.3 MB of 40.1 MB · 5.1 MB/s · 6 s left'."""
    speed = f"{size_text(p['speed'])}/s" if p.get("speed") else "measuring speed"
    return f"{size_text(p['done']) or '0 B'} of {size_text(p['total'])} · {speed} · {eta_text(p.get('eta'))}"


class DownloadPanel(QWidget):
    finished = Signal(str, str)  # "done" | "cancelled" | "failed", the SPEC

    def __init__(self, parent=None):
        super().__init__(parent)
        self._job: DownloadJob | None = None
        self._ids = 0
        self._closed = False
        self.downloader = DownloadWorker()
        self.thread = start_in_thread(self.downloader, "specdec-models-download", self)
        self.downloader.progress.connect(self._on_download_progress)
        self.downloader.done.connect(self._on_download_done)
        self.downloader.failed.connect(self._on_download_failed)
        self.downloader.cancelled.connect(self._on_download_cancelled)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        hub = QHBoxLayout()
        self.hub_edit = QLineEdit()
        self.hub_edit.setPlaceholderText("Hugging Face model: owner/name, or owner/name/file.gguf")
        self.hub_edit.returnPressed.connect(self.start_download)
        self.hub_edit.textChanged.connect(
            lambda t: self.download_button.setEnabled(bool(t.strip()) and self._job is None))
        self.download_button = QPushButton("Download")
        self.download_button.setEnabled(False)
        self.download_button.clicked.connect(self.start_download)
        hub.addWidget(self.hub_edit, 1)
        hub.addWidget(self.download_button)
        lay.addLayout(hub)
        self.partial_row = QWidget()
        prow = QHBoxLayout(self.partial_row)
        prow.setContentsMargins(0, 0, 0, 0)
        self.partial_label = QLabel("Stopped downloads:")
        self.partial_label.setObjectName("Muted")
        self.partial_combo = QComboBox()
        self.partial_combo.setToolTip("downloads stopped part-way: what arrived is kept")
        self.resume_button = QPushButton("Resume")
        self.resume_button.clicked.connect(self.resume_download)
        prow.addWidget(self.partial_label)
        prow.addWidget(self.partial_combo, 1)
        prow.addWidget(self.resume_button)
        self.partial_row.hide()
        lay.addWidget(self.partial_row)
        self.dl_panel = QWidget()
        dl = QVBoxLayout(self.dl_panel)
        dl.setContentsMargins(0, 0, 0, 0)
        dl.setSpacing(2)
        self.dl_title = QLabel("")
        dl_row = QHBoxLayout()
        self.dl_bar = QProgressBar()
        self.dl_bar.setRange(0, 1000)
        self.dl_bar.setTextVisible(True)
        self.dl_cancel = QPushButton("Cancel")
        self.dl_cancel.setToolTip("stop the download; what arrived is kept and the next Download resumes there")
        self.dl_cancel.clicked.connect(self.cancel_download)
        dl_row.addWidget(self.dl_bar, 1)
        dl_row.addWidget(self.dl_cancel)
        self.dl_detail = QLabel("")
        self.dl_detail.setObjectName("Muted")
        self.dl_detail.setWordWrap(True)
        dl.addWidget(self.dl_title)
        dl.addLayout(dl_row)
        dl.addWidget(self.dl_detail)
        self.dl_panel.hide()
        lay.addWidget(self.dl_panel)

    def start_download(self) -> None:
        from specdec_core.models.download import normalize_hub_id  # plain text handling, no torch

        spec = normalize_hub_id(self.hub_edit.text())
        if not spec or self._job is not None or self._closed:
            return
        self.hub_edit.setText(spec)
        self.partial_row.hide()
        self._ids += 1
        self._job = DownloadJob(self._ids, spec)
        self.download_button.setEnabled(False)
        self.dl_title.setText(f"Downloading <b>{html.escape(spec)}</b> into the Hugging Face cache")
        self.dl_bar.setValue(0)
        self.dl_bar.setRange(0, 0)  # busy until the file list is in
        self.dl_detail.setText("asking the hub for its files…")
        self.dl_detail.setStyleSheet("")
        self.dl_cancel.setEnabled(True)
        self.dl_panel.show()
        self.downloader.request_download(self._job)

    def set_partials(self, partials: list[dict]) -> None:
        """Stopped downloads, one line per model: Resume continues from the kept bytes."""
        by_spec: dict[str, int] = {}
        for p in partials:
            if p.get("spec"):
                by_spec[p["spec"]] = by_spec.get(p["spec"], 0) + p["bytes"]
        self.partial_combo.clear()
        for spec, kept in sorted(by_spec.items()):
            self.partial_combo.addItem(f"{spec}  ({size_text(kept) or '0 B'} kept)", spec)
        self.partial_row.setVisible(bool(by_spec) and self._job is None)

    def resume_download(self) -> None:
        spec = self.partial_combo.currentData()
        if spec:
            self.hub_edit.setText(spec)
            self.start_download()

    def cancel_download(self) -> None:
        self.downloader.cancel()
        self.dl_cancel.setEnabled(False)
        self.dl_detail.setText("stopping…")

    def _mine(self, job_id: int) -> bool:
        return self._job is not None and self._job.job_id == job_id

    def _on_download_progress(self, job_id: int, p: dict) -> None:
        if not self._mine(job_id):
            return
        self.dl_bar.setRange(0, 1000)
        self.dl_bar.setValue(int(p["fraction"] * 1000))
        self.dl_bar.setFormat(f"{p['fraction'] * 100:.0f}%")
        files = f" · file {min(p['files_done'] + 1, p['files_total'])} of {p['files_total']}: {p['file']}" \
            if p.get("file") and p["files_done"] < p["files_total"] else ""
        self.dl_detail.setText(progress_text(p) + files)

    def _download_ended(self) -> None:
        self._job = None
        self.dl_cancel.setEnabled(False)
        self.download_button.setEnabled(bool(self.hub_edit.text().strip()))

    def _on_download_done(self, job_id: int, spec: str, path: str) -> None:
        if not self._mine(job_id):
            return
        self._download_ended()
        self.dl_bar.setRange(0, 1000)
        self.dl_bar.setValue(1000)
        self.dl_bar.setFormat("100%")
        self.dl_detail.setText(f"done: {path}")
        self.finished.emit("done", spec)

    def _on_download_failed(self, job_id: int, spec: str, message: str) -> None:
        if not self._mine(job_id):
            return
        self._download_ended()
        self.dl_bar.setRange(0, 1000)
        self.dl_detail.setText(message)
        self.dl_detail.setStyleSheet("color: #c62828;")
        self.finished.emit("failed", spec)

    def _on_download_cancelled(self, job_id: int, spec: str, info: dict) -> None:
        if not self._mine(job_id):
            return
        self._download_ended()
        self.dl_bar.setRange(0, 1000)
        self.dl_detail.setText(f"cancelled: {size_text(info['kept']) or '0 B'} of {size_text(info['total'])} kept; "
                               "Download again to resume from there")
        self.finished.emit("cancelled", spec)  # the dialog lists it under the stopped downloads

    def shutdown(self) -> None:
        """Cancel a running download (its bytes stay for next time) and end the thread."""
        if self._closed:
            return
        self._closed = True
        for name in ("progress", "done", "failed", "cancelled"):
            try:
                getattr(self.downloader, name).disconnect()
            except (RuntimeError, TypeError):
                pass
        self.downloader.cancel()
        stop_thread(self.thread, 30000)
