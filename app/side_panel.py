"""The side panel: live metrics of the message, the standard/speculative toggle, decoding and
sampling settings, and the loaded models. Reads settings, shows numbers; never runs anything.

Every number it shows is a field of the engine's Stats (running while a message streams, final
when it ends), written by app/figures.py; it computes none itself. With a server as the target
(`show_target`) the toggle shows what the server does, the draft length and proposer rows go
(the server's own settings), and each answer's figures carry what the server reported."""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from specdec_core.contract import ServerInfo  # light: no torch
from specdec_core.events import Stats  # light: no torch
from specdec_core.remote.generation import figure_notes
from specdec_core.settings import DEFAULT_DRAFT_TOKENS, PROPOSER_KINDS, DecodeSettings, SamplingParams, usable_proposer

from . import figures
from .answer_figures import AnswerFigures
from .metric_charts import Metric, PositionBars, SpeedChart
from .theme import Theme


MODE_TIP = "Standard ↔ speculative: takes effect from the next message, no reload"
# what the toggle says while a server decodes (short enough for the panel at its narrowest; the
# tooltip says the rest)
SERVER_MODE_TEXT = {
    "speculative": "⚡ Speculative, by the server",
    "standard": "Standard, by the server",
    "server": "Decoding by the server",
}


def human_bytes(n: int | float | None) -> str:
    if not n:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


MIN_WIDTH = 300  # px: the panel's width before anything in it asks for more


class SidePanel(QScrollArea):
    settings_changed = Signal()

    def __init__(self, theme: Theme, parent=None):
        super().__init__(parent)
        self.theme = theme
        self.setObjectName("SidePanelScroll")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget()
        body.setObjectName("SidePanel")
        col = QVBoxLayout(body)
        col.setContentsMargins(10, 4, 10, 10)
        col.setSpacing(4)
        col.addWidget(self._message_box())
        col.addWidget(self._decoding_box())
        col.addWidget(self._sampling_box())
        col.addWidget(self._models_box())
        col.addStretch(1)
        self.setWidget(body)
        self._mode_toggled(True)
        self.has_draft = True

    # -- its width ------------------------------------------------------------------------
    def minimumSizeHint(self) -> QSize:
        """As wide as what it shows needs beside a vertical scroll bar: its figures and captions
        take more room under the theme's stylesheet and once an answer has filled them, and a
        fixed width cut them at the edge (300 px held 285 beside the bar, the figures needed 292)."""
        hint = super().minimumSizeHint()
        body = self.widget()
        if body is None:
            return hint
        width = body.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width() + 2 * self.frameWidth()
        return QSize(max(width, MIN_WIDTH), hint.height())

    def event(self, e) -> bool:
        # what it shows changed its size (a longer figure, a line more): the splitter asks again
        if e.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()
        return super().event(e)

    # -- the sections ---------------------------------------------------------------------
    def _message_box(self) -> QGroupBox:
        """This message: both rates, α, τ, the plain-step share and k, who proposed, the rate's
        curve, the per-position acceptance and a summary line."""
        live = QGroupBox("This message")
        grid = QGridLayout(live)
        grid.setHorizontalSpacing(12)
        self.m_speed = Metric(figures.DECODE_RATE, figures.DECODE_RATE_TIP)
        self.m_e2e = Metric(figures.END_TO_END_RATE, figures.END_TO_END_RATE_TIP)
        self.m_alpha = Metric("acceptance α", figures.ALPHA_TIP)
        self.m_tau = Metric("tokens / spec. step τ", figures.TAU_TIP)
        self.m_plain = Metric("plain steps", figures.PLAIN_TIP)
        self.m_k = Metric("draft length k", "draft length of the latest step (0: a plain step)")
        self.metrics = (self.m_speed, self.m_e2e, self.m_alpha, self.m_tau, self.m_plain, self.m_k)
        for i, m in enumerate(self.metrics):
            grid.addWidget(m, i // 2, i % 2)
        # which source proposed the steps (lookup, the draft model): the Stats' own per-source counts
        self.sources = _wrapping_label("Sources")
        self.sources.setToolTip(figures.SOURCES_TIP)
        grid.addWidget(self.sources, 3, 0, 1, 2)
        self.chart = SpeedChart(self.theme)
        grid.addWidget(self.chart, 4, 0, 1, 2)
        self.bars = PositionBars(self.theme)
        grid.addWidget(self.bars, 5, 0, 1, 2)
        self.summary = _wrapping_label("Muted")
        grid.addWidget(self.summary, 6, 0, 1, 2)
        return live

    def _decoding_box(self) -> QGroupBox:
        """The standard/speculative toggle, the proposer and the draft length (fixed or adaptive)."""
        dec = QGroupBox("Decoding")
        form = QFormLayout(dec)
        self.mode_button = QPushButton()
        self.mode_button.setObjectName("ModeToggle")
        self.mode_button.setCheckable(True)
        self.mode_button.setChecked(True)
        self.mode_button.setToolTip(MODE_TIP)
        self.mode_button.toggled.connect(self._mode_toggled)
        form.addRow(self.mode_button)
        self.proposer = proposer_box()
        form.addRow("Proposer", self.proposer)
        krow = QHBoxLayout()
        self.k_spin = QSpinBox()
        self.k_spin.setRange(1, 16)
        self.k_spin.setValue(4)
        self.k_spin.setToolTip("draft length k: tokens proposed per verification")
        self.adaptive = QCheckBox("adaptive")
        self.adaptive.setToolTip("let the controller choose k from measured acceptance and cost")
        self.adaptive.toggled.connect(lambda on: self.k_spin.setEnabled(not on))
        # on by default: measured faster than any fixed k on the built-in prompts (speed notes 16)
        self.adaptive.setChecked(DEFAULT_DRAFT_TOKENS == "adaptive")
        krow.addWidget(self.k_spin)
        krow.addWidget(self.adaptive)
        form.addRow("Draft length", krow)
        # the proposer and draft-length rows: the server's own settings while it is the target
        self._decoding, self._local_rows = form, (form.rowCount() - 2, form.rowCount() - 1)
        return dec

    def _sampling_box(self) -> QGroupBox:
        """Temperature, top-k, top-p, the seed and the answer's token budget (off by default)."""
        samp = QGroupBox("Sampling")
        sform = QFormLayout(samp)
        self.temperature = _spin(QDoubleSpinBox(), 0.0, 2.0, "0 = greedy", step=0.1, decimals=2)
        self.top_k = _spin(QSpinBox(), 0, 100000, off="off")
        self.top_p = _spin(QDoubleSpinBox(), 0.01, 1.0, "1 = off", step=0.05, value=1.0)
        self.seed = _spin(QSpinBox(), 0, 2**31 - 1,
                          "sampling seed: repeats a sampled answer exactly with a fixed draft length; "
                          "adaptive k follows measured speed, so a sample may differ (its distribution does not)")
        # off (0) by default: an answer runs until the model ends it, bounded by the context alone
        # (the meter under the input box shows how much is left); Continue takes a cut answer on
        self.max_new = _spin(QSpinBox(), 0, 131072,
                             "The most tokens one answer may take. Off: the answer runs until the model ends it "
                             "or the target's context is full; an answer cut short offers Continue.",
                             off="off", value=0)  # off: the context bounds the answer (the tooltip says)
        sform.addRow("Temperature", self.temperature)
        sform.addRow("Top-k", self.top_k)
        sform.addRow("Top-p", self.top_p)
        sform.addRow("Seed", self.seed)
        sform.addRow("Max new tokens", self.max_new)
        return samp

    def _models_box(self) -> QGroupBox:
        models = QGroupBox("Models")
        mlay = QVBoxLayout(models)
        self.target_label = QLabel("target: loading…")
        self.draft_label = QLabel("draft: loading…")
        for lab in (self.target_label, self.draft_label):
            lab.setWordWrap(True)
            lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            mlay.addWidget(lab)
        return models

    # -- settings -----------------------------------------------------------------------
    def _mode_toggled(self, speculative: bool) -> None:
        self.mode_button.setText("⚡ Speculative decoding" if speculative else "Standard decoding")
        self.proposer.setEnabled(speculative)
        self.k_spin.setEnabled(speculative and not self.adaptive.isChecked())
        self.adaptive.setEnabled(speculative)
        self.settings_changed.emit()

    def show_target(self, server: ServerInfo | None) -> None:
        """After a load: a server as the target (its mode fixed, its own drafting), or models here
        (None: every setting back)."""
        local = server is None
        tunable = local or server.can_toggle  # a `specdec serve` takes every setting with each request
        for row in self._local_rows:
            self._decoding.setRowVisible(row, tunable)
        self.mode_button.setEnabled(tunable)
        if tunable:
            self.mode_button.setToolTip(MODE_TIP)
            self._mode_toggled(self.mode_button.isChecked())
            if not local:
                self._show_server_models(server)
            return
        self.mode_button.blockSignals(True)  # no request can change what the server does
        self.mode_button.setChecked(server.mode != "standard")
        self.mode_button.blockSignals(False)
        self.mode_button.setText(SERVER_MODE_TEXT.get(server.mode, SERVER_MODE_TEXT["server"]))
        self.mode_button.setToolTip(server.race_note)
        for w in (self.proposer, self.k_spin, self.adaptive):
            w.setEnabled(False)
        self._show_server_models(server)

    def _show_server_models(self, server: ServerInfo) -> None:
        what = {"exact": "every token coloured by its kind, as the server's engine decided it",
                "per token": "every token coloured from the server's draft counters",
                "none": "the server reports no origin per token: its tokens are <i>server</i>"}
        self.target_label.setToolTip(server.model)  # llama-server names a model by its file path
        self.target_label.setText(
            f"<b>Target</b>: {html.escape(server.model.replace(chr(92), '/').rsplit('/', 1)[-1])}<br>"
            f"{html.escape(server.engine)} server at {html.escape(server.url)}<br>{what.get(server.colours, '')}")
        if server.speculative:
            how = f" ({html.escape(server.proposer)})" if server.proposer else ""
            self.draft_label.setText(f"<b>Draft</b>: the server's own{how}")
        elif server.speculative is False:
            self.draft_label.setText("<b>Draft</b>: none on the server (standard decoding)")
        else:
            self.draft_label.setText("<b>Draft</b>: the server does not say")

    @property
    def mode(self) -> str:
        return "speculative" if self.mode_button.isChecked() else "standard"

    def set_mode(self, mode: str) -> None:
        self.mode_button.setChecked(mode == "speculative")

    def settings(self) -> DecodeSettings:
        """The next message's settings (a proposer that needs a draft falls back when none is loaded)."""
        return DecodeSettings(
            max_new_tokens=self.max_new.value() or None,  # 0 is "off"
            sampling=SamplingParams(self.temperature.value(), self.top_k.value(), self.top_p.value()),
            draft_tokens="adaptive" if self.adaptive.isChecked() else self.k_spin.value(),
            seed=self.seed.value(),
            mode=self.mode,
            proposer=usable_proposer(self.proposer.currentData(), self.has_draft),
        )

    # -- models ---------------------------------------------------------------------------
    def set_models(self, target: dict | None, draft: dict | None) -> None:
        self.target_label.setText(_model_html("Target", target))
        self.draft_label.setText(_model_html("Draft", draft) if draft else "<b>Draft</b>: none (prompt lookup only)")
        self.has_draft = draft is not None
        offer_proposers(self.proposer, self.has_draft)

    def set_models_text(self, text: str) -> None:
        self.target_label.setText(text)
        self.draft_label.setText("")

    # -- metrics --------------------------------------------------------------------------
    def reset_metrics(self, mode: str) -> None:
        for m in self.metrics:
            m.set("—")
        self.chart.set_points([])
        self.bars.set_values([])
        self.sources.setText("")
        self.sources.setVisible(False)
        self.summary.setText("generating…" if mode else "")

    def show_stats(self, fig: AnswerFigures) -> None:
        """An answer's figures (running or final, same meanings): both rates labelled, α and τ
        over the speculative steps, the plain-step share beside them, its decode rate's curve."""
        stats = fig.stats
        self.m_speed.set(figures.rate(stats.decode_tokens_per_second))
        self.m_e2e.set(figures.rate(stats.tokens_per_second))
        self.m_alpha.set(figures.alpha(stats))
        self.m_tau.set(figures.tau(stats))
        counted = stats.target_forward_passes and fig.steps_counted
        self.m_plain.set(figures.share(stats.plain_step_share) if counted else "—")
        self.m_k.set(figures.draft_length(stats))
        self.m_k.caption.setText("draft length k" + (" (adaptive)" if fig.draft_setting == "adaptive" else ""))
        lines = figures.sources(stats)
        self.sources.setText("<span style='color:gray'>proposed by</span><br>" + "<br>".join(lines) if lines else "")
        self.sources.setVisible(bool(lines))
        self.bars.set_values(stats.per_position_acceptance if figures.speculative(stats) else [])
        self.chart.set_points(fig.series)
        self.summary.setText(" · ".join(_summary_bits(stats)))

    def show_server_figures(self, fig: AnswerFigures) -> None:
        """After an answer from a server: what the server itself reported about it (its own
        tok/s, proposed and accepted, where the figures came from), below the message's numbers."""
        server = fig.server
        if not server:
            return
        self.m_k.caption.setText("k (the server's)")  # not the hidden adaptive setting
        bits = [f"{html.escape(server.get('engine', '?'))} server"]
        bits += [html.escape(note) for note in figure_notes(server, fig.stats.proposed_tokens,
                                                             fig.stats.accepted_tokens)]
        if server.get("error"):
            bits.append(f"<b>cut off</b>: {html.escape(server['error'])}")
        text = self.summary.text()
        self.summary.setText((text + "<br>" if text else "") + " · ".join(bits))


STOP_WORDS = {"eos": "end of answer", "max_new_tokens": "token limit", "context": "context full",
              "cancelled": "stopped", "error": "cut off", "cut": "cut off: the app ended while it was written"}


def _summary_bits(stats: Stats) -> list[str]:
    """The summary line under the figures: tokens, time, first token, steps, reuse, how it ended."""
    bits = [f"{stats.new_tokens} tokens", f"{stats.seconds:.2f} s"]
    if stats.prefill_seconds:
        bits.append(f"first token {stats.prefill_seconds * 1000:.0f} ms")
    if stats.target_forward_passes:
        bits.append(f"{stats.target_forward_passes} steps, {stats.plain_steps} plain")
    earlier = stats.reused_prompt_tokens - stats.prompt_read_ahead_tokens
    if earlier > 0:
        # a later turn's chat so far, or a new chat's template head (left by the chat before it)
        bits.append(f"{earlier} prompt tokens already cached")
    if stats.prompt_read_ahead_tokens:  # Engine.read_prompt: done while the user wrote, not in the time above
        bits.append(f"{stats.prompt_read_ahead_tokens} prompt tokens read while you wrote "
                    f"({stats.prompt_read_ahead_seconds:.2f} s, not in this answer's time)")
    if stats.idle_read_tokens:  # Engine.read_ahead and read_prompt: done while nothing ran, not in the time above
        n = stats.idle_read_tokens
        bits.append(f"draft read {n} token{'' if n == 1 else 's'} ahead while you read and wrote "
                    f"({stats.idle_read_seconds:.2f} s, not in this answer's time)")
    if figures.speculative(stats) and stats.proposer:
        bits.append(f"proposer {stats.proposer}")
    bits.append(STOP_WORDS.get(stats.stop_reason, stats.stop_reason) or "generating…")
    return bits


def _wrapping_label(name: str) -> QLabel:
    """A label whose lines wrap to the panel's width and never widen it past its edge."""
    label = QLabel("")
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    return label


def _spin(box, low, high, tip: str = "", step=None, decimals: int | None = None, off: str = "", value=None):
    """A number box of the panel: its range, step, decimals, the word shown for its lowest value
    (`off`), its start value and tooltip."""
    box.setRange(low, high)
    if step is not None:
        box.setSingleStep(step)
    if decimals is not None:
        box.setDecimals(decimals)
    if off:
        box.setSpecialValueText(off)
    if value is not None:
        box.setValue(value)
    if tip:
        box.setToolTip(tip)
    return box


def proposer_box(label=lambda kind: kind.label) -> QComboBox:
    """A menu of every proposer kind (settings.PROPOSER_KINDS), its data the kind's name. It may
    be narrower than its longest label (the side panel and the race row fit a 1366-pixel screen)."""
    box = QComboBox()
    box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    box.setMinimumContentsLength(12)
    for kind in PROPOSER_KINDS:
        box.addItem(label(kind), kind.name)
    return box


def offer_proposers(box: QComboBox, has_draft: bool) -> None:
    """Grey out the proposers that need a draft when none is loaded, and step off one of them."""
    for i, kind in enumerate(PROPOSER_KINDS):
        box.model().item(i).setEnabled(has_draft or not kind.needs_draft)
    box.setCurrentIndex(box.findData(usable_proposer(box.currentData(), has_draft)))


def _model_html(role: str, info: dict | None) -> str:
    if not info:
        return f"<b>{role}</b>: —"
    quant = info.get("quantization") or "none"
    # bitsandbytes weights: name the scheme; the dtype is then only what it computes in
    bnb = {"nf4": "NF4 4-bit (bitsandbytes)", "int8": "int8 (bitsandbytes)"}.get(quant)
    bits = [
        f"<b>{role}</b>: {info.get('name') or '?'}",
        (f"{bnb} · {info.get('dtype') or '?'} compute" if bnb else
         f"{info.get('dtype') or '?'} · quantization {quant}") + f" · {info.get('device') or '?'}",
        f"memory {human_bytes(info.get('memory_bytes'))}"
        + (f" · loaded in {info['load_seconds']:.1f} s" if info.get("load_seconds") else ""),
    ]
    if info.get("kernels"):
        bits.append(f"kernels {html.escape(info['kernels'])}")
    # the load notes: which kernels, what was requantized, why a fallback happened
    bits += [f"• {html.escape(n)}" for n in info.get("notes") or []]
    return "<br>".join(bits)
