"""View ▸ Local server…: the models loaded in the window, served to the user's other tools as
`specdec serve` does (specdec_core/serve: an OpenAI-compatible server, each token with its
origin), while the chat keeps working beside it.

One engine, one line: while the server runs, the chat worker's engine is a QueuedEngine in the
server's line (specdec_core/serve/queue.py), so a chat message, a race and a server request take
turns on the same engine, first come first served (a chat message never gets 429: it waits its
turn). The swap happens in the worker's thread, between its generations, so no generation is
ever half inside the line.

A load of other models stops the server (it holds the old ones, whose memory the load means to
free) and starts it again on the new ones, at the same address, when they are models loaded here.
Nothing here imports torch: the server's threads do the computing.
"""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass

from PySide6.QtCore import QObject, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import (QDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSpinBox,
                               QVBoxLayout)

from specdec_core.serve.queue import DecodeQueue, QueuedEngine
from specdec_core.serve.runner import DEFAULT_HOST, DEFAULT_MAX_WAITING, DEFAULT_PORT, exposure_warning


@dataclass(frozen=True)
class ServeConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None


class _InThread(QObject):
    """Runs a callable in the thread this object lives in (the chat worker's)."""

    call = Signal(object)

    def __init__(self, thread) -> None:
        super().__init__()
        self.moveToThread(thread)
        self.call.connect(self._run)

    @Slot(object)
    def _run(self, fn) -> None:
        fn()


class LocalServerController(QObject):
    """Starts and stops the server on the window's engine; `changed` after either."""

    changed = Signal()

    def __init__(self, window, models) -> None:
        super().__init__(window)
        self.window = window
        self.models = models  # app/model_loading.ModelLoading: whether models are loaded
        self.server = None  # specdec_core.serve.runner.LocalServer while it runs
        self.config = ServeConfig()
        self._resume = False  # it ran when a load began: start it again on the new models
        self._in_worker = _InThread(window.thread)
        self.dialog: LocalServerDialog | None = None
        self.status_label = QLabel("")  # the address, in the window's status bar while it serves
        self.status_label.hide()
        window.statusBar().addPermanentWidget(self.status_label)
        self.changed.connect(self._show_address)
        window.worker.progress.connect(self._load_began)
        window.models_ready.connect(self._models_loaded)

    def open_dialog(self) -> None:
        if self.dialog is None:
            self.dialog = LocalServerDialog(self, self.window)
        self.dialog.show()
        self.dialog.raise_()

    def shutdown(self) -> None:
        """Before the window's worker stops: the server's answers end, the engine leaves the line."""
        self._resume = False
        self.stop()

    def _show_address(self) -> None:
        self.status_label.setText(f"Local server: {self.url}" if self.running else "")
        self.status_label.setVisible(self.running)

    @property
    def running(self) -> bool:
        return self.server is not None

    @property
    def url(self) -> str:
        return self.server.url if self.server is not None else ""

    def start(self, config: ServeConfig) -> str:
        """Serve the loaded models; "" when it runs, else why not (one line for a dialog)."""
        from specdec_core.models.errors import ModelError  # light: the one-line errors
        from specdec_core.serve.runner import LocalServer

        if self.server is not None:
            return ""
        engine = self.window.worker.engine
        if isinstance(engine, QueuedEngine):
            engine = engine.inner
        if engine is None or not self.models.ready:
            return "Load models first (File ▸ Load models…): the server serves the models loaded here."
        if engine.server_info() is not None:
            return ("The target is a server: the local server serves models loaded here. Load models with "
                    "File ▸ Load models… to serve them.")
        queue = DecodeQueue(DEFAULT_MAX_WAITING)
        try:
            server = LocalServer(engine, config.host, config.port, config.api_key, queue=queue, log_level="warning",
                                 access_log=False).start()
        except ModelError as exc:
            return str(exc)
        # the port it got (port 0: any free one), so a restart after a load keeps the address
        self.server, self.config = server, dataclasses.replace(config, port=server.port)
        worker = self.window.worker

        def enter_line() -> None:  # in the worker's thread, between its generations
            if worker.engine is engine:
                worker.engine = QueuedEngine(engine, queue, bounded=False)

        self._in_worker.call.emit(enter_line)
        self.changed.emit()
        return ""

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        server.stop()
        worker = self.window.worker

        def leave_line() -> None:
            engine = worker.engine
            if isinstance(engine, QueuedEngine) and engine.queue is server.queue:
                worker.engine = engine.inner

        self._in_worker.call.emit(leave_line)
        self.changed.emit()

    def status(self) -> str:
        """One line: where it serves and what it is doing (plain reads of the line's counters)."""
        if self.server is None:
            return "Not serving."
        q = self.server.queue
        doing = "decoding" if q.busy else "idle"
        return f"Serving at {self.url}/v1 · {doing}, {q.waiting} waiting, {q.turns} answered"

    # -- loads ----------------------------------------------------------------------------
    def _load_began(self, *_args) -> None:
        if self.server is not None:  # it holds the old models: let the load free them
            self._resume = True
            self.stop()

    def _models_loaded(self) -> None:
        if self._resume:
            self._resume = False
            if self.window.worker.engine is not None and self.window.worker.engine.server_info() is None:
                why = self.start(self.config)
                if why:
                    self.window.show_error("The local server could not start again", why)


class LocalServerDialog(QDialog):
    """View ▸ Local server…: the address, the key, start / stop, and how to reach it."""

    def __init__(self, controller: LocalServerController, parent=None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.setWindowTitle("Local server")
        lay = QVBoxLayout(self)
        intro = QLabel("Serve the loaded models to other tools — editors, agents, scripts — as an "
                       "OpenAI-compatible server, every token with its origin. The chat keeps working: "
                       "a chat message and a server request take turns on the same engine.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        form = QFormLayout()
        cfg = controller.config
        self.host = QLineEdit(cfg.host)
        self.port = QSpinBox()
        self.port.setRange(0, 65535)
        self.port.setValue(cfg.port)
        self.port.setToolTip("0: any free port")
        self.key = QLineEdit(cfg.api_key or "")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("none: no key asked")
        form.addRow("Address", self.host)
        form.addRow("Port", self.port)
        form.addRow("API key", self.key)
        lay.addLayout(form)
        self.warning = QLabel()
        self.warning.setWordWrap(True)
        self.warning.setObjectName("ServeWarning")
        lay.addWidget(self.warning)
        row = QHBoxLayout()
        self.address = QLabel()
        self.address.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(self.address, 1)
        self.copy_button = QPushButton("Copy address")
        self.copy_button.clicked.connect(lambda: QGuiApplication.clipboard().setText(controller.url + "/v1"))
        row.addWidget(self.copy_button)
        self.start_button = QPushButton()
        self.start_button.clicked.connect(self.toggle)
        row.addWidget(self.start_button)
        lay.addLayout(row)
        self.example = QLabel()
        self.example.setWordWrap(True)
        self.example.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.example)
        for w in (self.host, self.key):
            w.textChanged.connect(self._refresh)
        controller.changed.connect(self._refresh)
        self.timer = QTimer(self)
        self.timer.setInterval(500)
        self.timer.timeout.connect(self._refresh)
        self.timer.start()
        self.resize(560, 300)
        self._refresh()

    def config(self) -> ServeConfig:
        return ServeConfig(self.host.text().strip() or DEFAULT_HOST, self.port.value(), self.key.text().strip() or None)

    def toggle(self) -> None:
        if self.controller.running:
            self.controller.stop()
            return
        why = self.controller.start(self.config())
        if why:
            self.controller.window.show_error("The local server did not start", why)

    def _refresh(self) -> None:
        running = self.controller.running
        for w in (self.host, self.port, self.key):
            w.setEnabled(not running)
        if running:  # the port it got (0 asks for any free one)
            self.port.setValue(self.controller.config.port)
        self.start_button.setText("Stop" if running else "Start")
        self.copy_button.setEnabled(running)
        self.address.setText(self.controller.status())
        cfg = self.controller.config if running else self.config()
        warn = exposure_warning(cfg.host, cfg.api_key) if cfg.host else ""
        self.warning.setText(f"⚠ {html.escape(warn)}" if warn else "")
        self.warning.setVisible(bool(warn))
        if running:
            key = ' -H "Authorization: Bearer $KEY"' if cfg.api_key else ""
            self.example.setText(
                "<code>curl " + html.escape(self.controller.url) + "/v1/chat/completions" + html.escape(key) +
                " -H 'Content-Type: application/json' -d '{\"messages\": [{\"role\": \"user\", \"content\": "
                "\"Hello\"}]}'</code>")
        else:
            self.example.setText("")


def add_local_server(window, models) -> LocalServerController:
    """The main window's hook: View ▸ Local server… (window.view_menu), and the address in its
    status bar while it serves."""
    controller = LocalServerController(window, models)
    action = QAction("&Local server…", window)
    action.triggered.connect(controller.open_dialog)
    window.view_menu.addAction(action)
    return controller
