"""Colours, stylesheet and icon from the assets (assets/: palette.json, style.qss, icon.*),
light and dark."""

from __future__ import annotations

import json
from functools import lru_cache

from specdec_core import assets
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QIcon, QPalette
from PySide6.QtWidgets import QApplication

KINDS = ("accepted", "corrected", "bonus", "standard", "server")
# what each kind means, in the words of the hover text (docs/architecture.md, "Words")
KIND_HINTS = {
    "accepted": "a draft token the target kept",
    "corrected": "the target's token after it rejected a draft token",
    "bonus": "the target's extra token after it kept all of the step's k ≥ 1 draft tokens",
    "standard": "the target decided it alone (standard mode, the first token, or a plain step "
                "that proposed nothing)",
    "server": "a server target's token whose origin the server does not report",
}
KIND_LABELS = {kind: f"{kind} — {hint}" for kind, hint in KIND_HINTS.items()}


@lru_cache(maxsize=1)
def _palettes() -> dict:
    return json.loads(assets.read_text("palette.json"))


def parse_color(text: str) -> QColor:
    """'#rrggbb' or '#rrggbbaa' (CSS order, alpha last) -> QColor."""
    text = text.strip()
    if len(text) == 9:
        c = QColor(text[:7])
        c.setAlpha(int(text[7:], 16))
        return c
    return QColor(text)


class Theme:
    def __init__(self, dark: bool = False):
        self.dark = dark
        self.name = "dark" if dark else "light"
        self.values = _palettes()[self.name]

    def kind_bg(self, kind: str) -> QColor:
        return parse_color(self.values[kind]["bg"])

    def kind_fg(self, kind: str) -> QColor:
        return parse_color(self.values[kind]["fg"])

    def color(self, name: str) -> QColor:
        return parse_color(self.values[name])

    def stylesheet(self) -> str:
        qss = assets.read_text("style.qss")
        for key, value in self.values.items():
            if isinstance(value, str):
                qss = qss.replace(f"@{key}@", value)
        return qss


def system_prefers_dark(app: QApplication) -> bool:
    try:
        return app.styleHints().colorScheme() == Qt.ColorScheme.Dark
    except AttributeError:  # Qt < 6.5
        return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def apply_theme(app: QApplication, mode: str = "auto") -> Theme:
    """Fusion style + palette + stylesheet; mode 'light' | 'dark' | 'auto'."""
    dark = system_prefers_dark(app) if mode == "auto" else mode == "dark"
    theme = Theme(dark)
    app.setStyle("Fusion")
    pal = QPalette()
    v = theme.values
    if dark:
        text = QColor("#e6e8ef")
        pal.setColor(QPalette.ColorRole.Window, QColor(v["window"]))
        pal.setColor(QPalette.ColorRole.WindowText, text)
        pal.setColor(QPalette.ColorRole.Base, QColor(v["assistant_bubble"]))
        pal.setColor(QPalette.ColorRole.AlternateBase, QColor(v["panel"]))
        pal.setColor(QPalette.ColorRole.Text, text)
        pal.setColor(QPalette.ColorRole.Button, QColor(v["panel"]))
        pal.setColor(QPalette.ColorRole.ButtonText, text)
        pal.setColor(QPalette.ColorRole.ToolTipBase, QColor(v["panel"]))
        pal.setColor(QPalette.ColorRole.ToolTipText, text)
        pal.setColor(QPalette.ColorRole.PlaceholderText, QColor(v["muted"]))
        pal.setColor(QPalette.ColorRole.Link, QColor(v["accent"]))
    else:
        text = QColor("#1f2430")
        pal.setColor(QPalette.ColorRole.Window, QColor(v["window"]))
        pal.setColor(QPalette.ColorRole.WindowText, text)
        pal.setColor(QPalette.ColorRole.Base, QColor("#ffffff"))
        pal.setColor(QPalette.ColorRole.AlternateBase, QColor(v["window"]))
        pal.setColor(QPalette.ColorRole.Text, text)
        pal.setColor(QPalette.ColorRole.Button, QColor("#ffffff"))
        pal.setColor(QPalette.ColorRole.ButtonText, text)
        pal.setColor(QPalette.ColorRole.PlaceholderText, QColor(v["muted"]))
        pal.setColor(QPalette.ColorRole.Link, QColor(v["accent"]))
    pal.setColor(QPalette.ColorRole.Highlight, QColor(v["accent"]))
    pal.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    app.setPalette(pal)
    app.setStyleSheet(theme.stylesheet())
    return theme


def app_icon() -> QIcon:
    icon = QIcon()
    for name in ("icon.svg", "icon.png"):
        icon.addFile(str(assets.path(name)))
    return icon
