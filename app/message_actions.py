"""What the user can do to one message of the chat: its context menu (right click anywhere on the
bubble), Continue beside an answer cut short, Edit on an answer (a dialog), and Delete (asked
first: it takes what follows the message with it).

- Continue: GenerationControl.continue_answer on any answer cut short or edited: the last of its
  branch is written on in the same message, one that later turns follow in a new version of it
  (app/continuation.py).
- Regenerate: any answer, not only the last: a new version beside it (‹ ›), written from its question.
- Edit an answer: the edited text is a new version of the answer, marked "edited"; the original
  stays the other version with its colours and figures (as an edited question does).
- Delete: the message and every message after it on any branch; where the message has other
  versions, the nearest one is shown in its place.

The tree changes themselves are ChatControl's; this module holds the menu and the two dialogs.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QPoint, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QMenu, QMessageBox, QPlainTextEdit, QVBoxLayout, \
    QWidget

from .chat_control import ChatControl
from .chat_view import MessageWidget
from .continuation import can_continue, continue_words
from .generation_control import GenerationControl
from .history import Message


class MessageActions(QObject):
    def __init__(self, chats: ChatControl, generation: GenerationControl, window: QWidget):
        super().__init__(window)
        self.chats, self.generation, self.window = chats, generation, window
        self.delete_dialog: QMessageBox | None = None  # the last "delete this message?" question
        self.edit_dialog: AnswerEditor | None = None  # the last answer being edited
        chats.bubble_made.connect(self.install)

    def install(self, w: MessageWidget) -> None:
        """The context menu on the bubble and on its text; Edit on an answer too."""
        for target in (w, w.view):
            target.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
            target.customContextMenuRequested.connect(lambda pos, w=w, t=target: self._popup(w, t, pos))
        if w.role == "assistant":
            w.edit_button.setVisible(True)
            w.edit_button.setToolTip("Edit this answer: your text is kept as a new version, marked edited (‹ › "
                                     "shows the original)")

    def _popup(self, w: MessageWidget, target: QWidget, pos: QPoint) -> None:
        menu = self.menu(w, target.createStandardContextMenu(pos) if target is w.view else None)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(target.mapToGlobal(pos))

    def menu(self, w: MessageWidget, text_menu: QMenu | None = None) -> QMenu:
        """The message's actions (after the text's own Copy / Select all, where given), each
        enabled when it applies now."""
        menu = text_menu if text_menu is not None else QMenu(self.window)
        if text_menu is not None:
            menu.addSeparator()
        m: Message | None = w.message
        idle = self.generation.active is None and m is not None
        ready = idle and self.generation.models.ready

        def add(text: str, slot, enabled: bool) -> QAction:
            action = menu.addAction(text)
            action.triggered.connect(slot)
            action.setEnabled(enabled)
            return action

        add("Copy message", w.copy, True)
        if w.role == "assistant":
            followed = m is not None and bool(self.chats.conversation.children(m))
            cont = add("Continue as a new version" if followed else "Continue",
                       lambda: self.generation.continue_answer(m),
                       ready and can_continue(m) and m in self.chats.messages)
            if m is not None and not can_continue(m):
                cont.setToolTip("only an answer cut short (token limit, context full, stopped, cut off) or edited "
                                "continues")
            elif followed:
                cont.setToolTip(continue_words(m, True)[1])
            add("Regenerate", lambda: self.generation.regenerate(m), ready)
            add("Edit answer…", lambda: self.edit_answer(m), idle)
        else:
            add("Edit and resend…", lambda: self.chats.edit_message(m), idle)
        add("Delete…", lambda: self.ask_delete(m), idle)
        menu.setToolTipsVisible(True)
        return menu

    # -- editing an answer ----------------------------------------------------------------
    def edit_answer(self, message: Message | None) -> None:
        if message is None or message.role != "assistant" or self.generation.active is not None:
            return
        dlg = AnswerEditor(message.content, self.window)
        dlg.accepted.connect(lambda: self.chats.add_edited_answer(message, dlg.text()))
        dlg.open()
        self.edit_dialog = dlg

    # -- deleting ---------------------------------------------------------------------------
    def ask_delete(self, message: Message | None) -> None:
        """Window-modal, so no nested event loop: the message goes when the user says Delete."""
        if message is None or self.generation.active is not None:
            return
        conv = self.chats.conversation
        after = len(_followers(conv.messages, message))
        what = "your message" if message.role == "user" else "this answer"
        box = QMessageBox(QMessageBox.Icon.Question, "Delete the message?", f"Delete {what}?",
                          QMessageBox.StandardButton.Cancel, self.window)
        lines = []
        if after:
            lines.append(f"The {after} message{'s' if after > 1 else ''} after it (on every branch) "
                         f"{'go' if after > 1 else 'goes'} with it.")
        others = len(conv.versions(message)) - 1
        if others:
            lines.append(f"Its other version{'s stay' if others > 1 else ' stays'}, and the chat shows "
                         f"{'one of them' if others > 1 else 'it'} in its place.")
        lines.append("This cannot be undone (File ▸ Export keeps a copy of the chat).")
        box.setInformativeText(" ".join(lines))
        box.delete_button = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def clicked(button):
            if button is box.delete_button:
                self.chats.delete_message(message)

        box.buttonClicked.connect(clicked)
        box.open()
        self.delete_dialog = box


def _followers(messages: list[Message], message: Message) -> list[Message]:
    """Every message after `message` on any branch (its descendants)."""
    gone = {id(message)}
    out = []
    for m in messages:  # parents come before their children
        if m.parent is not None and id(m.parent) in gone:
            gone.add(id(m))
            out.append(m)
    return out


class AnswerEditor(QDialog):
    """The answer's text to rewrite; Save makes it a new version of the answer."""

    def __init__(self, text: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Edit the answer")
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        lay = QVBoxLayout(self)
        note = QLabel("Your text becomes a new version of the answer, marked edited; the model's original stays "
                      "as the other version (‹ › on the answer), with its colours and figures.")
        note.setWordWrap(True)
        note.setObjectName("Muted")
        lay.addWidget(note)
        self.editor = QPlainTextEdit(text)
        lay.addWidget(self.editor, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.buttons = buttons
        lay.addWidget(buttons)
        self.resize(640, 420)

    def text(self) -> str:
        return self.editor.toPlainText()
