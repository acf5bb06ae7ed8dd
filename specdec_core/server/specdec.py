"""A `specdec serve` server as the target (specdec_core/serve/ is that server).

Its stream carries every token as the serving engine emitted it -- kind, source, step, draft
position, its time on the engine's clock -- and its last chunk the engine's Stats, so nothing
is rebuilt here: the events and the Stats are the serving engine's own values, over the wire
(serve/protocol.py). Each request says the mode, the draft length, the proposer and the seed,
so such a target can be toggled and raced like models loaded here.

`stream_specdec` is a ServerGeneration run function over its /v1/completions stream (the
prompt as token ids from its /tokenize, so the chat is measured against its context).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from ..events import TokenEvent
from ..serve.protocol import EXTENSION, stats_from_wire, token_from_wire
from .errors import ServerError, StreamBroken
from .generation import Request, ServerGeneration, ServerStats


def specdec_body(model: str, prompt_ids: list[int], req: Request) -> dict:
    """Everything the local engine would be given: the settings travel whole -- the sampling
    (the penalties, min_p and logit_bias under their OpenAI / vLLM names, which the server takes
    as the same SamplingParams), the logprobs asked for, and a JSON schema's grammar as a
    response_format. A grammar the
    OpenAI fields cannot carry (Lark, a regex) is refused here (ServerError), never dropped."""
    s, p = req.settings, req.settings.sampling
    body = {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": s.max_new_tokens,
        "temperature": float(p.temperature),
        "top_p": float(p.top_p),
        "top_k": int(p.top_k),
        "min_p": float(p.min_p),
        "presence_penalty": float(p.presence_penalty),
        "frequency_penalty": float(p.frequency_penalty),
        "repetition_penalty": float(p.repetition_penalty),
        "stream": True,
        "stream_options": {"include_usage": True},
        EXTENSION: {"mode": s.mode, "draft_tokens": s.draft_tokens, "proposer": s.proposer,
                    "engine_seed": int(s.seed), "reuse_cache": req.reuse_cache, "running_stats": True},
    }
    if p.logit_bias:
        body["logit_bias"] = {str(t): float(b) for t, b in p.logit_bias}
    if s.grammar is not None:
        if s.grammar.kind != "json_schema":
            raise ServerError(f"a {s.grammar.kind} grammar cannot be sent to a specdec serve target (its requests "
                              "carry JSON schemas only, as response_format)")
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer",
                                                                            "schema": json.loads(s.grammar.text)}}
    if s.logprobs is not None:  # they come back with each token (protocol.token_to_wire)
        body["logprobs"] = int(s.logprobs)
    return body


def stream_specdec(endpoint, model: str, prompt_ids: list[int], req: Request, base: dict) -> Callable:
    body = specdec_body(model, prompt_ids, req)  # what it cannot carry is refused now, before any request

    def run(gen: ServerGeneration) -> Iterator[TokenEvent]:
        running: list[ServerStats] = []
        final: dict | None = None
        gen._running = lambda: running[-1] if running else ServerStats(mode=req.settings.mode)
        try:
            for chunk in endpoint.stream("/v1/completions", body, req.cancel):
                if req.cancel is not None and req.cancel.is_set():
                    break
                ext = chunk.get(EXTENSION) or {}
                for token in ext.get("tokens") or []:
                    yield _token(token, endpoint.url)
                if ext.get("stats"):
                    running.append(_stats(ext, base))
                choices = chunk.get("choices") or []
                if choices and choices[0].get("finish_reason"):
                    final = ext
        except StreamBroken as exc:
            exc.tokens = len(gen.events)
            gen.error = exc
            gen.stats = _cut(running, req, base, "error", str(exc))
            raise
        cancelled = req.cancel is not None and req.cancel.is_set()
        if final is None and not cancelled:
            err = StreamBroken.unfinished(endpoint.url, len(gen.events))
            gen.error = err
            gen.stats = _cut(running, req, base, "error", str(err))
            raise err
        gen.stats = _cut(running, req, base, "cancelled") if final is None else _stats(final, base)

    return run


def _token(d: dict, url: str) -> TokenEvent:
    try:
        return token_from_wire(d)
    except (KeyError, TypeError, ValueError) as exc:
        raise ServerError(f"{url} sent a token this client cannot read ({exc!r}): is it a newer specdec serve?") \
            from None


def _stats(ext: dict, base: dict) -> ServerStats:
    """The engine's Stats as the server sent them, with what the client knows of the server."""
    stats = stats_from_wire(ext["stats"], ServerStats)
    stats.server = {**base, "figures": "the serving engine's own Stats", "colours": "every token's kind, as decided",
                    "tokens_per_second": stats.tokens_per_second, "queue_seconds": ext.get("queue_seconds", 0.0),
                    "settings": ext.get("settings") or {}}
    return stats


def _cut(running: list[ServerStats], req: Request, base: dict, stop: str, error: str = "") -> ServerStats:
    """An answer that ended early: the latest running Stats (those of the tokens that came)."""
    stats = running[-1] if running else ServerStats(mode=req.settings.mode)
    stats.stop_reason = stop
    stats.server = {**(stats.server or base)}
    if error:
        stats.server["error"] = error
    return stats
