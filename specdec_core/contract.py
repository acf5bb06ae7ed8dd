"""The one engine boundary: what the app, the CLI, the race and the bench type against.

Two engines implement `EngineLike`: the local `Engine` (engine.py: a target, and a draft, loaded
here) and `ServerEngine` (remote/engine.py: a server decodes with its own draft). Every front end
gets one from `open_engine` (open_engine.py) and then only:

    fit = engine.fit(messages, settings.max_new_tokens)       # encoded, measured, or what to drop
    gen = engine.generate(fit.prompt, settings, cancel=...)   # iterate TokenEvents; gen.stats
    engine.target_info, engine.draft_info, engine.server_info(), engine.context_length

The settings are one value (settings.DecodeSettings); the events and Stats are events.py's,
the one source of every number shown. No torch here. See docs/architecture.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Protocol, Union, runtime_checkable

from .context import Fit, Messages
from .events import Stats, TokenEvent
from .fim import Infill
from .models.types import ModelInfo
from .settings import DecodeSettings


class EngineError(ValueError):
    """A request the loaded engine cannot serve; the message says how to fix it."""


@dataclass(frozen=True)
class ChatPrompt:
    """A prompt for a server that applies its own chat template (OpenAI chat completions): the
    messages as they are; how many tokens they make is the server's to know."""

    messages: tuple


# What an engine generates from: token ids (the target's tokenizer, its chat template), or the
# messages themselves for a server that tokenizes them.
Prompt = Union[list[int], ChatPrompt]


@dataclass(frozen=True)
class ServerInfo:
    """What a server target is and what it tells (plain values: the GUI reads them)."""

    url: str
    engine: str  # "llama.cpp" | "vLLM" | "OpenAI-compatible"
    model: str
    mode: str  # what every request gets: "speculative" | "standard" | "server" (not said); the default
    # where requests choose (can_toggle)
    speculative: bool | None
    proposer: str  # the server's own drafting, e.g. "draft-simple" ("" when not said)
    colours: str  # "exact" (every token's kind as the serving engine decided it: specdec serve) |
    # "per token" (every token's kind rebuilt from draft counters) | "none" (kind server)
    race_note: str  # why it cannot be raced ("" where it can)
    can_race: bool = False  # a request can say standard or speculative (specdec serve; not llama-server, vLLM)
    can_toggle: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class GenerationLike(Protocol):
    """One answer: iterate for TokenEvents; afterwards `stats`, `text`, `token_ids`, `kinds`, `sources`.
    When a stream breaks off, iteration raises after the events that arrived and `stats`
    describes those (stop_reason "error")."""

    events: list[TokenEvent]
    stats: Stats | None
    # the events' `t` come from the clock of an engine elsewhere (a `specdec serve`): waiting
    # for the network is nobody's compute, so a race times such a lane by them
    own_clock: bool

    def __iter__(self) -> Iterator[TokenEvent]: ...

    def snapshot(self) -> Stats:
        """The running stats of the tokens handed out so far (the final ones once done)."""
        ...

    def run(self) -> GenerationLike: ...

    @property
    def text(self) -> str: ...

    @property
    def token_ids(self) -> list[int]: ...

    @property
    def kinds(self) -> list[str]: ...

    @property
    def sources(self) -> list[str]: ...


@runtime_checkable
class EngineLike(Protocol):
    """An engine as every front end sees it."""

    @property
    def target_info(self) -> ModelInfo:
        """What the target was actually loaded as (or what the server says of it)."""
        ...

    @property
    def draft_info(self) -> ModelInfo | None:
        """The draft's, None when there is none."""
        ...

    @property
    def context_length(self) -> int | None:
        """The target's context in tokens (prompt plus answer); None: unknown, nothing refused."""
        ...

    @property
    def vocab_size(self) -> int | None:
        """The target's vocabulary size, to check raw token ids; None: the server checks them."""
        ...

    def server_info(self) -> ServerInfo | None:
        """What the server is and tells; None for models loaded here."""
        ...

    def encode_chat(self, messages: Messages, *, continue_final: bool = False,
                    answer_ids: list[int] | None = None) -> Prompt:
        """[{"role", "content"}, ...] -> the prompt, through the target's chat template, ending
        with the assistant's turn opener. `continue_final`: the last message is the assistant's
        and the answer continues it (a prefill): the prompt ends with its content, the turn left
        open (no end-of-turn after it, no new turn opener). EngineError where the last message is
        not the assistant's, or where a server cannot continue one. `answer_ids`: that message's
        tokens as this engine wrote them; an engine that tokenizes here puts them in the prompt as
        they are (a server tokenizes the text)."""
        ...

    def encode_tool_chat(self, messages: Messages, tools: list[dict] | None, *,
                         continue_final: bool = False) -> Prompt:
        """encode_chat with `tools`, the functions the template shows the model (OpenAI's tools,
        as templates take them: `specdec serve`'s tool calls), and messages that may hold an
        assistant's tool_calls and tools' results. EngineError where a server applies its own
        template (tools go to its own chat endpoint)."""
        ...

    def token_id(self, text: str) -> int | None:
        """The id of the vocabulary entry spelled exactly `text` -- an added token such as
        Qwen2.5's `<tool_call>` is spelled as its text; None where there is none, or where a
        server's vocabulary is not known here."""
        ...

    @property
    def end_token_ids(self) -> frozenset[int]:
        """The tokens that end an answer (the target's end of text and end of turn): an answer's
        last token where it ended by itself. Empty where a server's are not known here."""
        ...

    def encode_prompt(self, text: str) -> Prompt:
        """One user message through the chat template."""
        ...

    def encode_text(self, text: str) -> Prompt:
        """Raw text through the target's tokenizer alone, no chat template (its own special
        tokens, such as a BOS, as the tokenizer adds them): an OpenAI completions prompt.
        EngineError where a server does not tokenize for its clients."""
        ...

    def encode_infill(self, infill: Infill) -> Prompt:
        """Code before and after a gap (fim.Infill) -> the prompt whose answer fills the gap,
        with the target's fill-in-the-middle tokens. EngineError where the target has none, or
        where a server does not tokenize for its clients."""
        ...

    def count_tokens(self, messages: Messages) -> int | None:
        """How many prompt tokens the chat makes (None where the server does not say). Slow
        enough for a worker thread, never the GUI's."""
        ...

    def fit(self, messages: Messages, max_new_tokens: int | None, dropped: int = 0, *, continue_final: bool = False,
            answer_ids: list[int] | None = None) -> Fit:
        """The chat without its `dropped` oldest messages, encoded (encode_chat, with
        `continue_final` and `answer_ids` for a continued answer) and measured against the
        context (context.fit_chat: the one rule); when it does not fit, how many to drop.
        max_new_tokens None: the answer runs until the context is full (it needs one token)."""
        ...

    def generate(self, prompt: Prompt, settings: DecodeSettings, *, cancel: threading.Event | None = None,
                 reuse_cache: bool = False, answer_prefix: int = 0, reuse_at_most: int | None = None) -> GenerationLike:
        """Decode one answer with `settings` (mode, proposer, k, sampling, budget, seed; a
        budget of None: until the context is full, stop reason "context"). `cancel` ends it
        within a step; `reuse_cache` keeps the cached prefix of a chat's earlier turns, at most
        `reuse_at_most` of the prompt's first tokens where given (the bench's first turns keep
        the chat template's head alone; a server's own prompt cache decides what it keeps);
        `answer_prefix`: the prompt's last that many tokens are the answer being continued (its
        text is not handed out again). Refuses (ContextError, EngineError) before computing."""
        ...

    def fork(self) -> EngineLike:
        """A second engine over the same models with its own caches (a race's lane); raises
        EngineError where two decodes cannot run side by side (a server)."""
        ...


def prompt_tokens(prompt: Prompt) -> int | None:
    """A prompt's token count, None for a chat a server will tokenize."""
    return None if isinstance(prompt, ChatPrompt) else len(prompt)
