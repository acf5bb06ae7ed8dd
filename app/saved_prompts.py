"""Saved system prompts: the Prompts menu beside the system prompt box lists them (choosing one
puts it in the box), saves the prompt the box holds under a name, and opens a dialog to rename
or delete them.

They are kept where the theme and the settings are, in the chats' prefs table (app/history.py),
as one JSON list written through the Saver: the newest list is what reaches the disk. A chat
keeps its own copy of the prompt it was sent with, so renaming or deleting a saved prompt never
changes a chat.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QActionGroup
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .persistence import ChatStore

PREF = "system_prompts"
NAME = Qt.ItemDataRole.UserRole


@dataclass
class SavedPrompt:
    name: str
    text: str


class PromptLibrary:
    """The saved prompts, in the order they were saved; names are unique (compared as typed,
    without the spaces around them). Plain Python."""

    def __init__(self, prompts: list[SavedPrompt] | None = None):
        self.prompts = list(prompts or [])

    @classmethod
    def from_json(cls, text: str | None) -> PromptLibrary:
        """The list as stored; a damaged or foreign value reads as the prompts it still holds."""
        try:
            data = json.loads(text) if text else []
        except ValueError:
            data = []
        out = cls()
        for d in data if isinstance(data, list) else []:
            if isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("text"), str):
                if d["name"].strip() and out.get(d["name"]) is None:
                    out.prompts.append(SavedPrompt(d["name"].strip(), d["text"]))
        return out

    def to_json(self) -> str:
        return json.dumps([{"name": p.name, "text": p.text} for p in self.prompts], ensure_ascii=False)

    def names(self) -> list[str]:
        """In the order a menu lists them: alphabetical, case aside."""
        return sorted((p.name for p in self.prompts), key=str.casefold)

    def get(self, name: str) -> SavedPrompt | None:
        return next((p for p in self.prompts if p.name == name.strip()), None)

    def name_for(self, text: str) -> str | None:
        """The saved prompt that holds exactly `text`, if one does."""
        return next((p.name for p in self.prompts if p.text.strip() == text.strip()), None)

    def save(self, name: str, text: str) -> None:
        """Under `name`: a new prompt, or the one of that name given this text."""
        name = name.strip()
        if not name:
            raise ValueError("a saved prompt needs a name")
        if not text.strip():
            raise ValueError("the system prompt is empty")
        old = self.get(name)
        if old is not None:
            old.text = text
        else:
            self.prompts.append(SavedPrompt(name, text))

    def rename(self, old: str, new: str) -> None:
        new = new.strip()
        prompt = self.get(old)
        if prompt is None:
            raise ValueError(f"no saved prompt is called “{old}”")
        if not new:
            raise ValueError("a saved prompt needs a name")
        if new != prompt.name and self.get(new) is not None:
            raise ValueError(f"a saved prompt is already called “{new}”")
        prompt.name = new

    def delete(self, name: str) -> None:
        self.prompts = [p for p in self.prompts if p.name != name.strip()]


def suggest_name(text: str, words: int = 5) -> str:
    """A name to start from: the prompt's first words."""
    first = text.split()[:words]
    return " ".join(first)[:40] + ("…" if len(text.split()) > words else "")


def prompts_button() -> QToolButton:
    """The button the chat page puts beside the system prompt box; SavedPrompts gives it its menu."""
    b = QToolButton()
    b.setObjectName("PromptsButton")
    b.setText("Prompts ▾")
    b.setToolTip("Saved system prompts: choose one, save the one in the box, rename or delete them")
    b.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
    b.setStyleSheet("QToolButton::menu-indicator { image: none; width: 0px; }")  # the ▾ says it, unclipped
    return b


class SavedPrompts(QObject):
    def __init__(self, store: ChatStore, button: QToolButton, box: QPlainTextEdit, status_label: QLabel,
                 window: QWidget):
        super().__init__(window)
        self.store, self.button, self.box, self.status_label, self.window = store, button, box, status_label, window
        self.library = PromptLibrary.from_json(store.history.pref(PREF))
        self.menu = QMenu(button)
        self.menu.setToolTipsVisible(True)
        self.menu.aboutToShow.connect(self.fill_menu)
        button.setMenu(self.menu)
        self.input: QInputDialog | None = None  # the last "save as" dialog
        self.question: QMessageBox | None = None  # the last "replace?" question
        self.dialog: PromptsDialog | None = None

    def fill_menu(self) -> None:
        m = self.menu
        m.clear()
        shown = self.library.name_for(self.box.toPlainText())
        if not self.library.prompts:
            m.addAction("No saved prompts yet").setEnabled(False)
        group = QActionGroup(m)  # one prompt in the box at a time: shown as a choice of one
        for name in self.library.names():
            a = m.addAction(name, lambda name=name: self.use(name))
            a.setCheckable(True)
            group.addAction(a)
            a.setChecked(name == shown)
            text = self.library.get(name).text
            a.setToolTip(text if len(text) <= 400 else text[:400] + "…")
        m.addSeparator()
        save = m.addAction("Save this prompt…", self.save_dialog)
        save.setEnabled(bool(self.box.toPlainText().strip()))
        manage = m.addAction("Rename or delete…", self.manage_dialog)
        manage.setEnabled(bool(self.library.prompts))

    # -- actions --------------------------------------------------------------------------
    def use(self, name: str) -> None:
        prompt = self.library.get(name)
        if prompt is not None:
            self.box.setPlainText(prompt.text)
            self.status_label.setText(f"System prompt: “{prompt.name}”")

    def _write(self) -> None:
        self.store.save_pref(PREF, self.library.to_json)

    def save(self, name: str, text: str | None = None) -> None:
        """The box's prompt (or `text`) under `name`, replacing one of that name."""
        self.library.save(name, self.box.toPlainText() if text is None else text)
        self._write()
        self.status_label.setText(f"Saved the system prompt as “{name.strip()}”")

    def rename(self, old: str, new: str) -> None:
        self.library.rename(old, new)
        self._write()

    def delete(self, name: str) -> None:
        self.library.delete(name)
        self._write()

    # -- dialogs --------------------------------------------------------------------------
    def save_dialog(self) -> None:
        text = self.box.toPlainText()
        if not text.strip():
            self.status_label.setText("The system prompt is empty: nothing to save")
            return
        dlg = QInputDialog(self.window)
        dlg.setWindowTitle("Save the system prompt")
        dlg.setLabelText("Name:")
        dlg.setTextValue(self.library.name_for(text) or suggest_name(text))
        dlg.setWindowModality(Qt.WindowModality.WindowModal)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.textValueSelected.connect(lambda name: self._save_named(name, text))
        dlg.open()
        self.input = dlg

    def _save_named(self, name: str, text: str) -> None:
        name = name.strip()
        if not name:
            self.status_label.setText("Not saved: a saved prompt needs a name")
            return
        old = self.library.get(name)
        if old is None or old.text == text:
            self.save(name, text)
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Replace the saved prompt?",
                          f"A saved prompt is already called “{name}”. Replace its text with this one?",
                          QMessageBox.StandardButton.Cancel, self.window)
        replace = box.addButton("Replace", QMessageBox.ButtonRole.AcceptRole)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.buttonClicked.connect(lambda b: self.save(name, text) if b is replace else None)
        box.open()
        self.question = box

    def manage_dialog(self) -> None:
        dlg = PromptsDialog(self, self.window)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.open()
        self.dialog = dlg


class PromptsDialog(QDialog):
    """The saved prompts: each one's text, Use, Rename (or double-click), Delete."""

    def __init__(self, prompts: SavedPrompts, parent: QWidget | None = None):
        super().__init__(parent)
        self.prompts = prompts
        self.setWindowTitle("Saved system prompts")
        self.resize(520, 380)
        lay = QVBoxLayout(self)
        hint = QLabel("Double-click a name (or press F2) to rename it.")
        hint.setObjectName("Muted")
        lay.addWidget(hint)
        self.list = QListWidget()
        self.list.setEditTriggers(QListWidget.EditTrigger.DoubleClicked | QListWidget.EditTrigger.EditKeyPressed)
        self.list.currentItemChanged.connect(lambda *_a: self._show_selected())
        self.list.itemChanged.connect(self._renamed)
        lay.addWidget(self.list, 1)
        self.preview = QPlainTextEdit()
        self.preview.setReadOnly(True)
        self.preview.setMaximumHeight(110)
        lay.addWidget(self.preview)
        self.problem = QLabel("")
        self.problem.setObjectName("Muted")
        lay.addWidget(self.problem)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.use_button = QPushButton("Use")
        self.rename_button = QPushButton("Rename")
        self.delete_button = QPushButton("Delete…")
        for b in (self.use_button, self.rename_button, self.delete_button):
            buttons.addButton(b, QDialogButtonBox.ButtonRole.ActionRole)
        self.use_button.clicked.connect(self._use)
        self.rename_button.clicked.connect(lambda: self.list.editItem(self.list.currentItem()))
        self.delete_button.clicked.connect(self._ask_delete)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.question: QMessageBox | None = None
        self.fill()

    def fill(self, current: str | None = None) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for name in self.prompts.library.names():
            it = QListWidgetItem(name)
            it.setData(NAME, name)
            it.setFlags(it.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(it)
            if name == current:
                self.list.setCurrentItem(it)
        if self.list.currentItem() is None and self.list.count():
            self.list.setCurrentRow(0)
        self.list.blockSignals(False)
        self._show_selected()

    def selected(self) -> str | None:
        it = self.list.currentItem()
        return it.data(NAME) if it is not None else None

    def _show_selected(self) -> None:
        name = self.selected()
        prompt = self.prompts.library.get(name) if name else None
        self.preview.setPlainText(prompt.text if prompt else "")
        for b in (self.use_button, self.rename_button, self.delete_button):
            b.setEnabled(prompt is not None)

    def _renamed(self, it: QListWidgetItem) -> None:
        old, new = it.data(NAME), it.text()
        try:
            self.prompts.rename(old, new)
        except ValueError as exc:
            self.problem.setText(f"Not renamed: {exc}")
            self.fill(old)
            return
        self.problem.setText("")
        self.fill(new.strip())

    def _use(self) -> None:
        if self.selected():
            self.prompts.use(self.selected())
            self.accept()

    def _ask_delete(self) -> None:
        name = self.selected()
        if not name:
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Delete the saved prompt?",
                          f"Delete the saved prompt “{name}”? Chats that used it keep their own copy.",
                          QMessageBox.StandardButton.Cancel, self)
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.buttonClicked.connect(lambda b: self._delete(name) if b is delete else None)
        box.open()
        self.question = box

    def _delete(self, name: str) -> None:
        self.prompts.delete(name)
        self.fill()
