"""The context meter: how much of the target's context the chat takes, live while typing.

Counting is the engine's: `EngineLike.fit` encodes the chat with the target's own chat template
and tokenizer (a server's /tokenize for llama-server) and says, when the chat and its answer
budget outgrow the context, how many oldest messages the prompt would leave out -- the same rule
the worker applies before it generates (context.fit_chat), so the meter and the "does not fit"
dialog always agree. Tokenizing a long chat takes milliseconds to tens of them, and a server
answers over the network, so it happens in a CounterWorker in its own thread, never the GUI's;
the GUI asks again at most every DEBOUNCE_MS while the user types, and the worker answers only
the newest question (older ones are skipped unanswered).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QThread, Qt, Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from .models_worker import start_in_thread
from .theme import Theme

DEBOUNCE_MS = 250


@dataclass(frozen=True)
class CountJob:
    """One question: the chat as it would be sent (with the text being typed as its last user
    message, attachments included), its answer budget, the oldest messages already left out;
    and each attachment alone, to say what it takes."""

    job_id: int
    messages: list[dict[str, str]]
    max_new_tokens: int | None  # None: no budget, the answer may take what the context leaves
    dropped: int = 0
    attachments: tuple[str, ...] = ()  # each attachment's block as the prompt holds it


@dataclass
class Count:
    job_id: int
    prompt_tokens: int | None  # None: the engine cannot say (a server that tokenizes its own chat)
    context: int | None
    max_new_tokens: int | None
    fits: bool
    drop: int | None = None  # when it does not fit: oldest messages to leave out (None: even the last turn alone)
    dropped: int = 0
    attachment_tokens: list[int | None] = field(default_factory=list)
    error: str = ""


class CounterWorker(QObject):
    counted = Signal(object)  # Count

    _requested = Signal()

    def __init__(self, engine_provider: Callable[[], Any]):
        super().__init__()
        self._engine = engine_provider
        self._lock = threading.Lock()
        self._job: CountJob | None = None
        self._cache: dict[str, int | None] = {}  # an attachment's tokens, counted once per engine
        self._cache_engine: int | None = None
        self._requested.connect(self._count)

    # -- GUI-thread API -------------------------------------------------------------------
    def request(self, job: CountJob) -> None:
        with self._lock:
            self._job = job
        self._requested.emit()

    # -- worker-thread slot ---------------------------------------------------------------
    @Slot()
    def _count(self) -> None:
        with self._lock:
            job, self._job = self._job, None
        if job is None:  # a newer request was answered already
            return
        engine = self._engine()
        if engine is None:
            return
        try:
            fit = engine.fit(job.messages, job.max_new_tokens, job.dropped)
            if id(engine) != self._cache_engine:
                self._cache, self._cache_engine = {}, id(engine)
            each = [self._attachment_tokens(engine, block) for block in job.attachments]
            self.counted.emit(Count(job.job_id, fit.prompt_tokens, fit.context, job.max_new_tokens, fit.fits,
                                    fit.drop, fit.dropped, each))
        except Exception as exc:  # a server that went away: the meter says so, the chat goes on
            from .worker import _one_line

            self.counted.emit(Count(job.job_id, None, None, job.max_new_tokens, True, error=_one_line(exc)))


    def _attachment_tokens(self, engine, block: str) -> int | None:
        """What one attachment adds to a message: the message with it, less the message without."""
        if block not in self._cache:
            if len(self._cache) > 64:
                self._cache.clear()
            base = engine.count_tokens([{"role": "user", "content": ""}])
            n = engine.count_tokens([{"role": "user", "content": block}])
            self._cache[block] = None if n is None or base is None else max(n - base, 0)
        return self._cache[block]


def start_counter(engine_provider: Callable[[], Any], parent: QObject | None = None) -> tuple[CounterWorker, QThread]:
    """A CounterWorker in a thread of its own (wired by models_worker.start_in_thread, the one
    function that does that). Returns (worker, thread), running."""
    worker = CounterWorker(engine_provider)
    return worker, start_in_thread(worker, "specdec-context-counter", parent)


def meter_text(c: Count) -> tuple[str, str]:
    """(the line under the input box, its tooltip) for a count."""
    if c.error:
        return "context: cannot count now", c.error
    if c.prompt_tokens is None or not c.context:
        return "context: counted by the server", "the server applies its own chat template and does not say the length"
    tip = (f"The chat as it would be sent — system prompt, every message shown, attachments and what you are typing — "
           f"is {c.prompt_tokens:,} tokens by the target's own tokenizer; ")
    if c.max_new_tokens is None:  # no budget: the answer may take the rest
        left = max(c.context - c.prompt_tokens, 0)
        text = f"{c.prompt_tokens:,} of {c.context:,} tokens ({c.prompt_tokens / c.context:.0%}) · {left:,} left for the answer"
        tip += (f"the answer may take the {left:,} the target's context of {c.context:,} leaves (Max new tokens is "
                "off); an answer cut off there offers Continue once older turns are left out.")
    else:
        used = c.prompt_tokens + c.max_new_tokens
        text = (f"{c.prompt_tokens:,} + {c.max_new_tokens:,} for the answer of {c.context:,} tokens "
                f"({used / c.context:.0%})")
        tip += (f"the answer may take up to {c.max_new_tokens:,} more (Max new tokens); the target's context holds "
                f"{c.context:,}.")
    if not c.fits:
        if c.drop is None:
            text += " · too long even alone"
            tip += "\nEven the last message alone does not fit with that answer budget."
        else:
            more = c.drop - c.dropped
            text += f" · the oldest {more} message(s) would be left out"
            tip += (f"\nSending would offer to leave the oldest {more} message(s) out of the prompt (marked in the chat); "
                    "they stay in the chat and its history.")
    elif c.dropped:
        tip += f"\nThe oldest {c.dropped} message(s) are left out of the prompt (marked in the chat)."
    return text, tip


class ContextMeter(QWidget):
    """A slim bar and one line under the input box."""

    def __init__(self, theme: Theme, parent=None):
        super().__init__(parent)
        self.theme = theme
        lay = QHBoxLayout(self)
        lay.setContentsMargins(18, 0, 18, 0)
        lay.setSpacing(8)
        self.bar = QProgressBar()
        self.bar.setObjectName("ContextBar")
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(6)
        self.bar.setFixedWidth(120)
        self.bar.setRange(0, 1000)
        self.label = QLabel("context: —")
        self.label.setObjectName("Muted")
        self.label.setWordWrap(True)  # never wider than the chat: a long line takes two
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
        lay.addWidget(self.bar)
        lay.addWidget(self.label, 1)
        self.count: Count | None = None

    def show_count(self, c: Count) -> None:
        self.count = c
        text, tip = meter_text(c)
        self.label.setText(text)
        self.setToolTip(tip)
        if c.prompt_tokens is None or not c.context:
            self.bar.setValue(0)
            level = "ok"
        else:
            share = (c.prompt_tokens + (c.max_new_tokens or 0)) / c.context
            self.bar.setValue(int(min(share, 1.0) * 1000))
            level = "over" if not c.fits else "high" if share > 0.8 else "ok"
        self.bar.setProperty("level", level)
        self.bar.style().unpolish(self.bar)
        self.bar.style().polish(self.bar)

    def clear(self, text: str = "context: —") -> None:
        self.count = None
        self.label.setText(text)
        self.bar.setValue(0)
