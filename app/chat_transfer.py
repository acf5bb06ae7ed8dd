"""File ▸ Export chat as JSON… and File ▸ Import chat from JSON…: a chat with everything it holds
(every branch and version, each token's kind, the figures, the attachments, the system prompt,
the settings each answer was written with) to a file and back (app/chat_json.py,
docs/chat-json.md).

An import is checked whole before anything is written, then written in one transaction: a bad
or foreign file, or a disk that says no, gives a dialog and changes nothing; the chat shown
stays as it was. An imported chat is a new chat, opened on the branch it showed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QFileDialog, QLabel, QMessageBox, QWidget

from . import chat_json
from .chat_control import ChatControl
from .chat_json import ChatFile, ChatFileError
from .history import SaveError
from .persistence import ChatStore

FILTER = "SpecDec Chat JSON (*.json);;All files (*)"


def _app_version() -> str:
    from specdec_core import __version__  # light: no torch

    return __version__


def file_name(title: str) -> str:
    """A file name from a chat's title: its words, without what file systems refuse."""
    keep = "".join(c if c.isalnum() or c in " -_" else " " for c in title)
    return ("-".join(keep.split())[:60] or "chat") + ".json"


class ChatTransfer(QObject):
    def __init__(self, store: ChatStore, chats: ChatControl, status_label: QLabel,
                 show_error: Callable[[str, str], object], window: QWidget):
        super().__init__(window)
        self.store, self.chats, self.status_label, self.show_error, self.window = (
            store, chats, status_label, show_error, window)
        self.dialog: QMessageBox | None = None  # the last import's refusal

    # -- export ---------------------------------------------------------------------------
    def chat_file(self, chat_id: int | None = None) -> ChatFile | None:
        """The chat in the window as it is now (None while it has no message), or a chat of the list."""
        chats = self.chats
        if chat_id is not None and chat_id != chats.chat_id:
            chat, conversation, system_prompt = self.store.load(chat_id)
            return ChatFile(chat.title, system_prompt, conversation.messages, conversation.leaf,
                            self.store.history.pinned(chat_id))
        if not chats.conversation.messages:
            return None
        chat = chats.chat
        pinned = chat is not None and chat.id is not None and self.store.history.pinned(chat.id)
        return ChatFile(chat.title if chat is not None else "Chat", chats.page.system_prompt.toPlainText(),
                        chats.conversation.messages, chats.conversation.leaf, pinned)

    def export_json(self, path: Path | str, chat_id: int | None = None) -> Path:
        """Write the chat to `path` (OSError when it cannot be written)."""
        chat = self.chat_file(chat_id)
        if chat is None:
            raise ValueError("the chat has no message yet")
        path = Path(path)
        path.write_text(chat_json.dumps(chat, _app_version()), encoding="utf-8")
        return path

    def export_dialog(self, chat_id: int | None = None) -> None:
        chat = self.chat_file(chat_id)
        if chat is None:
            self.status_label.setText("Nothing to export yet")
            return
        self.chats.save_as("Export chat as JSON", file_name(chat.title), FILTER, lambda p: self.export_json(p, chat_id))

    # -- import ---------------------------------------------------------------------------
    def import_file(self, path: Path | str) -> int:
        """The chat in `path` saved as a new chat and opened; its id. ChatFileError (not a chat
        file), OSError (unreadable) or SaveError (the disk said no): nothing was written."""
        chat = chat_json.loads(Path(path).read_bytes())
        chat_id = self.store.history.insert_chat(chat.title, chat.system_prompt, chat.messages, chat.leaf,
                                                 chat.pinned)
        self.chats.open_chat(chat_id)
        self.status_label.setText(f"Imported “{chat.title or 'Chat'}” ({len(chat.messages)} messages)")
        return chat_id

    def import_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.window, "Import a chat", "", FILTER)
        if path:
            self.import_path(path)

    def import_path(self, path: str) -> int | None:
        """Import, or say in a dialog why not; None when nothing was imported."""
        try:
            return self.import_file(path)
        except ChatFileError as exc:
            why = str(exc)
        except SaveError as exc:
            why = f"The chat could not be saved: {exc}"
        except OSError as exc:
            why = f"The file cannot be read: {exc.strerror or exc}"
        box = QMessageBox(QMessageBox.Icon.Warning, "Could not import the chat", why,
                          QMessageBox.StandardButton.Ok, self.window)
        box.setInformativeText(f"{Path(path).name}: nothing was imported, and your chats are as they were.")
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.dialog = box
        self.status_label.setText("Nothing imported")
        return None
