"""The main window: chats on the left, the conversation in the middle, the side panel on the right.

GUI thread only. It owns the History (SQLite) and talks to the Worker through its request_*
methods and signals; it keeps the id of the one generation it is waiting for and drops every
signal from any other id.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from .chat_view import ChatView, Legend, MessageWidget, ViewToken
from .history import History, Message, StoredToken, chat_to_markdown
from .figures import meta_line
from .server_target import ServerDialog
from .side_panel import SidePanel
from .theme import Theme, app_icon
from .worker import GenerateRequest, LoadRequest, start_worker, stop_worker


def app_version() -> str:
    from specdec_core import __version__  # no torch: specdec_core/__init__ is light

    return __version__


class Composer(QPlainTextEdit):
    """The input box: Enter sends, Shift+Enter inserts a newline."""

    submitted = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Composer")
        self.setPlaceholderText("Message the model…  (Enter sends, Shift+Enter for a new line, Esc stops)")
        self.setTabChangesFocus(True)
        self.setFixedHeight(74)

    def keyPressEvent(self, e):
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (e.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(e)


@dataclass
class Active:
    """The generation the window is waiting for."""

    request: GenerateRequest
    widget: MessageWidget
    events: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)  # the engine's running Stats for `events`
    series: list = field(default_factory=list)  # (seconds, decode tok/s) as the engine reported them


class MainWindow(QMainWindow):
    models_ready = Signal()
    message_done = Signal(str)  # stop reason of the assistant message just saved
    load_error = Signal(str)

    def __init__(self, data_dir: Path | str | None = None, theme: Theme | None = None,
                 load_request: LoadRequest | None = None):
        super().__init__()
        self.theme = theme or Theme(False)
        self.history = History(data_dir)
        self.load_request = load_request or LoadRequest()
        self.chat_id: int | None = None
        self.messages: list[Message] = []
        self.active: Active | None = None
        self.ready = False
        self.model_info: dict = {}
        self.models_dialog = None
        self.last_error_dialog: QMessageBox | None = None
        self.context_dialog: QMessageBox | None = None  # the last "does not fit the context" dialog
        self.dropped_messages = 0  # oldest messages of this chat left out of the prompt (kept in the chat)
        self._next_request = 0
        self._regenerations = 0

        self.setWindowTitle("SpecDec Chat")
        self.setWindowIcon(app_icon())
        self.resize(1280, 820)
        self._build()
        self._build_menus()
        self.worker, self.thread = start_worker(self)
        self.worker.progress.connect(self._on_progress)
        self.worker.loaded.connect(self._on_loaded)
        self.worker.load_failed.connect(self._on_load_failed)
        self.worker.tokens.connect(self._on_tokens)
        self.worker.finished.connect(self._on_finished)
        self.worker.failed.connect(self._on_failed)
        self.worker.too_long.connect(self._on_too_long)
        from .race_view import add_race_tab  # a Race tab sharing this worker's thread and engine

        self.race_view = add_race_tab(self)
        from .local_server import add_local_server  # View ▸ Local server: these models served to other tools

        self.local_server = add_local_server(self)
        self._refresh_chat_list()
        self._update_buttons()
        self._closed = False

    # -- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        split.setHandleWidth(1)

        left = QWidget()
        llay = QVBoxLayout(left)
        llay.setContentsMargins(8, 8, 8, 8)
        self.new_button = QPushButton("+  New chat")
        self.new_button.clicked.connect(self.new_chat)
        llay.addWidget(self.new_button)
        self.chat_list = QListWidget()
        self.chat_list.setObjectName("ChatList")
        self.chat_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.chat_list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.chat_list.setWordWrap(False)
        self.chat_list.itemClicked.connect(lambda it: self.open_chat(it.data(Qt.ItemDataRole.UserRole)))
        llay.addWidget(self.chat_list, 1)
        left.setMinimumWidth(170)
        split.addWidget(left)

        chat_page = QWidget()
        clay = QVBoxLayout(chat_page)
        clay.setContentsMargins(0, 0, 0, 8)
        clay.setSpacing(4)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("SystemPrompt")
        self.system_prompt.setPlaceholderText("System prompt (optional), e.g. “You are a concise assistant.”")
        self.system_prompt.setFixedHeight(44)
        sp_row = QHBoxLayout()
        sp_row.setContentsMargins(18, 8, 18, 0)
        sp_row.addWidget(self.system_prompt)
        clay.addLayout(sp_row)
        self.legend = Legend(self.theme)
        self.legend.toggled.connect(self.set_colours)
        clay.addWidget(self.legend)
        self.chat_view = ChatView(self.theme)
        clay.addWidget(self.chat_view, 1)
        comp_row = QHBoxLayout()
        comp_row.setContentsMargins(18, 0, 18, 0)
        self.composer = Composer()
        self.composer.submitted.connect(self.send)
        self.composer.textChanged.connect(self._update_buttons)
        comp_row.addWidget(self.composer, 1)
        btns = QVBoxLayout()
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("SendButton")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("StopButton")
        self.stop_button.setToolTip("Stop generating (Esc)")
        self.stop_button.clicked.connect(self.stop)
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.setToolTip("Generate the last answer again (Ctrl+R)")
        self.regen_button.clicked.connect(self.regenerate)
        for b in (self.send_button, self.stop_button, self.regen_button):
            btns.addWidget(b)
        comp_row.addLayout(btns)
        clay.addLayout(comp_row)

        # the centre is a tab widget so other views (the race view) can be added as tabs
        self.tabs = QTabWidget()
        self.tabs.setTabBarAutoHide(True)
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(chat_page, "Chat")
        split.addWidget(self.tabs)

        self.side_panel = SidePanel(self.theme)
        split.addWidget(self.side_panel)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 0)
        split.setSizes([200, 760, 320])
        self.setCentralWidget(split)

        self.status_label = QLabel("")
        self.progress_bar = QProgressBar()
        self.progress_bar.setMaximumWidth(220)
        self.progress_bar.setTextVisible(False)
        self.progress_bar.hide()
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.progress_bar)

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
        act(m, "&Export chat as Markdown…", self.export_dialog, "Ctrl+E")
        act(m, "&Delete chat", self.delete_chat)
        m.addSeparator()
        act(m, "&Load models…", self.load_dialog, "Ctrl+L")
        act(m, "Connect to a &server…", self.connect_dialog)
        m.addSeparator()
        self.quit_action = act(m, "&Quit", self.close, "Ctrl+Q")
        m = self.menuBar().addMenu("&Chat")
        act(m, "&Send", self.send)
        self.stop_action = act(m, "S&top", self.stop, "Esc")
        self.stop_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        act(m, "&Regenerate", self.regenerate, "Ctrl+R")
        act(m, "Toggle standard / speculative", lambda: self.side_panel.mode_button.toggle(), "Ctrl+M")
        m = self.view_menu = self.menuBar().addMenu("&View")
        self.colour_action = act(m, "Token &colours", lambda on: self.legend.checkbox.setChecked(on), "Ctrl+T", True)
        self.colour_action.setChecked(True)
        m = self.menuBar().addMenu("&Help")
        act(m, "&About SpecDec Chat", self.about)

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
        self.models_ready.emit()

    def _on_load_failed(self, message: str) -> None:
        self.progress_bar.hide()
        self.status_label.setText("Models not loaded")
        self.side_panel.set_models_text("<b>No models loaded.</b> File ▸ Load models… to try again.")
        self.chat_view.set_hint("The models could not be loaded. Use File ▸ Load models… to choose others.")
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

    # -- chats --------------------------------------------------------------------------
    def _refresh_chat_list(self) -> None:
        self.chat_list.clear()
        for c in self.history.chats():
            it = QListWidgetItem(c.title or "(untitled)")
            it.setData(Qt.ItemDataRole.UserRole, c.id)
            it.setToolTip(c.title)
            self.chat_list.addItem(it)
            if c.id == self.chat_id:
                it.setSelected(True)
                self.chat_list.setCurrentItem(it)

    def new_chat(self) -> None:
        self.stop()
        self.chat_id = None
        self.dropped_messages = 0
        self.messages = []
        self.chat_view.clear()
        self.system_prompt.setPlainText("")
        self.chat_list.clearSelection()
        self.side_panel.reset_metrics("")
        self._update_buttons()
        self.composer.setFocus()

    def open_chat(self, chat_id: int) -> None:
        self.stop()
        self.chat_id = chat_id
        self.dropped_messages = 0
        self.messages = self.history.messages(chat_id)
        self.chat_view.clear()
        self.system_prompt.setPlainText(self.history.system_prompt(chat_id))
        for m in self.messages:
            self._add_bubble(m)
        self._refresh_chat_list()
        self._update_buttons()

    def delete_chat(self) -> None:
        if self.chat_id is not None:
            self.history.delete_chat(self.chat_id)
        self.new_chat()
        self._refresh_chat_list()

    def _add_bubble(self, m: Message) -> MessageWidget:
        w = self.chat_view.add_message(m.role)
        if m.role == "assistant" and m.tokens:
            w.set_tokens([ViewToken(t.token_id, t.text, t.kind, t.step, t.draft_position) for t in m.tokens])
        else:
            w.set_text(m.content)
        if m.role == "assistant":
            w.set_meta(meta_line(m.stats))
        return w

    def export_markdown(self, path: Path | str) -> Path:
        path = Path(path)
        title = self.history.title(self.chat_id) if self.chat_id is not None else "Chat"
        path.write_text(chat_to_markdown(title, self.system_prompt.toPlainText(), self.messages), encoding="utf-8")
        return path

    def export_dialog(self) -> None:
        if not self.messages:
            self.status_label.setText("Nothing to export yet")
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export chat as Markdown", "chat.md", "Markdown (*.md)")
        if path:
            self.export_markdown(path)
            self.status_label.setText(f"Exported to {path}")

    # -- generation ---------------------------------------------------------------------
    def send(self, text: str | None = None) -> bool:
        """Send the composer's text (or `text`). False when nothing was sent."""
        if not isinstance(text, str):
            text = self.composer.toPlainText()
        text = text.strip()
        if not text or not self.ready or self.active is not None:
            return False
        sys_prompt = self.system_prompt.toPlainText().strip()
        if self.chat_id is None:
            title = " ".join(text.split())[:48]
            self.chat_id = self.history.new_chat(title, sys_prompt)
        else:
            self.history.set_system_prompt(self.chat_id, sys_prompt)
        msg = Message("user", text)
        self.history.add_message(self.chat_id, msg)
        self.messages.append(msg)
        self._add_bubble(msg)
        self.composer.clear()
        self._refresh_chat_list()
        self._regenerations = 0
        self._start_generation()
        return True

    def _chat_messages(self) -> list[dict[str, str]]:
        out = []
        sp = self.system_prompt.toPlainText().strip()
        if sp:
            out.append({"role": "system", "content": sp})
        out += [{"role": m.role, "content": m.content} for m in self.messages if m.role in ("user", "assistant")]
        return out

    def _start_generation(self, seed_offset: int = 0) -> None:
        settings = self.side_panel.settings()
        settings = settings.replace(seed=settings.seed + seed_offset)
        self._next_request += 1
        req = GenerateRequest(self._next_request, self._chat_messages(), settings, dropped=self.dropped_messages)
        w = self.chat_view.add_message("assistant")
        w.set_streaming(True)
        w.set_meta(f"{settings.mode}" + (f" · {settings.proposer}" if settings.speculative else "") + " · generating…")
        self.active = Active(req, w)
        self.side_panel.reset_metrics(settings.mode)
        self.status_label.setText("Generating…")
        self._update_buttons()
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
        self.active = None
        a.widget.set_streaming(False)
        a.widget.set_error(f"generation failed: {message}")
        a.widget.set_meta("failed")
        self.status_label.setText(f"Generation failed: {message}")
        self._update_buttons()
        self.show_error("Generation failed", message)

    def _on_too_long(self, request_id: int, fit) -> None:
        """The chat plus its answer budget does not fit the target's context: nothing was
        computed. Offer to leave the oldest turns out of the prompt (they stay in the chat and in
        history); when even the last message does not fit, say what to shorten."""
        if not self._is_current(request_id):
            return
        self.active = None
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
                                   "They stay in the chat and in its history; only the model stops seeing them.")
            box.drop_button = box.addButton("Drop oldest turns", QMessageBox.ButtonRole.AcceptRole)
            box.addButton(QMessageBox.StandardButton.Cancel)

            def clicked(button, drop=drop):
                if button is box.drop_button and self.active is None:
                    self.dropped_messages = drop
                    self._start_generation(seed_offset=self._regenerations)  # the same request again

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
        settings = a.request.settings
        stats = dict(stats)
        stats.pop("text", None)
        stats.setdefault("mode", settings.mode)
        if settings.speculative:
            stats.setdefault("proposer", settings.proposer)
        stats["settings"] = settings.to_dict()
        tokens = [ViewToken.from_event(ev) for ev in a.events]
        content = "".join(t.text for t in tokens)
        msg = Message(
            "assistant",
            content,
            [StoredToken(t.token_id, t.text, t.kind, t.step, t.draft_position) for t in tokens],
            stats,
        )
        if self.chat_id is not None:
            self.history.add_message(self.chat_id, msg)
        self.messages.append(msg)
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
        self.message_done.emit(reason)

    def regenerate(self) -> None:
        if self.active is not None or not self.ready or not self.messages:
            return
        if self.messages[-1].role == "assistant":
            last = self.messages.pop()
            if last.id is not None:
                self.history.delete_message(last.id)
            self.chat_view.remove_last()
        elif self.chat_view.messages and self.chat_view.messages[-1].role == "assistant":
            self.chat_view.remove_last()  # a failed attempt
        if not self.messages or self.messages[-1].role != "user":
            return
        self._regenerations += 1
        self._start_generation(seed_offset=self._regenerations)

    # -- misc ---------------------------------------------------------------------------
    def set_colours(self, on: bool) -> None:
        self.chat_view.set_colours(on)
        if self.colour_action.isChecked() != on:
            self.colour_action.setChecked(on)

    def _update_buttons(self) -> None:
        busy = self.active is not None
        self.send_button.setEnabled(self.ready and not busy and bool(self.composer.toPlainText().strip()))
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
        if self.active is not None:
            self.worker.stop(self.active.request.request_id)
            self.active = None
        self.race_view.shutdown()
        self.local_server.shutdown()
        self._close_models_dialog()
        ended = stop_worker(self.worker, self.thread, 5000)
        self.history.close()
        return ended

    def closeEvent(self, e):
        self.shutdown_ok = self.shutdown()
        super().closeEvent(e)

