"""Colours, stylesheet and icon from the assets (assets/: palette.json, style.qss, icon.*),
light and dark.

The theme follows the system's colour scheme (Qt 6.5+: QStyleHints.colorScheme, and its
colorSchemeChanged signal while the app runs) unless the user picks light or dark (View menu,
`--theme`). One Theme object is shared by every view; switching changes its values in place and
the views redraw from them (`ThemeSwitcher`)."""

from __future__ import annotations

import json
from functools import lru_cache

from specdec_core import assets
from PySide6.QtCore import QObject, Qt, Signal
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
# which source proposed a step (TokenEvent.source, Stats.steps_by_source), in the words of the
# hover text, the legend and the side panel
SOURCE_WORDS = {
    "lookup": "lookup (copied from the conversation)",
    "draft": "the draft model",
    "grammar": "the answer's grammar (a run it forces: structured output, tool calls)",
}
LOOKUP_MARK = ("dotted underline: a token prompt lookup copied from the conversation and the target kept "
               "(the colour still says its kind); hover any token for the source of its step")


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


THEME_MODES = ("auto", "light", "dark")


class Theme:
    def __init__(self, dark: bool = False):
        self.set_dark(dark)

    def set_dark(self, dark: bool) -> None:
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
            else:  # a kind's colours: @accepted_fg@, @accepted_bg@
                for part, colour in value.items():
                    qss = qss.replace(f"@{key}_{part}@", colour)
        return qss


def system_prefers_dark(app: QApplication) -> bool:
    try:
        return app.styleHints().colorScheme() == Qt.ColorScheme.Dark
    except AttributeError:  # Qt < 6.5
        return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def apply_theme(app: QApplication, mode: str = "auto", theme: Theme | None = None) -> Theme:
    """Fusion style + palette + stylesheet; mode 'light' | 'dark' | 'auto'. With `theme`, that
    object takes the new colours (the views that share it redraw from them)."""
    hints = app.styleHints()
    if hasattr(hints, "setColorScheme"):  # Qt 6.8+: the window frame and native dialogs follow too
        if mode == "auto":
            hints.unsetColorScheme()
        else:
            hints.setColorScheme(Qt.ColorScheme.Dark if mode == "dark" else Qt.ColorScheme.Light)
    dark = system_prefers_dark(app) if mode == "auto" else mode == "dark"
    if theme is None:
        theme = Theme(dark)
    else:
        theme.set_dark(dark)
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


class ThemeSwitcher(QObject):
    """Keeps the app's theme as the user chose: 'auto' follows the system's colour scheme as it
    changes; 'light' / 'dark' hold whatever the system does. `changed` after every switch."""

    changed = Signal()

    def __init__(self, app: QApplication, theme: Theme, mode: str = "auto", parent: QObject | None = None):
        super().__init__(parent)
        self.app, self.theme, self.mode = app, theme, mode
        hints = app.styleHints()
        if hasattr(hints, "colorSchemeChanged"):  # Qt 6.5+
            hints.colorSchemeChanged.connect(self._system_changed)

    def set_mode(self, mode: str) -> None:
        self.mode = mode if mode in THEME_MODES else "auto"
        self.apply()

    def apply(self) -> None:
        apply_theme(self.app, self.mode, self.theme)
        self.changed.emit()

    def _system_changed(self, *_args) -> None:
        if self.mode == "auto" and system_prefers_dark(self.app) != self.theme.dark:
            self.apply()
