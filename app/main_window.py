"""The main window: chats on the left, the conversation in the middle, the side panel on the right.

GUI thread only. It owns the History (SQLite, written through a Saver) and talks to the Worker
through its request_* methods and signals; it keeps the id of the one generation it is waiting
for and drops every signal from any other id.

A chat is a tree of messages (app/conversation.py): the window shows one branch of it. Editing a
sent message and sending it again adds a sibling of that message; Regenerate adds a sibling of
the answer; ‹ n/m › on a message switches between versions. An answer is saved while it streams
(at most SAVE_SECONDS or SAVE_TOKENS behind), so a kill or a power cut leaves its part in the
chat, marked as cut. A write the disk refuses (full, read-only) gets one dialog; the chat stays
in this window and the Saver writes it when it can.
"""

from __future__ import annotations

import html
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from . import pyside_guard
from .attachments import AttachmentError, attachment_block, from_paste, limits_text, prompt_content, read_file
from .chat_list import ChatList
from .chat_view import ChatView, Legend, MessageWidget, ViewToken
from .composer import AttachmentBar, Composer, EditBanner, SystemPromptBox
from .context_meter import DEBOUNCE_MS, ContextMeter, CountJob, start_counter
from .conversation import Conversation
from .figures import meta_line
from .history import History, Message, StoredToken, chat_to_markdown
from .models_worker import stop_thread
from .saver import Saver
from .server_target import ServerDialog
from .side_panel import SidePanel
from .theme import Theme, ThemeSwitcher, app_icon
from .worker import GenerateRequest, LoadRequest, start_worker, stop_worker

# a streaming answer reaches the disk at least this often (the "never loses a word")
SAVE_SECONDS = 1.0
SAVE_TOKENS = 32
DEFAULT_SIZE = (1280, 820)
CUT_NOTE = "cut off: the app ended while this answer was being written; what reached the disk is kept"


def app_version() -> str:
    from specdec_core import __version__  # no torch: specdec_core/__init__ is light

    return __version__


@dataclass(eq=False)
class OpenChat:
    """The chat in the window: its id once saved (None until the disk took it), its title."""

    id: int | None
    title: str


@dataclass
class Active:
    """The generation the window is waiting for."""

    request: GenerateRequest
    widget: MessageWidget
    message: Message  # the answer being written (in the conversation, saved as it grows)
    events: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)  # the engine's running Stats for `events`
    series: list = field(default_factory=list)  # (seconds, decode tok/s) as the engine reported them
    unsaved: int = 0  # tokens shown but not yet written
    saved_at: float = field(default_factory=time.monotonic)


class MainWindow(QMainWindow):
    models_ready = Signal()
    message_done = Signal(str)  # stop reason of the assistant message just saved
    load_error = Signal(str)

    def __init__(self, data_dir: Path | str | None = None, theme: Theme | None = None,
                 load_request: LoadRequest | None = None, theme_mode: str | None = None):
        super().__init__()
        pyside_guard.install()  # before the first render: PySide6 6.12.0 on Python 3.11 (see there)
        self.theme = theme or Theme(False)
        self.history_error: str | None = None
        try:
            self.history = History(data_dir)
        except (OSError, sqlite3.Error) as exc:  # an unwritable data folder: chats live in memory this session
            self.history = History.in_memory(data_dir)
            self.history_error = str(exc)
        self.saver = Saver(self.history, self)
        self.saver.failed.connect(self._on_save_failed)
        self.saver.resumed.connect(self._on_save_resumed)
        self.load_request = load_request or LoadRequest()
        self.chat: OpenChat | None = None
        self.conversation = Conversation()
        self.editing: Message | None = None  # the sent message being edited (the next send is its sibling)
        self.active: Active | None = None
        self.ready = False
        self.model_info: dict = {}
        self.models_dialog = None
        self.last_error_dialog: QMessageBox | None = None
        self.save_dialog: QMessageBox | None = None
        self.quit_dialog: QMessageBox | None = None
        self._quit_anyway = False
        self.context_dialog: QMessageBox | None = None  # the last "does not fit the context" dialog
        self.dropped_messages = 0  # oldest messages of this chat left out of the prompt (kept in the chat)
        self._next_request = 0
        self._regenerations = 0
        self._count_job = 0
        self.search_text = ""

        self.setWindowTitle("SpecDec Chat")
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)  # a file dropped anywhere on the window is attached
        self._build()
        self._fit_screen()
        self.switcher = ThemeSwitcher(QApplication.instance(), self.theme,
                                      "dark" if self.theme.dark else "light", self)
        self.switcher.changed.connect(self._retheme)
        self._build_menus()
        self.worker, self.thread = start_worker(self)
        self.worker.progress.connect(self._on_progress)
        self.worker.loaded.connect(self._on_loaded)
        self.worker.load_failed.connect(self._on_load_failed)
        self.worker.tokens.connect(self._on_tokens)
        self.worker.finished.connect(self._on_finished)
        self.worker.failed.connect(self._on_failed)
        self.worker.too_long.connect(self._on_too_long)
        self.counter, self.counter_thread = start_counter(lambda: self.worker.engine, self)
        self.counter.counted.connect(self._on_counted)
        self._save_timer = QTimer(self)  # a slow stream still reaches the disk within SAVE_SECONDS
        self._save_timer.setInterval(int(SAVE_SECONDS * 1000))
        self._save_timer.timeout.connect(lambda: self._save_streaming(force=False))
        from .race_view import add_race_tab  # a Race tab sharing this worker's thread and engine

        self.race_view = add_race_tab(self)
        from .local_server import add_local_server  # View ▸ Local server: these models served to other tools

        self.local_server = add_local_server(self)
        self._refresh_chat_list()
        self._update_buttons()
        self._closed = False
        if theme_mode is not None:  # the command line's, else the one chosen last time
            self.switcher.set_mode(self.history.pref("theme", "auto") if theme_mode == "saved" else theme_mode)
            self._sync_theme_actions()
        if self.history_error:
            QTimer.singleShot(0, lambda: self.show_error(
                "Chats cannot be saved", f"The chat database in {self.history.data_dir} cannot be opened: "
                f"{self.history_error}. This session's chats stay in this window until it closes."))

    # -- properties the rest of the app (and the tests) read ------------------------------
    @property
    def chat_id(self) -> int | None:
        return self.chat.id if self.chat is not None else None

    @property
    def messages(self) -> list[Message]:
        """The branch shown, first message to last."""
        return self.conversation.path()

    # -- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        split.setHandleWidth(1)

        self.chat_list = ChatList()
        self.chat_list.new_requested.connect(self.new_chat)
        self.chat_list.open_requested.connect(self.open_chat)
        self.chat_list.hit_chosen.connect(self.open_hit)
        self.chat_list.rename_requested.connect(self.rename_chat)
        self.chat_list.pin_requested.connect(self.pin_chat)
        self.chat_list.delete_requested.connect(self.delete_chat)
        self.chat_list.export_requested.connect(self.export_dialog)
        self.chat_list.search_changed.connect(self.search)
        self.chat_list.setMinimumWidth(150)
        split.addWidget(self.chat_list)

        chat_page = QWidget()
        clay = QVBoxLayout(chat_page)
        clay.setContentsMargins(0, 0, 0, 6)
        clay.setSpacing(4)
        self.system_prompt = SystemPromptBox()
        self.system_prompt.setObjectName("SystemPrompt")
        self.system_prompt.files_dropped.connect(self.attach_files)
        self.system_prompt.setPlaceholderText("System prompt (optional), e.g. “You are a concise assistant.”")
        self.system_prompt.setFixedHeight(40)
        self.system_prompt.textChanged.connect(self._schedule_count)
        sp_row = QHBoxLayout()
        sp_row.setContentsMargins(18, 8, 18, 0)
        sp_row.addWidget(self.system_prompt)
        clay.addLayout(sp_row)
        self.legend = Legend(self.theme)
        self.legend.toggled.connect(self.set_colours)
        clay.addWidget(self.legend)
        self.chat_view = ChatView(self.theme)
        self.chat_view.edit_requested.connect(lambda w: self.edit_message(w.message))
        self.chat_view.version_requested.connect(lambda w, step: self.switch_version(w.message, step))
        clay.addWidget(self.chat_view, 1)
        self.edit_banner = EditBanner()
        self.edit_banner.cancelled.connect(self.cancel_edit)
        clay.addWidget(self.edit_banner)
        self.attachment_bar = AttachmentBar()
        self.attachment_bar.changed.connect(self._update_buttons)
        self.attachment_bar.changed.connect(self._schedule_count)
        clay.addWidget(self.attachment_bar)
        comp_row = QHBoxLayout()
        comp_row.setContentsMargins(18, 0, 18, 0)
        self.composer = Composer()
        self.composer.submitted.connect(self.send)
        self.composer.edit_last.connect(self.edit_last_message)
        self.composer.long_paste.connect(self.attach_paste)
        self.composer.files_dropped.connect(self.attach_files)
        self.composer.textChanged.connect(self._update_buttons)
        self.composer.textChanged.connect(self._schedule_count)
        comp_row.addWidget(self.composer, 1)
        btns = QVBoxLayout()
        btns.setSpacing(3)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("SendButton")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("StopButton")
        self.stop_button.setToolTip("Stop generating (Esc)")
        self.stop_button.clicked.connect(self.stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.setToolTip("Generate the last answer again as a new version; the earlier ones stay "
                                     "(‹ › on the answer) (Ctrl+R)")
        self.regen_button.clicked.connect(self.regenerate)
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setToolTip(f"Attach text or code files (Ctrl+O), or drop them on the window. "
                                      f"{limits_text()}.")
        self.attach_button.clicked.connect(self.attach_dialog)
        for b in (self.send_button, self.stop_button, self.regen_button):
            btns.addWidget(b)
        comp_row.addLayout(btns)
        clay.addLayout(comp_row)
        meter_row = QHBoxLayout()
        meter_row.setContentsMargins(0, 0, 18, 0)
        self.meter = ContextMeter(self.theme)
        meter_row.addWidget(self.meter, 1)
        self.attach_button.setObjectName("CopyButton")
        meter_row.addWidget(self.attach_button)
        clay.addLayout(meter_row)
        self._count_timer = QTimer(self)
        self._count_timer.setSingleShot(True)
        self._count_timer.setInterval(DEBOUNCE_MS)
        self._count_timer.timeout.connect(self._request_count)

        # the centre is a tab widget so other views (the race view) can be added as tabs
        self.tabs = QTabWidget()
        self.tabs.setTabBarAutoHide(True)
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(chat_page, "Chat")
        split.addWidget(self.tabs)

        self.side_panel = SidePanel(self.theme)
        self.side_panel.max_new.valueChanged.connect(self._schedule_count)
        split.addWidget(self.side_panel)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 0)
        split.setSizes([200, 760, 320])
        self.split = split
        self.setCentralWidget(split)

        self.status_label = QLabel("")
        self.unsaved_label = QLabel("")
        self.unsaved_label.setObjectName("Unsaved")
        self.unsaved_label.setVisible(False)
        self.progress_bar = QProgressBar()
        self.progress_bar.setMaximumWidth(220)
        self.progress_bar.setTextVisible(False)
        self.progress_bar.hide()
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.unsaved_label)
        self.statusBar().addPermanentWidget(self.progress_bar)

    def _fit_screen(self) -> None:
        """The default size, or less on a small screen (1366x768 included), with the side panel
        inside it."""
        screen = self.screen().availableGeometry() if self.screen() is not None else None
        w, h = DEFAULT_SIZE
        if screen is not None:
            w, h = min(w, screen.width() - 16), min(h, screen.height() - 40)
        self.resize(w, h)
        side = 320 if w >= 1200 else 290
        self.split.setSizes([200 if w >= 1200 else 160, w - side - 200, side])

    def _build_menus(self) -> None:
        def act(menu, text, slot, shortcut=None, checkable=False):
            a = QAction(text, self)
            if shortcut:
                a.setShortcut(QKeySequence(shortcut))
            a.setCheckable(checkable)
            a.triggered.connect(slot)
            menu.addAction(a)
            return a

        m = self.menuBar().addMenu("&File")
        act(m, "&New chat", self.new_chat, "Ctrl+N")
        act(m, "&Attach files…", self.attach_dialog, "Ctrl+O")
        act(m, "&Export chat as Markdown…", lambda: self.export_dialog(), "Ctrl+E")
        act(m, "Re&name chat…", lambda: self.start_rename(), "F2")
        self.pin_action = act(m, "&Pin chat", lambda on: self.pin_chat(self.chat_id, on), checkable=True)
        act(m, "&Delete chat", lambda: self.delete_chat())
        m.addSeparator()
        act(m, "&Load models…", self.load_dialog, "Ctrl+L")
        act(m, "Connect to a &server…", self.connect_dialog)
        m.addSeparator()
        self.quit_action = act(m, "&Quit", self.close, "Ctrl+Q")
        m = self.menuBar().addMenu("&Chat")
        # keys the input box itself handles are listed here too ("\t": shown, not bound twice)
        act(m, "&Send\tEnter", self.send)
        act(m, "New &line\tShift+Enter", lambda: self.composer.insertPlainText("\n"))
        self.stop_action = act(m, "S&top (or cancel an edit)", self.escape, "Esc")
        self.stop_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        act(m, "&Regenerate", self.regenerate, "Ctrl+R")
        act(m, "&Edit your last message\tUp", self.edit_last_message)
        act(m, "Previous version of the last answer", lambda: self.switch_last_answer(-1), "Alt+Left")
        act(m, "Next version of the last answer", lambda: self.switch_last_answer(1), "Alt+Right")
        act(m, "&Copy the last answer", self.copy_last_answer, "Ctrl+Shift+C")
        act(m, "Search chats…", self.chat_list.focus_search, "Ctrl+F")
        act(m, "Toggle standard / speculative", lambda: self.side_panel.mode_button.toggle(), "Ctrl+M")
        m = self.view_menu = self.menuBar().addMenu("&View")  # local_server adds its entry here
        self.follow_system_action = act(m, "Follow the system's &theme", self._follow_system_toggled, checkable=True)
        self.dark_action = act(m, "&Dark theme", self._dark_toggled, "Ctrl+Shift+D", checkable=True)
        self._sync_theme_actions()
        self.colour_action = act(m, "Token &colours", lambda on: self.legend.checkbox.setChecked(on), "Ctrl+T", True)
        self.colour_action.setChecked(True)
        m = self.menuBar().addMenu("&Help")
        act(m, "&About SpecDec Chat", self.about)

    def shortcut_texts(self) -> list[str]:
        """Every key the menus list (their shortcuts and the keys named after a tab)."""
        out = []
        for menu_action in self.menuBar().actions():
            for a in menu_action.menu().actions():
                if not a.shortcut().isEmpty():
                    out.append(a.shortcut().toString())
                if "\t" in a.text():
                    out.append(a.text().split("\t", 1)[1])
        return out

    # -- models -------------------------------------------------------------------------
    def start_loading(self, request: LoadRequest | None = None) -> None:
        if request is not None:
            self.load_request = request
        self.ready = False
        self._update_buttons()
        self.progress_bar.show()
        self.progress_bar.setRange(0, 0)
        self.status_label.setText("Loading models…")
        self.chat_view.set_hint("Loading models… the first run prepares the default pair and can take a minute.")
        self.side_panel.set_models_text("Loading…")
        self.meter.clear("context: loading models…")
        self.worker.request_load(self.load_request)

    def _on_progress(self, message: str, fraction: float) -> None:
        self.status_label.setText(message)
        if fraction < 0:
            self.progress_bar.setRange(0, 0)
        else:
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(int(fraction * 1000))
        if not self.ready:
            pct = "" if fraction < 0 else f" ({fraction * 100:.0f}%)"
            self.chat_view.set_hint(f"Loading models… {message}{pct}")

    def _on_loaded(self, info: dict) -> None:
        from specdec_core.models import recent

        self.ready = True
        self.model_info = info
        for role, spec in (("target", self.load_request.target), ("draft", self.load_request.draft)):
            if spec and info.get(role) and self.load_request.factory is None:
                recent.remember(spec, role, info[role], file=self.recent_file)  # listed next time, with what it was
        self.progress_bar.hide()
        t = (info.get("target") or {}).get("name") or "target"
        d = (info.get("draft") or {}).get("name")
        self.status_label.setText(f"Ready: {t}" + (f" + draft {d}" if d else ""))
        self.side_panel.set_models(info.get("target"), info.get("draft"))
        self.chat_view.set_hint("Ask anything. Tokens are coloured by where they came from — see the legend above.")
        server = info.get("server")
        self.legend.show_server_kind(server is not None and server.colours == "none")
        self.side_panel.show_target(server)
        self._update_buttons()
        self._schedule_count()
        self.models_ready.emit()

    def _on_load_failed(self, message: str) -> None:
        self.progress_bar.hide()
        self.status_label.setText("Models not loaded")
        self.side_panel.set_models_text("<b>No models loaded.</b> File ▸ Load models… to try again.")
        self.chat_view.set_hint("The models could not be loaded. Use File ▸ Load models… to choose others.")
        self.meter.clear("context: no models loaded")
        self.show_error("Could not load the models", message)
        self._update_buttons()
        self.load_error.emit(message)

    def load_dialog(self) -> None:
        """File ▸ Load models…: the Models dialog (app/models_dialog.py), window-modal, not blocking."""
        from .models_dialog import ModelsDialog

        # the models loaded now are freed before the next load: their bytes count as free
        freeable = sum((self.model_info.get(r) or {}).get("memory_bytes") or 0 for r in ("target", "draft"))
        dlg = ModelsDialog(self.load_request, self.recent_file, freeable if self.ready else 0, self)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.accepted.connect(lambda: self.start_loading(dlg.request()))
        dlg.open()
        self.models_dialog = dlg

    def connect_dialog(self) -> None:
        """File ▸ Connect to a server…: load that server as the target."""
        current = self.load_request.target if str(self.load_request.target).startswith("http") else ""
        dlg = ServerDialog(current, self)
        if dlg.exec() == ServerDialog.DialogCode.Accepted and dlg.url.text().strip():
            self.start_loading(LoadRequest(dlg.url.text().strip(), None, api_key=dlg.key.text().strip() or None))

    def _close_models_dialog(self) -> None:
        """Its threads end before the window goes (a download in flight keeps its bytes)."""
        import shiboken6

        dlg = self.models_dialog
        if dlg is not None and shiboken6.isValid(dlg):
            dlg.shutdown()

    @property
    def recent_file(self) -> Path:
        from specdec_core.models import recent  # plain JSON, no torch

        return self.history.data_dir / recent.FILE_NAME

    def show_error(self, title: str, message: str) -> QMessageBox:
        """A non-blocking error dialog (the app stays usable behind it)."""
        box = QMessageBox(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, self)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.last_error_dialog = box
        return box

    # -- saving -------------------------------------------------------------------------
    def _save_chat(self, chat: OpenChat) -> None:
        """The chat's row (created once), then its system prompt as the box holds it."""
        def create(h: History) -> None:
            if chat.id is None:
                chat.id = h.new_chat(chat.title, self.system_prompt.toPlainText().strip())

        self.saver.submit(("chat", id(chat)), create)
        prompt = self.system_prompt.toPlainText().strip()
        self.saver.submit(("system", id(chat)), lambda h: h.set_system_prompt(chat.id, prompt), last=True)

    def _save_message(self, message: Message) -> None:
        chat = self.chat
        self.saver.submit(("message", id(chat), id(message)), lambda h: h.save_message(chat.id, message))

    def _save_leaf(self) -> None:
        chat, conv = self.chat, self.conversation
        if chat is not None:
            self.saver.submit(("leaf", id(chat)), lambda h: h.set_leaf(
                chat.id, conv.leaf.id if conv.leaf is not None else None), last=True)

    def _on_save_failed(self, why: str) -> None:
        self.unsaved_label.setText("⚠ not saved")
        self.unsaved_label.setToolTip(f"Chats are not being saved: {why}. They stay in this window; saving resumes "
                                      "by itself.")
        self.unsaved_label.setVisible(True)
        box = QMessageBox(QMessageBox.Icon.Warning, "Your chat is not being saved",
                          f"The chat could not be written to {self.history.path}: {why}.",
                          QMessageBox.StandardButton.Ok, self)
        box.setInformativeText("Nothing is lost: the chat stays in this window, and it is written as soon as the "
                               "disk takes it again (tried every few seconds). Free some disk space, or make the "
                               "data folder writable.")
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.save_dialog = box

    def _on_save_resumed(self) -> None:
        self.unsaved_label.setVisible(False)
        self.status_label.setText("Saved: the chat is on disk again")
        self._refresh_chat_list()

    # -- chats --------------------------------------------------------------------------
    def _refresh_chat_list(self) -> None:
        try:
            chats = self.history.chats()
        except sqlite3.Error:
            return  # the database is unreadable now: the list keeps what it shows
        self.chat_list.show_chats(chats, self.chat_id)
        if self.chat is not None:
            self.pin_action.setChecked(any(c.pinned for c in chats if c.id == self.chat_id))

    def _reset_chat(self) -> None:
        self.stop()
        self.cancel_edit()
        self.dropped_messages = 0
        self.chat_view.clear()
        self.side_panel.reset_metrics("")

    def new_chat(self) -> None:
        self._reset_chat()
        self.chat = None
        self.conversation = Conversation()
        self.system_prompt.setPlainText("")
        self.chat_list.chats.clearSelection()
        self.pin_action.setChecked(False)
        self._update_buttons()
        self._schedule_count()
        self.composer.setFocus()

    def open_chat(self, chat_id: int, message_id: int | None = None) -> None:
        """Open a chat on the branch it showed last, or on the branch through `message_id`."""
        self._reset_chat()
        self.chat = OpenChat(chat_id, self.history.title(chat_id))
        msgs = self.history.all_messages(chat_id)
        leaf_id = message_id if message_id is not None else self.history.leaf(chat_id)
        self.conversation = Conversation(msgs, next((m for m in msgs if m.id == leaf_id), None))
        if message_id is not None and self.conversation.leaf is not None:
            self.conversation.show(self.conversation.leaf)
        self.system_prompt.setPlainText(self.history.system_prompt(chat_id))
        self._render_path()
        self._refresh_chat_list()
        self._show_last_stats()
        self._update_buttons()
        self._schedule_count()

    def open_hit(self, chat_id: int, message_id: int | None) -> None:
        """A search result: its chat, on the branch through the message, scrolled to it."""
        self.open_chat(chat_id, message_id)
        w = next((w for w in self.chat_view.messages if w.message is not None and w.message.id == message_id), None)
        if w is not None:
            QTimer.singleShot(0, lambda: self.chat_view.scroll_to(w))
            w.flash()
            w.select_text(self.search_text)

    def search(self, text: str) -> None:
        self.search_text = text
        try:
            hits = self.history.search(text) if text.strip() else []
        except sqlite3.Error:
            hits = []
        self.chat_list.show_results(text, hits)

    def start_rename(self, chat_id: int | None = None) -> None:
        chat_id = chat_id if chat_id is not None else self.chat_id
        if chat_id is not None:
            self.chat_list.start_rename(chat_id)

    def rename_chat(self, chat_id: int, title: str) -> None:
        title = title.strip() or self.history.title(chat_id)
        if self.chat is not None and self.chat.id == chat_id:
            self.chat.title = title
        self.saver.submit(("title", chat_id), lambda h: h.set_title(chat_id, title), last=True)
        self._refresh_chat_list()

    def pin_chat(self, chat_id: int | None, pinned: bool) -> None:
        if chat_id is None:
            self.pin_action.setChecked(False)
            return
        self.saver.submit(("pin", chat_id), lambda h: h.set_pinned(chat_id, pinned), last=True)
        self._refresh_chat_list()

    def delete_chat(self, chat_id: int | None = None) -> None:
        chat = self.chat
        if chat_id is None or (chat is not None and chat_id == chat.id):
            if chat is not None:
                self.saver.discard(lambda key: key[1] != id(chat))  # writes still waiting for it
                if chat.id is not None:
                    self.saver.submit(("delete", chat.id), lambda h, cid=chat.id: h.delete_chat(cid))
            self.new_chat()
        else:
            self.saver.submit(("delete", chat_id), lambda h: h.delete_chat(chat_id))
        self._refresh_chat_list()

    def _bubble(self, m: Message) -> MessageWidget:
        w = self.chat_view.add_message(m.role)
        w.message = m
        if m.role == "assistant" and m.tokens:
            w.set_tokens([ViewToken(t.token_id, t.text, t.kind, t.step, t.draft_position, t.source) for t in m.tokens])
        else:
            w.set_text(m.content)
        w.set_attachments(m.attachments)
        if m.role == "assistant":
            stats = dict(m.stats, stop_reason="cut") if m.cut else m.stats
            w.set_meta(meta_line(stats))
        if m.cut:
            w.set_error(CUT_NOTE)
        return w

    def _render_path(self) -> None:
        """The chat view shows the branch: bubbles kept where they already show it, the rest anew."""
        path = self.messages
        keep = 0
        for w, m in zip(self.chat_view.messages, path):
            if w.message is not m:
                break
            keep += 1
        self.chat_view.truncate(keep)
        for m in path[keep:]:
            self._bubble(m)
        self._show_versions()

    def _show_versions(self) -> None:
        for w in self.chat_view.messages:
            if w.message is not None and w.message in self.conversation.messages:
                w.set_version(*self.conversation.version(w.message))

    def _show_last_stats(self) -> None:
        last = next((m for m in reversed(self.messages) if m.role == "assistant" and m.stats), None)
        self.side_panel.reset_metrics("")
        if last is not None:
            # an answer the app could not finish kept its running figures: it says so, not "generating…"
            stats = dict(last.stats, stop_reason="cut") if last.cut else last.stats
            series = stats.get("series")  # its own curve (absent in answers saved before it was kept)
            self.side_panel.show_stats(stats, (stats.get("settings") or {}).get("draft_tokens"), series or [])
            if not series:
                self.side_panel.chart.set_points([], "no curve kept for this answer")
            self.side_panel.show_server_figures(stats)

    def export_markdown(self, path: Path | str, chat_id: int | None = None) -> Path:
        path = Path(path)
        if chat_id is not None and chat_id != self.chat_id:
            text = chat_to_markdown(self.history.title(chat_id), self.history.system_prompt(chat_id),
                                    self.history.messages(chat_id))
        else:
            title = self.chat.title if self.chat is not None else "Chat"
            text = chat_to_markdown(title, self.system_prompt.toPlainText(), self.messages)
        path.write_text(text, encoding="utf-8")
        return path

    def export_dialog(self, chat_id: int | None = None) -> None:
        if chat_id is None and not self.messages:
            self.status_label.setText("Nothing to export yet")
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export chat as Markdown", "chat.md", "Markdown (*.md)")
        if path:
            try:
                self.export_markdown(path, chat_id)
            except OSError as exc:
                self.show_error("Could not export the chat", f"{path}: {exc.strerror or exc}")
                return
            self.status_label.setText(f"Exported to {path}")

    # -- editing, versions, attachments ---------------------------------------------------
    def edit_message(self, message: Message | None) -> None:
        """Put a sent message back in the input box; sending it makes a new branch."""
        if message is None or message.role != "user" or self.active is not None:
            return
        self.editing = message
        self.composer.setPlainText(message.content)
        self.attachment_bar.set_items(message.attachments)
        self.edit_banner.setVisible(True)
        self.composer.setFocus()
        cur = self.composer.textCursor()
        cur.movePosition(cur.MoveOperation.End)
        self.composer.setTextCursor(cur)
        self._mark_left_out(self.meter.count)

    def edit_last_message(self) -> None:
        self.edit_message(next((m for m in reversed(self.messages) if m.role == "user"), None))

    def cancel_edit(self) -> None:
        if self.editing is None:
            return
        self.editing = None
        self.edit_banner.setVisible(False)
        self.composer.clear()
        self.attachment_bar.clear()

    def escape(self) -> None:
        """Esc: stop the answer being written, else cancel an edit."""
        if self.active is not None:
            self.stop()
        else:
            self.cancel_edit()

    def switch_version(self, message: Message | None, step: int) -> None:
        if message is None or self.active is not None:
            if self.active is not None:
                self.status_label.setText("Stop the answer being written (Esc) to switch versions")
            return
        shown = self.conversation.switch(message, step)
        if shown is None:
            return
        self.cancel_edit()
        self._render_path()
        self._save_leaf()
        self._show_last_stats()  # the figures of the answer now shown (its own version's)
        self._schedule_count()

    def switch_last_answer(self, step: int) -> None:
        self.switch_version(next((m for m in reversed(self.messages) if m.role == "assistant"), None), step)

    def copy_last_answer(self) -> None:
        last = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        if last is None:
            self.status_label.setText("No answer to copy yet")
            return
        QApplication.clipboard().setText(last.content)
        self.status_label.setText("Copied the last answer")

    def attach_dialog(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, f"Attach files — {limits_text()}", "",
                                                "Text and code files (*);;All files (*)")
        if paths:
            self.attach_files(paths)

    def attach_files(self, paths: list) -> None:
        """Attach each file; the ones that cannot be attached are named in one dialog, with why."""
        refused = []
        for p in paths:
            try:
                self.attachment_bar.add(read_file(p))
            except AttachmentError as exc:
                refused.append(str(exc))
        if refused:
            self.show_error("Not attached", "\n\n".join(refused))
        self.composer.setFocus()

    def attach_paste(self, text: str) -> None:
        n = 1 + sum(1 for a in self.attachment_bar.items if a.origin == "paste")
        self.attachment_bar.add(from_paste(text, n))
        self.status_label.setText("The long paste is attached as a file (click its chip to read it)")

    def dragEnterEvent(self, e):
        if e.mimeData().hasUrls() and any(u.isLocalFile() for u in e.mimeData().urls()):
            e.acceptProposedAction()

    def dropEvent(self, e):
        self.attach_files([u.toLocalFile() for u in e.mimeData().urls() if u.isLocalFile()])
        e.acceptProposedAction()

    # -- the context meter ----------------------------------------------------------------
    def _schedule_count(self) -> None:
        if self.ready:
            self._count_timer.start()

    def _draft_messages(self) -> list[dict[str, str]]:
        """The chat as the next send would make it: the branch (up to the message being edited)
        and the text and attachments in the input box."""
        path = self.messages
        if self.editing is not None and self.editing in path:
            path = path[:path.index(self.editing)]
        text = self.composer.toPlainText().strip()
        sp = self.system_prompt.toPlainText().strip()
        out = ([{"role": "system", "content": sp}] if sp else []) + self._as_prompt(path)
        if text or self.attachment_bar.items:
            out.append({"role": "user", "content": prompt_content(text, self.attachment_bar.items)})
        return out

    def _request_count(self) -> None:
        if not self.ready:
            return
        self._count_job += 1
        self.counter.request(CountJob(self._count_job, self._draft_messages(), self.side_panel.max_new.value(),
                                      self.dropped_messages,
                                      tuple(attachment_block(a) for a in self.attachment_bar.items)))

    def _on_counted(self, count) -> None:
        if count.job_id != self._count_job:
            return  # the chat changed since: a newer count is on its way
        self.meter.show_count(count)
        self.attachment_bar.show_tokens(count.attachment_tokens, count.context)
        self._mark_left_out(count)

    def _mark_left_out(self, count) -> None:
        """The oldest messages the prompt leaves out, or would leave out if sent now."""
        n = self.dropped_messages
        if count is not None and not count.fits and count.drop is not None:
            n = count.drop
        for i, w in enumerate(self.chat_view.messages):
            w.set_left_out(i < n)

    # -- generation ---------------------------------------------------------------------
    def send(self, text: str | None = None) -> bool:
        """Send the composer's text (or `text`) with its attachments. False when nothing was sent."""
        if not isinstance(text, str):
            text = self.composer.toPlainText()
        text = text.strip()
        attachments = list(self.attachment_bar.items)
        if (not text and not attachments) or not self.ready or self.active is not None:
            return False
        if self.chat is None:
            title = " ".join(text.split())[:48] or attachments[0].name
            self.chat = OpenChat(None, title)
            self._save_chat(self.chat)
        else:
            prompt = self.system_prompt.toPlainText().strip()
            chat = self.chat
            self.saver.submit(("system", id(chat)), lambda h: h.set_system_prompt(chat.id, prompt), last=True)
        # an edit is a sibling of the message it replaces; otherwise the next message of the branch
        parent = self.editing.parent if self.editing is not None else self.conversation.leaf
        msg = self.conversation.add(Message("user", text, attachments=attachments), parent)
        self._save_message(msg)
        self.editing = None
        self.edit_banner.setVisible(False)
        self._render_path()
        self.composer.clear()
        self.attachment_bar.clear()
        self._refresh_chat_list()
        self._regenerations = 0
        self._start_generation()
        return True

    @staticmethod
    def _as_prompt(path: list[Message]) -> list[dict[str, str]]:
        return [{"role": m.role, "content": prompt_content(m.content, m.attachments) if m.role == "user" else m.content}
                for m in path if m.role in ("user", "assistant")]

    def _chat_messages(self) -> list[dict[str, str]]:
        sp = self.system_prompt.toPlainText().strip()
        return ([{"role": "system", "content": sp}] if sp else []) + self._as_prompt(self.messages)

    def _start_generation(self, seed_offset: int = 0) -> None:
        settings = self.side_panel.settings()
        settings = settings.replace(seed=settings.seed + seed_offset)
        self._next_request += 1
        req = GenerateRequest(self._next_request, self._chat_messages(), settings, dropped=self.dropped_messages)
        stats = {"mode": settings.mode, "settings": settings.to_dict()}
        if settings.speculative:
            stats["proposer"] = settings.proposer
        msg = self.conversation.add(Message("assistant", "", stats=stats, state="streaming"), self.conversation.leaf)
        w = self._bubble(msg)
        w.set_streaming(True)
        w.set_meta(f"{settings.mode}" + (f" · {settings.proposer}" if settings.speculative else "") + " · generating…")
        self._show_versions()
        self.active = Active(req, w, msg)
        self.side_panel.reset_metrics(settings.mode)
        self.status_label.setText("Generating…")
        self._update_buttons()
        self._save_timer.start()
        self.worker.request_generate(req)

    def _is_current(self, request_id: int) -> bool:
        return self.active is not None and self.active.request.request_id == request_id

    def _on_tokens(self, request_id: int, events: list, stats: dict) -> None:
        if not self._is_current(request_id):
            return
        a = self.active
        a.events.extend(events)
        a.stats = dict(stats)
        if stats.get("decode_tokens_per_second"):
            a.series.append((stats["seconds"], stats["decode_tokens_per_second"]))
        a.widget.append_events(events)
        self.side_panel.show_stats(a.stats, a.request.settings.draft_tokens, a.series)
        # the answer as it stands, saved as it grows
        m = a.message
        new = [ViewToken.from_event(ev) for ev in events]
        m.tokens.extend(StoredToken(t.token_id, t.text, t.kind, t.step, t.draft_position, t.source or "") for t in new)
        m.content += "".join(t.text for t in new)
        m.stats = self._message_stats(a, stats)
        a.unsaved += len(events)
        self._save_streaming(force=False)

    def _message_stats(self, a: Active, stats: dict) -> dict:
        settings = a.request.settings
        out = dict(stats)
        out.pop("text", None)
        out.setdefault("mode", settings.mode)
        if settings.speculative:
            out.setdefault("proposer", settings.proposer)
        out["settings"] = settings.to_dict()
        # the decode rate's curve, kept with the answer: switching versions shows each one's own
        out["series"] = [[round(t, 3), round(v, 2)] for t, v in a.series]
        return out

    def _save_streaming(self, force: bool) -> None:
        """Write the streaming answer when SAVE_TOKENS tokens or SAVE_SECONDS wait (or `force`)."""
        a = self.active
        if a is None or not a.unsaved or self.chat is None:
            return
        if force or a.unsaved >= SAVE_TOKENS or time.monotonic() - a.saved_at >= SAVE_SECONDS:
            a.unsaved = 0
            a.saved_at = time.monotonic()
            self._save_message(a.message)

    def _on_finished(self, request_id: int, stats: dict) -> None:
        if not self._is_current(request_id):
            return
        self._complete(stats)

    def _on_failed(self, request_id: int, message: str) -> None:
        if not self._is_current(request_id):
            return
        a = self.active
        if a.events:  # it broke off midway: keep what came, marked as cut
            stats = dict(a.stats)
            stats.update(stop_reason="error", error=message)
            self._complete(stats)
            return
        self._end_without_answer(a)
        a.widget.set_streaming(False)
        a.widget.set_error(f"generation failed: {message}")
        a.widget.set_meta("failed")
        a.widget.message = None  # not part of the chat: Regenerate replaces it
        self.status_label.setText(f"Generation failed: {message}")
        self._update_buttons()
        self.show_error("Generation failed", message)

    def _end_without_answer(self, a: Active) -> None:
        """No token came: the answer is taken out of the conversation (nothing of it was saved)."""
        self.active = None
        self._save_timer.stop()
        self.conversation.remove(a.message)
        self._show_versions()

    def _on_too_long(self, request_id: int, fit) -> None:
        """The chat plus its answer budget does not fit the target's context: nothing was
        computed. Offer to leave the oldest turns out of the prompt (they stay in the chat and in
        history); when even the last message does not fit, say what to shorten."""
        if not self._is_current(request_id):
            return
        self._end_without_answer(self.active)
        self.chat_view.remove_last()  # the empty answer bubble: no answer was started
        self.status_label.setText("The chat does not fit the target's context")
        self._update_buttons()
        n, budget, context, drop = fit.prompt_tokens, fit.max_new_tokens, fit.context, fit.drop
        text = (f"This chat is {n} tokens and its answer may take up to {budget} more, but the target's "
                f"context holds {context} tokens.")
        box = QMessageBox(QMessageBox.Icon.Warning, "The chat does not fit the context", text,
                          QMessageBox.StandardButton.NoButton, self)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.drop_button = None
        if drop is None:
            box.setInformativeText("Even your last message with that answer budget does not fit: shorten it, or "
                                   "lower Max new tokens, then press Regenerate. Nothing was deleted.")
            box.addButton(QMessageBox.StandardButton.Ok)
        else:
            box.setInformativeText(f"Leave out the oldest {drop} message(s) of this conversation and send again? "
                                   "They stay in the chat and in its history (marked in the chat); only the model "
                                   "stops seeing them.")
            box.drop_button = box.addButton("Drop oldest turns", QMessageBox.ButtonRole.AcceptRole)
            box.addButton(QMessageBox.StandardButton.Cancel)

            def clicked(button, drop=drop):
                if button is box.drop_button and self.active is None:
                    self.dropped_messages = drop
                    self._start_generation(seed_offset=self._regenerations)  # the same request again
                    self._schedule_count()

            box.buttonClicked.connect(clicked)
        box.open()
        self.context_dialog = box

    def stop(self) -> None:
        """Esc: cancel the running generation. What streamed so far is kept and saved as a
        stopped message; anything the worker still sends for it is dropped."""
        if self.active is None:
            return
        self.worker.stop(self.active.request.request_id)
        # the engine's running stats of the last batch shown: they count exactly the tokens
        # that are kept (the worker forwards nothing once stopped)
        stats = dict(self.active.stats) or {"new_tokens": 0}
        stats["stop_reason"] = "cancelled"
        self._complete(stats)

    def _complete(self, stats: dict) -> None:
        a = self.active
        self.active = None
        self._save_timer.stop()
        settings = a.request.settings
        stats = self._message_stats(a, stats)
        tokens = [ViewToken.from_event(ev) for ev in a.events]
        content = "".join(t.text for t in tokens)
        msg = a.message
        msg.content = content
        msg.tokens = [StoredToken(t.token_id, t.text, t.kind, t.step, t.draft_position, t.source or "") for t in tokens]
        msg.stats = stats
        msg.state = ""
        if self.chat is not None:
            self._save_message(msg)
        w = a.widget
        w.tokens = tokens
        w.text = content
        w.set_streaming(False)
        w.set_meta(meta_line(stats))
        self.side_panel.show_stats(stats, settings.draft_tokens, a.series)
        self.side_panel.show_server_figures(stats)
        reason = stats.get("stop_reason", "")
        self.status_label.setText("Stopped" if reason == "cancelled" else "Ready")
        if reason == "error":  # a stream that broke off: the part is kept, the dialog says why
            w.set_error(f"cut off: {stats.get('error', '')}")
            self.status_label.setText("The answer was cut off")
            self.show_error("The answer was cut off",
                            stats.get("error", "") + " — what arrived is kept, marked as cut.")
        self._update_buttons()
        self._schedule_count()
        self.message_done.emit(reason)

    def regenerate(self) -> None:
        """A new version of the last answer; the earlier ones stay (‹ › on the answer)."""
        if self.active is not None or not self.ready or not self.messages:
            return
        self.cancel_edit()
        last = self.messages[-1]
        if last.role == "assistant":  # the new answer is its sibling: the branch ends at the question
            self.conversation.leaf = last.parent
        self._render_path()  # also takes away a failed attempt's bubble
        if not self.messages or self.messages[-1].role != "user":
            return
        self._regenerations += 1
        self._start_generation(seed_offset=self._regenerations)

    # -- theme --------------------------------------------------------------------------
    def _follow_system_toggled(self, on: bool) -> None:
        self.set_theme_mode("auto" if on else ("dark" if self.theme.dark else "light"))

    def _dark_toggled(self, on: bool) -> None:
        self.set_theme_mode("dark" if on else "light")

    def set_theme_mode(self, mode: str) -> None:
        """'auto' (follow the system), 'light' or 'dark'; remembered with the chats."""
        self.switcher.set_mode(mode)
        self._sync_theme_actions()
        self.saver.submit(("pref", "theme"), lambda h: h.set_pref("theme", self.switcher.mode), last=True)

    def _sync_theme_actions(self) -> None:
        if not hasattr(self, "dark_action"):
            return
        for action, on in ((self.follow_system_action, self.switcher.mode == "auto"), (self.dark_action, self.theme.dark)):
            action.blockSignals(True)
            action.setChecked(on)
            action.blockSignals(False)

    def _retheme(self) -> None:
        self.legend.retheme()
        self.chat_view.retheme()
        self.side_panel.update()
        for w in self.side_panel.findChildren(QWidget):
            w.update()
        if hasattr(self, "race_view"):
            self.race_view.retheme()
        self._sync_theme_actions()

    # -- misc ---------------------------------------------------------------------------
    def set_colours(self, on: bool) -> None:
        self.chat_view.set_colours(on)
        if self.colour_action.isChecked() != on:
            self.colour_action.setChecked(on)

    def _update_buttons(self) -> None:
        busy = self.active is not None
        has_input = bool(self.composer.toPlainText().strip()) or bool(self.attachment_bar.items)
        self.send_button.setEnabled(self.ready and not busy and has_input)
        self.send_button.setText("Send" if self.ready else "Loading…")
        self.stop_button.setEnabled(busy)
        self.regen_button.setEnabled(self.ready and not busy and bool(self.messages))

    def about(self) -> None:
        from PySide6 import __version__ as pyside_version

        QMessageBox.about(
            self,
            "About SpecDec Chat",
            f"<h3>SpecDec Chat {html.escape(app_version())}</h3>"
            "<p>A chat app that makes exact speculative decoding visible: a small draft model "
            "proposes tokens, the target verifies them in one pass, and every token is coloured by "
            "where it came from.</p>"
            f"<p>Qt for Python {pyside_version} · Apache-2.0</p>",
        )

    def shutdown(self) -> bool:
        """Stop the worker thread; True when it ended (a model load cannot be interrupted)."""
        if self._closed:
            return True
        self._closed = True
        if self.active is not None:  # what streamed so far is kept, as a stopped answer
            self.stop()
        self.ready = False  # nothing more is counted or sent
        self._count_timer.stop()
        self.saver.flush()
        self.race_view.shutdown()
        self.local_server.shutdown()
        self._close_models_dialog()
        stop_thread(self.counter_thread)
        ended = stop_worker(self.worker, self.thread, 5000)
        self.history.close()
        return ended

    def closeEvent(self, e):
        if not self._closed and not self._quit_anyway and self.saver.pending and not self.saver.flush():
            e.ignore()  # writes still wait for the disk: ask first (window-modal, no nested event loop)
            self._ask_before_quitting()
            return
        self.shutdown_ok = self.shutdown()
        super().closeEvent(e)

    def _ask_before_quitting(self) -> None:
        box = QMessageBox(QMessageBox.Icon.Warning, "Quit without saving?",
                          f"{self.saver.pending} change(s) to your chats could not be written: {self.saver.error}.",
                          QMessageBox.StandardButton.Cancel, self)
        box.setInformativeText("Quit anyway and lose them, or keep the window open and free some space "
                               "(File ▸ Export keeps a copy of the chat).")
        quit_button = box.addButton("Quit without saving", QMessageBox.ButtonRole.DestructiveRole)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def clicked(button):
            if button is quit_button:
                self._quit_anyway = True
                self.close()

        box.buttonClicked.connect(clicked)
        box.open()
        self.quit_dialog = box
