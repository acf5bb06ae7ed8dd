"""The chat in the window and its branches: which chat is open, the branch of its tree shown
(app/conversation.py), editing a sent message, switching versions, the chat list's actions
(new, open, search, rename, pin, delete, export), and the files attached to the next message.

It knows nothing of generating. Before the chat shown changes it emits `leaving`, and the window
connects that to stopping the answer being written (so what streamed is kept in the chat it
belongs to); while an answer is written into the branch `busy` is set (by GenerationControl) and
edits and version switches wait. `changed` says the branch or the input changed, so the buttons
and the context meter follow.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QFileDialog, QLabel, QWidget

from .answer_figures import AnswerFigures
from .attachments import AttachmentError, from_paste, limits_text, prompt_content, read_file
from .chat_list import ChatList
from .chat_page import ChatPage
from .chat_view import MessageWidget
from .continuation import branch_copy, can_continue, continue_words, lead
from .conversation import Conversation
from .figures import meta_line
from .history import Attachment, Message, chat_to_markdown
from .persistence import ChatStore, OpenChat
from .side_panel import SidePanel

CUT_NOTE = "cut off: the app ended while this answer was being written; what reached the disk is kept"


def shown_figures(m: Message) -> AnswerFigures | None:
    """A message's figures as shown: an answer the app could not finish kept its running figures,
    and says so ("cut off"), not "generating…"."""
    return m.figures.marked_cut() if m.cut and m.figures is not None else m.figures


def as_prompt(path: list[Message]) -> list[dict[str, str]]:
    """Messages as the model reads them: a question with its attachments' text, an answer as written."""
    return [{"role": m.role, "content": prompt_content(m.content, m.attachments) if m.role == "user" else m.content}
            for m in path if m.role in ("user", "assistant")]


class ChatControl(QObject):
    changed = Signal()  # the branch shown or the input changed
    leaving = Signal()  # the chat shown is about to change: an answer being written must end now
    bubble_made = Signal(object)  # a MessageWidget now shows a message of the chat (its menu is added)

    def __init__(self, store: ChatStore, page: ChatPage, chat_list: ChatList, side_panel: SidePanel,
                 status_label: QLabel, show_error: Callable[[str, str], object], window: QWidget):
        super().__init__(window)
        self.store, self.page, self.chat_list, self.side_panel = store, page, chat_list, side_panel
        self.status_label, self.show_error, self.window = status_label, show_error, window
        self.chat: OpenChat | None = None
        self.conversation = Conversation()
        self.editing: Message | None = None  # the sent message being edited (the next send is its sibling)
        self.busy = False  # an answer is being written into the branch shown
        self.ready = False  # models are loaded (GenerationControl says): Continue is offered
        self.dropped_messages = 0  # oldest messages of this chat left out of the prompt (kept in the chat)
        self.search_text = ""
        # File ▸ Pin chat: its check follows the chat shown, so it lives with the chat
        self.pin_action = QAction("&Pin chat", window)
        self.pin_action.setCheckable(True)
        self.pin_action.triggered.connect(lambda on: self.pin_chat(self.chat_id, on))

    @property
    def chat_id(self) -> int | None:
        return self.chat.id if self.chat is not None else None

    @property
    def messages(self) -> list[Message]:
        """The branch shown, first message to last."""
        return self.conversation.path()

    def prompt_messages(self, path: list[Message] | None = None) -> list[dict[str, str]]:
        """The system prompt and the branch (or `path`), as the model reads them."""
        sp = self.page.system_prompt.toPlainText().strip()
        return ([{"role": "system", "content": sp}] if sp else []) + as_prompt(self.messages if path is None else path)

    # -- the chat list ------------------------------------------------------------------
    def refresh_list(self) -> None:
        chats = self.store.chats()
        if chats is None:
            return  # the database is unreadable now: the list keeps what it shows
        self.chat_list.show_chats(chats, self.chat_id)
        if self.chat is not None:
            self.pin_action.setChecked(any(c.pinned for c in chats if c.id == self.chat_id))

    def _reset(self) -> None:
        self.leaving.emit()
        self.cancel_edit()
        self.dropped_messages = 0
        self.page.chat_view.clear()
        self.side_panel.reset_metrics("")

    def new_chat(self) -> None:
        self._reset()
        self.chat = None
        self.conversation = Conversation()
        self.page.system_prompt.setPlainText("")
        self.chat_list.chats.clearSelection()
        self.pin_action.setChecked(False)
        self.changed.emit()
        self.page.composer.setFocus()

    def open_chat(self, chat_id: int, message_id: int | None = None) -> None:
        """Open a chat on the branch it showed last, or on the branch through `message_id`."""
        self._reset()
        self.chat, self.conversation, system_prompt = self.store.load(chat_id, message_id)
        self.page.system_prompt.setPlainText(system_prompt)
        self.render_path()
        self.refresh_list()
        self.show_last_stats()
        self.changed.emit()

    def open_hit(self, chat_id: int, message_id: int | None) -> None:
        """A search result: its chat, on the branch through the message, scrolled to it."""
        self.open_chat(chat_id, message_id)
        view = self.page.chat_view
        w = next((w for w in view.messages if w.message is not None and w.message.id == message_id), None)
        if w is not None:
            QTimer.singleShot(0, lambda: view.scroll_to(w))
            w.flash()
            w.select_text(self.search_text)

    def search(self, text: str) -> None:
        self.search_text = text
        self.chat_list.show_results(text, self.store.search(text))

    def start_rename(self, chat_id: int | None = None) -> None:
        chat_id = chat_id if chat_id is not None else self.chat_id
        if chat_id is not None:
            self.chat_list.start_rename(chat_id)

    def rename_chat(self, chat_id: int, title: str) -> None:
        title = title.strip() or self.store.history.title(chat_id)
        if self.chat is not None and self.chat.id == chat_id:
            self.chat.title = title
        self.store.save_title(chat_id, title)
        self.refresh_list()

    def pin_chat(self, chat_id: int | None, pinned: bool) -> None:
        if chat_id is None:
            self.pin_action.setChecked(False)
            return
        self.store.save_pin(chat_id, pinned)
        self.refresh_list()

    def delete_chat(self, chat_id: int | None = None) -> None:
        chat = self.chat
        if chat_id is None or (chat is not None and chat_id == chat.id):
            if chat is not None:
                self.store.delete_open(chat)
            self.new_chat()
        else:
            self.store.delete(chat_id)
        self.refresh_list()

    def export_markdown(self, path: Path | str, chat_id: int | None = None) -> Path:
        path = Path(path)
        if chat_id is not None and chat_id != self.chat_id:
            text = self.store.markdown(chat_id)
        else:
            title = self.chat.title if self.chat is not None else "Chat"
            text = chat_to_markdown(title, self.page.system_prompt.toPlainText(), self.messages)
        path.write_text(text, encoding="utf-8")
        return path

    def export_dialog(self, chat_id: int | None = None) -> None:
        if chat_id is None and not self.messages:
            self.status_label.setText("Nothing to export yet")
            return
        self.save_as("Export chat as Markdown", "chat.md", "Markdown (*.md)", lambda p: self.export_markdown(p, chat_id))

    def save_as(self, caption: str, name: str, file_filter: str, write: Callable[[str], object]) -> None:
        """Ask where to export, write there (`write(path)`); a disk that says no is a dialog."""
        path, _ = QFileDialog.getSaveFileName(self.window, caption, name, file_filter)
        if not path:
            return
        try:
            write(path)
        except OSError as exc:
            self.show_error("Could not export the chat", f"{path}: {exc.strerror or exc}")
            return
        self.status_label.setText(f"Exported to {path}")

    # -- the branch shown ---------------------------------------------------------------
    def bubble(self, m: Message) -> MessageWidget:
        w = self.page.chat_view.add_message(m.role)
        w.message = m
        if m.role == "assistant" and m.tokens:
            w.set_tokens(m.tokens, lead(m))
        else:
            w.set_text(m.content)
        w.set_attachments(m.attachments)
        if m.role == "assistant":
            w.set_meta(meta_line(shown_figures(m)))
        if m.cut:
            w.set_error(CUT_NOTE)
        self.bubble_made.emit(w)
        return w

    def widget(self, m: Message) -> MessageWidget | None:
        """The bubble that shows `m` (None when the branch shown does not hold it)."""
        return next((w for w in self.page.chat_view.messages if w.message is m), None)

    def restore_bubble(self, m: Message, w: MessageWidget) -> None:
        """`w` shows `m` as saved again (a continuation that added nothing)."""
        w.set_meta(meta_line(shown_figures(m)))
        error = m.figures.error if m.figures is not None else ""
        w.set_error(CUT_NOTE if m.cut else error and f"cut off: {error}")

    def show_actions(self, ready: bool | None = None) -> None:
        """Continue beside each answer cut short, or edited (and while the models can write on);
        on one that later turns follow it says the continuation is a new version."""
        if ready is not None:
            self.ready = ready
        present = {id(m) for m in self.conversation.messages}  # one pass, not one per bubble
        followed = {id(m.parent) for m in self.conversation.messages if m.parent is not None}
        for w in self.page.chat_view.messages:
            m = w.message
            shown = self.ready and not self.busy and can_continue(m) and id(m) in present
            w.continue_button.setVisible(shown)
            if shown:
                text, tip = continue_words(m, id(m) in followed)
                w.continue_button.setText(text)
                w.continue_button.setToolTip(tip)

    def new_version_to_continue(self, answer: Message) -> Message:
        """A new version of `answer` (its text, tokens and figures) at the end of the branch shown,
        for a continuation: the turns after `answer` were written from it and stay with it."""
        self.cancel_edit()
        copy = self.conversation.add(branch_copy(answer), answer.parent)
        self.render_path()
        return copy

    def drop_version(self, message: Message, leaf: Message | None) -> None:
        """Take back a version nothing was written into (never saved) and show `leaf`'s branch again."""
        self.conversation.remove(message)
        if leaf is not None and leaf in self.conversation.messages:
            self.conversation.leaf = leaf
        self.render_path()
        self.show_last_stats()

    def render_path(self) -> None:
        """The chat view shows the branch: bubbles kept where they already show it, the rest anew."""
        path = self.messages
        view = self.page.chat_view
        keep = 0
        for w, m in zip(view.messages, path):
            if w.message is not m:
                break
            keep += 1
        view.truncate(keep)
        for m in path[keep:]:
            self.bubble(m)
        self.show_versions()

    def show_versions(self) -> None:
        for w in self.page.chat_view.messages:
            if w.message is not None and w.message in self.conversation.messages:
                w.set_version(*self.conversation.version(w.message))
        self.show_actions()

    def show_last_stats(self) -> None:
        last = next((m for m in reversed(self.messages) if m.role == "assistant" and m.figures is not None), None)
        self.side_panel.reset_metrics("")
        if last is not None and last.figures.edited_only:  # the user's text: no figures describe it
            self.side_panel.chart.set_points([], "an edited answer")
            self.side_panel.summary.setText("an edited answer: its figures are the original version's (‹ ›)")
        elif last is not None:
            # an answer the app could not finish kept its running figures: it says so, not "generating…"
            fig = shown_figures(last)
            self.side_panel.show_stats(fig)
            if not fig.series:  # its own curve (absent in answers saved before it was kept)
                self.side_panel.chart.set_points([], "no curve kept for this answer")
            self.side_panel.show_server_figures(fig)

    def mark_left_out(self, count) -> None:
        """The oldest messages the prompt leaves out, or would leave out if sent now."""
        n = self.dropped_messages
        if count is not None and not count.fits and count.drop is not None:
            n = count.drop
        for i, w in enumerate(self.page.chat_view.messages):
            w.set_left_out(i < n)

    def switch_version(self, message: Message | None, step: int) -> None:
        if message is None or self.busy:
            if self.busy:
                self.status_label.setText("Stop the answer being written (Esc) to switch versions")
            return
        shown = self.conversation.switch(message, step)
        if shown is None:
            return
        self.cancel_edit()
        self.render_path()
        self.save_leaf()
        self.show_last_stats()  # the figures of the answer now shown (its own version's)
        self.changed.emit()

    def switch_last_answer(self, step: int) -> None:
        self.switch_version(next((m for m in reversed(self.messages) if m.role == "assistant"), None), step)

    def save_leaf(self) -> None:
        if self.chat is not None:
            self.store.save_leaf(self.chat, self.conversation)

    def save_message(self, message: Message) -> None:
        self.store.save_message(self.chat, message)

    def copy_last_answer(self) -> None:
        last = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        if last is None:
            self.status_label.setText("No answer to copy yet")
            return
        QApplication.clipboard().setText(last.content)
        self.status_label.setText("Copied the last answer")

    # -- sending and regenerating (the chat's part; GenerationControl writes the answer) ----
    def add_question(self, text: str, attachments: list[Attachment]) -> Message:
        """The user's message at the end of the branch (a sibling of the message being edited),
        saved, shown; the chat is created on its first message."""
        def system_prompt() -> str:
            return self.page.system_prompt.toPlainText().strip()

        if self.chat is None:
            self.chat = OpenChat(None, " ".join(text.split())[:48] or attachments[0].name)
            self.store.save_chat(self.chat, system_prompt)
        else:
            self.store.save_system_prompt(self.chat, system_prompt())
        # an edit is a sibling of the message it replaces; otherwise the next message of the branch
        parent = self.editing.parent if self.editing is not None else self.conversation.leaf
        msg = self.conversation.add(Message("user", text, attachments=attachments), parent)
        self.save_message(msg)
        self.editing = None
        self.page.edit_banner.setVisible(False)
        self.render_path()
        self.page.composer.clear()
        self.page.attachment_bar.clear()
        self.refresh_list()
        return msg

    def rewind_to_question(self, answer: Message | None = None) -> bool:
        """For Regenerate: the branch ends at the question of `answer` (by default the last
        message's), so the new answer is a sibling of it. False when the branch does not end at
        a question then."""
        self.cancel_edit()
        last = answer if answer is not None else self.messages[-1]
        if last.role == "assistant":
            self.conversation.leaf = last.parent
        self.render_path()  # also takes away a failed attempt's bubble
        return bool(self.messages) and self.messages[-1].role == "user"

    # -- deleting a message, rewriting an answer ----------------------------------------
    def delete_message(self, message: Message | None) -> bool:
        """`message` and everything that follows it, on every branch (the caller asked first).
        Where it has other versions, the nearest one is shown in its place; else the branch ends
        at the message before it. False when nothing was deleted."""
        if message is None or message not in self.conversation.messages:
            return False
        if self.busy:
            self.status_label.setText("Stop the answer being written (Esc) to delete a message")
            return False
        self.cancel_edit()
        siblings = self.conversation.versions(message)
        i = siblings.index(message)
        others = siblings[:i][-1:] + siblings[i + 1:][:1]  # the previous version, else the next
        gone = self.conversation.remove(message)
        if others:
            self.conversation.show(others[0])
        if self.chat is not None:
            self.store.delete_messages(self.chat, message, gone)
            self.save_leaf()
        self.dropped_messages = 0  # the oldest messages changed: the next send measures again
        self.render_path()
        self.show_last_stats()
        self.changed.emit()
        self.status_label.setText(f"Deleted {len(gone)} message{'' if len(gone) == 1 else 's'}")
        return True

    def add_edited_answer(self, answer: Message, text: str) -> Message | None:
        """A new version of `answer` with the user's `text`, marked edited; the original stays a
        version of its own (‹ ›). Its tokens, kinds and figures were the model's: the edit has none."""
        if answer.role != "assistant" or self.busy or not text.strip() or text == answer.content:
            return None
        msg = self.conversation.add(Message("assistant", text, figures=AnswerFigures(edited=True)), answer.parent)
        self.save_message(msg)
        self.render_path()
        self.show_last_stats()
        self.changed.emit()
        self.status_label.setText("The answer is edited: the original is the other version (‹ ›)")
        return msg

    # -- editing ------------------------------------------------------------------------
    def edit_message(self, message: Message | None) -> None:
        """Put a sent message back in the input box; sending it makes a new branch."""
        if message is None or message.role != "user" or self.busy:
            return
        self.editing = message
        composer = self.page.composer
        composer.setPlainText(message.content)
        self.page.attachment_bar.set_items(message.attachments)
        self.page.edit_banner.setVisible(True)
        composer.setFocus()
        cur = composer.textCursor()
        cur.movePosition(cur.MoveOperation.End)
        composer.setTextCursor(cur)
        self.mark_left_out(self.page.meter.count)

    def edit_last_message(self) -> None:
        self.edit_message(next((m for m in reversed(self.messages) if m.role == "user"), None))

    def cancel_edit(self) -> None:
        if self.editing is None:
            return
        self.editing = None
        self.page.edit_banner.setVisible(False)
        self.page.composer.clear()
        self.page.attachment_bar.clear()

    # -- attachments for the next message -------------------------------------------------
    def attach_dialog(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self.window, f"Attach files — {limits_text()}", "",
                                                "Text and code files (*);;All files (*)")
        if paths:
            self.attach_files(paths)

    def attach_files(self, paths: list) -> None:
        """Attach each file; the ones that cannot be attached are named in one dialog, with why."""
        refused = []
        for p in paths:
            try:
                self.page.attachment_bar.add(read_file(p))
            except AttachmentError as exc:
                refused.append(str(exc))
        if refused:
            self.show_error("Not attached", "\n\n".join(refused))
        self.page.composer.setFocus()

    def attach_paste(self, text: str) -> None:
        bar = self.page.attachment_bar
        n = 1 + sum(1 for a in bar.items if a.origin == "paste")
        bar.add(from_paste(text, n))
        self.status_label.setText("The long paste is attached as a file (click its chip to read it)")
