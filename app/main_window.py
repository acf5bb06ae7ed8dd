"""The main window: chats on the left, the conversation in the middle, the side panel on the right.

The window lays its parts out and wires them together; what each part does lives with it:

- app/chat_page.py          the Chat tab's widgets (input box, buttons, meter, ...);
- app/persistence.py        the chats on disk (ChatStore, through the Saver) and what the user is
                            told when the disk refuses a write (SaveAlerts);
- app/model_loading.py      loading the models, and whether the window is `ready`;
- app/chat_control.py       the chat shown and its branches, edits, versions, the chat list;
- app/context_watch.py      the context meter, counted in its own thread;
- app/generation_control.py Send, Stop, Regenerate, Continue and the worker's signals while it writes;
- app/message_actions.py    one message's menu: Continue, Regenerate, Edit an answer, Delete;
- app/preferences.py        the theme and the token colours;
- app/user_memory.py, app/saved_prompts.py, app/chat_transfer.py  what is kept between runs:
                            settings, the models loaded last, saved system prompts, chat files;
- app/race_view.py, app/local_server.py  the Race tab and View ▸ Local server.

They are made in the order they depend on each other (store, models, chats, context,
generation), each given what it uses, so nothing is ever half built; where an earlier part must
react to a later one, it emits a signal and this window connects it. GUI thread only: the Worker
computes in its own thread and is reached through its request_* methods and signals.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QLabel, QMainWindow, QMenu, QMessageBox, QProgressBar, QSplitter, QTabWidget

from . import pyside_guard
from .chat_control import ChatControl
from .chat_list import ChatList
from .chat_page import ChatPage
from .context_watch import ContextWatch
from .generation_control import GenerationControl
from .message_actions import MessageActions
from .model_loading import ModelLoading
from .models_worker import stop_thread
from .persistence import ChatStore, SaveAlerts
from .preferences import Preferences
from .side_panel import SidePanel
from .theme import Theme, app_icon
from .worker import LoadRequest, start_worker, stop_worker

DEFAULT_SIZE = (1280, 820)


def app_version() -> str:
    from specdec_core import __version__  # no torch: specdec_core/__init__ is light

    return __version__


class MainWindow(QMainWindow):
    models_ready = Signal()
    message_done = Signal(str)  # stop reason of the assistant message just saved
    load_error = Signal(str)

    def __init__(self, data_dir: Path | str | None = None, theme: Theme | None = None,
                 load_request: LoadRequest | None = None, theme_mode: str | None = None,
                 restore_models: dict | None = None):
        super().__init__()
        pyside_guard.install()  # before the first render: PySide6 6.12.0 on Python 3.11 (see there)
        self.theme = theme or Theme(False)
        self.last_error_dialog: QMessageBox | None = None
        self._closed = False
        self._quit_anyway = False  # the user chose to quit with writes still waiting for the disk
        self.setWindowTitle("SpecDec Chat")
        self.setWindowIcon(app_icon())
        self.setAcceptDrops(True)  # a file dropped anywhere on the window is attached
        self.store = ChatStore(data_dir, self)
        self.worker, self.thread = start_worker(self)
        self._build()
        self._fit_screen()
        self._make_controllers(load_request or LoadRequest())
        self._wire_worker()  # before the race tab's slots: the window hears of a load first
        from .race_view import add_race_tab  # a Race tab sharing this worker's thread and engine

        self.race_view = add_race_tab(self)
        self.prefs = Preferences(self.theme, self.store, self.page, self.side_panel, self.race_view, self)
        self.save_alerts = SaveAlerts(self.store, self.unsaved_label, self.status_label, self)
        self._remember(restore_models)
        self._build_menus()
        self._wire_widgets()
        from .local_server import add_local_server  # View ▸ Local server: these models served to other tools

        self.local_server = add_local_server(self, self.models)
        self.chats.refresh_list()
        self.generation.update_buttons()
        if theme_mode is not None:  # the command line's, else ("saved") the one chosen last time
            self.prefs.restore(theme_mode)
        if self.store.open_error:
            QTimer.singleShot(0, lambda: self.show_error(
                "Chats cannot be saved", f"The chat database in {self.store.history.data_dir} cannot be opened: "
                f"{self.store.open_error}. This session's chats stay in this window until it closes."))

    # -- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        self.chat_list = ChatList()
        self.chat_list.setMinimumWidth(150)
        self.page = ChatPage(self.theme)
        # the centre is a tab widget so other views (the race view) can be added as tabs
        self.tabs = QTabWidget()
        self.tabs.setTabBarAutoHide(True)
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.page, "Chat")
        self.side_panel = SidePanel(self.theme)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        split.setHandleWidth(1)
        for i, (widget, stretch) in enumerate(((self.chat_list, 0), (self.tabs, 1), (self.side_panel, 0))):
            split.addWidget(widget)
            split.setStretchFactor(i, stretch)
        split.setSizes([200, 760, 320])
        self.split = split
        self.setCentralWidget(split)
        self._build_status_bar()

    def _build_status_bar(self) -> None:
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

    # -- the parts, in the order they depend on each other --------------------------------
    def _make_controllers(self, load_request: LoadRequest) -> None:
        page, side, status, errors = self.page, self.side_panel, self.status_label, self.show_error
        self.models = ModelLoading(self.worker, load_request, self.store, page, side, status, self.progress_bar,
                                   errors, self)
        self.chats = ChatControl(self.store, page, self.chat_list, side, status, errors, self)
        self.context = ContextWatch(self.worker, self.chats, self.models, page, side, self)
        self.generation = GenerationControl(self.worker, self.chats, self.models, self.context, page, side, status,
                                            errors, self)
        self.context.answering = lambda: self.generation.active is not None
        self.actions = MessageActions(self.chats, self.generation, self)
        # what an earlier part says, the later ones answer
        for changed in (self.models.ready_changed, self.chats.changed):
            changed.connect(self.generation.update_buttons)
            changed.connect(self.context.schedule)
        self.models.loaded.connect(self.models_ready)
        self.models.failed.connect(self.load_error)
        self.chats.leaving.connect(self.generation.stop)  # what streamed is kept in the chat it belongs to
        self.generation.done.connect(self.message_done)

    def _remember(self, restore_models: dict | None) -> None:
        """What is kept between runs: the settings, the models loaded last (when `restore_models`
        is given: the command line's device, dtype, ... over them), saved system prompts, chat files."""
        from .chat_transfer import ChatTransfer
        from .saved_prompts import SavedPrompts
        from .user_memory import UserMemory

        self.memory = UserMemory(self.store, self.models, self.side_panel, self.race_view, self.status_label, self)
        if restore_models is not None:
            self.memory.restore_models(restore_models)
        self.prompts = SavedPrompts(self.store, self.page.prompts_button, self.page.system_prompt, self.status_label,
                                    self)
        self.transfer = ChatTransfer(self.store, self.chats, self.status_label, self.show_error, self)

    def _wire_worker(self) -> None:
        w, models, gen = self.worker, self.models, self.generation
        w.progress.connect(models.on_progress)
        w.loaded.connect(models.on_loaded)
        w.load_failed.connect(models.on_load_failed)
        w.tokens.connect(gen.on_tokens)
        w.finished.connect(gen.on_finished)
        w.failed.connect(gen.on_failed)
        w.too_long.connect(gen.on_too_long)

    def _wire_widgets(self) -> None:
        chats, gen, schedule = self.chats, self.generation, self.context.schedule
        lst = self.chat_list
        for signal, slot in ((lst.new_requested, chats.new_chat), (lst.open_requested, chats.open_chat),
                             (lst.hit_chosen, chats.open_hit), (lst.rename_requested, chats.rename_chat),
                             (lst.pin_requested, chats.pin_chat), (lst.delete_requested, chats.delete_chat),
                             (lst.export_requested, chats.export_dialog), (lst.search_changed, chats.search),
                             (lst.export_json_requested, self.transfer.export_dialog)):
            signal.connect(slot)
        p = self.page
        p.system_prompt.files_dropped.connect(chats.attach_files)
        p.system_prompt.textChanged.connect(schedule)
        p.chat_view.edit_requested.connect(
            lambda w: self.actions.edit_answer(w.message) if w.role == "assistant" else chats.edit_message(w.message))
        p.chat_view.continue_requested.connect(lambda w: gen.continue_answer(w.message))
        p.chat_view.version_requested.connect(lambda w, step: chats.switch_version(w.message, step))
        p.edit_banner.cancelled.connect(chats.cancel_edit)
        for changed in (p.attachment_bar.changed, p.composer.textChanged):
            changed.connect(gen.update_buttons)
            changed.connect(schedule)
        p.composer.submitted.connect(gen.send)
        p.composer.edit_last.connect(chats.edit_last_message)
        p.composer.long_paste.connect(chats.attach_paste)
        p.composer.files_dropped.connect(chats.attach_files)
        p.send_button.clicked.connect(gen.send)
        p.stop_button.clicked.connect(gen.stop)
        p.regen_button.clicked.connect(lambda: gen.regenerate())
        p.attach_button.clicked.connect(chats.attach_dialog)
        self.side_panel.max_new.valueChanged.connect(schedule)
        self.store.saver.resumed.connect(chats.refresh_list)  # after SaveAlerts has cleared its mark

    # -- menus ----------------------------------------------------------------------------
    def _build_menus(self) -> None:
        self._build_file_menu(self.menuBar().addMenu("&File"))
        self._build_chat_menu(self.menuBar().addMenu("&Chat"))
        m = self.view_menu = self.menuBar().addMenu("&View")  # local_server adds its entry here
        for action in (self.prefs.follow_system_action, self.prefs.dark_action, self.prefs.colour_action):
            m.addAction(action)
        self._act(self.menuBar().addMenu("&Help"), "&About SpecDec Chat", self.about)

    def _build_file_menu(self, m: QMenu) -> None:
        chats, models = self.chats, self.models
        self._act(m, "&New chat", chats.new_chat, "Ctrl+N")
        self._act(m, "&Attach files…", chats.attach_dialog, "Ctrl+O")
        self._act(m, "&Export chat as Markdown…", lambda: chats.export_dialog(), "Ctrl+E")
        self._act(m, "Export chat as &JSON…", lambda: self.transfer.export_dialog(), "Ctrl+Shift+E")
        self._act(m, "&Import chat from JSON…", self.transfer.import_dialog, "Ctrl+Shift+O")
        self._act(m, "Re&name chat…", lambda: chats.start_rename(), "F2")
        m.addAction(chats.pin_action)
        self._act(m, "&Delete chat", lambda: chats.delete_chat())
        m.addSeparator()
        self._act(m, "&Load models…", models.load_dialog, "Ctrl+L")
        self._act(m, "Connect to a &server…", models.connect_dialog)
        m.addSeparator()
        self.quit_action = self._act(m, "&Quit", self.close, "Ctrl+Q")

    def _build_chat_menu(self, m: QMenu) -> None:
        chats, gen = self.chats, self.generation
        # keys the input box itself handles are listed here too ("\t": shown, not bound twice)
        self._act(m, "&Send\tEnter", gen.send)
        self._act(m, "New &line\tShift+Enter", lambda: self.page.composer.insertPlainText("\n"))
        self.stop_action = self._act(m, "S&top (or cancel an edit)", gen.escape, "Esc")
        self.stop_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self._act(m, "&Regenerate", lambda: gen.regenerate(), "Ctrl+R")
        self._act(m, "Co&ntinue the last answer", lambda: gen.continue_answer(), "Ctrl+Shift+Return")
        self._act(m, "&Edit your last message\tUp", chats.edit_last_message)
        self._act(m, "Previous version of the last answer", lambda: chats.switch_last_answer(-1), "Alt+Left")
        self._act(m, "Next version of the last answer", lambda: chats.switch_last_answer(1), "Alt+Right")
        self._act(m, "&Copy the last answer", chats.copy_last_answer, "Ctrl+Shift+C")
        self._act(m, "Search chats…", self.chat_list.focus_search, "Ctrl+F")
        self._act(m, "Toggle standard / speculative", lambda: self.side_panel.mode_button.toggle(), "Ctrl+M")

    def _act(self, menu: QMenu, text: str, slot, shortcut: str | None = None) -> QAction:
        action = QAction(text, self)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

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

    # -- dialogs --------------------------------------------------------------------------
    def show_error(self, title: str, message: str) -> QMessageBox:
        """A non-blocking error dialog (the app stays usable behind it)."""
        box = QMessageBox(QMessageBox.Icon.Critical, title, message, QMessageBox.StandardButton.Ok, self)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.last_error_dialog = box
        return box

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

    # -- files dropped on the window ------------------------------------------------------
    def dragEnterEvent(self, e):
        if e.mimeData().hasUrls() and any(u.isLocalFile() for u in e.mimeData().urls()):
            e.acceptProposedAction()

    def dropEvent(self, e):
        self.chats.attach_files([u.toLocalFile() for u in e.mimeData().urls() if u.isLocalFile()])
        e.acceptProposedAction()

    # -- closing --------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Stop the worker thread; True when it ended (a model load cannot be interrupted)."""
        if self._closed:
            return True
        self._closed = True
        self.generation.stop()  # what streamed so far is kept, as a stopped answer
        self.models.ready = False  # nothing more is counted or sent
        self.context.stop()
        self.memory.flush()
        self.store.saver.flush()
        self.race_view.shutdown()
        self.local_server.shutdown()
        self.models.close_dialog()
        stop_thread(self.context.counter_thread)
        ended = stop_worker(self.worker, self.thread, 5000)
        self.store.history.close()
        return ended

    def closeEvent(self, e):
        saver = self.store.saver
        if not self._closed and not self._quit_anyway and saver.pending and not saver.flush():
            e.ignore()  # writes still wait for the disk: ask first (window-modal, no nested event loop)
            self.save_alerts.ask_before_quitting(self._quit_without_saving)
            return
        self.shutdown_ok = self.shutdown()
        super().closeEvent(e)

    def _quit_without_saving(self) -> None:
        self._quit_anyway = True
        self.close()
