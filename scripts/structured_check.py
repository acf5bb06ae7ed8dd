"""Structured output and a tool call on the embedded pair through `specdec serve` and the official
`openai` client: a JSON-schema extraction (parse() with a pydantic model) in standard and in
speculative mode (the same text, the steps each took, where the tokens came from), and a tool call.

    PYTHONPATH=. nice -n 19 .venv/bin/python scripts/structured_check.py
"""

from __future__ import annotations

import json
import time
from collections import Counter

import openai
from pydantic import BaseModel, ConfigDict


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    age: int
    city: str
    languages: list[str]


TEXT = ("Extract the person: Maria Lopez is 34, lives in Valencia and speaks Spanish, Catalan and English. "
        "She works as a nurse.")
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
                                                "required": ["city", "unit"], "additionalProperties": False}}}


def main() -> None:
    from specdec_core.engine import Engine
    from specdec_core.serve.runner import LocalServer

    server = LocalServer(Engine.load("default", "default"), port=0, log_level="warning", access_log=False).start()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)
    try:
        messages = [{"role": "user", "content": TEXT}]
        for mode in ("standard", "speculative"):
            t = time.perf_counter()
            r = client.chat.completions.parse(model=server.model, messages=messages, response_format=Person,
                                              temperature=0, max_tokens=120,
                                              extra_body={"specdec": {"mode": mode, "reuse_cache": False}})
            ext = r.model_extra["specdec"]
            s = ext["stats"]
            print(f"{mode}: {time.perf_counter() - t:.1f} s, {s['new_tokens']} tokens, "
                  f"{s['decode_tokens_per_second']:.2f} tok/s after the first, {s['target_forward_passes']} target "
                  f"passes, sources {dict(Counter(tok['source'] for tok in ext['tokens']))}")
            print("  ", r.choices[0].message.parsed)
        for choice in ("auto", "required"):
            r = client.chat.completions.create(model=server.model, temperature=0, max_tokens=60, tools=[WEATHER],
                                               tool_choice=choice,
                                               messages=[{"role": "user", "content": "What's the weather in Paris?"}])
            msg = r.choices[0].message
            calls = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
            print(f"tool_choice {choice}: {r.choices[0].finish_reason}, calls {calls}, content {msg.content!r}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
