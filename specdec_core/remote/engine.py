"""A server as the target: the engine boundary (contract.EngineLike), served over HTTP.

`connect(url)` asks the server what it is before anything is generated:

- GET /v1/models must answer as an OpenAI-compatible server (else: one line saying so);
- llama.cpp's llama-server (owned_by "llamacpp", and /props answers): its /slots say whether
  it drafts and how (`--model-draft`/`--spec-type`); prompts go through its own chat template
  (/apply-template) and tokenizer (/tokenize), answers through its /completion stream with
  per-token draft counters, so every token gets its kind and the figures are exact;
- vLLM (owned_by "vllm"): its /metrics say whether speculative decoding is configured;
  answers through /v1/chat/completions, kinds `server`, figures per request when the server
  reports them (--per-request-spec-decode-metrics) else from its Prometheus counters;
- `specdec serve` (owned_by "specdec", this project's own server): prompts through its /tokenize,
  answers through its /v1/completions stream, which carries every token's kind and the engine's
  Stats as they are (specdec.py): nothing rebuilt; every request carries the whole settings
  value, so it can be toggled to standard and raced like models loaded here;
- any other OpenAI-compatible server: answers and nothing more (kind `server`).

Those others decode with their own draft; neither llama-server nor vLLM takes a request that
turns drafting off (llama-server of this build has its per-request speculative fields switched
off; vLLM configures speculation per server), so `race_refusal` says why such a target cannot be
raced and settings with mode "standard" are refused on a server that drafts.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from ..context import Fit, Messages, answer_budget, fit_chat
from ..contract import ChatPrompt, EngineError, Prompt, ServerInfo, prompt_tokens
from ..fim import Infill
from ..models.types import ModelInfo
from ..serve.protocol import EXTENSION, OWNED_BY
from ..settings import DecodeSettings
from .errors import HTTPStatusError, ServerError
from .generation import Request, ServerGeneration, stream_llama, stream_openai
from .http import DEFAULT_TIMEOUT, Endpoint
from .specdec import stream_specdec

API_KEY_ENV = "SPECDEC_API_KEY"
LLAMA_CPP, VLLM, SPECDEC, OPENAI = "llama.cpp", "vLLM", "specdec serve", "OpenAI-compatible"


def is_server_spec(spec: object) -> bool:
    """A target SPEC that names a server: http://HOST:PORT or https://... (a mistyped one such as
    "http:/host" too, so it is told what a server address looks like, not what a model is)."""
    return isinstance(spec, str) and spec.strip().lower().startswith(("http:", "https:"))


def connect(url: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT,
            progress: Callable[[str, float | None], None] | None = None) -> ServerEngine:
    """Probe the server at `url` and return a ServerEngine for it (ServerError when it is not
    reachable or not an OpenAI-compatible server). The key: `api_key`, else $SPECDEC_API_KEY."""
    key = api_key if api_key else os.environ.get(API_KEY_ENV) or None
    endpoint = Endpoint(url, key, timeout)
    say = progress or (lambda *_a: None)
    say(f"Connecting to {endpoint.url}…", None)
    t0 = time.perf_counter()
    try:
        models = endpoint.get_json("/v1/models")
    except HTTPStatusError as exc:
        if exc.status in (401, 403):
            raise
        raise ServerError(f"{endpoint.url} is not an OpenAI-compatible server ({exc}); give the address of "
                          "llama-server, vLLM or another OpenAI-compatible server") from None
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict) or "id" not in data[0]:
        raise ServerError(f"{endpoint.url} answered /v1/models without a model list: is it an OpenAI-compatible "
                          "server (llama.cpp's llama-server, vLLM)?")
    first = data[0]
    owner = str(first.get("owned_by", "")).lower()
    props = None
    if owner == "llamacpp" or owner == "":
        props = _optional_json(endpoint, "/props")
    if isinstance(props, dict) and "default_generation_settings" in props:
        engine = _llama(endpoint, first, props)
    elif owner == OWNED_BY and isinstance(first.get(EXTENSION), dict):
        engine = _specdec(endpoint, first)
    elif owner == "vllm":
        engine = _vllm(endpoint, first)
    else:
        engine = ServerEngine(endpoint, OPENAI, str(first["id"]), None, "")
    engine.target_info.load_seconds = time.perf_counter() - t0
    say(f"Connected to {engine.flavour} at {endpoint.url}", 1.0)
    return engine


def _optional_json(endpoint: Endpoint, path: str):
    try:
        return endpoint.get_json(path)
    except ServerError:
        return None


def _llama(endpoint: Endpoint, model: dict, props: dict) -> ServerEngine:
    speculative, types = None, ""
    slots = _optional_json(endpoint, "/slots")  # absent when the server runs with --no-slots
    if isinstance(slots, list) and slots and isinstance(slots[0], dict):
        speculative = bool(slots[0].get("speculative"))
        types = str((slots[0].get("params") or {}).get("speculative.types", ""))
        types = ",".join(t for t in types.split(",") if t and t != "none")
    meta = model.get("meta") or {}
    # the slot names its drafting (e.g. draft-simple) once it has served a request
    engine = ServerEngine(endpoint, LLAMA_CPP, str(model["id"]), speculative, types)
    info = engine.target_info
    info.quantization = str(props.get("model_ftype") or "gguf")
    info.memory_bytes = int(meta.get("size") or 0)
    info.notes.append(f"llama-server build {props.get('build_info', '?')}, {props.get('total_slots', '?')} slot(s), "
                      f"context {meta.get('n_ctx', '?')} tokens")
    n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")  # one slot's context
    engine.context_length = int(n_ctx) if isinstance(n_ctx, int) and n_ctx > 0 else None
    return engine


def _specdec(endpoint: Endpoint, model: dict) -> ServerEngine:
    """What a `specdec serve` says of its pair in its model card: the models as they loaded
    there, its context and vocabulary."""
    card = model[EXTENSION]
    draft = card.get("draft")
    # what it drafts with: its draft model, else prompt lookup (copies from the conversation)
    drafting = str(draft.get("name") or "draft model") if isinstance(draft, dict) else "prompt lookup"
    engine = ServerEngine(endpoint, SPECDEC, str(model["id"]), True, drafting)
    where = f"{SPECDEC} server at {endpoint.url}"
    engine.target_info = _served_info(card.get("target") or {}, model["id"], endpoint.url, where)
    engine.draft_info = _served_info(draft, "draft", endpoint.url, where) if isinstance(draft, dict) else None
    engine.target_info.notes.append(f"specdec serve {card.get('version', '?')}: every token's kind and the "
                                    "engine's Stats come as the serving engine decided them")
    n_ctx, vocab = model.get("max_model_len"), card.get("vocab_size")
    engine.context_length = n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None
    engine.vocab_size = vocab if isinstance(vocab, int) and vocab > 0 else None
    return engine


def _served_info(d: dict, name: str, url: str, where: str) -> ServerModelInfo:
    notes = [str(n) for n in d.get("notes") or []]
    return ServerModelInfo(name=str(d.get("name") or name), source=url, dtype=str(d.get("dtype") or "server's own"),
                           quantization=str(d.get("quantization") or "server's own"), device=where,
                           memory_bytes=int(d.get("memory_bytes") or 0), load_seconds=0.0, notes=notes,
                           kernels=str(d.get("kernels") or ""))


def _vllm(endpoint: Endpoint, model: dict) -> ServerEngine:
    speculative = None
    try:
        page = endpoint.get_text("/metrics")
        speculative = "vllm:spec_decode_num_drafts" in page
    except ServerError:
        pass
    version = _optional_json(endpoint, "/version")
    engine = ServerEngine(endpoint, VLLM, str(model["id"]), speculative, "speculative config")
    if isinstance(version, dict) and version.get("version"):
        engine.target_info.notes.append(f"vLLM {version['version']}")
    if speculative is None:
        engine.target_info.notes.append("its /metrics page could not be read: speculative figures unknown")
    return engine


class ServerEngine:
    """contract.EngineLike over HTTP. The server tokenizes and decodes; a llama-server's prompts
    are its own token ids (so they are measured against its context), other servers' the
    messages themselves (ChatPrompt: not measured here)."""

    # prompt + answer budget must fit (the app offers to leave the oldest turns out); known for
    # llama-server; None: not checked before sending
    context_length: int | None = None
    vocab_size = None  # the server checks raw ids itself

    def __init__(self, endpoint: Endpoint, flavour: str, model: str, speculative: bool | None, spec_types: str):
        self.endpoint = endpoint
        self.flavour = flavour
        self.model = model
        self.speculative = speculative  # the server drafts (True), does not (False), does not say (None)
        self.spec_types = spec_types
        where = f"{flavour} server at {endpoint.url}"
        self.target_info = ServerModelInfo(
            name=model.replace("\\", "/").rsplit("/", 1)[-1] or model, source=endpoint.url, dtype="server's own",
            quantization="server's own", device=where, memory_bytes=0, load_seconds=0.0)
        self.draft_info = None
        if speculative:
            how = f" ({spec_types})" if spec_types else ""
            self.draft_info = ServerModelInfo(
                name=f"the server's own draft{how}", source=endpoint.url, dtype="server's own",
                quantization="server's own", device=where, memory_bytes=0, load_seconds=0.0)

    # -- what this server can do ----------------------------------------------------------
    @property
    def mode(self) -> str:
        """What every request gets: "speculative", "standard", or "server" (not said)."""
        return {True: "speculative", False: "standard"}.get(self.speculative, "server")

    @property
    def race_refusal(self) -> str:
        """Why this target cannot be raced (standard against speculative on one server)."""
        url = self.endpoint.url
        if self.flavour == LLAMA_CPP:
            if self.speculative is False:
                return (f"the llama-server at {url} has no draft model, so it cannot be raced: start it with "
                        "--model-draft FILE --spec-type draft-simple")
            return (f"the llama-server at {url} cannot be raced: it drafts on every request and takes no request "
                    "that turns drafting off (its per-request speculative settings are switched off in this build); "
                    "to compare, run a second llama-server without --model-draft")
        if self.flavour == VLLM:
            return (f"the vLLM server at {url} cannot be raced: vLLM sets speculative decoding for the whole server "
                    "(--speculative-config) and no request can turn it off; to compare, run a second vLLM server "
                    "without it")
        return (f"the server at {url} cannot be raced: it does not say whether it drafts, and no request can "
                "turn drafting on or off")

    def server_info(self) -> ServerInfo:
        if self.flavour == SPECDEC:  # every setting travels with each request: a target like one loaded here
            return ServerInfo(url=self.endpoint.url, engine=self.flavour, model=self.model, mode=self.mode,
                              speculative=True, proposer=self.spec_types, colours="exact", race_note="",
                              can_race=True, can_toggle=True)
        return ServerInfo(url=self.endpoint.url, engine=self.flavour, model=self.model, mode=self.mode,
                          speculative=self.speculative, proposer=self.spec_types,
                          colours="per token" if self.flavour == LLAMA_CPP else "none", race_note=self.race_refusal)

    def fork(self) -> ServerEngine:
        """A race's lane: a `specdec serve` takes each lane's requests in turn (one decode at a
        time there, so each lane's clock, the engine's own, counts its compute alone)."""
        if self.flavour != SPECDEC:
            raise EngineError(self.race_refusal)
        twin = ServerEngine(self.endpoint, self.flavour, self.model, self.speculative, self.spec_types)
        twin.target_info, twin.draft_info = self.target_info, self.draft_info
        twin.context_length, twin.vocab_size = self.context_length, self.vocab_size
        return twin

    # -- prompts ----------------------------------------------------------------------------
    def encode_chat(self, messages: Messages, *, continue_final: bool = False,
                    answer_ids: list[int] | None = None) -> Prompt:
        """llama-server, specdec serve: token ids through its own template and tokenizer (what its
        chat endpoint would feed the model); others: the messages, for their chat endpoint.
        `continue_final`: llama-server (unless started with --no-prefill-assistant) and specdec
        serve continue a last assistant message themselves (asked or not: their template
        endpoints render what their chat endpoints would); other servers' chat endpoints open a
        new turn after it, so it is refused there (EngineError). `answer_ids` are not used: the
        server tokenizes the message's text."""
        if continue_final:
            if not messages or messages[-1]["role"] != "assistant":
                raise EngineError("only an assistant's message can be continued: the last message is not the "
                                  "assistant's")
            if self.flavour not in (SPECDEC, LLAMA_CPP):
                raise EngineError(f"the {self.flavour} server at {self.endpoint.url} cannot be asked to continue "
                                  "the assistant's last message")
        if self.flavour == SPECDEC:
            return self._tokenize({"model": self.model, "messages": list(messages)})
        if self.flavour != LLAMA_CPP:
            return ChatPrompt(tuple(dict(m) for m in messages))
        tpl = self.endpoint.post_json("/apply-template", {"messages": list(messages)})
        text = tpl.get("prompt") if isinstance(tpl, dict) else None
        if not isinstance(text, str):
            raise ServerError(f"{self.endpoint.url}/apply-template did not return a prompt")
        return self._tokenize({"content": text, "add_special": True, "parse_special": True})

    def encode_tool_chat(self, messages: Messages, tools: list[dict] | None, *,
                         continue_final: bool = False) -> Prompt:
        if not tools:
            return self.encode_chat(messages, continue_final=continue_final)
        raise EngineError(f"the server at {self.endpoint.url} shows tools to its model itself: send them to its "
                          "chat endpoint, not through this client's prompts")

    def token_id(self, text: str) -> int | None:
        return None  # the server's vocabulary is its own

    @property
    def end_token_ids(self) -> frozenset[int]:
        return frozenset()  # the server ends its answers itself

    def encode_prompt(self, text: str) -> Prompt:
        return self.encode_chat([{"role": "user", "content": text}])

    def encode_text(self, text: str) -> Prompt:
        """Raw text through the server's tokenizer (llama-server, specdec serve); other servers
        do not tokenize for their clients."""
        if self.flavour == SPECDEC:
            return self._tokenize({"model": self.model, "prompt": text})
        if self.flavour == LLAMA_CPP:
            return self._tokenize({"content": text, "add_special": True, "parse_special": True})
        raise EngineError(f"the {self.flavour} server at {self.endpoint.url} does not tokenize text for its "
                          "clients: send it chat messages")

    def encode_infill(self, infill: Infill) -> Prompt:
        """Fill in the middle is the server's own business (llama-server's /infill): not through
        this engine's prompts."""
        raise EngineError(f"the server at {self.endpoint.url} fills in the middle through its own endpoint, "
                          "not through this client's prompts")

    def _tokenize(self, body: dict) -> list[int]:
        tok = self.endpoint.post_json("/tokenize", body)
        ids = tok.get("tokens") if isinstance(tok, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise ServerError(f"{self.endpoint.url}/tokenize did not return token ids")
        return ids

    def count_tokens(self, messages: Messages) -> int | None:
        return prompt_tokens(self.encode_chat(messages))

    def fit(self, messages: Messages, max_new_tokens: int | None, dropped: int = 0, *, continue_final: bool = False,
            answer_ids: list[int] | None = None) -> Fit:
        def encode(kept: Messages) -> Prompt:
            return self.encode_chat(kept, continue_final=continue_final)

        return fit_chat(messages, max_new_tokens, self.context_length, encode, prompt_tokens, dropped)

    # -- decoding ----------------------------------------------------------------------------
    def generate(self, prompt: Prompt, settings: DecodeSettings, *, cancel: threading.Event | None = None,
                 reuse_cache: bool = False, answer_prefix: int = 0, reuse_at_most: int | None = None) -> ServerGeneration:
        """Stream one answer. A `specdec serve` takes every setting; elsewhere the draft length
        and the proposer are the server's own business, and the mode must be what the server
        does ("speculative" on a server that does not say). Without a budget, the answer gets
        what the context leaves where both lengths are known, else the server's own bound.
        (`answer_prefix` is not needed: the server detokenizes; `reuse_at_most` is not asked
        for: what a server keeps is its prompt cache's say.)"""
        n = prompt_tokens(prompt)
        if settings.max_new_tokens is None and n is not None and self.context_length:
            settings = settings.replace(max_new_tokens=answer_budget(None, n, self.context_length))
        if settings.mode == "standard" and self.speculative and self.flavour != SPECDEC:
            raise ServerError(f"the {self.flavour} server at {self.endpoint.url} drafts on every request and no "
                              "request can turn that off, so it cannot decode standard here; run a server without "
                              "a draft for standard decoding")
        if not (prompt.messages if isinstance(prompt, ChatPrompt) else prompt):
            raise ServerError("the prompt is empty: give at least one token")
        req = Request(settings, self.mode, self.spec_types or None, reuse_cache, cancel)
        base = {"url": self.endpoint.url, "engine": self.flavour, "model": self.model}
        if self.flavour == SPECDEC:
            if isinstance(prompt, ChatPrompt):
                prompt = self.encode_chat(list(prompt.messages))
            return ServerGeneration(stream_specdec(self.endpoint, self.model, list(prompt), req, base), own_clock=True)
        if self.flavour == LLAMA_CPP:
            if isinstance(prompt, ChatPrompt):
                prompt = self.encode_chat(list(prompt.messages))
            return ServerGeneration(stream_llama(self.endpoint, list(prompt), req, base))
        prefix = "vllm:" if self.flavour == VLLM and self.speculative else None
        return ServerGeneration(stream_openai(self.endpoint, self.model, prompt, req, base, prefix,
                                              self.flavour == VLLM))


class ServerModelInfo(ModelInfo):
    """ModelInfo of a model a server holds: what the server said about it."""

    def summary(self) -> str:
        size = f", {self.memory_bytes / 2**30:.2f} GiB" if self.memory_bytes else ""
        quant = f" ({self.quantization})" if self.quantization != "server's own" else ""
        return f"{self.name}{quant}{size} on the {self.device} (connected in {self.load_seconds:.2f} s)"
