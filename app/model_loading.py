"""Loading the models: File ▸ Load models… and Connect to a server…, the worker's progress while
it loads, and what the window shows once it has (or has not).

`ready` is the one flag the rest of the window reads to know whether it may count, send or serve.
The worker does the loading in its thread; this only asks and shows (it never imports torch).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QLabel, QProgressBar, QWidget

from .chat_page import ChatPage
from .persistence import ChatStore
from .server_target import ServerDialog
from .side_panel import SidePanel
from .worker import LoadRequest, Worker


class ModelLoading(QObject):
    ready_changed = Signal()  # a load began (not ready), ended (ready) or failed
    loaded = Signal()
    failed = Signal(str)

    def __init__(self, worker: Worker, load_request: LoadRequest, store: ChatStore, page: ChatPage,
                 side_panel: SidePanel, status_label: QLabel, progress_bar: QProgressBar,
                 show_error: Callable[[str, str], object], window: QWidget):
        super().__init__(window)
        self.worker, self.load_request, self.store = worker, load_request, store
        self.page, self.side_panel, self.status_label, self.progress_bar = page, side_panel, status_label, progress_bar
        self.show_error, self.window = show_error, window
        self.ready = False
        self.model_info: dict = {}
        self.dialog = None  # the last Models dialog (app/models_dialog.py), closed with the window
        # asked first when a load fails: True when it loads something else instead (app/user_memory.py)
        self.instead: Callable[[str], bool] | None = None

    def start_loading(self, request: LoadRequest | None = None) -> None:
        if request is not None:
            self.load_request = request
        self.ready = False
        self.ready_changed.emit()
        self.progress_bar.show()
        self.progress_bar.setRange(0, 0)
        self.status_label.setText("Loading models…")
        self.page.chat_view.set_hint("Loading models… the first run prepares the default pair and can take a minute.")
        self.side_panel.set_models_text("Loading…")
        self.page.meter.clear("context: loading models…")
        self.worker.request_load(self.load_request)

    def on_progress(self, message: str, fraction: float) -> None:
        self.status_label.setText(message)
        if fraction < 0:
            self.progress_bar.setRange(0, 0)
        else:
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(int(fraction * 1000))
        if not self.ready:
            pct = "" if fraction < 0 else f" ({fraction * 100:.0f}%)"
            self.page.chat_view.set_hint(f"Loading models… {message}{pct}")

    def on_loaded(self, info: dict) -> None:
        from specdec_core.models import recent

        self.ready = True
        self.model_info = info
        req = self.load_request
        for role, spec in (("target", req.target), ("draft", req.draft)):
            if spec and info.get(role) and req.factory is None:
                recent.remember(spec, role, info[role], file=self.store.recent_file)  # listed next time, with what it was
        self.progress_bar.hide()
        t = (info.get("target") or {}).get("name") or "target"
        d = (info.get("draft") or {}).get("name")
        self.status_label.setText(f"Ready: {t}" + (f" + draft {d}" if d else ""))
        self.side_panel.set_models(info.get("target"), info.get("draft"))
        self.page.chat_view.set_hint("Ask anything. Tokens are coloured by where they came from — see the legend above.")
        server = info.get("server")
        self.page.legend.show_server_kind(server is not None and server.colours == "none")
        self.side_panel.show_target(server)
        self.ready_changed.emit()
        self.loaded.emit()

    def on_load_failed(self, message: str) -> None:
        if self.instead is not None and self.instead(message):
            return
        self.progress_bar.hide()
        self.status_label.setText("Models not loaded")
        self.side_panel.set_models_text("<b>No models loaded.</b> File ▸ Load models… to try again.")
        self.page.chat_view.set_hint("The models could not be loaded. Use File ▸ Load models… to choose others.")
        self.page.meter.clear("context: no models loaded")
        self.show_error("Could not load the models", message)
        self.ready_changed.emit()
        self.failed.emit(message)

    def load_dialog(self) -> None:
        """File ▸ Load models…: the Models dialog (app/models_dialog.py), window-modal, not blocking."""
        from .models_dialog import ModelsDialog

        # the models loaded now are freed before the next load: their bytes count as free
        freeable = sum((self.model_info.get(r) or {}).get("memory_bytes") or 0 for r in ("target", "draft"))
        dlg = ModelsDialog(self.load_request, self.store.recent_file, freeable if self.ready else 0, self.window)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.accepted.connect(lambda: self.start_loading(dlg.request()))
        dlg.open()
        self.dialog = dlg

    def connect_dialog(self) -> None:
        """File ▸ Connect to a server…: load that server as the target."""
        current = self.load_request.target if str(self.load_request.target).startswith("http") else ""
        dlg = ServerDialog(current, self.window)
        if dlg.exec() == ServerDialog.DialogCode.Accepted and dlg.url.text().strip():
            self.start_loading(LoadRequest(dlg.url.text().strip(), None, api_key=dlg.key.text().strip() or None))

    def close_dialog(self) -> None:
        """Its threads end before the window goes (a download in flight keeps its bytes)."""
        import shiboken6

        dlg = self.dialog
        if dlg is not None and shiboken6.isValid(dlg):
            dlg.shutdown()
