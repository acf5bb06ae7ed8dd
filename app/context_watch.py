"""Keeps the context meter up to date: what the next send would be -- the branch, the text and
files in the input box -- counted by the engine in the counter's own thread (app/context_meter.py
says why a thread), at most every DEBOUNCE_MS while the user types. The same input goes to the
worker, whose target reads its prompt ahead of the send (Engine.read_prompt: it reads only when
that is a long attachment's or paste's worth of new tokens) -- never while an answer is written.

Only the newest count is shown: every question has a job number and an answer to an older one is
dropped, since the chat has changed since it was asked.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QWidget

from .attachments import attachment_block, prompt_content
from .chat_control import ChatControl
from .chat_page import ChatPage
from .context_meter import DEBOUNCE_MS, CountJob, start_counter
from .model_loading import ModelLoading
from .side_panel import SidePanel
from .worker import Worker


class ContextWatch(QObject):
    def __init__(self, worker: Worker, chats: ChatControl, models: ModelLoading, page: ChatPage,
                 side_panel: SidePanel, window: QWidget):
        super().__init__(window)
        self.chats, self.models, self.page, self.side_panel = chats, models, page, side_panel
        self.worker = worker
        self.answering: Callable[[], bool] = lambda: False  # set once the generation control is made
        self.job = 0  # the newest question asked
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(DEBOUNCE_MS)
        self.timer.timeout.connect(self._request)
        self.counter, self.counter_thread = start_counter(lambda: worker.engine, window)
        self.counter.counted.connect(self._on_counted)

    def schedule(self) -> None:
        if self.models.ready:
            self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def draft_messages(self) -> list[dict[str, str]]:
        """The chat as the next send would make it: the branch (up to the message being edited)
        and the text and attachments in the input box."""
        path = self.chats.messages
        editing = self.chats.editing
        if editing is not None and editing in path:
            path = path[:path.index(editing)]
        text = self.page.composer.toPlainText().strip()
        items = self.page.attachment_bar.items
        out = self.chats.prompt_messages(path)
        if text or items:
            out.append({"role": "user", "content": prompt_content(text, items)})
        return out

    def _request(self) -> None:
        if not self.models.ready:
            return
        self.job += 1
        messages, max_new = self.draft_messages(), self.side_panel.max_new.value() or None
        self.counter.request(CountJob(self.job, messages, max_new, self.chats.dropped_messages,
                                      tuple(attachment_block(a) for a in self.page.attachment_bar.items)))
        typed = self.page.composer.toPlainText().strip() or self.page.attachment_bar.items
        if typed and not self.answering():
            self.worker.request_read_prompt(messages, max_new, self.chats.dropped_messages)

    def _on_counted(self, count) -> None:
        if count.job_id != self.job:
            return  # the chat changed since: a newer count is on its way
        self.page.meter.show_count(count)
        self.page.attachment_bar.show_tokens(count.attachment_tokens, count.context)
        self.chats.mark_left_out(count)
