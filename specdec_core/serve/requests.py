"""An OpenAI request body, checked into what the engine needs: the prompt, the one settings
value (settings.DecodeSettings) and what the response should look like.

What applies is taken (messages / prompt, max_tokens / max_completion_tokens, temperature,
top_p, top_k, seed, stop, n = 1, stream, stream_options.include_usage, and the `specdec`
extension of protocol.py); what would change the answer in a way the engine does not do
(logprobs, penalties, logit_bias, tools, n > 1, ...) is refused rather than ignored; anything
else (user, metadata, store, ...) is ignored, as OpenAI's own clients send such fields freely.

A field of the wrong type is a 422, a value out of range a 400 (errors.py), each naming its
field in `param`. Defaults are OpenAI's (temperature 1, top_p 1, no seed: a fresh random one,
reported back in the response) except the draft length, which is the engine's default.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from ..settings import DEFAULT_DRAFT_TOKENS, DEFAULT_PROPOSER, MODES, PROPOSERS, DecodeSettings, SamplingParams, \
    SettingsError, usable_proposer
from .errors import invalid, unsupported, wrong_type
from .protocol import EXTENSION, REQUEST_FIELDS

MAX_STOPS = 16
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_MISSING = object()


@dataclass(frozen=True)
class Options:
    """How to decode one request and how to answer it. `max_tokens` None: up to the context."""

    model: str | None
    messages: list[dict[str, str]] | None  # chat: through the chat template
    prompt: str | list[int] | None  # completions: raw text or token ids, no template
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

    @property
    def chat(self) -> bool:
        return self.messages is not None

    @property
    def prompt_param(self) -> str:
        return "messages" if self.chat else "prompt"

    def settings(self, max_new_tokens: int, has_draft: bool) -> DecodeSettings:
        """The engine's settings, as `specdec generate` builds them for its first sample (seed S
        there is sample_seed(S, 0) here too: the same answer for the same settings). Without a
        proposer named, the default one, or prompt lookup where no draft is loaded."""
        proposer = self.proposer or usable_proposer(DEFAULT_PROPOSER, has_draft)
        settings = DecodeSettings(max_new_tokens, self.sampling, self.draft_tokens, self.seed, mode=self.mode,
                                  proposer=proposer)
        return settings.for_sample(0) if self.engine_seed is None else settings.replace(seed=self.engine_seed)


def chat_options(body: dict) -> Options:
    messages = _messages(_field(body, "messages", list, "an array of messages", required=True))
    return _options(body, messages=messages, prompt=None)


def completion_options(body: dict) -> Options:
    for name, neutral in (("echo", (None, False)), ("suffix", (None, "")), ("best_of", (None, 1))):
        if body.get(name) not in neutral:
            raise unsupported(name, "not supported by this server")
    return _options(body, messages=None, prompt=_prompt(body.get("prompt", _MISSING)))


def tokenize_input(body: dict) -> tuple[list[dict[str, str]] | None, str | None]:
    """/tokenize: {"messages": [...]} (through the chat template) or {"prompt": "text"}."""
    if "messages" in body:
        return _messages(_field(body, "messages", list, "an array of messages", required=True)), None
    prompt = _field(body, "prompt", str, "a string", required=True)
    return None, prompt


# -- the common fields ------------------------------------------------------------------------
def _options(body: dict, messages, prompt) -> Options:
    model = _field(body, "model", str, "a string")
    _refuse_what_does_not_apply(body)
    n = _field(body, "n", int, "an integer")
    if n not in (None, 1):
        raise unsupported("n", f"only n = 1 is served (one answer per request), got {n}")
    max_tokens = _field(body, "max_completion_tokens", int, "an integer")
    if max_tokens is None:
        max_tokens = _field(body, "max_tokens", int, "an integer")
        param = "max_tokens"
    else:
        param = "max_completion_tokens"
    if max_tokens is not None and max_tokens < 1:
        raise invalid(f"{param} must be >= 1, got {max_tokens}", param)
    temperature = _number(body, "temperature", 1.0)
    top_p = _number(body, "top_p", 1.0)
    top_k = _field(body, "top_k", int, "an integer")
    top_k = 0 if top_k in (None, -1) else top_k
    try:
        sampling = SamplingParams(temperature, top_k, top_p)
    except SettingsError as exc:
        param = "temperature" if "temperature" in str(exc) else "top_k" if "top-k" in str(exc) else "top_p"
        raise invalid(str(exc).replace("top-k", "top_k").replace("top-p", "top_p"), param) from None
    seed = _field(body, "seed", int, "an integer")
    if seed is not None and not 0 <= seed < 2**63:
        raise invalid(f"seed must be in [0, 2**63), got {seed}", "seed")
    stream = _field(body, "stream", bool, "a boolean") or False
    stream_options = _field(body, "stream_options", dict, "an object")
    include_usage = False
    if stream_options is not None:
        if not stream:
            raise invalid("stream_options is only allowed with stream: true", "stream_options")
        include_usage = _field(stream_options, "include_usage", bool, "a boolean", prefix="stream_options.") or False
    ext = _field(body, EXTENSION, dict, "an object") or {}
    unknown = sorted(set(ext) - set(REQUEST_FIELDS))
    if unknown:
        raise invalid(f"{EXTENSION}.{unknown[0]} is not a field of the extension; it takes "
                      f"{', '.join(REQUEST_FIELDS)}", f"{EXTENSION}.{unknown[0]}")
    mode = _choice(ext, "mode", MODES, "speculative")
    proposer = _choice(ext, "proposer", PROPOSERS, None)
    draft_tokens = ext.get("draft_tokens", DEFAULT_DRAFT_TOKENS)
    if draft_tokens != "adaptive":
        if isinstance(draft_tokens, bool) or not isinstance(draft_tokens, int):
            raise wrong_type(f"{EXTENSION}.draft_tokens", "an integer k >= 1 or \"adaptive\"", draft_tokens)
        if draft_tokens < 1:
            raise invalid(f"{EXTENSION}.draft_tokens must be >= 1 or \"adaptive\", got {draft_tokens}",
                          f"{EXTENSION}.draft_tokens")
    reuse = _field(ext, "reuse_cache", bool, "a boolean", prefix=f"{EXTENSION}.")
    running = _field(ext, "running_stats", bool, "a boolean", prefix=f"{EXTENSION}.")
    engine_seed = _field(ext, "engine_seed", int, "an integer", prefix=f"{EXTENSION}.")
    if engine_seed is not None and not 0 <= engine_seed < 2**63:
        raise invalid(f"{EXTENSION}.engine_seed must be in [0, 2**63), got {engine_seed}", f"{EXTENSION}.engine_seed")
    return Options(model=model, messages=messages, prompt=prompt, max_tokens=max_tokens, sampling=sampling,
                   seed=secrets.randbits(63) if seed is None else seed,
                   stops=_stops(body.get("stop")), stream=stream, include_usage=include_usage, mode=mode,
                   draft_tokens=draft_tokens, proposer=proposer, reuse_cache=True if reuse is None else reuse,
                   running_stats=bool(running), engine_seed=engine_seed)


def _refuse_what_does_not_apply(body: dict) -> None:
    """Fields that would change the answer in a way the engine does not do: refused, so a
    client never gets an answer it did not ask for. Their neutral values pass."""
    neutral = {"logprobs": (None, False, 0), "top_logprobs": (None, 0), "logit_bias": (None, {}),
               "frequency_penalty": (None, 0, 0.0), "presence_penalty": (None, 0, 0.0),
               "repetition_penalty": (None, 1, 1.0), "tools": (None, []), "functions": (None, []),
               "tool_choice": (None, "none"), "function_call": (None, "none"), "min_p": (None, 0, 0.0)}
    for name, values in neutral.items():
        value = body.get(name)
        if not any(value is v or (type(value) is type(v) and value == v) for v in values):
            raise unsupported(name, "not supported by this server: the engine decodes the distribution that "
                                    "temperature, top_k and top_p define, exactly, and nothing else")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise unsupported("response_format", "only {\"type\": \"text\"} is served")


def _messages(items: list) -> list[dict[str, str]]:
    if not items:
        raise invalid("messages is empty: give at least one message", "messages")
    out = []
    for i, m in enumerate(items):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise wrong_type(where, "an object with role and content", m)
        role = m.get("role")
        if not isinstance(role, str):
            raise wrong_type(f"{where}.role", "a string", role)
        if role not in ROLES:
            raise unsupported(f"{where}.role", f"{role!r} messages are not served (tools are not); use system, "
                                               "user or assistant")
        out.append({"role": ROLES[role], "content": _content(m.get("content", _MISSING), f"{where}.content")})
    return out


def _content(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                raise wrong_type(f"{where}[{j}]", "a content part object", part)
            if part.get("type") != "text":
                raise unsupported(f"{where}[{j}].type", f"{part.get('type')!r} content is not served: text only")
            text = part.get("text")
            if not isinstance(text, str):
                raise wrong_type(f"{where}[{j}].text", "a string", text)
            parts.append(text)
        return "".join(parts)
    if content is _MISSING:
        raise invalid(f"{where} is missing", where, code="missing_required_parameter")
    raise wrong_type(where, "a string or an array of text parts", content)


def _prompt(prompt) -> str | list[int]:
    """A string, token ids, or either wrapped in a one-item array; several prompts are refused."""
    if prompt is _MISSING or prompt is None:
        raise invalid("prompt is missing", "prompt", code="missing_required_parameter")
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        if len(prompt) != 1:
            raise unsupported("prompt", f"one prompt per request is served, got {len(prompt)}")
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise invalid("prompt is empty", "prompt")
        return prompt
    if isinstance(prompt, list):
        if not prompt:
            raise invalid("prompt is empty: give text or at least one token id", "prompt")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise wrong_type("prompt", "a string or an array of token ids (integers)", prompt)
        if min(prompt) < 0:
            raise invalid(f"prompt: token ids are >= 0, got {min(prompt)}", "prompt")
        return list(prompt)
    raise wrong_type("prompt", "a string or an array of token ids", prompt)


def _stops(stop) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise wrong_type("stop", "a string or an array of strings", stop)
    if len(stops) > MAX_STOPS:
        raise invalid(f"stop takes at most {MAX_STOPS} strings, got {len(stops)}", "stop")
    if any(not s for s in stops):
        raise invalid("stop strings must not be empty", "stop")
    return tuple(stops)


# -- typed fields -----------------------------------------------------------------------------
def _field(body: dict, name: str, kind: type, expected: str, required: bool = False, prefix: str = ""):
    """body[name] when it is of `kind` (bool is not an int here), None when absent or null."""
    value = body.get(name, _MISSING)
    if value is _MISSING or value is None:
        if required:
            raise invalid(f"{prefix}{name} is missing", prefix + name, code="missing_required_parameter")
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise wrong_type(prefix + name, expected, value)
    return value


def _number(body: dict, name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong_type(name, "a number", value)
    return float(value)


def _choice(ext: dict, name: str, choices: tuple[str, ...], default: str | None) -> str | None:
    value = ext.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise wrong_type(f"{EXTENSION}.{name}", "a string", value)
    if value not in choices:
        raise invalid(f"{EXTENSION}.{name} must be one of {', '.join(choices)}, got {value!r}", f"{EXTENSION}.{name}")
    return value

