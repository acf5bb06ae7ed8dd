"""The chat view: one bubble per message, markdown rendered, assistant tokens coloured by kind.

How a message's text becomes coloured, highlighted rich text (markdown, code blocks with their
language and Copy button, the kinds in the background, the hover text): app/message_text.py.

A bubble is one message of the branch shown (its `message`): a user bubble can be edited (a new
branch) and shows its attachments; a message with several versions shows ‹ n/m › to switch.
"""

from __future__ import annotations

import html
import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .composer import Chip
from .message_text import TokenText, ViewToken, align, render_answer, source_line, token_tooltip  # noqa: F401
from .theme import LOOKUP_MARK, Theme

RENDER_INTERVAL_MS = 40


class MessageWidget(QFrame):
    """One bubble: role, meta line (speed, α…), ‹ n/m › between versions, Edit (yours), Copy,
    the attachments (yours), the rendered text."""

    edit_requested = Signal()
    version_requested = Signal(int)  # -1 previous version, +1 next
    continue_requested = Signal()  # an answer cut short: write on in it

    def __init__(self, role: str, theme: Theme, colours: bool = True, parent=None):
        super().__init__(parent)
        self.role = role
        self.theme = theme
        self.colours = colours
        self.text = ""
        self.tokens: list[ViewToken] = []
        self.streaming = False
        self.error: str | None = None
        self.empty_hint: str | None = None  # shown instead of "(no text…)" before any tokens came
        self.message = None  # the history.Message this bubble shows (the chat's; None in the race view)
        self.setObjectName("Bubble")
        self.setProperty("role", role)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(12, 8, 12, 10)
        outer.setSpacing(4)
        head = QHBoxLayout()
        head.setSpacing(8)
        self.role_label = QLabel({"user": "You", "assistant": "Assistant"}.get(role, role))
        self.role_label.setObjectName("BubbleRole")
        self.meta_label = QLabel("")
        self.meta_label.setObjectName("BubbleMeta")
        self.meta_label.setWordWrap(True)  # a long line of figures wraps rather than widen the bubble past the view
        self.left_out_label = QLabel("left out of the prompt")
        self.left_out_label.setObjectName("LeftOut")
        self.left_out_label.setToolTip("The chat is longer than the target's context: this message is not sent to the "
                                       "model. It stays in the chat and its history.")
        self.left_out_label.setVisible(False)
        self.prev_button = self._tool("‹", "the previous version of this message")
        self.prev_button.clicked.connect(lambda: self.version_requested.emit(-1))
        self.version_label = QLabel("")
        self.version_label.setObjectName("BubbleMeta")
        self.next_button = self._tool("›", "the next version of this message")
        self.next_button.clicked.connect(lambda: self.version_requested.emit(1))
        self.edit_button = self._tool("Edit", "Edit this message and send it again as a new branch "
                                              "(Up in an empty input box edits your last one)")
        self.edit_button.clicked.connect(self.edit_requested)
        self.edit_button.setVisible(role == "user")
        self.copy_button = self._tool("Copy", "Copy this message (Markdown) to the clipboard")
        self.copy_button.clicked.connect(self.copy)
        # beside the mark of an answer cut short (token limit, context full, stopped, cut off)
        self.continue_button = self._tool("Continue ▸", "Write on in this answer from where it stopped (the model "
                                                         "reads the answer so far and continues it)")
        self.continue_button.setObjectName("ContinueButton")
        self.continue_button.clicked.connect(self.continue_requested)
        self.continue_button.setVisible(False)
        head.addWidget(self.role_label)
        head.addWidget(self.meta_label, 1)
        head.addWidget(self.continue_button)
        head.addWidget(self.left_out_label)
        for w in (self.prev_button, self.version_label, self.next_button, self.edit_button, self.copy_button):
            head.addWidget(w)
        self.set_version(1, 1)
        outer.addLayout(head)
        chips = QWidget()  # the attachments of a user message, clipped rather than widen the bubble
        chips.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.chips = QHBoxLayout(chips)
        self.chips.setContentsMargins(0, 0, 0, 0)
        self.chips.setSpacing(6)
        self.chips.addStretch(1)
        chips.setVisible(False)
        self.chips_row = chips
        outer.addWidget(chips)
        self.view = TokenText(self)
        outer.addWidget(self.view)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(RENDER_INTERVAL_MS)
        self._timer.timeout.connect(self.render)

    @staticmethod
    def _tool(text: str, tip: str) -> QToolButton:
        b = QToolButton()
        b.setObjectName("CopyButton")
        b.setText(text)
        b.setToolTip(tip)
        return b

    def set_version(self, index: int, count: int) -> None:
        """‹ index/count ›: shown when the message has other versions (an edit, a regeneration)."""
        many = count > 1
        for w in (self.prev_button, self.version_label, self.next_button):
            w.setVisible(many)
        self.version_label.setText(f"{index}/{count}")
        self.version_label.setToolTip(f"version {index} of {count} of this message; the others stay in the chat")
        self.prev_button.setEnabled(index > 1)
        self.next_button.setEnabled(index < count)

    def set_attachments(self, attachments: list) -> None:
        while self.chips.count() > 1:
            item = self.chips.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        for a in attachments:
            self.chips.insertWidget(self.chips.count() - 1, Chip(a, removable=False))
        self.chips_row.setVisible(bool(attachments))

    def set_left_out(self, on: bool) -> None:
        self.left_out_label.setVisible(on)
        self.setProperty("leftOut", on)
        self.style().unpolish(self)
        self.style().polish(self)

    def flash(self, ms: int = 2500) -> None:
        """Mark the bubble for a moment (a search result was opened here)."""
        self.setProperty("found", True)
        self.style().unpolish(self)
        self.style().polish(self)

        def off():
            self.setProperty("found", False)
            self.style().unpolish(self)
            self.style().polish(self)

        QTimer.singleShot(ms, self, off)

    def select_text(self, words: str) -> bool:
        """Select the first of `words` in the text (a search result's match); False when absent."""
        for w in words.split():
            self.view.moveCursor(QTextCursor.MoveOperation.Start)
            if self.view.find(w):
                return True
        return False

    # -- content --------------------------------------------------------------------------
    def set_text(self, text: str) -> None:
        self.text = text
        self.render()

    def set_tokens(self, tokens: list[ViewToken], lead: str = "") -> None:
        """The answer's tokens, after `lead`: text no token wrote (an edited answer written on)."""
        self.tokens = list(tokens)
        self.text = lead + "".join(t.text for t in self.tokens)
        self.render()

    def append_events(self, events) -> None:
        self.append_tokens([ViewToken.from_event(ev) for ev in events])

    def append_tokens(self, tokens: list[ViewToken]) -> None:
        """More of the streaming answer (the very tokens the chat stores: made once per event)."""
        self.tokens.extend(tokens)
        self.text += "".join(t.text for t in tokens)
        if not self._timer.isActive():
            self._timer.start()

    def set_streaming(self, on: bool) -> None:
        self.streaming = on
        if not on:
            self._timer.stop()
        self.render()

    def set_error(self, message: str) -> None:
        self.error = message
        self.render()

    def set_meta(self, text: str) -> None:
        self.meta_label.setText(text)

    def set_colours(self, on: bool) -> None:
        if on != self.colours:
            self.colours = on
            self.render()

    def copy(self) -> None:
        QApplication.clipboard().setText(self.text)
        self.copy_button.setText("Copied")
        QTimer.singleShot(1200, self.copy_button, lambda: self.copy_button.setText("Copy"))

    # -- rendering ------------------------------------------------------------------------
    def _css(self) -> str:
        v = self.theme.values
        return (
            f"pre {{ background-color: {v['code_bg']}; padding: 8px; margin-top: 4px; margin-bottom: 4px; }}"
            "code { font-family: 'DejaVu Sans Mono', 'Menlo', 'Consolas', monospace; }"
            f"table {{ border-collapse: collapse; }} td, th {{ border: 1px solid {v['border']}; padding: 3px; }}"
            "p { margin-top: 0px; margin-bottom: 6px; }"
        )

    def render(self) -> None:
        t0 = time.perf_counter()
        self._render()
        # long messages take longer to lay out: re-render less often so typing stays smooth
        spent_ms = (time.perf_counter() - t0) * 1000
        self._timer.setInterval(int(max(RENDER_INTERVAL_MS, 3 * spent_ms)))

    def _render(self) -> None:
        doc = self.view.document()
        doc.setDefaultStyleSheet(self._css())
        self.view.tokens = self.tokens
        self.view.set_code_blocks([], [])  # until an answer's code blocks are rendered
        if self.role == "user":
            doc.setPlainText(self.text)
            self.view.position_tokens = []
            return
        body = self.text
        if self.streaming and not body:
            doc.setHtml(f"<p style='color:{self.theme.values['muted']}'>…</p>")
            self.view.position_tokens = []
            return
        if not self.streaming and not self.tokens and not body and not self.error and self.empty_hint:
            doc.setHtml(f"<p style='color:{self.theme.values['muted']}'><i>{html.escape(self.empty_hint)}</i></p>")
            self.view.position_tokens = []
            return
        if not self.streaming and not body.strip() and not self.error:
            doc.setHtml(f"<p style='color:{self.theme.values['muted']}'><i>(no text: the model ended its answer "
                        f"at once{'' if not self.tokens else f' after {len(self.tokens)} token(s)'})</i></p>")
            self.view.position_tokens = []
            return
        render_answer(self.view, body, self.tokens, self.theme, self.colours)
        if self.error:
            cur = QTextCursor(doc)
            cur.movePosition(QTextCursor.MoveOperation.End)
            if body.strip():  # a line of its own: HTML inserted at a paragraph's end joins it
                cur.insertBlock(QTextBlockFormat(), QTextCharFormat())
            cur.insertHtml(f"<span style='color:#c0392b'>⚠ {html.escape(self.error)}</span>")
        if self.streaming:
            cur = QTextCursor(doc)
            cur.movePosition(QTextCursor.MoveOperation.End)
            fmt = QTextCharFormat()
            fmt.setForeground(self.theme.color("accent"))
            cur.insertText(" ▍", fmt)


class ChatView(QScrollArea):
    """Scrollable column of MessageWidgets, with an empty-state hint."""

    edit_requested = Signal(object)  # the MessageWidget whose message to edit
    version_requested = Signal(object, int)  # the MessageWidget, -1 / +1
    continue_requested = Signal(object)  # the MessageWidget whose answer to continue

    def __init__(self, theme: Theme, parent=None):
        super().__init__(parent)
        self.theme = theme
        self.colours = True
        self.setObjectName("ChatScroll")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.canvas = QWidget()
        self.canvas.setObjectName("ChatCanvas")
        self.column = QVBoxLayout(self.canvas)
        self.column.setContentsMargins(18, 14, 18, 14)
        self.column.setSpacing(10)
        self.hint = QLabel()
        self.hint.setObjectName("Muted")
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hint.setWordWrap(True)
        self.column.addWidget(self.hint)
        self.column.addStretch(1)
        self.setWidget(self.canvas)
        self.messages: list[MessageWidget] = []
        self._stick = True
        self.verticalScrollBar().rangeChanged.connect(self._on_range)
        self.verticalScrollBar().valueChanged.connect(self._on_value)
        self.set_hint("")

    def set_hint(self, text: str) -> None:
        self.hint.setText(text)
        self.hint.setVisible(bool(text) and not self.messages)

    def add_message(self, role: str) -> MessageWidget:
        w = MessageWidget(role, self.theme, self.colours)
        w.edit_requested.connect(lambda w=w: self.edit_requested.emit(w))
        w.version_requested.connect(lambda step, w=w: self.version_requested.emit(w, step))
        w.continue_requested.connect(lambda w=w: self.continue_requested.emit(w))
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        if role == "user":
            row.addSpacing(90)
            row.addWidget(w, 1)
        else:
            row.addWidget(w, 1)
            row.addSpacing(30)
        holder = QWidget()
        holder.setLayout(row)
        w.holder = holder
        self.column.insertWidget(self.column.count() - 1, holder)
        self.messages.append(w)
        self.hint.setVisible(False)
        self._stick = True
        return w

    def remove_last(self) -> None:
        if self.messages:
            w = self.messages.pop()
            self.column.removeWidget(w.holder)
            w.holder.hide()  # gone from the screen now, not when the event loop next deletes it
            w.holder.deleteLater()
        self.hint.setVisible(bool(self.hint.text()) and not self.messages)

    def clear(self) -> None:
        while self.messages:
            self.remove_last()

    def truncate(self, n: int) -> None:
        """Keep the first `n` bubbles."""
        while len(self.messages) > n:
            self.remove_last()

    def scroll_to(self, w: MessageWidget) -> None:
        self._stick = False
        self.canvas.layout().activate()
        self.ensureWidgetVisible(w.holder, 0, 40)
        # a tall bubble: its top, not its bottom
        self.verticalScrollBar().setValue(min(w.holder.y() - 20, self.verticalScrollBar().maximum()))

    def retheme(self) -> None:
        for m in self.messages:
            m.render()

    def set_colours(self, on: bool) -> None:
        self.colours = on
        for m in self.messages:
            m.set_colours(on)

    def _on_range(self, _lo, hi):
        if self._stick:
            self.verticalScrollBar().setValue(hi)

    def _on_value(self, value):
        self._stick = value >= self.verticalScrollBar().maximum() - 8


class Legend(QWidget):
    """Colour swatches for the kinds, the mark of lookup's tokens, and the switch that turns
    colouring off."""

    toggled = Signal(bool)

    def __init__(self, theme: Theme, parent=None):
        from PySide6.QtWidgets import QCheckBox

        super().__init__(parent)
        self.theme = theme
        lay = QHBoxLayout(self)
        lay.setContentsMargins(18, 6, 18, 2)
        lay.setSpacing(10)
        from .theme import KIND_LABELS, KINDS

        self.swatches: dict[str, QLabel] = {}
        for kind in KINDS:
            sw = QLabel(kind)
            self.swatches[kind] = sw
            sw.setVisible(kind != "server")  # shown while a server target that tells no kinds is loaded
            sw.setToolTip(KIND_LABELS[kind])
            lay.addWidget(sw)
        self.lookup = QLabel("copied")
        self.lookup.setToolTip(LOOKUP_MARK)
        lay.addWidget(self.lookup)
        lay.addStretch(1)
        self.checkbox = QCheckBox("Colour tokens")
        self.checkbox.setChecked(True)
        self.checkbox.setToolTip("Switch colouring off for plain reading (Ctrl+T)")
        self.checkbox.toggled.connect(self.toggled)
        lay.addWidget(self.checkbox)
        self.retheme()

    def retheme(self) -> None:
        for kind, sw in self.swatches.items():
            sw.setStyleSheet(self._swatch(kind))
        # lookup's mark on an accepted token: the kind's colour, and a dotted line under it
        fg = self.theme.kind_fg("accepted").name()
        self.lookup.setStyleSheet(self._swatch("accepted", edge=False)[:-1]
                                  + f" border-bottom: 2px dotted {fg}; border-radius: 0px; }}")

    def _swatch(self, kind: str, edge: bool = True) -> str:
        c = self.theme.kind_bg(kind)
        fg = self.theme.kind_fg(kind)
        left = f"border-left: 3px solid {fg.name()}; " if edge else ""
        return (f"QLabel {{ background: rgba({c.red()},{c.green()},{c.blue()},{c.alpha()}); "
                f"{left}border-radius: 3px; padding: 1px 6px; }}")

    def show_server_kind(self, shown: bool) -> None:
        """The `server` swatch: shown while the target is a server that reports no kind per token."""
        self.swatches["server"].setVisible(shown)
