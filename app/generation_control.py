"""Writing an answer: Send, Stop, Regenerate (the last answer or any other), Continue (an answer
cut short, app/continuation.py), the worker's signals while it generates, and the answer saved as
it streams.

The window waits for one generation at a time: it keeps that request's id and drops every signal
carrying any other (a stopped answer's last batch, a stale one). An answer is saved while it
streams, at most SAVE_SECONDS or SAVE_TOKENS behind, so a kill or a power cut leaves its part in
the chat, marked as cut. The worker computes in its thread; this runs in the GUI thread and only
calls the worker's request_* methods.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget

from specdec_core.events import Stats  # light: no torch

from .chat_control import ChatControl
from .chat_page import ChatPage
from .answer_figures import AnswerFigures
from .answer_token import AnswerToken
from .chat_view import MessageWidget
from .context_watch import ContextWatch
from .continuation import Base, answer_ids, can_continue
from .figures import meta_line
from .history import Message
from .model_loading import ModelLoading
from .side_panel import SidePanel
from .worker import Finished, GenerateRequest, Worker

# a streaming answer reaches the disk at least this often (the "never loses a word")
SAVE_SECONDS = 1.0
SAVE_TOKENS = 32


@dataclass
class Active:
    """The generation the window is waiting for."""

    request: GenerateRequest
    widget: MessageWidget
    message: Message  # the answer being written (in the conversation, saved as it grows)
    base: Base = field(default_factory=Base)  # what the message held before: a continuation's old part
    events: list = field(default_factory=list)  # this generation's (steps numbered on from the base's)
    stats: Stats | None = None  # the engine's running Stats for `events`
    series: list = field(default_factory=list)  # (seconds, decode tok/s) of the message, the base's included
    unsaved: int = 0  # tokens shown but not yet written
    # a continuation written into a new version of an answer later turns follow: that answer, and
    # the branch shown before (both shown again when nothing was written); None: the message itself
    origin: Message | None = None
    leaf_before: Message | None = None
    saved_at: float = field(default_factory=time.monotonic)


class GenerationControl(QObject):
    done = Signal(str)  # stop reason of the assistant message just completed

    def __init__(self, worker: Worker, chats: ChatControl, models: ModelLoading, context: ContextWatch,
                 page: ChatPage, side_panel: SidePanel, status_label: QLabel,
                 show_error: Callable[[str, str], object], window: QWidget):
        super().__init__(window)
        self.worker, self.chats, self.models, self.context = worker, chats, models, context
        self.page, self.side_panel, self.status_label = page, side_panel, status_label
        self.show_error, self.window = show_error, window
        self._active: Active | None = None
        self.context_dialog: QMessageBox | None = None  # the last "does not fit the context" dialog
        self._next_request = 0
        self._regenerations = 0  # each regeneration of one question gets a seed of its own
        self._save_timer = QTimer(self)  # a slow stream still reaches the disk within SAVE_SECONDS
        self._save_timer.setInterval(int(SAVE_SECONDS * 1000))
        self._save_timer.timeout.connect(lambda: self._save_streaming(force=False))

    @property
    def active(self) -> Active | None:
        return self._active

    @active.setter
    def active(self, a: Active | None) -> None:
        # the chat's branch is locked exactly while an answer is written into it
        self._active = a
        self.chats.busy = a is not None

    def update_buttons(self) -> None:
        busy = self.active is not None
        ready = self.models.ready
        page = self.page
        has_input = bool(page.composer.toPlainText().strip()) or bool(page.attachment_bar.items)
        page.send_button.setEnabled(ready and not busy and has_input)
        page.send_button.setText("Send" if ready else "Loading…")
        page.stop_button.setEnabled(busy)
        page.regen_button.setEnabled(ready and not busy and bool(self.chats.messages))
        self.chats.show_actions(ready)

    # -- starting -------------------------------------------------------------------------
    def send(self, text: str | None = None) -> bool:
        """Send the composer's text (or `text`) with its attachments. False when nothing was sent."""
        if not isinstance(text, str):  # a button's clicked(bool) lands here too
            text = self.page.composer.toPlainText()
        text = text.strip()
        attachments = list(self.page.attachment_bar.items)
        if (not text and not attachments) or not self.models.ready or self.active is not None:
            return False
        self.chats.add_question(text, attachments)
        self._regenerations = 0
        self._start()
        return True

    def regenerate(self, answer: Message | None = None) -> None:
        """A new version of `answer` (by default the last one): the branch is taken back to its
        question and a new answer written there; the earlier ones stay (‹ › on the answer), each
        with whatever followed it."""
        if self.active is not None or not self.models.ready or not self.chats.messages:
            return
        if not self.chats.rewind_to_question(answer):
            return
        # each version of an answer gets a seed of its own
        self._regenerations = len(self.chats.conversation.children(self.chats.conversation.leaf))
        self._start(seed_offset=self._regenerations)

    def continue_answer(self, answer: Message | None = None) -> bool:
        """Write on in `answer` (by default the last one of the branch shown), which was cut short
        or edited: the model reads the chat up to it with the answer so far as its open turn. The
        last answer of its branch grows in the same message; one that later turns follow gets a
        new version to grow in, and those turns stay with it as it was. False when nothing started."""
        chats = self.chats
        if answer is None:
            answer = chats.messages[-1] if chats.messages else None
        if self.active is not None or not self.models.ready:
            return False
        if not can_continue(answer) or answer not in chats.messages or chats.widget(answer) is None:
            self.status_label.setText("Only an answer cut short, or edited, in the chat shown can be continued")
            return False
        origin = leaf = None
        if chats.conversation.children(answer):  # the turns after it read it as it is: not rewritten under them
            origin, leaf = answer, chats.conversation.leaf
            answer = chats.new_version_to_continue(answer)
        self._start(continuing=answer, origin=origin, leaf_before=leaf)
        return True

    def _continuation(self, continuing: Message, settings) -> tuple[GenerateRequest, MessageWidget, Base]:
        """The request that writes on in `continuing` (the answer so far is the prompt's open
        assistant turn), its bubble, and what the message held before."""
        chats = self.chats
        req = GenerateRequest(self._next_request, chats.prompt_messages(), settings, dropped=chats.dropped_messages,
                              continuing=True, answer_ids=answer_ids(continuing))
        base = Base.of(continuing)
        continuing.state = "streaming"
        w = chats.widget(continuing)
        w.set_error(None)  # the cut-off mark goes while it writes on
        return req, w, base

    def _start(self, seed_offset: int = 0, continuing: Message | None = None, origin: Message | None = None,
               leaf_before: Message | None = None) -> None:
        settings = self.side_panel.settings()
        settings = settings.replace(seed=settings.seed + seed_offset)
        self._next_request += 1
        chats = self.chats
        if continuing is not None:
            req, w, base = self._continuation(continuing, settings)
            msg = continuing
            verb = "continuing…" if origin is None else "continuing in a new version…"
        else:
            base = Base()
            req = GenerateRequest(self._next_request, chats.prompt_messages(), settings,
                                  dropped=chats.dropped_messages)
            fig = AnswerFigures(Stats(mode=settings.mode, proposer=settings.proposer if settings.speculative else None),
                                settings.to_dict())
            msg = chats.conversation.add(Message("assistant", "", figures=fig, state="streaming"),
                                         chats.conversation.leaf)
            w = chats.bubble(msg)
            verb = "generating…"
        w.set_streaming(True)
        w.set_meta(f"{settings.mode}" + (f" · {settings.proposer}" if settings.speculative else "") + f" · {verb}")
        chats.show_versions()
        self.active = Active(req, w, msg, base, series=[tuple(p) for p in base.series], origin=origin,
                             leaf_before=leaf_before)
        self.side_panel.reset_metrics(settings.mode)
        self.status_label.setText("Generating…")
        self.update_buttons()
        self._save_timer.start()
        self.worker.request_generate(req)

    # -- the worker's signals -------------------------------------------------------------
    def _is_current(self, request_id: int) -> bool:
        return self.active is not None and self.active.request.request_id == request_id

    def on_tokens(self, request_id: int, events: list, stats: Stats) -> None:
        if not self._is_current(request_id):
            return
        a = self.active
        events = a.base.shift(events)  # a continuation's steps follow the old part's
        a.events.extend(events)
        a.stats = stats
        if stats.decode_tokens_per_second:
            a.series.append((a.base.seconds + stats.seconds, stats.decode_tokens_per_second))
        # each event becomes one token, which the view shows and the answer stores as it grows
        new = [AnswerToken.from_event(ev) for ev in events]
        a.widget.append_tokens(new)
        m = a.message
        m.tokens.extend(new)
        m.content += "".join(t.text for t in new)
        m.figures = self._message_figures(a, stats)
        self.side_panel.show_stats(m.figures)
        a.unsaved += len(events)
        self._save_streaming(force=False)

    def on_finished(self, request_id: int, end: Finished) -> None:
        if not self._is_current(request_id):
            return
        self._complete(end.stats, end.error)

    def on_failed(self, request_id: int, message: str) -> None:
        if not self._is_current(request_id):
            return
        a = self.active
        if a.events:  # it broke off midway: keep what came, marked as cut
            self._complete(dataclasses.replace(a.stats, stop_reason="error"), message)
            return
        if a.base.continuing:  # nothing was added: the answer stays as it was
            self._end_continuation(a)
            self.status_label.setText(f"Could not continue: {message}")
            self.show_error("Could not continue the answer", message)
            return
        self._end_without_answer(a)
        a.widget.set_streaming(False)
        a.widget.set_error(f"generation failed: {message}")
        a.widget.set_meta("failed")
        a.widget.message = None  # not part of the chat: Regenerate replaces it
        self.status_label.setText(f"Generation failed: {message}")
        self.update_buttons()
        self.show_error("Generation failed", message)

    def on_too_long(self, request_id: int, fit) -> None:
        """The chat plus its answer budget does not fit the target's context: nothing was
        computed. Offer to leave the oldest turns out of the prompt (they stay in the chat and in
        history); when even the last message does not fit, say what to shorten."""
        if not self._is_current(request_id):
            return
        a = self.active
        continuing = (a.origin or a.message) if a.base.continuing else None  # what the user asked to continue
        if continuing is not None:
            self._end_continuation(a)
        else:
            self._end_without_answer(a)
            self.page.chat_view.remove_last()  # the empty answer bubble: no answer was started
        self.status_label.setText("The chat does not fit the target's context")
        self.update_buttons()
        self.context_dialog = self._too_long_dialog(fit, continuing)

    def _too_long_dialog(self, fit, continuing: Message | None = None) -> QMessageBox:
        n, budget, context, drop = fit.prompt_tokens, fit.max_new_tokens, fit.context, fit.drop
        if budget is None:
            text = (f"This chat is {n} tokens, which leaves no room for {'more of ' if continuing else ''}an answer "
                    f"in the target's context of {context} tokens.")
        else:
            text = (f"This chat is {n} tokens and its answer may take up to {budget} more, but the target's "
                    f"context holds {context} tokens.")
        box = QMessageBox(QMessageBox.Icon.Warning, "The chat does not fit the context", text,
                          QMessageBox.StandardButton.NoButton, self.window)
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
                    self.chats.dropped_messages = drop
                    self.chats.mark_left_out(None)  # marked now, not when the next count comes back
                    if continuing is not None:
                        self.continue_answer(continuing)
                    else:
                        self._start(seed_offset=self._regenerations)  # the same request again
                    self.context.schedule()

            box.buttonClicked.connect(clicked)
        box.open()
        return box

    # -- ending ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Esc: cancel the running generation. What streamed so far is kept and saved as a
        stopped message; anything the worker still sends for it is dropped."""
        if self.active is None:
            return
        self.worker.stop(self.active.request.request_id)
        # the engine's running stats of the last batch shown: they count exactly the tokens
        # that are kept (the worker forwards nothing once stopped)
        stats = self.active.stats
        if stats is None:  # nothing came yet: no figures but how it was asked for
            settings = self.active.request.settings
            stats = Stats(mode=settings.mode, proposer=settings.proposer if settings.speculative else None)
        self._complete(dataclasses.replace(stats, stop_reason="cancelled"))

    def escape(self) -> None:
        """Esc: stop the answer being written, else cancel an edit."""
        if self.active is not None:
            self.stop()
        else:
            self.chats.cancel_edit()

    def _end_continuation(self, a: Active) -> None:
        """A continuation that added nothing: the answer is as it was, and shows so (a new version
        made for it goes, and the branch shown before is shown again)."""
        self.active = None
        self._save_timer.stop()
        msg, w = a.message, a.widget
        msg.state = a.base.state
        w.set_streaming(False)
        if a.origin is not None:
            self.chats.drop_version(msg, a.leaf_before)
        else:
            self.chats.restore_bubble(msg, w)
        self.update_buttons()

    def _end_without_answer(self, a: Active) -> None:
        """No token came: the answer is taken out of the conversation (nothing of it was saved)."""
        self.active = None
        self._save_timer.stop()
        self.chats.conversation.remove(a.message)
        self.chats.show_versions()

    def _complete(self, stats: Stats, error: str = "") -> None:
        a = self.active
        if a.origin is not None and not a.events:  # a new version nothing was written into: not kept
            self._end_continuation(a)
            self.status_label.setText("Nothing was added: the answer is as it was")
            self.done.emit(stats.stop_reason)
            return
        self.active = None
        self._save_timer.stop()
        if a.request.settings.max_new_tokens is None and stats.stop_reason == "max_new_tokens":
            stats = dataclasses.replace(stats, stop_reason="context")  # a server given what the context left: full
        fig = self._message_figures(a, stats, error)
        msg = a.message  # its tokens and text are those stored as they streamed
        msg.figures, msg.state = fig, ""
        if self.chats.chat is not None:
            self.chats.save_message(msg)
        w = a.widget
        w.tokens = list(msg.tokens)
        w.text = msg.content
        w.set_streaming(False)
        w.set_meta(meta_line(fig))
        self.side_panel.show_stats(fig)
        self.side_panel.show_server_figures(fig)
        reason = fig.stats.stop_reason
        self.status_label.setText("Stopped" if reason == "cancelled" else "Ready")
        if a.origin is not None:
            self.status_label.setText("Continued in a new version of the answer: the turns after it stay with the "
                                      "version they read (‹ ›)")
        if reason == "error":  # a stream that broke off: the part is kept, the dialog says why
            w.set_error(f"cut off: {fig.error}")
            self.status_label.setText("The answer was cut off")
            self.show_error("The answer was cut off", fig.error + " — what arrived is kept, marked as cut.")
        self.chats.show_versions()
        self.update_buttons()
        self.context.schedule()
        self.done.emit(reason)

    # -- saving while it streams ----------------------------------------------------------
    @staticmethod
    def _message_figures(a: Active, stats: Stats, error: str = "") -> AnswerFigures:
        """The answer's figures: the engine's Stats (joined with the old part's when it continues
        one), the settings it was written with and its decode rate's curve."""
        fig = a.base.joined(stats, error)
        fig.settings = a.request.settings.to_dict()
        # the decode rate's curve, kept with the answer: switching versions shows each one's own
        fig.series = [(round(t, 3), round(v, 2)) for t, v in a.series]
        return fig

    def _save_streaming(self, force: bool) -> None:
        """Write the streaming answer when SAVE_TOKENS tokens or SAVE_SECONDS wait (or `force`)."""
        a = self.active
        if a is None or not a.unsaved or self.chats.chat is None:
            return
        if force or a.unsaved >= SAVE_TOKENS or time.monotonic() - a.saved_at >= SAVE_SECONDS:
            a.unsaved = 0
            a.saved_at = time.monotonic()
            self.chats.save_message(a.message)
