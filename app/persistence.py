"""The chats on disk: what the window saves (through the Saver, in order, kept while the disk says
no) and what it reads back when a chat is opened; and what the user is told when saving stops.

ChatStore is plain data access, no widgets: each write is queued under a key naming what it
writes (see app/saver.py for why keys), and a chat is read back as the tree the window shows.
SaveAlerts is the part the user sees: the "not saved" mark in the status bar, the dialog when
writes start failing, and the question before quitting with writes still waiting.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget

from .conversation import Conversation
from .history import History, Message, chat_to_markdown
from .saver import Saver


@dataclass(eq=False)
class OpenChat:
    """The chat in the window: its id once saved (None until the disk took it), its title.

    Compared by identity: the Saver's keys hold id(chat), so two chats with equal fields are
    still two chats."""

    id: int | None
    title: str


class ChatStore(QObject):
    def __init__(self, data_dir: Path | str | None, parent: QObject | None = None):
        super().__init__(parent)
        self.open_error: str | None = None  # why the database could not be opened, if it could not
        try:
            self.history = History(data_dir)
        except (OSError, sqlite3.Error) as exc:  # an unwritable data folder: chats live in memory this session
            self.history = History.in_memory(data_dir)
            self.open_error = str(exc)
        self.saver = Saver(self.history, self)

    @property
    def recent_file(self) -> Path:
        from specdec_core.models import recent  # plain JSON, no torch

        return self.history.data_dir / recent.FILE_NAME

    # -- writes ---------------------------------------------------------------------------
    def save_chat(self, chat: OpenChat, system_prompt: Callable[[], str]) -> None:
        """The chat's row (created once), then its system prompt as the box holds it.

        `system_prompt` is read when the row is written: a row that waits for the disk is
        created with the prompt the box holds by then."""
        def create(h: History) -> None:
            if chat.id is None:
                chat.id = h.new_chat(chat.title, system_prompt())

        self.saver.submit(("chat", id(chat)), create)
        self.save_system_prompt(chat, system_prompt())

    def save_system_prompt(self, chat: OpenChat, prompt: str) -> None:
        self.saver.submit(("system", id(chat)), lambda h: h.set_system_prompt(chat.id, prompt), last=True)

    def save_message(self, chat: OpenChat, message: Message) -> None:
        self.saver.submit(("message", id(chat), id(message)), lambda h: h.save_message(chat.id, message))

    def delete_messages(self, chat: OpenChat, first: Message, gone: list[Message]) -> None:
        """`first` and what follows it (`gone`, `first` included): writes still waiting for any
        of them are dropped (a message the disk never took), then the rows, if `first` has one
        (History.delete_message takes its followers with it)."""
        keys = {("message", id(chat), id(m)) for m in gone}
        self.saver.discard(lambda key: key not in keys)
        if first.id is not None:
            self.saver.submit(("delete-message", first.id), lambda h, mid=first.id: h.delete_message(mid))

    def save_leaf(self, chat: OpenChat, conversation: Conversation) -> None:
        """The branch shown, as it is when the write goes through (the last one chosen wins)."""
        self.saver.submit(("leaf", id(chat)), lambda h: h.set_leaf(
            chat.id, conversation.leaf.id if conversation.leaf is not None else None), last=True)

    def save_title(self, chat_id: int, title: str) -> None:
        self.saver.submit(("title", chat_id), lambda h: h.set_title(chat_id, title), last=True)

    def save_pin(self, chat_id: int, pinned: bool) -> None:
        self.saver.submit(("pin", chat_id), lambda h: h.set_pinned(chat_id, pinned), last=True)

    def save_pref(self, name: str, value: Callable[[], str]) -> None:
        """`value` is read when the write goes through: the newest choice is what is kept."""
        self.saver.submit(("pref", name), lambda h: h.set_pref(name, value()), last=True)

    def delete_open(self, chat: OpenChat) -> None:
        """The chat in the window: its waiting writes are dropped (it may never have reached the
        disk), then its row, if it has one."""
        self.saver.discard(lambda key: key[1] != id(chat))
        if chat.id is not None:
            self.saver.submit(("delete", chat.id), lambda h, cid=chat.id: h.delete_chat(cid))

    def delete(self, chat_id: int) -> None:
        self.saver.submit(("delete", chat_id), lambda h: h.delete_chat(chat_id))

    # -- reads ----------------------------------------------------------------------------
    def chats(self) -> list | None:
        """The chat list, or None when the database cannot be read now (the list keeps what it shows)."""
        try:
            return self.history.chats()
        except sqlite3.Error:
            return None

    def search(self, text: str) -> list:
        try:
            return self.history.search(text) if text.strip() else []
        except sqlite3.Error:
            return []

    def load(self, chat_id: int, message_id: int | None = None) -> tuple[OpenChat, Conversation, str]:
        """(the chat, its tree on the branch it showed last -- or on the branch through
        `message_id` --, its system prompt)."""
        chat = OpenChat(chat_id, self.history.title(chat_id))
        msgs = self.history.all_messages(chat_id)
        leaf_id = message_id if message_id is not None else self.history.leaf(chat_id)
        conversation = Conversation(msgs, next((m for m in msgs if m.id == leaf_id), None))
        if message_id is not None and conversation.leaf is not None:
            conversation.show(conversation.leaf)
        return chat, conversation, self.history.system_prompt(chat_id)

    def markdown(self, chat_id: int) -> str:
        """A chat that is not the one in the window, as Markdown (the branch it showed last)."""
        h = self.history
        return chat_to_markdown(h.title(chat_id), h.system_prompt(chat_id), h.messages(chat_id))


class SaveAlerts(QObject):
    """What the user sees when writes wait for the disk: one dialog per run of failures, a mark in
    the status bar until they go through, and a question before quitting without them."""

    def __init__(self, store: ChatStore, unsaved_label: QLabel, status_label: QLabel, window: QWidget):
        super().__init__(window)
        self.store, self.unsaved_label, self.status_label, self.window = store, unsaved_label, status_label, window
        self.save_dialog: QMessageBox | None = None
        self.quit_dialog: QMessageBox | None = None
        store.saver.failed.connect(self._failed)
        store.saver.resumed.connect(self._resumed)

    def _failed(self, why: str) -> None:
        self.unsaved_label.setText("⚠ not saved")
        self.unsaved_label.setToolTip(f"Chats are not being saved: {why}. They stay in this window; saving resumes "
                                      "by itself.")
        self.unsaved_label.setVisible(True)
        box = QMessageBox(QMessageBox.Icon.Warning, "Your chat is not being saved",
                          f"The chat could not be written to {self.store.history.path}: {why}.",
                          QMessageBox.StandardButton.Ok, self.window)
        box.setInformativeText("Nothing is lost: the chat stays in this window, and it is written as soon as the "
                               "disk takes it again (tried every few seconds). Free some disk space, or make the "
                               "data folder writable.")
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.save_dialog = box

    def _resumed(self) -> None:
        self.unsaved_label.setVisible(False)
        self.status_label.setText("Saved: the chat is on disk again")

    def ask_before_quitting(self, quit_anyway: Callable[[], None]) -> None:
        """Window-modal, so no nested event loop: `quit_anyway` runs if the user chooses to lose them."""
        saver = self.store.saver
        box = QMessageBox(QMessageBox.Icon.Warning, "Quit without saving?",
                          f"{saver.pending} change(s) to your chats could not be written: {saver.error}.",
                          QMessageBox.StandardButton.Cancel, self.window)
        box.setInformativeText("Quit anyway and lose them, or keep the window open and free some space "
                               "(File ▸ Export keeps a copy of the chat).")
        quit_button = box.addButton("Quit without saving", QMessageBox.ButtonRole.DestructiveRole)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def clicked(button):
            if button is quit_button:
                quit_anyway()

        box.buttonClicked.connect(clicked)
        box.open()
        self.quit_dialog = box
