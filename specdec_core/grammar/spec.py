"""What an answer is constrained to, as a plain value (no torch, no grammar library here): the
settings carry it from a front end (a server request's response_format or tools) to the engine,
which compiles it for its own tokenizer (grammar/constraint.py).

    GrammarSpec.json_schema(schema)   JSON matching a JSON Schema (a dict)
    GrammarSpec.json_object()         any JSON object
    GrammarSpec.lark(text)            a Lark grammar (llguidance's syntax: JSON schemas can be
                                      embedded as %json{...}; tool calls are built from that)
    GrammarSpec.regex(pattern)        text matching a regular expression
"""

from __future__ import annotations

import json
from dataclasses import dataclass

KINDS = ("json_schema", "lark", "regex")

# JSON as the grammar writes it: ", " between items and ": " after a key, no other whitespace.
# One spelling of each answer, so that what follows a value (`", "key": "`) is forced and costs no
# model (the grammar proposer), and so that no answer can run on in whitespace; it is how the
# Qwen2.5 models and OpenAI's structured outputs write JSON on one line.
JSON_LAYOUT = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}


@dataclass(frozen=True)
class GrammarSpec:
    kind: str  # one of KINDS
    text: str  # the schema as JSON text, the Lark grammar, the pattern

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown grammar kind {self.kind!r}; one of {', '.join(KINDS)}")

    @classmethod
    def json_schema(cls, schema: dict | bool) -> GrammarSpec:
        return cls("json_schema", json.dumps(schema, sort_keys=False))

    @classmethod
    def json_object(cls) -> GrammarSpec:
        return cls.json_schema({"type": "object"})

    @classmethod
    def lark(cls, text: str) -> GrammarSpec:
        return cls("lark", text)

    @classmethod
    def regex(cls, pattern: str) -> GrammarSpec:
        return cls("regex", pattern)

    def describe(self) -> str:
        """A short name for logs and the settings echo."""
        return self.kind
