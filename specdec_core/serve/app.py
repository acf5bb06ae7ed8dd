"""The Starlette application of `specdec serve`: routes, the key, the line of waiting requests.

    GET  /health                 {"status": "ok", "model", "busy", "waiting", "max_waiting", "served"}
    GET  /v1/models              the served model, owned_by "specdec", its pair under "specdec"
    GET  /v1/models/{id}
    POST /v1/chat/completions    messages through the target's chat template (a last assistant
                                 message is a prefill: the answer continues it)
    POST /v1/completions         raw text or token ids, no template (with `suffix`: fill in the middle)
    POST /infill                 llama-server's fill in the middle (input_prefix, input_suffix,
                                 input_extra), answered in llama-server's shape (infill.py)
    POST /tokenize               {"messages"} or {"prompt"} -> {"tokens", "count", "max_model_len"}

One request at a time decodes; the others wait their turn in the engine's line (queue.py),
at most `max_waiting` of them: past that, 429 with Retry-After. A request is checked and its
prompt tokenized before it joins the line (a refusal costs no wait), in a worker thread so
the event loop stays free; its answer is decoded in a thread of its own (answer.py) and comes
back through an asyncio queue. A client that goes away -- a closed stream, or a closed
connection while a whole answer is awaited -- sets its generation's cancel event, which the
decoder reads before each step (or which takes it out of the line while it waits).

With a key, every path but /health wants `Authorization: Bearer KEY` (as OpenAI's and vLLM's).
With CORS origins (--cors-origin), Starlette's CORSMiddleware answers those origins' browser
preflights and marks every response to them; without, there is no CORS at all.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import __version__
from ..context import ContextError
from ..contract import EngineError, EngineLike, GenerationLike
from ..grammar.constraint import GrammarError
from ..settings import DEFAULT_DRAFT_TOKENS, DEFAULT_PROPOSER, MODES, PROPOSER_KINDS, SettingsError, usable_proposer
from . import errors
from .answer import Answer, Done, Failure, Piece
from .errors import APIError
from .infill import InfillShape
from .protocol import EXTENSION, OWNED_BY
from .queue import DecodeQueue, QueuedEngine, QueueFull
from .requests import Options, TokenizeInput, chat_options, completion_options, infill_options, tokenize_input
from .responses import Shape, final_ext, sse, tokens_ext, usage
from .tools import CallStream, has_call_tokens, parse_calls, response_format_grammar, tools_grammar

log = logging.getLogger("specdec.serve")

MAX_BODY_BYTES = 32 * 2**20  # a whole context of text is well under a megabyte
KEEPALIVE_SECONDS = 10.0  # a stream waiting for its turn sends a comment this often (clients' read timeouts)
# the sampling values beyond temperature, top_k and top_p that a response's settings echo
SHAPING = ("min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
# without max_tokens and with a context the config does not give: an answer budget of this much
DEFAULT_MAX_TOKENS = 4096


@dataclass
class Prepared:
    """A request past every check: its prompt ids and settings, its generation in the line."""

    options: Options
    prompt_ids: list[int]
    gen: GenerationLike
    cancel: threading.Event
    settings: dict


class Service:
    """What the routes share: the engine (behind the line), the served model's name, the key,
    and the cancel events of the answers in flight (set when the server stops)."""

    def __init__(self, engine: EngineLike, queue: DecodeQueue, model_name: str | None = None,
                 api_key: str | None = None):
        # between a client's turns the draft reads what it skipped, while the line is empty
        self.engine = QueuedEngine(engine, queue, bounded=True, read_between=True)
        self.queue = queue
        self.model = model_name or served_name(engine.target_info.name)
        self.api_key = api_key or None
        self.created = int(time.time())
        self.in_flight: set[threading.Event] = set()
        self.closing = False

    # -- checks -----------------------------------------------------------------------------
    def check_key(self, request: Request) -> None:
        if self.api_key is None:
            return
        auth = request.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        if not auth:
            raise errors.unauthorized("this server wants an API key: send the header Authorization: Bearer KEY")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.api_key.encode()):
            raise errors.unauthorized("incorrect API key")

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model:
            raise errors.unknown_model(model, self.model)

    # -- what is served -------------------------------------------------------------------
    def card(self) -> dict:
        e = self.engine
        has_draft = e.draft_info is not None
        return {"id": self.model, "object": "model", "created": self.created, "owned_by": OWNED_BY,
                "max_model_len": e.context_length,
                EXTENSION: {"version": __version__, "target": e.target_info.to_dict(),
                            "draft": e.draft_info.to_dict() if has_draft else None, "vocab_size": e.vocab_size,
                            "modes": list(MODES),
                            "proposers": [k.name for k in PROPOSER_KINDS if has_draft or not k.needs_draft],
                            "defaults": {"mode": "speculative", "draft_tokens": DEFAULT_DRAFT_TOKENS,
                                         "proposer": usable_proposer(DEFAULT_PROPOSER, has_draft)},
                            "max_waiting": self.queue.max_waiting}}

    def health(self) -> dict:
        return {"status": "ok", "model": self.model, "busy": self.queue.busy, "waiting": self.queue.waiting,
                "max_waiting": self.queue.max_waiting, "served": self.queue.turns}

    # -- a request, up to its place in the line (a worker thread) ----------------------------
    def prepare(self, opts: Options) -> Prepared:
        e = self.engine
        param = opts.prompt_param
        use = opts.tool_use if opts.tool_use is not None and opts.tool_use.functions else None
        if opts.infill is not None:
            ids = self._encode_infill(opts)
        else:
            ids = opts.prompt if isinstance(opts.prompt, list) else self._encode(opts.messages, opts.prompt, use)
        vocab = e.vocab_size
        if vocab is not None and max(ids) >= vocab:
            raise errors.invalid(f"prompt: token id {max(ids)} is outside the vocabulary (size {vocab})", "prompt")
        biased = [t for t, _ in opts.sampling.logit_bias]
        if vocab is not None and biased and max(biased) >= vocab:
            raise errors.invalid(f"logit_bias: token id {max(biased)} is outside the vocabulary (size {vocab})",
                                 "logit_bias")
        context = e.context_length
        budget = opts.max_tokens
        if budget is None:
            budget = context - len(ids) if context is not None else DEFAULT_MAX_TOKENS
            if budget < 1:
                raise errors.too_long(f"the prompt is {len(ids)} tokens and leaves no room for an answer in the "
                                      f"target's context of {context} tokens: shorten it", param)
        try:
            settings = opts.settings(budget, e.draft_info is not None)
        except SettingsError as exc:
            raise errors.invalid(str(exc), f"{EXTENSION}.proposer") from None
        special = has_call_tokens(e)
        grammar = response_format_grammar(opts.response_format) or (use and tools_grammar(use, special))
        settings = settings.replace(grammar=grammar or None)
        cancel = threading.Event()
        try:
            gen = e.generate(ids, settings, cancel=cancel, reuse_cache=opts.reuse_cache)
        except GrammarError as exc:  # a schema the grammar library refuses, in its words
            raise errors.invalid(str(exc), "tools" if use else "response_format") from None
        except ContextError as exc:
            raise errors.too_long(str(exc).replace("max-new-tokens", "max_tokens"),
                                  param if exc.prompt_tokens >= exc.context else "max_tokens") from None
        except QueueFull as exc:
            raise errors.busy(f"the server is busy: {exc}", exc.retry_after) from None
        except (EngineError, SettingsError) as exc:
            raise errors.invalid(str(exc).replace("--proposer prompt-lookup", f"{EXTENSION}.proposer "
                                                  "\"prompt-lookup\"").replace("pass --draft SPEC, or ", ""),
                                 f"{EXTENSION}.proposer") from None
        echo = {**settings.to_dict(), "seed": opts.seed, "engine_seed": settings.seed, "mode": settings.mode,
                "proposer": settings.proposer if settings.speculative else None, "reuse_cache": opts.reuse_cache,
                **{name: getattr(settings.sampling, name) for name in SHAPING},
                "logit_bias": {str(t): b for t, b in settings.sampling.logit_bias}, "logprobs": settings.logprobs}
        return Prepared(opts, ids, gen, cancel, echo)

    def _encode(self, messages: list[dict[str, str]] | None, text: str | None, tools=None) -> list[int]:
        """Messages through the chat template, or raw text through the tokenizer alone. A chat
        whose last message is the assistant's is a prefill, as llama-server takes it: the answer
        continues that message (its turn left open in the prompt) rather than opening a new one.
        `tools` (tools.ToolUse): the functions the template shows the model."""
        if messages is None:
            ids = list(self.engine.encode_text(text))
        else:
            last = messages[-1]
            prefill = last["role"] == "assistant" and not last.get("tool_calls")
            try:
                if tools is None:
                    ids = list(self.engine.encode_chat(messages, continue_final=prefill))
                else:  # the target's template, with the functions
                    ids = list(self.engine.encode_tool_chat(messages, tools.template_tools(), continue_final=prefill))
            except EngineError as exc:
                raise errors.unsupported("tools", str(exc)) from None
            except Exception as exc:  # noqa: BLE001 -- a template may refuse a conversation (its roles' order)
                raise errors.invalid(f"the target's chat template refused these messages: {exc}", "messages") \
                    from None
        if not ids:
            raise errors.invalid("the prompt makes no tokens", "messages" if messages is not None else "prompt")
        return ids

    def _encode_infill(self, opts: Options) -> list[int]:
        """The fill-in-the-middle prompt; a target without FIM tokens is a 400 naming the field."""
        param = "input_prefix" if opts.infill.repo_level else "suffix"
        try:
            ids = list(self.engine.encode_infill(opts.infill))
        except EngineError as exc:
            raise errors.invalid(f"{param}: {exc}", param, code="unsupported_parameter") from None
        return ids

    def tokenize(self, what: TokenizeInput) -> dict:
        ids = self._encode(what.messages, what.prompt)
        return {"tokens": ids, "count": len(ids), "max_model_len": self.engine.context_length}

    def shutdown(self) -> None:
        """Every answer in flight ends within its step (or leaves the line)."""
        self.closing = True
        for cancel in list(self.in_flight):
            cancel.set()


def served_name(name: str) -> str:
    """The id clients send for a model: its name as one word a shell and a URL take as they are,
    "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)" -> "qwen2.5-coder-1.5b-instruct-q4_k_m"."""
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-") or "model"


# -- the routes ---------------------------------------------------------------------------------
def build_app(service: Service, cors_origins: Sequence[str] = ()) -> Starlette:
    """`cors_origins`: the web origins ("http://localhost:3000", "*" for any) whose pages may call
    this server from a browser; none: no CORS headers at all."""
    async def health(_request: Request) -> Response:
        return JSONResponse(service.health())

    async def models(request: Request) -> Response:
        service.check_key(request)
        return JSONResponse({"object": "list", "data": [service.card()]})

    async def model(request: Request) -> Response:
        service.check_key(request)
        service.check_model(request.path_params["model"])
        return JSONResponse(service.card())

    async def tokenize(request: Request) -> Response:
        service.check_key(request)
        what = tokenize_input(await read_json(request))
        service.check_model(what.model)
        return JSONResponse(await run_in_threadpool(service.tokenize, what))

    async def chat(request: Request) -> Response:
        return await complete(request, chat_options)

    async def completions(request: Request) -> Response:
        return await complete(request, completion_options)

    async def infill(request: Request) -> Response:
        return await complete(request, infill_options)

    async def complete(request: Request, read_options) -> Response:
        service.check_key(request)
        if service.closing:
            raise APIError(503, "the server is shutting down", type="server_error", code="shutting_down")
        body = await read_json(request)
        opts = read_options(body)
        service.check_model(opts.model)
        prepared = await run_in_threadpool(service.prepare, opts)
        items: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def deliver(item: object) -> None:  # from the answer's thread
            try:
                loop.call_soon_threadsafe(items.put_nowait, item)
            except RuntimeError:  # the loop has closed: nobody is listening any more
                prepared.cancel.set()

        service.in_flight.add(prepared.cancel)
        Answer(prepared.gen, prepared.cancel, opts.stops, opts.running_stats, deliver).start()
        if read_options is infill_options:
            shape = InfillShape(service.model, len(prepared.prompt_ids))
        else:
            shape = Shape(opts.chat, service.model, opts.include_usage, logprobs=opts.logprobs is not None,
                          end_ids=service.engine.end_token_ids)
        if opts.stream:
            return AnswerStream(_stream(service, prepared, shape, items), prepared.cancel, service)
        try:
            return await _whole(service, request, prepared, shape, items)
        finally:
            prepared.cancel.set()
            service.in_flight.discard(prepared.cancel)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/infill", infill, methods=["POST"]),
        Route("/tokenize", tokenize, methods=["POST"]),
    ]
    handlers = {APIError: _api_error, HTTPException: _http_error, Exception: _crash}
    middleware = [cors(cors_origins)] if cors_origins else None
    app = Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)
    app.state.service = service
    return app


def cors(origins: Sequence[str]) -> Middleware:
    """Starlette's CORSMiddleware for `origins`: their preflights answered (the methods served,
    any request header: the key's Authorization, the JSON's Content-Type, an SDK's own), their
    responses, streamed or not, marked with Access-Control-Allow-Origin; any other origin's
    preflight refused (400) and its responses unmarked. No credentials: the key is a header,
    not a cookie."""
    return Middleware(CORSMiddleware, allow_origins=list(origins), allow_methods=["GET", "POST"],
                      allow_headers=["*"])


class AnswerStream(StreamingResponse):
    """The server-sent events of one answer. However the response ends -- done, or its client
    gone (Starlette cancels the stream when the connection closes) -- the answer's cancel event
    is set, so the engine stops within its step."""

    def __init__(self, content: AsyncIterator[bytes], cancel: threading.Event, service: Service):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.cancel = cancel
        self.service = service

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.cancel.set()
            self.service.in_flight.discard(self.cancel)


async def _stream(service: Service, p: Prepared, shape: Shape | InfillShape, items: asyncio.Queue) -> AsyncIterator[bytes]:
    use = p.options.tool_use
    calls = CallStream(use.names) if use is not None and use.calls else None
    if shape.chat:
        yield sse(shape.role_chunk())
    while True:
        try:
            item = await asyncio.wait_for(items.get(), KEEPALIVE_SECONDS)
        except asyncio.TimeoutError:
            yield b": waiting for the engine\n\n"  # a comment: clients skip it, their read timeout restarts
            continue
        if isinstance(item, Piece):
            text, new_calls = (item.text, []) if calls is None else calls.feed(item.text)
            yield sse(shape.chunk(text, None, tokens_ext(item.tokens, item.running), item.tokens))
            if new_calls:  # each call whole, once its closing marker came
                yield sse(shape.calls_chunk(new_calls, calls.sent_calls - len(new_calls)))
        elif isinstance(item, Failure):
            yield sse(errors.internal(item.message).body())
            return
        elif isinstance(item, Done):
            if item.finish_reason is None:  # cancelled: its client is gone, or the server stops
                if service.closing:
                    yield sse(APIError(503, "the server is shutting down", type="server_error",
                                       code="shutting_down").body())
                return
            ext = final_ext(item.stats, item.queue_seconds, p.settings, [])
            finish = item.finish_reason
            if calls is not None:
                if calls.flush():
                    yield sse(shape.chunk(calls.flush(), None, {"tokens": []}))
                finish = "tool_calls" if calls.calls and finish == "stop" else finish
            yield sse(shape.chunk(None if shape.chat else "", finish, ext))
            if shape.include_usage:
                yield sse(shape.usage_chunk(usage(len(p.prompt_ids), item.completion_tokens, item.stats)))
            if shape.done:
                yield sse("[DONE]")
            return


async def _whole(service: Service, request: Request, p: Prepared, shape: Shape | InfillShape, items: asyncio.Queue) -> Response:
    """Collect the whole answer; a closed connection meanwhile cancels it."""

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                p.cancel.set()
                return

    watcher = asyncio.ensure_future(watch())
    tokens, text = [], []
    try:
        while True:
            item = await items.get()
            if isinstance(item, Piece):
                tokens.extend(item.tokens)
                text.append(item.text)
            elif isinstance(item, Failure):
                raise errors.internal(item.message)
            elif isinstance(item, Done):
                break
    finally:
        watcher.cancel()
    if item.finish_reason is None:
        if service.closing:
            raise APIError(503, "the server is shutting down", type="server_error", code="shutting_down")
        return Response(status_code=499)  # the client closed the connection: nobody reads this
    answer, finish, calls = "".join(text), item.finish_reason, None
    if p.options.tool_use is not None and p.options.tool_use.calls:
        # the calls, or the text (auto's other branch, a cut call)
        calls = parse_calls(answer, p.options.tool_use.names) or None
        finish = "tool_calls" if calls and finish == "stop" else finish
    body = shape.response(answer, finish, usage(len(p.prompt_ids), item.completion_tokens, item.stats),
                          final_ext(item.stats, item.queue_seconds, p.settings, tokens), tokens, calls)
    return JSONResponse(body)


# -- bodies and errors --------------------------------------------------------------------------
async def read_json(request: Request) -> dict:
    """The body as a JSON object: 413 past MAX_BODY_BYTES, 400 when it is not JSON or not an object."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise _too_large()
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise _too_large()
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise errors.invalid(f"the body is not valid JSON: {exc}", None, code="invalid_json") from None
    if not isinstance(body, dict):
        raise errors.invalid("the body must be a JSON object", None, code="invalid_json")
    return body


def _too_large() -> APIError:
    return APIError(413, f"the request body is over {MAX_BODY_BYTES // 2**20} MiB", param=None,
                    code="request_too_large")


async def _api_error(_request: Request, exc: APIError) -> Response:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    if exc.status_code == 404:
        err = APIError(404, f"no such path: {request.url.path} (this server has /v1/models, /v1/chat/completions, "
                            "/v1/completions, /infill, /tokenize, /health)", code="not_found")
    elif exc.status_code == 405:
        err = APIError(405, f"{request.method} is not allowed on {request.url.path}", code="method_not_allowed")
    else:
        err = APIError(exc.status_code, str(exc.detail), code=None)
    return JSONResponse(err.body(), status_code=err.status, headers=dict(exc.headers or {}))


async def _crash(_request: Request, exc: Exception) -> Response:
    log.error("request failed", exc_info=exc)
    err = errors.internal(f"the server failed on this request: {type(exc).__name__}: {exc}")
    return JSONResponse(err.body(), status_code=500)
