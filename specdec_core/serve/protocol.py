"""The wire format of `specdec serve`'s extension to the OpenAI API: what a request may add and
what every response carries beyond the standard fields (which clients such as the official
`openai` package read, ignoring the rest). Shared by the server (serve/app.py) and the client
that recognises such a server (remote/specdec.py). Plain JSON values; no torch.

A request may add (the `openai` client sends them with `extra_body=`):

    "top_k": K                       vLLM's and llama.cpp's spelling; 0 (or -1) = off
    "specdec": {"mode": "speculative" | "standard",
                "draft_tokens": K | "adaptive",
                "proposer": "lookup+draft" | "draft" | "prompt-lookup",
                "reuse_cache": true,       keep the engine's cached prefix of an earlier request
                "running_stats": false,    every chunk also carries the engine's running Stats
                "engine_seed": N}          the engine's own seed as it is (a client engine's
                                           DecodeSettings.seed); `seed` is `specdec generate
                                           --seed`'s, whose one sample has sample_seed(seed, 0)

Every response adds a "specdec" object:

    a streamed chunk        {"tokens": [TOKEN, ...]}            the tokens whose text the chunk carries
    the finishing chunk     {"tokens": [...], "stats": STATS, "queue_seconds": s, "settings": SETTINGS}
    a whole answer          the same, with every token
    TOKEN = {"id", "text", "kind", "source", "step", "draft_position", "draft_length", "t", "margin"}
            and, where logprobs were asked for, "logprobs": {"chosen": LP, "top": [LP, ...]} with
            LP = [id, text, utf8 bytes, logprob] (a logprob the grammar forbids: -9999.0)
    STATS = events.Stats.to_dict(): the engine's own figures (proposed_tokens, accepted_tokens,
            acceptance_rate = alpha, tokens_per_speculative_step = tau, tokens_per_second,
            decode_tokens_per_second, plain_step_share, per-position counts, ...), never
            recomputed by the server. A server before these names sent draft_tokens,
            accepted_draft_tokens and mean_accepted_per_step for the first two and tau: the
            client reads those where the new ones are missing (renamed_figures.py)
    SETTINGS = {"max_new_tokens", "temperature", "top_k", "top_p", "min_p", "presence_penalty",
                "frequency_penalty", "repetition_penalty", "logit_bias", "logprobs", "draft_tokens", "mode",
                "proposer", "seed" (the request's, or the random one drawn for it), "engine_seed", "reuse_cache"}

/v1/models names the server (owned_by "specdec") and describes the loaded pair under "specdec".
"""

from __future__ import annotations

import dataclasses
import json
import math

from ..events import Logprobs, Stats, TokenEvent, TokenKind, TokenLogprob
from ..renamed_figures import stats_under_current_names
from ..settings import DecodeSettings

EXTENSION = "specdec"  # the key of the extension object in requests, responses and the model card
OWNED_BY = "specdec"  # /v1/models' owned_by: how a client tells this server from others

# the extension's request fields (schema.Extension has them, in this order; requests.py reads them)
REQUEST_FIELDS = ("mode", "draft_tokens", "proposer", "reuse_cache", "running_stats", "engine_seed")


def request_to_wire(model: str, prompt_ids: list[int], settings: DecodeSettings, reuse_cache: bool) -> dict:
    """A /v1/completions request (streamed) that has the server decode `prompt_ids` with exactly
    these settings: the sampling under the OpenAI / vLLM names the server reads back into the
    same SamplingParams (requests.py; tests/test_serve_units.py round-trips every field), the
    rest in the extension, the logprobs asked for, a JSON schema as response_format. ValueError
    for a grammar the OpenAI fields cannot carry (Lark, a regex): refused, never dropped."""
    s, p = settings, settings.sampling
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
                    "engine_seed": int(s.seed), "reuse_cache": reuse_cache, "running_stats": True},
    }
    if p.logit_bias:
        body["logit_bias"] = {str(t): float(b) for t, b in p.logit_bias}
    if s.grammar is not None:
        if s.grammar.kind != "json_schema":
            raise ValueError(f"a {s.grammar.kind} grammar cannot be sent to a specdec serve target (its requests "
                             "carry JSON schemas only, as response_format)")
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer",
                                                                            "schema": json.loads(s.grammar.text)}}
    if s.logprobs is not None:  # they come back with each token (token_to_wire)
        body["logprobs"] = int(s.logprobs)
    return body


# A token the grammar forbids has logprob -inf, which JSON cannot carry: this stands for it on the
# wire, as OpenAI and vLLM write it.
IMPOSSIBLE = -9999.0


def finite(logprob: float) -> float:
    return max(logprob, IMPOSSIBLE)


def token_to_wire(ev: TokenEvent) -> dict:
    margin = ev.margin if ev.margin is not None and math.isfinite(ev.margin) else None  # JSON has no inf
    out = {"id": ev.token_id, "text": ev.text, "kind": ev.kind.value, "source": ev.source, "step": ev.step,
           "draft_position": ev.draft_position, "draft_length": ev.draft_length, "t": ev.t, "margin": margin}
    if ev.logprobs is not None:
        out["logprobs"] = {"chosen": _lp_to_wire(ev.logprobs.chosen), "top": [_lp_to_wire(t) for t in ev.logprobs.top]}
    return out


def _lp_to_wire(t: TokenLogprob) -> list:
    return [t.token_id, t.text, list(t.utf8), finite(t.logprob)]


def _lp_from_wire(d: list) -> TokenLogprob:
    token_id, text, utf8, logprob = d
    return TokenLogprob(int(token_id), str(text), tuple(int(b) for b in utf8), float(logprob))


def token_from_wire(d: dict) -> TokenEvent:
    """One TOKEN back into the engine's event (ValueError/KeyError/TypeError on a malformed one)."""
    margin = d.get("margin")
    pos = d.get("draft_position")
    lps = d.get("logprobs")
    logprobs = None if lps is None else Logprobs(_lp_from_wire(lps["chosen"]),
                                                  tuple(_lp_from_wire(t) for t in lps["top"]))
    return TokenEvent(int(d["id"]), str(d.get("text", "")), TokenKind(d["kind"]), int(d.get("step", 0)),
                      None if pos is None else int(pos), float(d.get("t", 0.0)),
                      None if margin is None else float(margin), int(d.get("draft_length", 0)),
                      str(d.get("source", "")), logprobs)


def stats_to_wire(stats: Stats) -> dict:
    return stats.to_dict()


def stats_from_wire(d: dict, cls: type[Stats] = Stats, **extra) -> Stats:
    """STATS back into a Stats (or a subclass, with `extra` fields): the fields it names, an
    older server's names read as today's; the derived figures (alpha, tau, tok/s) are
    properties and follow from them."""
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in stats_under_current_names(d).items() if k in names}
    kwargs.update(extra)
    return cls(**kwargs)
