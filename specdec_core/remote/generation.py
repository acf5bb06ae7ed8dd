"""One answer streamed from a server: token events while it arrives, stats when it is done.

Two readers, one per protocol:

- llama.cpp's own `/completion` stream, asked for `timings_per_token` and `return_tokens`:
  every chunk has its token id, `tokens_predicted` and the running draft counters, so each
  token's kind is rebuilt (steps.py) and the stats are the server's own figures, exactly;
- the OpenAI chat-completions stream (vLLM and any other compatible server): text pieces of
  kind `server`; the speculative figures come from vLLM's per-request metrics when the server
  reports them, else from the difference of its Prometheus counters around the request.

Either way a `ServerGeneration` behaves like the decoder's Generation (iterate for events;
afterwards `stats`, `text`, `token_ids`, `kinds`). When the stream breaks off, iteration
raises StreamBroken after the events that did arrive, and `stats` describes those
(stop_reason "error"), so a caller keeps the partial answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..events import EventStream, Stats, TokenEvent, TokenKind
from ..settings import DecodeSettings
from .errors import ServerError, StreamBroken
from .prometheus import SpecFigures, figures_from_counters, figures_from_vllm_request
from .steps import StepRebuilder

LLAMA_STOP = {"eos": "eos", "limit": "max_new_tokens", "word": "stop_word"}
OPENAI_STOP = {"stop": "eos", "length": "max_new_tokens"}


@dataclass(slots=True)
class ServerStats(Stats):
    """Stats of an answer a server decoded. The common fields hold what the server's figures
    prove (new tokens, proposed/accepted, verifications, per-position counts); `seconds` and
    `prefill_seconds` are the client's clock (what the user waited, network included);
    `server` holds the server's own figures and says where each came from."""

    server: dict = field(default_factory=dict)


def figure_notes(server: dict, proposed_tokens: int, accepted_tokens: int) -> list[str]:
    """What a server reported about one answer, as short phrases (plain text), in the one
    wording the CLI's line and the app's side panel share."""
    notes = []
    if server.get("tokens_per_second"):
        notes.append(f"{server['tokens_per_second']:.1f} tok/s by its own clock")
    if proposed_tokens:
        notes.append(f"proposed {proposed_tokens}, accepted {accepted_tokens}")
    notes.append(f"figures from {server.get('figures', 'nothing')}")
    if server.get("server_wide"):
        notes.append("counted server-wide: other requests meanwhile count too")
    if server.get("colour_note"):
        notes.append(f"some colours withheld ({server['colour_note']})")
    return notes


class ServerGeneration(EventStream):
    def __init__(self, run: Callable[[ServerGeneration], Iterator[TokenEvent]], own_clock: bool = False):
        # own_clock: the events' `t` are the serving engine's compute clock (a `specdec serve`),
        # which a race reads as the lane's clock instead of the time it waits on the network
        self.own_clock = own_clock
        self.events: list[TokenEvent] = []
        self.stats: ServerStats | None = None
        self.error: ServerError | None = None
        self._run = run
        self._running: Callable[[], ServerStats] | None = None  # set by the reader once it streams

    def snapshot(self) -> ServerStats:
        """The stats of the tokens seen so far (the final stats once done), as the decoder's
        Generation gives them: the app shows them while the answer streams."""
        if self.stats is not None:
            return self.stats
        if self._running is None:
            return ServerStats()
        return self._running()

    def __iter__(self) -> Iterator[TokenEvent]:
        for ev in self._run(self):
            self.events.append(ev)
            yield ev

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events)


@dataclass(frozen=True)
class Request:
    """What the engine asks of one answer: the user's settings, and what the server will do."""

    settings: DecodeSettings  # the budget, sampling and seed are read; k and the proposer are the server's
    mode: str  # what the server will do: "speculative" | "standard" | "server" (not said)
    proposer: str | None  # the server's own drafting, e.g. "draft-simple"
    reuse_cache: bool
    cancel: threading.Event | None


# -- llama.cpp --------------------------------------------------------------------------------
def llama_body(prompt_ids: list[int], req: Request) -> dict:
    """The /completion request: the sampling the engine's promise covers (temperature, then
    top-k, then top-p; nothing else) spelled out, since llama-server's defaults add min-p 0.05,
    top-k 40 and top-p 0.95 and apply temperature last."""
    s = req.settings.sampling
    return {
        "prompt": list(prompt_ids),
        "n_predict": -1 if req.settings.max_new_tokens is None else req.settings.max_new_tokens,  # -1: its context
        "temperature": float(s.temperature),
        "top_k": int(s.top_k),
        "top_p": float(s.top_p),
        "min_p": 0.0,
        "typical_p": 1.0,
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "dry_multiplier": 0.0,
        "xtc_probability": 0.0,
        "top_n_sigma": -1.0,
        "mirostat": 0,
        "samplers": ["temperature", "top_k", "top_p"],
        # llama.cpp's seed is 32 bits and 0xFFFFFFFF means "random"
        "seed": int(req.settings.seed) % 0xFFFFFFFF,
        "stream": True,
        "timings_per_token": True,
        "return_tokens": True,
        "cache_prompt": req.reuse_cache,
    }



def broken(gen: ServerGeneration, err: StreamBroken, stats: Callable[[str, str], ServerStats]) -> StreamBroken:
    """An answer whose stream broke (or closed unfinished): the error keeps how many tokens came,
    the generation keeps the error and `stats("error", message)` -- those tokens' figures."""
    err.tokens = len(gen.events)
    gen.error = err
    gen.stats = stats("error", str(err))
    return err

def stream_llama(endpoint, prompt_ids: list[int], req: Request, base: dict) -> Callable:
    """A ServerGeneration run function over llama-server's /completion stream."""

    def run(gen: ServerGeneration) -> Iterator[TokenEvent]:
        rb = StepRebuilder()
        t0 = time.perf_counter()
        t_first = t_last = None
        final: dict | None = None
        timings: dict = {}
        stop = ""
        proposer = req.proposer
        gen._running = lambda: _llama_stats(rb, timings, req, proposer, base, t0, t_first, t_last, "")
        try:
            for chunk in endpoint.stream("/completion", llama_body(prompt_ids, req), req.cancel):
                if req.cancel is not None and req.cancel.is_set():
                    break
                if chunk.get("timings"):
                    timings = chunk["timings"]
                n = chunk.get("tokens_predicted")
                counters = (int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0))) \
                    if chunk.get("timings") else None
                ids = list(chunk.get("tokens") or [])
                text = chunk.get("content") or ""
                origins = rb.feed(int(n), counters) if isinstance(n, int) else []
                if origins:
                    now = time.perf_counter()
                    t_first = t_first if t_first is not None else now
                    t_last = now
                    # tokens the server held back (a split character) come with this chunk:
                    # their count from tokens_predicted, their text with the last one
                    ids = [-1] * (len(origins) - len(ids)) + ids[-len(origins):]
                    for i, (tok, o) in enumerate(zip(ids, origins)):
                        yield TokenEvent(int(tok), text if i == len(origins) - 1 else "", o.kind, o.step,
                                         o.draft_position, now - t0, None, o.draft_length)
                if chunk.get("stop"):
                    final = chunk
                    types = str((chunk.get("generation_settings") or {}).get("speculative.types", ""))
                    types = ",".join(t for t in types.split(",") if t and t != "none")
                    if types:  # what the server drafted with, as it says in its answer
                        proposer = types
                    stop = LLAMA_STOP.get(chunk.get("stop_type", ""), chunk.get("stop_type", "") or "eos")
                    if chunk.get("truncated") and stop == "max_new_tokens":
                        stop = "context_full"
                    break
        except StreamBroken as exc:
            raise broken(gen, exc, lambda stop, error: _llama_stats(rb, timings, req, proposer, base, t0, t_first,
                                                                     t_last, stop, error))
        cancelled = req.cancel is not None and req.cancel.is_set()
        if final is None and not cancelled:
            raise broken(gen, StreamBroken.unfinished(endpoint.url, len(gen.events)),
                         lambda stop, error: _llama_stats(rb, timings, req, proposer, base, t0, t_first, t_last,
                                                          stop, error))
        gen.stats = _llama_stats(rb, timings, req, proposer, base, t0, t_first, t_last,
                                 "cancelled" if cancelled else stop)

    return run


def _llama_stats(rb: StepRebuilder, timings: dict, req: Request, proposer: str | None, base: dict, t0: float,
                 t_first, t_last, stop: str, error: str = "") -> ServerStats:
    drafted = int(timings.get("draft_n", rb.draft_n) or 0)
    accepted = int(timings.get("draft_n_accepted", rb.accepted_n) or 0)
    proposed, kept = rb.per_position()
    n = rb.n
    # every verification emits one target token after its kept drafts, so when a held-back
    # token hid a step boundary the count is still tokens - accepted
    verifications = rb.verifications if rb.steps_known else max(n - accepted, 0)
    mode = req.mode if req.mode != "server" else ("speculative" if drafted else "standard")
    s = ServerStats(
        new_tokens=n,
        seconds=(t_last - t0) if t_last is not None else time.perf_counter() - t0,
        prefill_seconds=(t_first - t0) if t_first is not None else 0.0,
        proposed_tokens=drafted,
        accepted_tokens=accepted,
        target_forward_passes=verifications,
        speculative_steps=len(rb.spec_steps),
        speculative_step_tokens=rb.spec_step_tokens,
        last_draft_length=rb.last_draft_length,
        per_position_proposed=proposed,
        per_position_accepted=kept,
        draft_lengths=[d for d, _ in rb.spec_steps],
        stop_reason=stop,
        reused_prompt_tokens=int(timings.get("cache_n", 0) or 0),
        mode=mode,
        proposer=proposer if mode == "speculative" else None,
    )
    s.server = dict(base)
    s.server.update(
        figures="llama-server timings (per token)",
        colours="rebuilt from the draft counters" if not rb.mismatch else "rebuilt where the counters place them",
        colour_note=rb.mismatch,
        steps_exact=rb.steps_known,
        speculative_steps=len(rb.spec_steps),
        plain_steps=rb.plain_steps,
        unplaced_tokens=rb.unknown_tokens,
        tokens_per_second=float(timings.get("predicted_per_second", 0.0) or 0.0),
        prompt_tokens=int(timings.get("prompt_n", 0) or 0),
        prompt_seconds=float(timings.get("prompt_ms", 0.0) or 0.0) / 1000,
        decode_seconds=float(timings.get("predicted_ms", 0.0) or 0.0) / 1000,
        timings=dict(timings),
    )
    if error:
        s.server["error"] = error
    return s


# -- OpenAI-compatible ----------------------------------------------------------------------
def openai_body(model: str, prompt, req: Request, vllm: bool) -> tuple[str, dict]:
    """(path, body): chat messages go to /v1/chat/completions, token ids to /v1/completions."""
    s = req.settings.sampling
    body: dict = {
        "model": model,
        "temperature": float(s.temperature),
        "top_p": float(s.top_p),
        "seed": int(req.settings.seed) % 2**31,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if req.settings.max_new_tokens is not None:  # absent: the server's own bound (its context)
        body["max_tokens"] = req.settings.max_new_tokens
    if s.top_k > 0:  # "off" is spelled differently by each server: leave it out
        body["top_k"] = int(s.top_k)
    if vllm:
        body["return_token_ids"] = True
    if isinstance(prompt, list):
        body["prompt"] = list(prompt)
        return "/v1/completions", body
    body["messages"] = [dict(m) for m in prompt.messages]
    return "/v1/chat/completions", body


def stream_openai(endpoint, model: str, prompt, req: Request, base: dict, metrics_prefix: str | None,
                  vllm: bool) -> Callable:
    """A ServerGeneration run function over an OpenAI-compatible stream."""

    def run(gen: ServerGeneration) -> Iterator[TokenEvent]:
        before = _read_counters(endpoint, metrics_prefix)
        path, body = openai_body(model, prompt, req, vllm)
        t0 = time.perf_counter()
        t_first = t_last = None
        usage: dict = {}
        spec: dict | None = None
        finish = ""
        chunks = 0
        gen._running = lambda: _openai_stats(gen, usage, None, req, base, t0, t_first, t_last, "")
        try:
            for chunk in endpoint.stream(path, body, req.cancel):
                if req.cancel is not None and req.cancel.is_set():
                    break
                if chunk.get("usage"):
                    usage = chunk["usage"]
                metrics = chunk.get("metrics") or {}
                if isinstance(metrics, dict) and metrics.get("speculative_decoding"):
                    spec = metrics["speculative_decoding"]
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    text = delta.get("content") if "delta" in choice else choice.get("text")
                    text = text or ""
                    ids = list(choice.get("token_ids") or [])
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                    if not text and not ids:
                        continue
                    now = time.perf_counter()
                    t_first = t_first if t_first is not None else now
                    t_last = now
                    for i, tok in enumerate(ids or [-1]):
                        last = i == max(len(ids), 1) - 1
                        yield TokenEvent(int(tok), text if last else "", TokenKind.SERVER, chunks, None, now - t0)
                    chunks += 1
        except StreamBroken as exc:
            raise broken(gen, exc, lambda stop, error: _openai_stats(gen, usage, None, req, base, t0, t_first, t_last,
                                                                      stop, error))
        cancelled = req.cancel is not None and req.cancel.is_set()
        if not finish and not cancelled:
            raise broken(gen, StreamBroken.unfinished(endpoint.url, len(gen.events)),
                         lambda stop, error: _openai_stats(gen, usage, None, req, base, t0, t_first, t_last,
                                                           stop, error))
        figures = None
        if spec is not None:
            figures = figures_from_vllm_request(spec)
        elif before is not None:
            after = _read_counters(endpoint, metrics_prefix)
            if after is not None and after.present:
                figures = figures_from_counters(after - before)
        stop = "cancelled" if cancelled else OPENAI_STOP.get(finish, finish)
        gen.stats = _openai_stats(gen, usage, figures, req, base, t0, t_first, t_last, stop)

    return run


def _read_counters(endpoint, prefix: str | None):
    if not prefix:
        return None
    from .prometheus import read_spec_counters

    try:
        return read_spec_counters(endpoint.get_text("/metrics"), prefix)
    except ServerError:
        return None


def _openai_stats(gen: ServerGeneration, usage: dict, figures: SpecFigures | None, req: Request, base: dict,
                  t0: float, t_first, t_last, stop: str, error: str = "") -> ServerStats:
    n = int(usage.get("completion_tokens") or len(gen.events))
    s = ServerStats(
        new_tokens=n,
        seconds=(t_last - t0) if t_last is not None else time.perf_counter() - t0,
        prefill_seconds=(t_first - t0) if t_first is not None else 0.0,
        stop_reason=stop,
        mode=req.mode,
        proposer=req.proposer,
    )
    s.server = dict(base)
    s.server.update(colours="not reported per token (kind server)", prompt_tokens=int(usage.get("prompt_tokens") or 0),
                    tokens_per_second=n / s.seconds if s.seconds > 0 else 0.0)
    if figures is not None and figures.proposed:
        s.mode = "speculative"
        s.proposed_tokens = figures.proposed
        s.accepted_tokens = min(figures.accepted, figures.proposed)
        s.per_position_proposed = list(figures.per_position_proposed)
        s.per_position_accepted = list(figures.per_position_accepted)
        # each verification emits one target token after its kept drafts
        s.target_forward_passes = max(n - s.accepted_tokens, 1)
        if figures.steps:  # a speculative step emits its kept drafts and one target token
            s.speculative_steps = min(figures.steps, s.target_forward_passes)
            s.speculative_step_tokens = s.speculative_steps + s.accepted_tokens
        s.server.update(figures=figures.source, server_wide=figures.server_wide, speculative_steps=figures.steps)
    elif figures is not None:
        s.server.update(figures=figures.source + ": nothing drafted", server_wide=figures.server_wide)
    else:
        s.server.update(figures="none (the server reports no speculative figures)")
    if error:
        s.server["error"] = error
    return s
