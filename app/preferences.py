"""View preferences: the theme (follow the system, light or dark; remembered with the chats) and
the token colours, with the View menu's actions that show and change them.

The actions are made here, with the switcher they mirror, so they exist whenever the theme
changes and their checks never lag what is shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QApplication, QWidget

from .chat_page import ChatPage
from .persistence import ChatStore
from .side_panel import SidePanel
from .theme import Theme, ThemeSwitcher

if TYPE_CHECKING:  # imported by the window only when it adds the tab
    from .race_view import RaceView


def _checkable(text: str, window: QWidget, shortcut: str | None = None) -> QAction:
    action = QAction(text, window)
    if shortcut:
        action.setShortcut(QKeySequence(shortcut))
    action.setCheckable(True)
    return action


class Preferences:
    def __init__(self, theme: Theme, store: ChatStore, page: ChatPage, side_panel: SidePanel, race_view: RaceView,
                 window: QWidget):
        self.theme, self.store, self.page, self.side_panel, self.race_view = theme, store, page, side_panel, race_view
        self.switcher = ThemeSwitcher(QApplication.instance(), theme, "dark" if theme.dark else "light", window)
        self.switcher.changed.connect(self._retheme)
        self.follow_system_action = _checkable("Follow the system's &theme", window)
        self.follow_system_action.triggered.connect(self._follow_system_toggled)
        self.dark_action = _checkable("&Dark theme", window, "Ctrl+Shift+D")
        self.dark_action.triggered.connect(self._dark_toggled)
        self._sync_theme_actions()
        # the legend's checkbox and View ▸ Token colours are one switch, shown in two places
        self.colour_action = _checkable("Token &colours", window, "Ctrl+T")
        self.colour_action.triggered.connect(lambda on: page.legend.checkbox.setChecked(on))
        self.colour_action.setChecked(True)
        page.legend.toggled.connect(self.set_colours)

    def restore(self, theme_mode: str) -> None:
        """The command line's mode, or 'saved': the one chosen last time."""
        self.switcher.set_mode(self.store.history.pref("theme", "auto") if theme_mode == "saved" else theme_mode)
        self._sync_theme_actions()

    def set_theme_mode(self, mode: str) -> None:
        """'auto' (follow the system), 'light' or 'dark'; remembered with the chats."""
        self.switcher.set_mode(mode)
        self._sync_theme_actions()
        self.store.save_pref("theme", lambda: self.switcher.mode)

    def set_colours(self, on: bool) -> None:
        self.page.chat_view.set_colours(on)
        if self.colour_action.isChecked() != on:
            self.colour_action.setChecked(on)

    def _follow_system_toggled(self, on: bool) -> None:
        self.set_theme_mode("auto" if on else ("dark" if self.theme.dark else "light"))

    def _dark_toggled(self, on: bool) -> None:
        self.set_theme_mode("dark" if on else "light")

    def _sync_theme_actions(self) -> None:
        for action, on in ((self.follow_system_action, self.switcher.mode == "auto"),
                           (self.dark_action, self.theme.dark)):
            action.blockSignals(True)
            action.setChecked(on)
            action.blockSignals(False)

    def _retheme(self) -> None:
        self.page.legend.retheme()
        self.page.chat_view.retheme()
        self.side_panel.update()
        for w in self.side_panel.findChildren(QWidget):
            w.update()
        self.race_view.retheme()
        self._sync_theme_actions()
