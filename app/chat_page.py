"""The Chat tab's widgets, laid out: the system prompt, the legend, the conversation, the edit
banner, the attachments, the input box with its buttons, and the context meter.

It only builds and places them; the main window connects them to the controllers that act on
them (chat_control, generation_control, context_watch), so this file can change its layout
without touching what a click does.
"""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from .attachments import limits_text
from .chat_view import ChatView, Legend
from .composer import AttachmentBar, Composer, EditBanner, SystemPromptBox
from .context_meter import ContextMeter
from .saved_prompts import prompts_button
from .theme import Theme

# the input rows line up with the bubbles' side margins
SIDE_MARGIN = 18


class ChatPage(QWidget):
    def __init__(self, theme: Theme, parent: QWidget | None = None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 6)
        lay.setSpacing(4)
        lay.addLayout(self._system_prompt_row())
        self.legend = Legend(theme)
        lay.addWidget(self.legend)
        self.chat_view = ChatView(theme)
        lay.addWidget(self.chat_view, 1)
        self.edit_banner = EditBanner()
        lay.addWidget(self.edit_banner)
        self.attachment_bar = AttachmentBar()
        lay.addWidget(self.attachment_bar)
        lay.addLayout(self._composer_row())
        lay.addLayout(self._meter_row(theme))

    def _system_prompt_row(self) -> QHBoxLayout:
        self.system_prompt = SystemPromptBox()
        self.system_prompt.setObjectName("SystemPrompt")
        self.system_prompt.setPlaceholderText("System prompt (optional), e.g. “You are a concise assistant.”")
        self.system_prompt.setFixedHeight(40)
        row = QHBoxLayout()
        row.setContentsMargins(SIDE_MARGIN, 8, SIDE_MARGIN, 0)
        row.addWidget(self.system_prompt)
        self.prompts_button = prompts_button()  # saved system prompts (app/saved_prompts.py)
        row.addWidget(self.prompts_button)
        return row

    def _composer_row(self) -> QHBoxLayout:
        row = QHBoxLayout()
        row.setContentsMargins(SIDE_MARGIN, 0, SIDE_MARGIN, 0)
        self.composer = Composer()
        row.addWidget(self.composer, 1)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("SendButton")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("StopButton")
        self.stop_button.setToolTip("Stop generating (Esc)")
        self.regen_button = QPushButton("Regenerate")
        self.regen_button.setToolTip("Generate the last answer again as a new version; the earlier ones stay "
                                     "(‹ › on the answer) (Ctrl+R)")
        buttons = QVBoxLayout()
        buttons.setSpacing(3)
        for b in (self.send_button, self.stop_button, self.regen_button):
            buttons.addWidget(b)
        row.addLayout(buttons)
        return row

    def _meter_row(self, theme: Theme) -> QHBoxLayout:
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, SIDE_MARGIN, 0)
        self.meter = ContextMeter(theme)
        row.addWidget(self.meter, 1)
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setToolTip(f"Attach text or code files (Ctrl+O), or drop them on the window. "
                                      f"{limits_text()}.")
        self.attach_button.setObjectName("CopyButton")  # styled as the small text buttons are
        row.addWidget(self.attach_button)
        return row
