"""The answer of POST /infill in llama-server's shape (its /completion objects), which editor
plugins made for llama-server (llama.vim, llama.vscode) read:

    whole      {"content", "tokens", "stop": true, "stop_type": "eos" | "limit" | "word", "model",
                "tokens_predicted", "tokens_evaluated", "tokens_cached", "truncated": false,
                "timings": {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms",
                            "predicted_per_second", "cache_n"}, "specdec": {...}}
    streamed   `data: {"content", "tokens", "stop": false, "specdec": {"tokens"}}` per engine step,
               then the whole object's fields with "content": "" and "stop": true; no [DONE]

The same methods as responses.Shape, so the routes stream and collect either alike.
"""

from __future__ import annotations

from ..events import TokenEvent
from .protocol import EXTENSION

STOP_TYPE = {"stop": "eos", "length": "limit"}


class InfillShape:
    chat = False
    include_usage = False
    done = False  # llama-server's streams end with their last object, no [DONE]

    def __init__(self, model: str, prompt_tokens: int):
        self.model = model
        self.prompt_tokens = prompt_tokens

    def chunk(self, text: str | None, finish: str | None = None, ext: dict | None = None,
              tokens: list[TokenEvent] = ()) -> dict:
        if finish is None:
            obj = {"content": text or "", "tokens": [e.token_id for e in tokens], "stop": False}
            obj[EXTENSION] = ext or {"tokens": []}
            return obj
        return self._final("", finish, ext or {}, [])

    def response(self, text: str, finish: str | None, usage: dict, ext: dict, tokens: list[TokenEvent] = (),
                 calls: list[dict] | None = None) -> dict:  # (an infill is code: it calls no tools)
        return self._final(text, finish, ext, list(tokens), usage)

    def _final(self, text: str, finish: str | None, ext: dict, tokens: list[TokenEvent], usage: dict | None = None) -> dict:
        stats = ext.get("stats", {})
        stop_type = "word" if stats.get("stop_reason") == "stop_word" else STOP_TYPE.get(finish, "none")
        prompt_n = self.prompt_tokens - stats.get("reused_prompt_tokens", 0)
        predicted = stats.get("new_tokens", 0)
        prefill, seconds = stats.get("prefill_seconds", 0.0), stats.get("seconds", 0.0)
        return {"content": text, "tokens": [e.token_id for e in tokens], "stop": True, "stop_type": stop_type,
                "model": self.model, "tokens_predicted": predicted, "tokens_evaluated": self.prompt_tokens,
                "tokens_cached": stats.get("reused_prompt_tokens", 0), "truncated": False,
                "timings": {"prompt_n": prompt_n, "prompt_ms": prefill * 1000, "predicted_n": predicted,
                            "predicted_ms": (seconds - prefill) * 1000,
                            "predicted_per_second": stats.get("decode_tokens_per_second", 0.0),
                            "cache_n": stats.get("reused_prompt_tokens", 0)},
                EXTENSION: ext}
