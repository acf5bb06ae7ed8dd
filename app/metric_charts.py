"""The side panel's painted figures of one message: the decode rate's curve (SpeedChart), the
acceptance rate at each draft position (PositionBars), and one labelled number (Metric).

They draw what they are given (the engine's Stats, as app/figures.py words them) in the theme's
colours; they compute nothing. No torch.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from . import figures
from .theme import Theme


class SpeedChart(QWidget):
    """tokens/s over the message (x: seconds since the message started)."""

    def __init__(self, theme: Theme, parent=None):
        super().__init__(parent)
        self.theme = theme
        self.points: list[tuple[float, float]] = []
        self.empty_text = f"{figures.DECODE_RATE} appear here"  # said while there is no curve
        self.setMinimumHeight(90)
        self.setToolTip(f"{figures.DECODE_RATE} over the current message, as the engine reported it "
                        "after each batch of steps")

    def set_points(self, points: list[tuple[float, float]], empty_text: str | None = None) -> None:
        self.points = [tuple(p) for p in points]
        self.empty_text = empty_text or f"{figures.DECODE_RATE} appear here"
        self.update()

    def paintEvent(self, _e):
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = QRectF(self.rect()).adjusted(34, 6, -6, -16)
        muted = self.theme.color("muted")
        border = self.theme.color("border")
        p.setPen(QPen(border, 1))
        p.drawRect(r)
        font = p.font()
        font.setPointSizeF(max(font.pointSizeF() - 2, 6))
        p.setFont(font)
        if len(self.points) < 2:
            p.setPen(muted)
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, self.empty_text)
            return
        t0 = self.points[0][0]
        t1 = max(self.points[-1][0], t0 + 1e-6)
        ymax = max(v for _, v in self.points) * 1.15 or 1.0
        path = QPainterPath()
        for i, (t, v) in enumerate(self.points):
            x = r.left() + (t - t0) / (t1 - t0) * r.width()
            y = r.bottom() - v / ymax * r.height()
            path.moveTo(x, y) if i == 0 else path.lineTo(x, y)
        fill = QPainterPath(path)
        fill.lineTo(r.right(), r.bottom())
        fill.lineTo(r.left(), r.bottom())
        fill.closeSubpath()
        c = QColor(self.theme.color("chart"))
        c.setAlpha(50)
        p.fillPath(fill, c)
        p.setPen(QPen(self.theme.color("chart"), 2))
        p.drawPath(path)
        p.setPen(muted)
        p.drawText(QRectF(0, r.top() - 2, 32, 14), Qt.AlignmentFlag.AlignRight, f"{ymax:.0f}")
        p.drawText(QRectF(0, r.bottom() - 12, 32, 14), Qt.AlignmentFlag.AlignRight, "0")
        p.drawText(QRectF(r.left(), r.bottom() + 1, r.width(), 14), Qt.AlignmentFlag.AlignRight, f"{t1 - t0:.1f} s")


class PositionBars(QWidget):
    """Acceptance rate at each draft position (position 1 = the first proposed token)."""

    def __init__(self, theme: Theme, parent=None):
        super().__init__(parent)
        self.theme = theme
        self.values: list[float] = []
        self.setMinimumHeight(80)
        self.setToolTip("acceptance rate at each draft position: how often the i-th proposed token was kept")

    def set_values(self, values: list[float]) -> None:
        self.values = list(values)
        self.update()

    def paintEvent(self, _e):
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        r = QRectF(self.rect()).adjusted(6, 4, -6, -16)
        muted = self.theme.color("muted")
        font = p.font()
        font.setPointSizeF(max(font.pointSizeF() - 2, 6))
        p.setFont(font)
        if not self.values:
            p.setPen(muted)
            p.drawText(r, Qt.AlignmentFlag.AlignCenter, "per-position acceptance (speculative)")
            return
        n = len(self.values)
        gap = 4
        w = max((r.width() - gap * (n - 1)) / n, 2)
        track = QColor(self.theme.color("border"))
        fill = self.theme.kind_fg("accepted")
        for i, v in enumerate(self.values):
            x = r.left() + i * (w + gap)
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(track)
            p.drawRoundedRect(QRectF(x, r.top(), w, r.height()), 3, 3)
            h = max(0.0, min(1.0, v)) * r.height()
            p.setBrush(fill)
            p.drawRoundedRect(QRectF(x, r.bottom() - h, w, h), 3, 3)
            p.setPen(muted)
            p.drawText(QRectF(x, r.bottom() + 1, w, 14), Qt.AlignmentFlag.AlignCenter, str(i + 1))


class Metric(QWidget):
    def __init__(self, caption: str, tooltip: str, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.value = QLabel("—")
        self.value.setObjectName("Metric")
        self.caption = QLabel(caption)
        self.caption.setObjectName("MetricCaption")
        lay.addWidget(self.value)
        lay.addWidget(self.caption)
        self.setToolTip(tooltip)

    def set(self, text: str) -> None:
        self.value.setText(text)
