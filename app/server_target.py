"""The window's side of a server target (`--target http://HOST:PORT`, File ▸ Connect to a
server…): what changes while one is loaded, and the server's own figures of each answer.

GUI thread only; plain values in (the engine's ServerInfo and a message's stats dict). The main window calls three functions, so its own code stays as it was:

- `apply_server(window, server)` after a load: the `server` swatch in the legend, the mode
  toggle fixed to what the server does (no request can turn its drafting off), the draft
  length and proposer left to the server, the models box naming the server;
- `show_server_figures(panel, stats)` after an answer: what the server reported (its own
  tok/s, drafted and accepted, where the figures came from) under the message's numbers;
- `ServerDialog`: the address and the key, for File ▸ Connect to a server….
"""

from __future__ import annotations

import html

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit

from specdec_core.server.generation import figure_notes

MODE_TEXT = {
    # short enough for the side panel's toggle at its narrowest; the tooltip says the rest
    "speculative": "⚡ Speculative, by the server",
    "standard": "Standard, by the server",
    "server": "Decoding by the server",
}


class ServerDialog(QDialog):
    """http://HOST:PORT and an optional API key (empty: $SPECDEC_API_KEY)."""

    def __init__(self, url: str = "", parent=None):
        super().__init__(parent)
        self.setWindowTitle("Connect to a server")
        form = QFormLayout(self)
        self.url = QLineEdit(url or "http://127.0.0.1:8080")
        self.url.setPlaceholderText("http://HOST:PORT")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("empty: $SPECDEC_API_KEY, or none")
        form.addRow("Server", self.url)
        form.addRow("API key", self.key)
        note = QLabel("An OpenAI-compatible server that decodes with its own draft: llama.cpp's "
                      "<code>llama-server --model-draft …</code> (every token coloured from its draft "
                      "counters) or vLLM with <code>--speculative-config</code> (its figures per answer).")
        note.setWordWrap(True)
        form.addRow(note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.resize(520, 160)


def connect_dialog(window) -> None:
    """File ▸ Connect to a server…: load that server as the target."""
    from .worker import LoadRequest

    current = window.load_request.target if str(window.load_request.target).startswith("http") else ""
    dlg = ServerDialog(current, window)
    if dlg.exec() == QDialog.DialogCode.Accepted and dlg.url.text().strip():
        window.start_loading(LoadRequest(dlg.url.text().strip(), None, api_key=dlg.key.text().strip() or None))


def apply_server(window, server) -> None:
    """After a load: set the window up for a server target, or back for local models."""
    window.legend.swatches["server"].setVisible(server is not None and server.colours != "per token")
    panel = window.side_panel
    local = server is None
    for w in (panel.proposer, panel.k_spin, panel.adaptive):
        w.setEnabled(local and panel.mode == "speculative")
    # the proposer and the draft length are the server's own settings: their rows go while it is loaded
    form = panel.proposer.parentWidget().layout()
    if isinstance(form, QFormLayout):
        form.setRowVisible(panel.proposer, local)
        row = _row_of(form, panel.k_spin)
        if row >= 0:
            form.setRowVisible(row, local)
    panel.mode_button.setEnabled(local)
    if local:
        panel.mode_button.setToolTip("Standard ↔ speculative: takes effect from the next message, no reload")
        panel._mode_toggled(panel.mode_button.isChecked())
        return
    mode = server.mode
    panel.mode_button.blockSignals(True)
    panel.mode_button.setChecked(mode != "standard")
    panel.mode_button.blockSignals(False)
    panel.mode_button.setText(MODE_TEXT.get(mode, MODE_TEXT["server"]))
    panel.mode_button.setToolTip(server.race_note)
    for w in (panel.proposer, panel.k_spin, panel.adaptive):
        w.setEnabled(False)
        w.setToolTip("the server drafts with its own settings")
    what = {"per token": "every token coloured from the server's draft counters",
            "none": "the server reports no origin per token: its tokens are <i>server</i>"}
    model = server.model
    panel.target_label.setToolTip(model)  # llama-server names a model by its file path
    panel.target_label.setText(
        f"<b>Target</b>: {html.escape(model.replace(chr(92), '/').rsplit('/', 1)[-1])}<br>"
        f"{html.escape(server.engine)} server at {html.escape(server.url)}<br>"
        f"{what.get(server.colours, '')}")
    if server.speculative:
        how = f" ({html.escape(server.proposer)})" if server.proposer else ""
        panel.draft_label.setText(f"<b>Draft</b>: the server's own{how}")
    elif server.speculative is False:
        panel.draft_label.setText("<b>Draft</b>: none on the server (standard decoding)")
    else:
        panel.draft_label.setText("<b>Draft</b>: the server does not say")


def _row_of(form: QFormLayout, widget) -> int:
    """The form row holding `widget`, also when it sits inside a row's own layout."""
    for row in range(form.rowCount()):
        item = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
        lay = item.layout() if item is not None else None
        if item is not None and (item.widget() is widget or (lay is not None and lay.indexOf(widget) >= 0)):
            return row
    return -1


def show_server_figures(panel, stats: dict) -> None:
    """Below the message's numbers: what the server itself reported about this answer."""
    server = stats.get("server")
    if not server:
        return
    panel.m_k.caption.setText("k (the server's)")  # not the hidden adaptive setting
    bits = [f"{html.escape(server.get('engine', '?'))} server"]
    notes = figure_notes(server, stats.get("draft_tokens", 0), stats.get("accepted_draft_tokens", 0))
    bits += [html.escape(note) for note in notes]
    if server.get("error"):
        bits.append(f"<b>cut off</b>: {html.escape(server['error'])}")
    text = panel.summary.text()
    panel.summary.setText((text + "<br>" if text else "") + " · ".join(bits))
