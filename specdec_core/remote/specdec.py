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

from collections.abc import Callable, Iterator

from ..events import TokenEvent
from ..serve.protocol import EXTENSION, request_to_wire, stats_from_wire, token_from_wire
from .errors import ServerError, StreamBroken
from .generation import Request, ServerGeneration, ServerStats, broken


def specdec_body(model: str, prompt_ids: list[int], req: Request) -> dict:
    """The request for this answer (protocol.request_to_wire: the settings' one wire form); a
    grammar the request cannot carry is refused here, before anything is sent."""
    try:
        return request_to_wire(model, prompt_ids, req.settings, req.reuse_cache)
    except ValueError as exc:
        raise ServerError(str(exc)) from None


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
            raise broken(gen, exc, lambda stop, error: _cut(running, req, base, stop, error))
        cancelled = req.cancel is not None and req.cancel.is_set()
        if final is None and not cancelled:
            raise broken(gen, StreamBroken.unfinished(endpoint.url, len(gen.events)),
                         lambda stop, error: _cut(running, req, base, stop, error))
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
