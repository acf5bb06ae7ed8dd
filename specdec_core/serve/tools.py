"""Structured output and tool calls of `specdec serve`: a request's `response_format` and `tools` /
`tool_choice` become the answer's grammar (grammar/spec.py: the engine masks every distribution
with it, exactly), and the answer's text becomes OpenAI `tool_calls`.

Tool calls go through the model's own chat template, as the model was trained to make them: the
template shows it the functions (`tools=`), and Qwen2.5 -- the embedded pair -- writes each call
as `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`. The grammar holds the calls to
that shape with each function's parameters as the arguments' JSON schema, so they always parse:

    tool_choice "none"             text that makes no call (the functions are still shown, as
                                   OpenAI shows them: the prompt stays the conversation's)
    "auto" (the default)           one or more calls, or text that does not begin with a call;
                                   also the call as a fenced or bare JSON object, as the small
                                   Qwen2.5 models write it (call_forms.py: constrained from the
                                   moment the answer opens as one)
    "required"                     one or more calls, of any of the functions
    parallel_tool_calls false      (auto, required) one call at most
    {"function": {"name": F}}      one call of F
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from ..grammar.spec import JSON_LAYOUT, GrammarSpec
from . import call_forms

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

    @property
    def names(self) -> list[str]:
        """The names of the functions an answer may call."""
        return [f["name"] for f in self.functions if self.choice != "function" or f["name"] == self.name]

    def template_tools(self) -> list[dict]:
        """What the chat template's `tools=` gets."""
        return [{"type": "function", "function": f} for f in self.functions]


def has_call_tokens(engine) -> bool:
    """Whether <tool_call> and </tool_call> are tokens of their own in the engine's vocabulary
    (as in Qwen2.5's; contract.EngineLike.token_id)."""
    return all(engine.token_id(t) is not None for t in (OPEN, CLOSE))


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
    opened = f"{OPEN} " if special_tokens else f'"{OPEN}" '
    closed = f" {CLOSE}" if special_tokens else f' "{CLOSE}"'
    # text never holds a call's marker: as a token of its own it is outside any text lexeme; as
    # text, text may not open with it
    marker = "" if special_tokens else OPEN
    if not use.calls:  # "none": text, which cannot hold a call's marker token (nor open with its text)
        return GrammarSpec.lark(f"start: TEXT\nTEXT: {_text_unless(marker)}")
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
    else:  # auto: calls; a call in the JSON forms; or text that opens as neither (call_forms.py)
        forms, form_rules = call_forms.lark_rules(chosen)
        triggers = call_forms.openings(use.names) + (f"|(?:{OPEN})" if marker else "")
        start = f"start: {' | '.join([calls, *forms])} | TEXT\nTEXT: /(?s:.*)/ & ~/(?:{triggers})(?s:.*)/"
        rules += form_rules
    return GrammarSpec.lark("\n".join([start, *rules]))


def _text_unless(marker: str) -> str:
    return f"/(?s:.*)/ & ~/{marker}(?s:.*)/" if marker else "/(?s:.*)/"


def parse_calls(text: str, names: list[str]) -> list[dict] | None:
    """The OpenAI tool_calls of an answer made of calls (<tool_call> tags, or one call in
    call_forms.py's JSON forms, of the functions `names`); None where it is text (auto's other
    branch). A call cut short (the length limit) is left out."""
    if opening(text, names) != "tags":
        found = call_forms.parse(text, names)
        return None if found is None else [to_openai(c) for c in found]
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


def opening(text: str, names: list[str]) -> str | None:
    """How an answer opens: "tags" (<tool_call>), "json" (call_forms.py), "text"; None while the
    text so far may still open either way."""
    head = text.lstrip()
    if head.startswith(OPEN):
        return "tags"
    json_form = call_forms.read_opening(text, names)
    if json_form == "call":
        return "json"
    if json_form is None or (head == "" or OPEN.startswith(head)):
        return None
    return "text"


def to_openai(call: dict) -> dict:
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))}}


class CallStream:
    """A streamed answer's text, split as it comes into content to send now and tool calls
    complete enough to send (each one whole: its name and all its arguments in one delta).
    `names`: the functions the answer may call."""

    def __init__(self, names: list[str]):
        self.names = list(names)
        self.text = ""
        self.mode: str | None = None  # "content" | "calls", once the text's start tells
        self.sent_calls = 0
        self.calls: list[dict] = []

    def feed(self, piece: str) -> tuple[str, list[dict]]:
        self.text += piece
        if self.mode is None:
            kind = opening(self.text, self.names)
            if kind is None:
                return "", []  # still may be a call's opening: hold it
            self.mode = "content" if kind == "text" else "calls"
            if self.mode == "content":
                return self.text, []
        if self.mode == "content":
            return piece, []
        done = parse_calls(self.text, self.names) or []
        new = done[self.sent_calls :]
        self.sent_calls = len(done)
        self.calls.extend(new)
        return "", new

    def flush(self) -> str:
        """Text held back at the end: an answer that was only the start of a marker, or calls of
        which none was complete (cut by the length limit) -- what a whole answer gives as content."""
        return self.text if self.mode is None or (self.mode == "calls" and not self.calls) else ""
