"""The dialog that asks for a server target (File ▸ Connect to a server…, and the Models
dialog's Server… button): its address and key. What a loaded server changes in the window is
the side panel's and the legend's own business (SidePanel.show_target, Legend.show_server_kind).
"""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit


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
