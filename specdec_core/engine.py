"""The local engine: a target (and optionally a draft) loaded here, behind the one engine
boundary (contract.EngineLike) that the CLI, the app's worker, the race and the bench use.

It turns chat messages into prompt ids with the target's chat template, fits them to the
context, builds the proposer the settings name and runs the decoder.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .context import Fit, Messages, fit_chat
from .contract import EngineError, ServerInfo
from .decoder import Decoder, Generation
from .fim import FimError, Infill, encode_infill
from .lm import common_prefix
from .models.types import LoadedModel, ModelInfo
from .proposers import DraftModelProposer, LookupDraftProposer, PromptLookupProposer, Proposer
from .settings import DEFAULT_PROPOSER, DecodeSettings, proposer_kind


# read_prompt: fewer new tokens than this are left to the send (a typed question: a pass of them
# costs little then, and re-reading its tail on every pause of the typing would cost more), and
# a read goes in passes of this many rows (~0.3-0.6 s each on a 2-core CPU: how long a send
# waits at most for the pass under way)
PROMPT_READ_MIN = 64
PROMPT_READ_ROWS = 128


def _draft_proposer(engine: Engine) -> Proposer:
    # the target's logits width (config, not weight shape: 4-bit weights are packed)
    return DraftModelProposer(engine.draft.model, engine.vocab_size, lean=engine.draft.lean, clock=engine.clock)


# How each of settings.PROPOSER_KINDS is built on a loaded pair (a kind that needs a draft is
# only built when one is loaded).
PROPOSER_BUILDERS: dict[str, Callable[[Engine], Proposer]] = {
    "lookup+draft": lambda engine: LookupDraftProposer(_draft_proposer(engine)),
    "draft": _draft_proposer,
    "prompt-lookup": lambda _engine: PromptLookupProposer(),
}


@dataclass
class Engine:
    target: LoadedModel
    draft: LoadedModel | None = None  # None: only standard decoding and prompt lookup
    # what the decoder and the draft time their work on (the controller's costs): a test that
    # asserts what the controller chose pins them with a clock of its own
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.tokenizer = self.target.tokenizer
        self.decoder = Decoder(self.target.model, self.tokenizer, self.target.eos_token_ids, lean=self.target.lean,
                               clock=self.clock)
        self._proposers: dict[str, Proposer] = {}
        self._head: list[int] | None = None
        self._last_proposer: str | None = None  # the proposer of the latest generation (None: standard)
        self._idle_read = (0, 0.0)  # read_ahead's (tokens, seconds) since the latest generation
        # read_prompt's reads since the latest generation: (first position, end, seconds), or None
        self._prompt_read: tuple[int, int, float] | None = None

    @classmethod
    def load(
        cls,
        target: str = "default",
        draft: str | None = "default",
        *,
        device: str = "auto",
        dtype: str = "auto",
        quantization: str | None = None,
        progress: Callable[[str, float | None], None] | None = None,
        **load_kwargs,
    ) -> Engine:
        """Load a pair by SPEC (see models) and check it is compatible before any decoding.

        On a CPU a GGUF runs on its own blocks through the CPU backend (specdec_core/cpu):
        integer kernels for the instruction set this CPU has, and the lean forward for the
        families it covers; each model's info.kernels and info.notes say what ran where.
        """
        from .models import check_compatible, load_model

        t = load_model(target, role="target", device=device, dtype=dtype, quantization=quantization,
                       progress=progress, **load_kwargs)
        d = None
        if draft is not None:
            d = load_model(draft, role="draft", device=t.info.device, dtype=dtype, progress=progress, **load_kwargs)
            check_compatible(t, d)
        return cls(t, d)

    def fork(self) -> Engine:
        """The same loaded models, its own decoder and proposers (so its own KV caches)."""
        return Engine(self.target, self.draft, self.clock)

    # -- what is loaded ---------------------------------------------------------------------
    @property
    def target_info(self) -> ModelInfo:
        return self.target.info

    @property
    def draft_info(self) -> ModelInfo | None:
        return self.draft.info if self.draft is not None else None

    @property
    def context_length(self) -> int | None:
        """The target's context window in tokens (None when its config does not say)."""
        return self.decoder.context_length

    @property
    def vocab_size(self) -> int:
        return self.target.model.config.get_text_config().vocab_size

    def server_info(self) -> ServerInfo | None:
        return None

    # -- prompts ---------------------------------------------------------------------------
    def encode_chat(self, messages: Messages, *, continue_final: bool = False,
                    answer_ids: list[int] | None = None) -> list[int]:
        """messages [{"role": "system"|"user"|"assistant", "content": ...}] -> prompt ids,
        through the target's own chat template, ending with the assistant's turn opener; with
        `continue_final`, ending with the last (assistant's) message, its turn left open.

        `answer_ids`: that last message as this target wrote it, token by token. Where the
        template opens the assistant's turn the same way with and without its content, the prompt
        is the turn opener followed by exactly these ids, so the continuation reads what the
        answer's own decoding read (re-encoding its text may split it into other tokens, and
        loses a special token or a character cut in half)."""
        if continue_final and (not messages or messages[-1]["role"] != "assistant"):
            raise EngineError("only an assistant's message can be continued: the last message is not the assistant's")
        if continue_final and answer_ids:
            whole = self.encode_chat(messages, continue_final=True)
            opener = self.encode_chat(messages[:-1])
            if whole[: len(opener)] == opener:
                return opener + list(answer_ids)
            return whole
        return self.encode_tool_chat(messages, None, continue_final=continue_final)

    def encode_tool_chat(self, messages: Messages, tools: list[dict] | None, *, continue_final: bool = False) -> list[int]:
        """encode_chat with `tools` (contract.EngineLike.encode_tool_chat)."""
        if getattr(self.tokenizer, "chat_template", None):
            enc = self.tokenizer.apply_chat_template(messages, add_generation_prompt=not continue_final,
                                                     continue_final_message=continue_final, tokenize=True,
                                                     tools=tools)
            ids = enc["input_ids"] if hasattr(enc, "keys") else enc
            return list(ids)
        # A base model without a template: plain concatenation of the contents (which ends with
        # the last message's content: continued or not, the same prompt).
        text = "\n\n".join(m["content"] for m in messages)
        return self.tokenizer(text)["input_ids"]

    def token_id(self, text: str) -> int | None:
        tid = self.tokenizer.convert_tokens_to_ids(text)
        if not isinstance(tid, int) or tid == self.tokenizer.unk_token_id:
            return None
        return tid if self.tokenizer.convert_ids_to_tokens(tid) == text else None

    @property
    def end_token_ids(self) -> frozenset[int]:
        return self.decoder.eos

    def encode_prompt(self, text: str) -> list[int]:
        """One user message through the chat template."""
        return self.encode_chat([{"role": "user", "content": text}])

    def encode_text(self, text: str) -> list[int]:
        """Raw text, no chat template (the tokenizer's own special tokens as it adds them)."""
        return list(self.tokenizer(text)["input_ids"])

    def encode_infill(self, infill: Infill) -> list[int]:
        try:
            return encode_infill(self.tokenizer, infill)
        except FimError as exc:
            raise EngineError(str(exc)) from None

    def count_tokens(self, messages: Messages) -> int:
        return len(self.encode_chat(messages))

    def fit(self, messages: Messages, max_new_tokens: int | None, dropped: int = 0, *, continue_final: bool = False,
            answer_ids: list[int] | None = None) -> Fit:
        def encode(kept: Messages) -> list[int]:
            return self.encode_chat(kept, continue_final=continue_final, answer_ids=answer_ids)

        return fit_chat(messages, max_new_tokens, self.context_length, encode, len, dropped)

    # -- decoding --------------------------------------------------------------------------
    def new_proposer(self, name: str) -> Proposer:
        """A fresh proposer with its own state."""
        kind = proposer_kind(name)
        if kind.needs_draft and self.draft is None:
            raise EngineError("no draft model is loaded: pass --draft SPEC, or use a proposer that needs none "
                              "(--proposer prompt-lookup)")
        return PROPOSER_BUILDERS[name](self)

    def proposer(self, name: str) -> Proposer:
        """The engine's own proposer of that kind, created once and reused across messages."""
        if name not in self._proposers:
            self._proposers[name] = self.new_proposer(name)
        return self._proposers[name]

    def generate(self, prompt: list[int], settings: DecodeSettings = DecodeSettings(), *,
                 cancel: threading.Event | None = None, reuse_cache: bool = False,
                 answer_prefix: int = 0, reuse_at_most: int | None = None) -> Generation:
        """contract.EngineLike.generate; reuse_at_most (this engine only): with reuse_cache, keep
        the cached entries of at most that many of the prompt's first tokens (Decoder.generate)."""
        prop = self.proposer(settings.proposer) if settings.speculative else None
        self._last_proposer = settings.proposer if prop is not None else None
        def idle_work(reused: int) -> dict:
            # what the reads while nothing ran did for this one (a turn that keeps the cache),
            # taken when it starts: a read still going when it was made has ended by its turn
            idle, self._idle_read = self._idle_read, (0, 0.0)
            typed, self._prompt_read = self._prompt_read, None
            told = {}
            if reuse_cache and prop is not None:
                told.update(idle_read_tokens=idle[0], idle_read_seconds=idle[1])
            if reuse_cache and typed is not None:
                first, end, seconds = typed
                kept = max(0, min(reused, end) - first)  # what the send changed after it is read again
                if kept:
                    told.update(prompt_read_ahead_tokens=kept, prompt_read_ahead_seconds=seconds)
            return told

        return self.decoder.generate(prompt, settings, prop, cancel, reuse_cache=reuse_cache,
                                     answer_prefix=answer_prefix, reuse_at_most=reuse_at_most, idle_work=idle_work)

    def read_ahead(self, stop: Callable[[], bool] = lambda: False) -> tuple[int, float]:
        """Between a chat's turns, let the latest generation's draft read what its windows
        skipped of that conversation (DraftModelProposer.read_backlog), so the next turn, which
        keeps the conversation's prefix, starts with the draft's view whole and only its new
        message to read. For the idle time after an answer: the app's worker calls it once an
        answer ends and stops it (`stop`, asked between passes of a few dozen tokens) as soon
        as a new request comes; the bench calls it between a conversation's turns. Nothing after
        a standard generation (no draft read then) or with a proposer that reads nothing.
        -> (tokens read, seconds); the next generation's Stats carry them (idle_read_*)."""
        name = self._last_proposer
        prop = self._proposers.get(name) if name is not None else None
        read = getattr(prop, "read_backlog", None)
        if read is None:
            return 0, 0.0
        tokens, seconds = read(stop)
        self._idle_read = (self._idle_read[0] + tokens, self._idle_read[1] + seconds)
        return tokens, seconds

    def read_prompt(self, prompt: list[int], stop: Callable[[], bool] = lambda: False) -> tuple[int, float]:
        """Before a message is sent: the target, then the draft, read the prompt it would make, so
        the send, which keeps the caches' longest common prefix (reuse_cache), finds it read and
        the draft proposes knowing all of it (its own first read of a prompt takes only the last
        128 tokens: DraftModelProposer.first_read_window). For the time the user spends writing
        the question under a long attachment or paste: the app's context watch asks for it with
        what the input box holds, at most every quarter second. Each model reads only what its
        cache lacks, when that is at least PROMPT_READ_MIN tokens (a typed question is read at its
        send), never the prompt's last token (its logits are the first step's), in passes asking
        `stop` between them. A row's numbers do not depend on the pass it is read in (the CPU
        kernels are batch-invariant), so the answer is the one a send without it would give.
        -> the target's (tokens read, seconds); the next generation's Stats carry them
        (prompt_read_ahead_*) and the draft's read (idle_read_*, as Engine.read_ahead's)."""
        read, seconds = self._target_reads(prompt, stop)
        # the proposer the next answer most likely uses: the last speculative one's, else the default
        name = self._last_proposer or (DEFAULT_PROPOSER if self.draft is not None else None)
        draft_read = getattr(self.proposer(name), "read_prompt", None) if name is not None else None
        if draft_read is not None and not stop():
            tokens, took = draft_read(prompt, stop, PROMPT_READ_MIN)
            self._idle_read = (self._idle_read[0] + tokens, self._idle_read[1] + took)
        return read, seconds

    def _target_reads(self, prompt: list[int], stop: Callable[[], bool]) -> tuple[int, float]:
        target = self.decoder.target
        have = common_prefix(target.ids, prompt, min(target.length, len(prompt) - 1))
        if len(prompt) - 1 - have < PROMPT_READ_MIN or stop():
            return 0, 0.0
        t0 = self.clock()
        target.keep_prefix(prompt[: have + 1])  # the tail that differs goes
        at = have
        while at < len(prompt) - 1 and not stop():
            rows = prompt[at: min(at + PROMPT_READ_ROWS, len(prompt) - 1)]
            target.forward(rows, logits_to_keep=0)
            at += len(rows)
        seconds = self.clock() - t0
        last = self._prompt_read
        if last is not None and last[0] <= have <= last[1]:  # goes on from the last read
            self._prompt_read = (last[0], at, last[2] + seconds)
        else:
            self._prompt_read = (have, at, seconds)
        return at - have, seconds

    @property
    def template_head(self) -> list[int]:
        """The tokens every new chat's prompt starts with: the chat template's opening (on the
        embedded pair Qwen's system prompt and the user's turn opener, 24 tokens), found as what
        two one-message chats share (a prompt that shares less keeps less: keep_prefix). The app
        decodes every message on the cache the last one left, so a new chat finds these already
        read by both models; the bench's first turns are measured so."""
        if self._head is None:
            a = self.encode_chat([{"role": "user", "content": "a"}])
            b = self.encode_chat([{"role": "user", "content": "Which?"}])
            self._head = a[: common_prefix(a, b, min(len(a), len(b)))]
        return list(self._head)

    def read_template_head(self) -> int:
        """Read the template's head into the target's cache and the draft model of the default
        proposer and of any other built so far (each reset to it), so that a session's first chat
        starts where every later one does (the app's worker, after loading; ~0.15 s on the
        embedded pair on a 2-core CPU, paid while the window shows the load finishing instead of
        in the first answer; the bench, before a message it reads ahead). Returns the tokens read."""
        head = self.template_head
        if not head:
            return 0
        # the whole head: a chat's prompt always goes on past it, so no token of it is the one
        # a prompt's last must be, fed again for its logits
        target = self.decoder.target
        target.reset()
        target.forward(head, logits_to_keep=0)
        if self.draft is not None:
            self.proposer(DEFAULT_PROPOSER)
            for prop in self._proposers.values():  # every draft built so far, as a new chat finds it
                if hasattr(prop, "prime"):
                    prop.prime(head)
        return len(head)
