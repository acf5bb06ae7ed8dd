"""Structured output and tool calls of `specdec serve`: a request's `response_format` and `tools` /
`tool_choice` become the answer's grammar (grammar/spec.py: the engine masks every distribution
with it, exactly), and the answer's text becomes OpenAI `tool_calls`.

Tool calls go through the model's own chat template, as the model was trained to make them: the
template shows it the functions (`tools=`), and Qwen2.5 -- the embedded pair -- writes each call
as `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`. The grammar holds the calls to
that shape with each function's parameters as the arguments' JSON schema, so they always parse:

    tool_choice "none"             text that makes no call (the functions are still shown, as
                                   OpenAI shows them: the prompt stays the conversation's)
    "auto" (the default)           one or more calls, or text that does not begin with a call
    "required"                     one or more calls, of any of the functions
    parallel_tool_calls false      (auto, required) one call at most
    {"function": {"name": F}}      one call of F
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from ..grammar.spec import JSON_LAYOUT, GrammarSpec

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class ToolUse:
    """The functions offered (each {"name", "description", "parameters"}) and how they may be called."""

    functions: tuple[dict, ...]
    choice: str  # "auto" | "required" | "none" | "function" (one named call)
    name: str | None = None  # the function of choice "function"
    several: bool = True  # parallel_tool_calls: more than one call in an answer (auto, required)

    @property
    def calls(self) -> bool:
        """Whether the answer may be calls (its text is read for them)."""
        return bool(self.functions) and self.choice != "none"

    def template_tools(self) -> list[dict]:
        """What the chat template's `tools=` gets."""
        return [{"type": "function", "function": f} for f in self.functions]


def has_call_tokens(tokenizer) -> bool:
    """Whether <tool_call> and </tool_call> are tokens of their own in `tokenizer` (as in Qwen2.5)."""
    if tokenizer is None:
        return False
    ids = [tokenizer.convert_tokens_to_ids(t) for t in (OPEN, CLOSE)]
    return all(isinstance(i, int) and tokenizer.convert_ids_to_tokens(i) == t for i, t in zip(ids, (OPEN, CLOSE)))


def response_format_grammar(fmt: dict | None) -> GrammarSpec | None:
    """{"type": "text"} -> None; "json_object" -> any JSON object; "json_schema" -> its schema
    (strict or not: the schema is always kept to -- a grammar cannot half-constrain)."""
    if fmt is None or fmt["type"] == "text":
        return None
    if fmt["type"] == "json_object":
        return GrammarSpec.json_object()
    return GrammarSpec.json_schema(fmt["json_schema"].get("schema", {"type": "object"}))


def tools_grammar(use: ToolUse, special_tokens: bool) -> GrammarSpec | None:
    """The Lark grammar of the calls `use` allows. `special_tokens`: the tokenizer has <tool_call>
    and </tool_call> as tokens of their own (Qwen2.5 does): the grammar names the tokens, which
    no free text can then contain; else it matches their text."""
    text = "/(?s:.*)/" if special_tokens else f"/(?s:.*)/ & ~/{OPEN}(?s:.*)/"
    if not use.calls:  # "none": text, which cannot hold a call's marker token (nor open with its text)
        return GrammarSpec.lark(f"start: TEXT\nTEXT: {text}")
    opened = f"{OPEN} " if special_tokens else f'"{OPEN}" '
    closed = f" {CLOSE}" if special_tokens else f' "{CLOSE}"'
    chosen = [f for f in use.functions if use.choice != "function" or f["name"] == use.name]
    rules = [f"call: {opened}\"\\n\" ({' | '.join(f'f{i}' for i in range(len(chosen)))}) \"\\n\"{closed}"]
    for i, f in enumerate(chosen):
        schema = {"type": "object", "properties": {"name": {"const": f["name"]},
                                                   "arguments": f.get("parameters") or {"type": "object"}},
                  "required": ["name", "arguments"], "additionalProperties": False, "x-guidance": JSON_LAYOUT}
        rules.append(f"f{i}: %json {json.dumps(schema)}")
    # after a call the model may end, or write the newline that would open its next call and then
    # end after all: the grammar never forces a call the model did not mean
    calls = 'call ("\\n" call)* "\\n"?' if use.several else "call"
    if use.choice == "function":
        start = "start: call"
    elif use.choice == "required":
        start = f"start: {calls}"
    else:  # auto: calls, or text; text that opens with a call's marker is the call branch's
        start = f"start: {calls} | TEXT\nTEXT: {text}"
    return GrammarSpec.lark("\n".join([start, *rules]))


def parse_calls(text: str) -> list[dict] | None:
    """The OpenAI tool_calls of an answer made of calls; None where it is text (auto's other
    branch). A call cut short (the length limit) is left out."""
    if not text.lstrip().startswith(OPEN):
        return None
    calls = []
    for part in text.split(OPEN)[1:]:
        body, closed, _ = part.partition(CLOSE)
        if not closed:
            break
        try:
            call = json.loads(body)
        except ValueError:
            break
        calls.append(to_openai(call))
    return calls


def to_openai(call: dict) -> dict:
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))}}


class CallStream:
    """A streamed answer's text, split as it comes into content to send now and tool calls
    complete enough to send (each one whole: its name and all its arguments in one delta)."""

    def __init__(self):
        self.text = ""
        self.mode: str | None = None  # "content" | "calls", once the text's start tells
        self.sent_calls = 0
        self.calls: list[dict] = []

    def feed(self, piece: str) -> tuple[str, list[dict]]:
        self.text += piece
        if self.mode is None:
            head = self.text.lstrip()
            if not head or (OPEN.startswith(head) and head != OPEN):
                return "", []  # still may be a call's opening: hold it
            self.mode = "calls" if head.startswith(OPEN) else "content"
            if self.mode == "content":
                return self.text, []
        if self.mode == "content":
            return piece, []
        done = parse_calls(self.text) or []
        new = done[self.sent_calls :]
        self.sent_calls = len(done)
        self.calls.extend(new)
        return "", new

    def flush(self) -> str:
        """Text held back at the end: an answer that was only the start of a marker, or calls of
        which none was complete (cut by the length limit) -- what a whole answer gives as content."""
        return self.text if self.mode is None or (self.mode == "calls" and not self.calls) else ""
