"""The OpenAI response objects: a whole answer, and the chunks of a streamed one, for chat
completions and (text) completions alike, each with the `specdec` extension (protocol.py).

    chat         {"object": "chat.completion", "choices": [{"message": {"role", "content"}, ...}]}
    chat chunk   {"object": "chat.completion.chunk", "choices": [{"delta": {"content"}, ...}]}
    completion   {"object": "text_completion", "choices": [{"text", ...}]} (chunks: the same object)

Streamed (every chunk with the extension, its tokens' list empty where it has none), the first
chunk of a chat gives the role (as OpenAI's does); a chunk per engine step
gives its text and tokens; the last chunk with a choice gives the finish_reason and the Stats;
with stream_options.include_usage every chunk has "usage": null and one more chunk after the
last gives the usage with no choices; then `data: [DONE]`.

With logprobs asked for, each choice's "logprobs" has its tokens' (the target's, events.Logprobs):
chat {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}, completions
{"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
"""

from __future__ import annotations

import json
import time
import uuid

from ..events import Stats, TokenEvent, TokenLogprob
from .protocol import EXTENSION, finite, stats_to_wire, token_to_wire


class Shape:
    """The objects of one request's answer (its id, creation time and model fixed once)."""

    done = True  # a stream ends with `data: [DONE]`

    def __init__(self, chat: bool, model: str, include_usage: bool = False, logprobs: bool = False,
                 end_ids: frozenset[int] = frozenset()):
        self.chat = chat
        self.model = model
        self.include_usage = include_usage
        self.logprobs = logprobs
        self.end_ids = end_ids  # the end token is no part of the content: not listed in logprobs (as OpenAI's)
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self._offset = 0  # completions' text_offset: where the next token's text starts

    def _object(self, streamed: bool) -> dict:
        kind = ("chat.completion.chunk" if streamed else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": None}

    def _choice(self, text: str | None, finish: str | None, streamed: bool, tokens: list[TokenEvent],
                calls: list[dict] | None = None) -> dict:
        listed = [e for e in tokens if e.logprobs is not None and e.token_id not in self.end_ids]
        # a whole answer asked for logprobs has them, even none (an answer of only the end token)
        logprobs = self._logprobs(listed) if self.logprobs and (listed or not streamed) else None
        if not self.chat:
            return {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": logprobs}
        if streamed:
            delta = {} if text is None else {"content": text}
            return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        message = {"role": "assistant", "content": text or ""}
        if calls:  # an answer of tool calls has no content
            message = {"role": "assistant", "content": None, "tool_calls": calls}
        return {"index": 0, "message": message, "finish_reason": finish, "logprobs": logprobs}

    def _logprobs(self, tokens: list[TokenEvent]) -> dict:
        """The choice's logprobs object for these tokens (each decoded with them, events.Logprobs)."""
        lps = [e.logprobs for e in tokens]
        if self.chat:
            return {"content": [{**_entry(lp.chosen), "top_logprobs": [_entry(t) for t in lp.top]} for lp in lps],
                    "refusal": None}
        offsets = []
        for e in tokens:
            offsets.append(self._offset)
            self._offset += len(e.text)
        return {"tokens": [lp.chosen.text for lp in lps], "token_logprobs": [finite(lp.chosen.logprob) for lp in lps],
                "top_logprobs": [{t.text: finite(t.logprob) for t in (lp.chosen, *lp.top)} for lp in lps],
                "text_offset": offsets}

    # -- streamed ---------------------------------------------------------------------------
    def chunk(self, text: str | None, finish: str | None = None, ext: dict | None = None,
              tokens: list[TokenEvent] = ()) -> dict:
        obj = self._object(True)
        obj["choices"] = [self._choice(text, finish, True, list(tokens))]
        if self.include_usage:
            obj["usage"] = None
        if ext is not None:
            obj[EXTENSION] = ext
        return obj

    def calls_chunk(self, calls: list[dict], first_index: int) -> dict:
        """Tool calls as a streamed delta: each with its index among the answer's calls, its id,
        name and arguments whole (a client appends the pieces of a call by index; here one piece)."""
        obj = self.chunk(None, ext={"tokens": []})
        obj["choices"][0]["delta"] = {"tool_calls": [{"index": first_index + i, **call} for i, call in enumerate(calls)]}
        return obj

    def role_chunk(self) -> dict:
        obj = self.chunk(None, ext={"tokens": []})  # every chunk has the extension: a client reads it alike
        obj["choices"][0]["delta"] = {"role": "assistant", "content": ""}
        return obj

    def usage_chunk(self, usage: dict) -> dict:
        obj = self._object(True)
        obj["choices"] = []
        obj["usage"] = usage
        obj[EXTENSION] = {"tokens": []}
        return obj

    # -- whole ------------------------------------------------------------------------------
    def response(self, text: str, finish: str | None, usage: dict, ext: dict, tokens: list[TokenEvent] = (),
                 calls: list[dict] | None = None) -> dict:
        obj = self._object(False)
        obj["choices"] = [self._choice(text, finish, False, list(tokens), calls)]
        obj["usage"] = usage
        obj[EXTENSION] = ext
        return obj


def _entry(t: TokenLogprob) -> dict:
    return {"token": t.text, "logprob": finite(t.logprob), "bytes": list(t.utf8)}


def usage(prompt_tokens: int, completion_tokens: int, stats: Stats | None) -> dict:
    cached = stats.reused_prompt_tokens if stats is not None else 0
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": cached}}


def tokens_ext(tokens: list[TokenEvent], running: Stats | None = None) -> dict:
    ext: dict = {"tokens": [token_to_wire(e) for e in tokens]}
    if running is not None:
        ext["stats"] = stats_to_wire(running)
    return ext


def final_ext(stats: Stats, queue_seconds: float, settings: dict, tokens: list[TokenEvent]) -> dict:
    """The last chunk's (or a whole answer's) extension: the engine's Stats, how long the request
    waited for its turn, and the settings it was decoded with (its seed too)."""
    return {"tokens": [token_to_wire(e) for e in tokens], "stats": stats_to_wire(stats),
            "queue_seconds": queue_seconds, "settings": settings}


def sse(obj: dict | str) -> bytes:
    """One server-sent event: `data: JSON` and a blank line."""
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return f"data: {data}\n\n".encode()
