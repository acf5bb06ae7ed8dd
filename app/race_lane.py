"""One lane of the race view: its title, its own clock, tok/s (end-to-end and decode), a token
progress bar and the coloured text (the chat's MessageWidget).

The lane shows the tokens it is given as they arrive and the engine's Stats of that lane, timed
by the lane's own clock (app/race_worker.py); it computes no figure itself. GUI thread only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QScrollArea, QVBoxLayout, QWidget

from specdec_core.events import Stats  # light: no torch

from . import figures
from .chat_view import MessageWidget
from .theme import Theme

if TYPE_CHECKING:  # the race's value, for the types only
    from specdec_core.race import LaneResult

EMPTY_LANE_HINT = {
    "standard": "Pick a preset above (or write a prompt) and press Start race: the target alone "
                "answers here, one token per step.",
    "speculative": "…and here the same target answers with a draft proposing tokens, coloured by "
                   "where each token came from.",
}

class LaneWidget(QFrame):
    """One lane: title, own clock, tok/s, a token progress bar, the coloured text."""

    def __init__(self, lane: str, theme: Theme, parent=None):
        super().__init__(parent)
        self.lane = lane
        self.theme = theme
        self.setObjectName("RaceLane")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 8, 10, 8)
        lay.setSpacing(4)
        head = QHBoxLayout()
        self.title = QLabel()
        self.title.setStyleSheet("font-weight: 600; font-size: 14px;")
        self.badge = QLabel("")
        head.addWidget(self.title)
        head.addStretch(1)
        head.addWidget(self.badge)
        lay.addLayout(head)
        figs = QHBoxLayout()
        self.clock_label = QLabel("0.00 s")
        self.clock_label.setObjectName("Metric")
        self.clock_label.setToolTip("this lane's own compute time")
        self.rate_label = QLabel(f"— {figures.END_TO_END_RATE}")
        self.rate_label.setObjectName("Metric")
        self.rate_label.setToolTip(f"{figures.END_TO_END_RATE_TIP}, by this lane's own clock")
        self.decode_label = QLabel("")
        self.decode_label.setObjectName("Muted")
        self.decode_label.setToolTip(f"{figures.DECODE_RATE_TIP}, by this lane's own clock")
        self.count_label = QLabel("0 tokens")
        self.count_label.setObjectName("Muted")
        figs.addWidget(self.clock_label)
        figs.addSpacing(16)
        figs.addWidget(self.rate_label)
        figs.addSpacing(8)
        figs.addWidget(self.decode_label)
        figs.addStretch(1)
        figs.addWidget(self.count_label)
        lay.addLayout(figs)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(6)
        lay.addWidget(self.bar)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        holder = QWidget()
        col = QVBoxLayout(holder)
        col.setContentsMargins(0, 0, 0, 0)
        self.message = MessageWidget("assistant", theme)
        self.message.role_label.hide()
        col.addWidget(self.message)
        col.addStretch(1)
        self.scroll.setWidget(holder)
        self.scroll.verticalScrollBar().rangeChanged.connect(lambda _lo, hi: self.scroll.verticalScrollBar().setValue(hi))
        lay.addWidget(self.scroll, 1)
        self.events: list = []
        self.clock = 0.0
        self.stats = Stats()  # the engine's Stats of this lane, timed by its own clock
        self.message.empty_hint = EMPTY_LANE_HINT[lane]
        self.reset("Standard decoding" if lane == "standard" else "Speculative decoding", 1)
        self.retheme()

    def retheme(self) -> None:
        v = self.theme.values
        self.setStyleSheet(f"#RaceLane {{ border: 1px solid {v['border']}; border-radius: 10px; "
                           f"background: {v['panel']}; }}")
        self.badge.setStyleSheet(f"color: {v['accent']}; font-weight: 600;")
        self.message.render()

    @property
    def tokens(self) -> int:
        return len(self.events)

    @property
    def tokens_per_second(self) -> float:
        """End-to-end tok/s by the lane's own clock, as the engine's Stats give it."""
        return self.stats.tokens_per_second

    def reset(self, title: str, max_new_tokens: int) -> None:
        self.title.setText(title)
        self.badge.setText("")
        self.events = []
        self.clock = 0.0
        self.stats = Stats()
        self.bar.setRange(0, max(1, max_new_tokens))
        self.bar.setValue(0)
        self.message.tokens = []
        self.message.text = ""
        self.message.error = None
        self.message.set_meta("")
        self.message.set_streaming(False)
        self._show_figures()

    def begin(self) -> None:
        self.message.set_streaming(True)

    def add(self, race_events: list, stats: Stats | None = None) -> None:
        evs = [r.event for r in race_events]
        self.events.extend(evs)
        self.clock = race_events[-1].clock
        if stats is not None:
            self.stats = stats
        self.message.append_events(evs)
        self.bar.setValue(min(self.bar.maximum(), self.tokens))
        self._show_figures()

    def finish(self, lane: LaneResult | None, note: str = "") -> None:
        """The lane's end: its final clock and Stats (None: the race failed or never started)."""
        if lane is not None and lane.seconds:
            self.clock = lane.seconds
        if lane is not None and lane.stats is not None:
            self.stats = lane.stats
        self.message.set_streaming(False)
        self._show_figures()
        self.message.set_meta(note)

    def _show_figures(self) -> None:
        self.clock_label.setText(f"{self.clock:.2f} s")
        self.rate_label.setText(f"{figures.rate(self.tokens_per_second)} {figures.END_TO_END_RATE}")
        decode = self.stats.decode_tokens_per_second
        self.decode_label.setText(f"{figures.rate(decode)} {figures.DECODE_RATE}" if decode else "")
        self.count_label.setText(f"{self.tokens} token{'s' if self.tokens != 1 else ''}")

    def set_colours(self, on: bool) -> None:
        self.message.set_colours(on)
