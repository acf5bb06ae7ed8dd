"""An OpenAI request body, checked (schema.py: pydantic models) and turned into what the engine
needs: the prompt, the one settings value (settings.DecodeSettings) and what the response should
look like.

Structured output and tools (response_format, tools, tool_choice, parallel_tool_calls, tool
messages) are schema_tools.py's fields, and become the answer's grammar in app.py (tools.py).
What applies is taken (messages / prompt / suffix / llama-server's infill fields, max_tokens /
max_completion_tokens, temperature, top_p, top_k, min_p, logit_bias, the penalties, logprobs,
seed, stop, n = 1, stream, stream_options.include_usage, and the `specdec` extension of
protocol.py); what would change the answer in a way the engine does not do (n > 1, ...) is
refused rather than ignored; anything else (user, metadata, store, ...) is ignored, as
OpenAI's own clients send such fields freely.

A field of the wrong type is a 422, a value out of range a 400 (errors.py), each naming its
field in `param`. Defaults are OpenAI's (temperature 1, top_p 1, no seed: a fresh random one,
reported back in the response) except the draft length, which is the engine's default: they
are put in here, where the models' None (absent or null) becomes the engine's value.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass

from ..fim import Infill
from ..settings import DEFAULT_PROPOSER, DecodeSettings, SamplingParams, usable_proposer
from .schema import ROLES, Extension, InfillRequest, Message, TokenizeChat, TokenizeText, BaseRequest, parse
from .schema_tools import ChatRequest, TextRequest, ToolMessage
from .tools import ToolUse


@dataclass(frozen=True)
class Options:
    """How to decode one request and how to answer it. `max_tokens` None: up to the context."""

    model: str | None
    messages: list[dict[str, str]] | None  # chat: through the chat template
    prompt: str | list[int] | None  # completions: raw text or token ids, no template
    infill: Infill | None  # fill in the middle (a completion's suffix, /infill): the prompt is its FIM layout
    max_tokens: int | None
    sampling: SamplingParams
    seed: int  # what the request said, else a fresh random one (reported back)
    stops: tuple[str, ...]
    stream: bool
    include_usage: bool
    mode: str
    draft_tokens: int | str
    proposer: str | None  # None: the engine's default for what is loaded
    reuse_cache: bool
    running_stats: bool
    engine_seed: int | None = None  # the engine's seed as it is (a client engine's settings)
    logprobs: int | None = None  # each token's logprob and this many alternatives; None: none
    response_format: dict | None = None  # None or {"type": "text"}: free text (tools.py)
    tool_use: ToolUse | None = None  # the functions offered and tool_choice (chat only)

    @property
    def chat(self) -> bool:
        return self.messages is not None

    @property
    def prompt_param(self) -> str:
        if self.infill is not None and self.infill.repo_level:
            return "input_prefix"
        return "messages" if self.chat else "prompt"

    def settings(self, max_new_tokens: int, has_draft: bool) -> DecodeSettings:
        """The engine's settings, as `specdec generate` builds them for its first sample (seed S
        there is sample_seed(S, 0) here too: the same answer for the same settings). Without a
        proposer named, the default one, or prompt lookup where no draft is loaded."""
        proposer = self.proposer or usable_proposer(DEFAULT_PROPOSER, has_draft)
        settings = DecodeSettings(max_new_tokens, self.sampling, self.draft_tokens, self.seed, mode=self.mode,
                                  proposer=proposer, logprobs=self.logprobs)
        return settings.for_sample(0) if self.engine_seed is None else settings.replace(seed=self.engine_seed)


@dataclass(frozen=True)
class TokenizeInput:
    """/tokenize: {"messages": [...]} (through the chat template) or {"prompt": "text"}."""

    model: str | None
    messages: list[dict[str, str]] | None
    prompt: str | None


def chat_options(body: dict) -> Options:
    req = parse(ChatRequest, body)
    logprobs = (req.top_logprobs or 0) if req.logprobs else None
    opts = _options(req, messages=_conversation(req.messages), prompt=None, logprobs=logprobs)
    return dataclasses.replace(opts, response_format=_format(req), tool_use=_tool_use(req))


def completion_options(body: dict) -> Options:
    req = parse(TextRequest, body)
    infill = None if req.suffix is None else Infill(req.prompt, req.suffix)
    opts = _options(req, messages=None, prompt=req.prompt, infill=infill, logprobs=req.logprobs)
    return dataclasses.replace(opts, response_format=_format(req))


def infill_options(body: dict) -> Options:
    """llama-server's /infill: n_predict is the answer's budget (-1, or none: up to the context)."""
    req = parse(InfillRequest, body)
    infill = Infill(req.input_prefix, req.input_suffix, tuple((e.filename, e.text) for e in req.input_extra),
                    req.prompt, repo_level=True)
    opts = _options(req, messages=None, prompt=None, infill=infill)
    if req.n_predict is not None and req.max_tokens is None and req.max_completion_tokens is None:
        opts = dataclasses.replace(opts, max_tokens=None if req.n_predict == -1 else req.n_predict)
    return opts


def _format(req: ChatRequest | TextRequest) -> dict | None:
    return None if req.response_format is None else req.response_format.to_dict()


def _tool_use(req: ChatRequest) -> ToolUse | None:
    if not req.tools:
        return None
    choice = req.tool_choice or "auto"
    functions = tuple(t.function.to_dict() for t in req.tools)
    several = req.parallel_tool_calls is not False
    if isinstance(choice, str):
        return ToolUse(functions, choice, several=several)
    return ToolUse(functions, "function", choice.function.name, several)


def tokenize_input(body: dict) -> TokenizeInput:
    if "messages" in body:
        chat = parse(TokenizeChat, body)
        return TokenizeInput(chat.model, _conversation(chat.messages), None)
    text = parse(TokenizeText, body)
    return TokenizeInput(text.model, None, text.prompt)


def _conversation(messages: list[Message]) -> list[dict[str, str]]:
    """As the chat template takes them; a tool's result and an assistant's calls as theirs."""
    return [m.to_template() if isinstance(m, ToolMessage) else {"role": ROLES[m.role], "content": m.text}
            for m in messages]


def _options(req: BaseRequest, messages: list[dict[str, str]] | None, prompt: str | list[int] | None,
             infill: Infill | None = None, logprobs: int | None = None) -> Options:
    """A checked request's values, with the defaults where it has none."""
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    sampling = SamplingParams(temperature=1.0 if req.temperature is None else float(req.temperature),
                              top_k=0 if req.top_k in (None, -1) else req.top_k,
                              top_p=1.0 if req.top_p is None else float(req.top_p),
                              min_p=float(req.min_p or 0.0),
                              presence_penalty=float(req.presence_penalty or 0.0),
                              frequency_penalty=float(req.frequency_penalty or 0.0),
                              repetition_penalty=1.0 if req.repetition_penalty is None else float(req.repetition_penalty),
                              logit_bias=tuple(sorted((int(t), float(b)) for t, b in (req.logit_bias or {}).items())))
    stops = () if req.stop is None else (req.stop,) if isinstance(req.stop, str) else tuple(req.stop)
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    ext = req.specdec or Extension()
    return Options(model=req.model, messages=messages, prompt=prompt, infill=infill, max_tokens=max_tokens,
                   sampling=sampling, logprobs=logprobs,
                   seed=secrets.randbits(63) if req.seed is None else req.seed, stops=stops,
                   stream=bool(req.stream), include_usage=include_usage,
                   mode=ext.mode or "speculative", draft_tokens=ext.draft_tokens, proposer=ext.proposer,
                   reuse_cache=ext.reuse_cache is not False, running_stats=bool(ext.running_stats),
                   engine_seed=ext.engine_seed)
