"""The input area: the box a message is typed in, the files attached to it, and the banner shown
while a sent message is being edited.

- Composer: Enter sends, Shift+Enter inserts a newline, Up in an empty box edits the last message
  sent; a long paste becomes an attachment chip instead of a wall of text; dropped files are
  attached (the window also takes files dropped anywhere on it);
- AttachmentBar: one chip per attachment -- name, size, the tokens it takes of the context (the
  context meter counts them), a button to take it off; a click shows its text;
- SystemPromptBox: the system prompt, which passes dropped files on to be attached;
- EditBanner: "editing a sent message: sending makes a new branch", with Cancel.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .attachments import human_size, is_long_paste
from .history import Attachment


def local_files(source) -> list[str]:
    """The local files a drop or a paste carries (none for plain text)."""
    return [u.toLocalFile() for u in source.urls() if u.isLocalFile()] if source.hasUrls() else []


class FileDropBox(QPlainTextEdit):
    """A text box that passes dropped or pasted local files on to be attached: a plain text box
    takes the drop itself and would type the file's file:// address instead."""

    files_dropped = Signal(list)  # local file paths dropped or pasted

    def canInsertFromMimeData(self, source) -> bool:
        return bool(local_files(source)) or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source) -> None:
        files = local_files(source)
        if files:
            self.files_dropped.emit(files)
            return
        super().insertFromMimeData(source)


class Composer(FileDropBox):
    submitted = Signal()
    edit_last = Signal()  # Up in an empty box
    long_paste = Signal(str)  # a paste too long to type into the box: it becomes an attachment

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Composer")
        self.setPlaceholderText("Message the model…  (Enter sends, Shift+Enter for a new line, Esc stops, "
                                "Up edits your last message; drop files to attach them)")
        self.setTabChangesFocus(True)
        self.setFixedHeight(74)

    def keyPressEvent(self, e):
        key, mods = e.key(), e.modifiers()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (mods & Qt.KeyboardModifier.ShiftModifier):
            self.submitted.emit()
            return
        plain = mods in (Qt.KeyboardModifier.NoModifier, Qt.KeyboardModifier.KeypadModifier)
        if key == Qt.Key.Key_Up and plain and not self.toPlainText():
            self.edit_last.emit()
            return
        super().keyPressEvent(e)

    def insertFromMimeData(self, source) -> None:
        if not local_files(source) and source.hasText() and is_long_paste(source.text()):
            self.long_paste.emit(source.text())
            return
        super().insertFromMimeData(source)  # files are attached, other text typed


class SystemPromptBox(FileDropBox):
    """The system prompt. A file dropped on it is attached to the message, as anywhere else on the
    window."""


def chip_text(a: Attachment, tokens: int | None = None) -> str:
    lines = a.text.count("\n") + 1
    bits = [a.name, human_size(a.bytes), f"{lines:,} line{'s' if lines != 1 else ''}"]
    if tokens is not None:
        bits.append(f"{tokens:,} tokens")
    return " · ".join(bits)


def show_attachment(parent: QWidget, a: Attachment) -> None:
    """The text of an attachment, read-only."""
    dlg = QDialog(parent)
    dlg.setWindowTitle(a.name)
    dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    lay = QVBoxLayout(dlg)
    view = QPlainTextEdit()
    view.setReadOnly(True)
    view.setPlainText(a.text)
    lay.addWidget(view)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dlg.reject)
    lay.addWidget(buttons)
    dlg.resize(640, 480)
    dlg.open()


class Chip(QFrame):
    removed = Signal(object)  # the Attachment

    def __init__(self, a: Attachment, removable: bool = True, parent=None):
        super().__init__(parent)
        self.attachment = a
        self.setObjectName("Chip")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 2, 2, 2)
        lay.setSpacing(4)
        icon = QLabel()  # the style's own file icon: every platform has it (an emoji font may be missing)
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_FileIcon).pixmap(14, 14))
        lay.addWidget(icon)
        self.label = QLabel(chip_text(a))
        self.label.setCursor(Qt.CursorShape.PointingHandCursor)
        self.label.mousePressEvent = lambda _e: show_attachment(self.window(), a)
        preview = "\n".join(a.text.splitlines()[:12])
        self.setToolTip(f"<b>{html.escape(a.name)}</b> (click to read it)<pre>{html.escape(preview[:800])}</pre>")
        lay.addWidget(self.label)
        if removable:
            x = QToolButton()
            x.setObjectName("ChipRemove")
            x.setText("✕")
            x.setToolTip("take this attachment off the message")
            x.clicked.connect(lambda: self.removed.emit(a))
            lay.addWidget(x)

    def set_tokens(self, tokens: int | None, context: int | None) -> None:
        self.label.setText(chip_text(self.attachment, tokens))
        over = tokens is not None and context is not None and tokens > context
        self.setProperty("level", "over" if over else "ok")
        if over:
            self.label.setToolTip(f"{tokens:,} tokens: more than the target's whole context of {context:,}; "
                                  "it cannot be sent whole")
        self.style().unpolish(self)
        self.style().polish(self)


class AttachmentBar(QWidget):
    """The chips of the message being written."""

    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.items: list[Attachment] = []
        self.chips: list[Chip] = []
        self._lay = QHBoxLayout(self)
        self._lay.setContentsMargins(18, 0, 18, 0)
        self._lay.setSpacing(6)
        self._lay.addStretch(1)
        # many chips are clipped at the right rather than widen the window past the screen
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setVisible(False)

    def add(self, a: Attachment) -> None:
        self.items.append(a)
        self._rebuild()

    def set_items(self, items: list[Attachment]) -> None:
        self.items = list(items)
        self._rebuild()

    def remove(self, a: Attachment) -> None:
        self.items = [x for x in self.items if x is not a]
        self._rebuild()

    def clear(self) -> None:
        self.set_items([])

    def show_tokens(self, tokens: list[int | None], context: int | None) -> None:
        if len(tokens) == len(self.chips):
            for chip, n in zip(self.chips, tokens):
                chip.set_tokens(n, context)

    def _rebuild(self) -> None:
        for chip in self.chips:
            self._lay.removeWidget(chip)
            chip.deleteLater()
        self.chips = []
        for a in self.items:
            chip = Chip(a)
            chip.removed.connect(self.remove)
            self._lay.insertWidget(self._lay.count() - 1, chip)
            self.chips.append(chip)
        self.setVisible(bool(self.items))
        self.changed.emit()


class EditBanner(QFrame):
    """Shown above the input box while a sent message is being edited."""

    cancelled = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("EditBanner")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 4, 6, 4)
        self.label = QLabel("Editing a sent message: sending it starts a new branch; the old one stays (‹ › on the "
                            "message)")
        self.label.setWordWrap(True)
        cancel = QPushButton("Cancel (Esc)")
        cancel.clicked.connect(self.cancelled)
        lay.addWidget(self.label, 1)
        lay.addWidget(cancel)
        self.setVisible(False)
