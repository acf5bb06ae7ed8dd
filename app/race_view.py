"""The race view: standard decoding (left) against speculative decoding (right), live.

GUI thread only. It builds RaceRequests, hands them to a RaceWorker and renders the race events
it streams back: each lane (app/race_lane.py) shows its text with the token colours (the chat's
MessageWidget), its own clock and tok/s. The race runner always advances the lane whose clock is behind, so
showing each lane's tokens as they arrive, with its own clock value, renders both lanes "by
their own clock". At the end a summary says speedup, α, τ and whether the texts are identical.

`add_race_tab(window)` is the small hook the main window calls: it adds this view as a tab,
shares the chat worker's thread and loaded engine, and follows model loading.
"""

from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from specdec_core import assets
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from specdec_core.events import Stats  # light: no torch
from specdec_core.settings import DEFAULT_DRAFT_TOKENS, PROPOSER_KINDS, DecodeSettings, SamplingParams, usable_proposer

from . import figures
from .chat_view import Legend
from .race_lane import LaneWidget
from .race_worker import RaceRequest, start_race_worker
from .side_panel import offer_proposers, proposer_box
from .theme import Theme

if TYPE_CHECKING:  # the race's value, for the types only (the race itself runs in the worker's thread)
    from specdec_core.race import RaceResult

CLOCK_NOTE = ("Times are each lane's own compute time: the two lanes take turns, step by step, on one "
              "device, and each clock advances only while its own lane computes (warm-up excluded).")


def _proposer_label(name: str) -> str:
    """A proposer kind as the race names it ("draft model"), any other name as it is."""
    return next((kind.label.lower() for kind in PROPOSER_KINDS if kind.name == name), name)


def load_presets() -> list[dict]:
    """The race presets (assets/race_prompts.json); none when the file cannot be read."""
    try:
        return list(json.loads(assets.read_text("race_prompts.json"))["prompts"])
    except (OSError, ValueError, KeyError):
        return []


def summary_html(result: dict) -> str:
    """The end-of-race summary from RaceResult.to_dict() (plain dict; no engine types): the
    speed line, the engine's figures, and the race's one verdict sentence (the CLI's too)."""
    if result.get("cancelled"):
        return "<b>Race stopped.</b> The lanes show what each produced until then."
    std, spec = result["standard"], result["speculative"]
    speedup = result.get("speedup", 0.0)
    prop = _proposer_label(result.get("proposer", ""))
    if speedup >= 1:
        head = f"<b>Speculative ({html.escape(prop)}) is {speedup:.2f}× faster</b>"
    else:
        head = f"<b>Speculative ({html.escape(prop)}) is slower here: {speedup:.2f}×</b>"
    spec_stats = Stats.from_dict(spec.get("stats", {}))
    lines = [
        head + f" — standard {std['seconds']:.2f} s, {std['tokens_per_second']:.1f} {figures.END_TO_END_RATE} · "
        f"speculative {spec['seconds']:.2f} s, {spec['tokens_per_second']:.1f} {figures.END_TO_END_RATE} (own clocks).",
        f"Acceptance rate α {figures.alpha(spec_stats)} · τ {figures.tau(spec_stats)} tokens per speculative step · "
        f"plain steps {figures.share(spec_stats.plain_step_share)} · "
        f"{spec_stats.target_forward_passes} target passes for {spec['new_tokens']} tokens "
        f"(standard: {Stats.from_dict(std.get('stats', {})).target_forward_passes}).",
    ]
    verdict = result.get("verdict", "")
    mark = "✓ " if result.get("identical") else ("≠ " if verdict else "")
    lines.append(mark + html.escape(verdict))
    return "<br>".join(lines)


class RaceView(QWidget):
    race_done = Signal(object)  # the result dict (also for a stopped race)
    race_started = Signal()

    def __init__(self, theme: Theme | None = None, parent=None):
        super().__init__(parent)
        self.theme = theme or Theme(False)
        self.worker = None
        self.ready = False
        self.has_draft = False
        self.model_info: dict = {}
        self.presets = load_presets()
        self.active: RaceRequest | None = None
        self.result: dict | None = None
        self.waiting = False
        self._next_id = 0
        self._build()
        if self.presets:  # start from the first preset (a code answer): one click to a race
            self.preset_box.setCurrentIndex(1)
        self._update_buttons()

    # -- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        lay = QVBoxLayout(self)
        lay.setContentsMargins(14, 10, 14, 10)
        lay.setSpacing(6)
        lay.addLayout(self._choice_row())
        lay.addLayout(self._number_row())
        lay.addLayout(self._prompt_row())
        self.note = QLabel(CLOCK_NOTE)
        self.note.setObjectName("Muted")
        self.note.setWordWrap(True)
        lay.addWidget(self.note)
        self.legend = Legend(self.theme)
        self.legend.layout().setContentsMargins(0, 0, 0, 0)
        self.legend.toggled.connect(self.set_colours)
        lay.addWidget(self.legend)
        lanes = QHBoxLayout()
        lanes.setSpacing(10)
        self.lanes = {"standard": LaneWidget("standard", self.theme), "speculative": LaneWidget("speculative", self.theme)}
        lanes.addWidget(self.lanes["standard"], 1)
        lanes.addWidget(self.lanes["speculative"], 1)
        lay.addLayout(lanes, 1)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setMinimumHeight(60)
        self._style_summary()
        lay.addWidget(self.summary)
        lay.addLayout(self._export_row())

    def _choice_row(self) -> QHBoxLayout:
        """The preset prompt, the proposer and k."""
        row = QHBoxLayout()
        self.preset_box = QComboBox()
        self.preset_box.addItem("Preset prompts…")
        for p in self.presets:
            self.preset_box.addItem(p["name"])
        self.preset_box.currentIndexChanged.connect(self._preset_chosen)
        # narrower than the longest preset's name, so the row fits a 1366-pixel screen
        self.preset_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.preset_box.setMinimumContentsLength(14)
        row.addWidget(self.preset_box, 1)
        row.addWidget(QLabel("Proposer"))
        self.proposer_box = proposer_box(lambda kind: kind.label.lower())
        row.addWidget(self.proposer_box)
        row.addWidget(QLabel("k"))
        self.k_box = QComboBox()
        for k in range(1, 9):
            self.k_box.addItem(str(k), k)
        self.k_box.addItem("adaptive", "adaptive")
        self.k_box.setCurrentIndex(self.k_box.findData(DEFAULT_DRAFT_TOKENS))  # the chat's default
        row.addWidget(self.k_box)
        return row

    def _number_row(self) -> QHBoxLayout:
        """Max tokens, temperature and seed: a second row, so both fit a 1366-pixel screen beside
        the chat list and the side panel."""
        row = QHBoxLayout()
        row.addWidget(QLabel("Max tokens"))
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 4096)
        self.max_tokens.setValue(128)
        row.addWidget(self.max_tokens)
        row.addWidget(QLabel("T"))
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setToolTip("0 = greedy: both lanes must produce the same text")
        row.addWidget(self.temperature)
        row.addWidget(QLabel("Seed"))
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        row.addWidget(self.seed)
        row.addStretch(1)
        return row

    def _prompt_row(self) -> QHBoxLayout:
        """The prompt both lanes answer, with Start race and Stop beside it."""
        prow = QHBoxLayout()
        self.prompt = QPlainTextEdit()
        self.prompt.setObjectName("Composer")
        self.prompt.setPlaceholderText("The prompt both lanes answer (pick a preset or paste your own)…")
        self.prompt.setFixedHeight(64)
        self.prompt.textChanged.connect(self._update_buttons)
        prow.addWidget(self.prompt, 1)
        btns = QVBoxLayout()
        self.start_button = QPushButton("Start race")
        self.start_button.setObjectName("SendButton")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        btns.addWidget(self.start_button)
        btns.addWidget(self.stop_button)
        prow.addLayout(btns)
        return prow

    def _export_row(self) -> QHBoxLayout:
        """The status line and the two exports of a finished race."""
        erow = QHBoxLayout()
        self.status = QLabel("Load models to race.")
        self.status.setObjectName("Muted")
        erow.addWidget(self.status, 1)
        self.png_button = QPushButton("Export PNG…")
        self.png_button.clicked.connect(self.export_png_dialog)
        self.json_button = QPushButton("Export JSON…")
        self.json_button.clicked.connect(self.export_json_dialog)
        erow.addWidget(self.png_button)
        erow.addWidget(self.json_button)
        return erow

    def _style_summary(self) -> None:
        v = self.theme.values
        self.summary.setStyleSheet(f"QLabel {{ border: 1px solid {v['border']}; border-radius: 8px; "
                                   f"padding: 8px; background: {v['panel']}; }}")

    # -- wiring ---------------------------------------------------------------------------
    def attach(self, worker) -> None:
        """Listen to a RaceWorker (signals arrive queued, in the GUI thread)."""
        self.worker = worker
        worker.started.connect(self._on_started)
        worker.events.connect(self._on_events)
        worker.finished.connect(self._on_finished)
        worker.failed.connect(self._on_failed)

    def set_models(self, info: dict | None) -> None:
        """{"target": info, "draft": info | None} from the loader, or None when nothing is loaded."""
        self.model_info = dict(info or {})
        self.ready = info is not None
        self.has_draft = bool(info and info.get("draft"))
        offer_proposers(self.proposer_box, self.has_draft)
        t = (self.model_info.get("target") or {}).get("name")
        self.status.setText(f"Ready: {t}" if self.ready else "Load models to race.")
        server = self.model_info.get("server")
        if server is not None and not server.can_race:  # a server that no request can switch to standard
            self.ready = False
            self.status.setWordWrap(True)
            self.status.setText("This server cannot be raced: " + server.race_note)
        self._update_buttons()

    def models_failed(self, _message: str = "") -> None:
        self.set_models(None)

    def _preset_chosen(self, index: int) -> None:
        if index <= 0 or index > len(self.presets):
            return
        p = self.presets[index - 1]
        self.prompt.setPlainText(p["prompt"])
        if p.get("max_new_tokens"):
            self.max_tokens.setValue(int(p["max_new_tokens"]))

    # -- racing ---------------------------------------------------------------------------
    def settings(self) -> DecodeSettings:
        """The race's settings (a proposer that needs a draft falls back when none is loaded)."""
        return DecodeSettings(
            max_new_tokens=self.max_tokens.value(),
            sampling=SamplingParams(round(self.temperature.value(), 4)),
            draft_tokens=self.k_box.currentData(),
            seed=self.seed.value(),
            proposer=usable_proposer(self.proposer_box.currentData(), self.has_draft),
        )

    def start(self, text: str | None = None) -> bool:
        if not isinstance(text, str):
            text = self.prompt.toPlainText()
        text = text.strip()
        if not text or not self.ready or self.active is not None or self.worker is None:
            return False
        s = self.settings()
        self._next_id += 1
        req = RaceRequest(request_id=self._next_id, prompt=text, settings=s)
        self.active = req
        self.result = None
        self.waiting = True
        self.lanes["standard"].reset("Standard decoding", s.max_new_tokens)
        self.lanes["speculative"].reset(f"Speculative · {_proposer_label(s.proposer)}", s.max_new_tokens)
        self.summary.setText("")
        self.status.setText("Waiting for the device (warm-up, or a chat answer still running)…")
        self._update_buttons()
        self.worker.request_race(req)
        return True

    def stop(self) -> None:
        if self.active is None:
            return
        self.worker.stop(self.active.request_id)
        self.active.cancel.set()  # also when it has not started yet

    def shutdown(self) -> None:
        if self.active is not None and self.worker is not None:
            self.stop()

    def _is_current(self, request_id: int) -> bool:
        return self.active is not None and self.active.request_id == request_id

    def _on_started(self, request_id: int) -> None:
        if not self._is_current(request_id):
            return
        self.waiting = False
        for lane in self.lanes.values():
            lane.begin()
        self.status.setText("Racing…")
        self.race_started.emit()

    def _on_events(self, request_id: int, batch: list, stats: dict[str, Stats] | None = None) -> None:
        if not self._is_current(request_id) or self.active.cancel.is_set():
            return
        by_lane: dict[str, list] = {}
        for rev in batch:
            by_lane.setdefault(rev.lane, []).append(rev)
        for name, revs in by_lane.items():
            self.lanes[name].add(revs, (stats or {}).get(name))

    def _on_finished(self, request_id: int, race: RaceResult | None) -> None:
        if not self._is_current(request_id):
            return
        req = self.active
        self.active = None
        self.waiting = False
        cancelled = race is None or race.cancelled
        for name, lane in self.lanes.items():  # each lane's final figures, by its own clock
            lane.finish(getattr(race, name) if race is not None else None, "stopped" if cancelled else "")
        if not cancelled:
            winner = "speculative" if race.speedup > 1 else "standard"
            self.lanes[winner].badge.setText("▲ faster")
        # the race as the summary and the JSON export write it: RaceResult.to_dict(), prompt, models
        result = race.to_dict() if race is not None else {"cancelled": True}
        result["prompt"] = req.prompt
        result["models"] = self.model_info
        self.result = result
        self.summary.setText(summary_html(result))
        self.status.setText("Race stopped" if cancelled else "Race finished — export it below")
        self._update_buttons()
        self.race_done.emit(result)

    def _on_failed(self, request_id: int, message: str) -> None:
        if not self._is_current(request_id):
            return
        self.active = None
        self.waiting = False
        for lane in self.lanes.values():
            lane.finish(None, "failed")
        self.summary.setText(f"<b>The race failed:</b> {html.escape(message)}")
        self.status.setText("Race failed")
        self._update_buttons()
        self.race_done.emit({"error": message})

    def _update_buttons(self) -> None:
        busy = self.active is not None
        self.start_button.setEnabled(self.ready and not busy and bool(self.prompt.toPlainText().strip()))
        self.start_button.setText("Start race" if self.ready or self.model_info.get("server") else "Loading…")
        self.stop_button.setEnabled(busy)
        done = self.result is not None and not busy
        self.png_button.setEnabled(done)
        self.json_button.setEnabled(done)

    def retheme(self) -> None:
        """The theme switched: the lanes' frames and text take its colours."""
        self.legend.retheme()
        self._style_summary()
        for lane in self.lanes.values():
            lane.retheme()

    def set_colours(self, on: bool) -> None:
        for lane in self.lanes.values():
            lane.set_colours(on)

    # -- export ---------------------------------------------------------------------------
    def export_png(self, path: Path | str) -> Path:
        path = Path(path)
        if not self.grab().save(str(path), "PNG"):
            raise OSError(f"could not write {path}")
        return path

    def export_json(self, path: Path | str) -> Path:
        """The race's timings and texts: RaceResult.to_dict() plus prompt and models."""
        path = Path(path)
        data = dict(self.result or {})
        data["exported_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
        return path

    def export_png_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export race as PNG", "race.png", "PNG image (*.png)")
        if path:
            self.export_png(path)
            self.status.setText(f"Exported to {path}")

    def export_json_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export race timings as JSON", "race.json", "JSON (*.json)")
        if path:
            self.export_json(path)
            self.status.setText(f"Exported to {path}")


def add_race_tab(window) -> RaceView:
    """The main window's hook: a Race tab next to Chat, sharing the chat worker's thread (one
    device, so a race and a chat never compute at once) and its loaded engine."""
    view = RaceView(window.theme)
    worker, _thread = start_race_worker(lambda: window.worker.engine, window, thread=window.thread)
    view.race_worker = worker
    view.attach(worker)
    window.worker.loaded.connect(view.set_models)
    window.worker.load_failed.connect(view.models_failed)
    window.tabs.addTab(view, "Race")
    return view
