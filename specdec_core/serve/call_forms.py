"""The other ways a model writes a tool call when it may also answer in text (tool_choice "auto").

Qwen2.5's template teaches `<tool_call>\\n{...}\\n</tool_call>`, but the small Qwen2.5 models --
the embedded pair -- mostly answer an auto request with the call as a fenced JSON block, or as
the bare object:

    ```json                                   {"name": "get_weather", "arguments": {...}}
    {
      "name": "get_weather",
      "arguments": {"city": "Paris", ...}
    }
    ```

llama.cpp's Hermes-2-Pro / Qwen2.5 handler (common/chat.cpp) takes these too: its grammar is lazy
-- nothing is constrained until a trigger, the answer opening with `{"name": "<one of the
functions>"` (fenced or not), appears; from there on the grammar holds the rest to the call's
shape, so the arguments always parse. The same idea here, exactly, as one grammar the engine
masks every row with: an answer is either TEXT -- any text that does NOT open with a trigger -- or
a trigger followed by the rest of that function's call. The two branches take exactly
complementary openings, so until a trigger is complete every continuation the text branch allows
is still allowed (the model's own distribution, untouched), and once it is complete only the call
branch is left. The trigger names the function (as llama.cpp's does), so a JSON answer that
merely has a "name" key stays text. Whitespace inside these forms is the model's own (bounded, so
a call cannot run on in it): they are written pretty-printed, not in the template's one line.

The regular expressions are in the subset Rust's regex crate (llguidance) and Python's `re` /
`regex` read alike, so the grammar and the reading of the answer (parse, stream) agree.
"""

from __future__ import annotations

import json
import re

import regex  # the partial matching a stream needs (is this text still the start of a call?)

WS = r"[ \t\n]*"  # in the opening: any (the answer may still be text there)
# after it, between two JSON tokens: a pretty-printer's (a newline and an indent) or none -- the
# model's own layout, bounded, so that no call can run on in whitespace
GAP = r"\n?[ \t]{0,24}"
FENCE = "```"


def opening(name: str, fenced: bool) -> str:
    """The trigger: the answer's opening up to the function's name and its closing quote."""
    fence = f"{FENCE}(?:json)?{WS}" if fenced else ""
    return f'{WS}{fence}\\{{{WS}"name"{WS}:{WS}"{name}"'  # names are [A-Za-z0-9_-]: no escaping needed


def openings(names: list[str]) -> str:
    """Every trigger of these functions as one alternation (fenced or bare)."""
    return "|".join(f"(?:{opening(n, fenced)})" for n in names for fenced in (True, False))


def lark_rules(functions: list[dict], tag: str = "j") -> tuple[list[str], list[str]]:
    """(the rule names of the calls in these forms, one per function; the Lark rules). After the
    trigger: `, "arguments": ` then the function's parameters as JSON, the closing brace, and the
    closing fence where the call opened with one."""
    names, rules = [], []
    for i, f in enumerate(functions):
        schema = dict(f.get("parameters") or {"type": "object"})
        schema["x-guidance"] = {"whitespace_pattern": GAP}
        rule = f"{tag}{i}"
        names.append(rule)
        rules += [f"{rule}: {rule.upper()}F CALL_ARGS {rule}a CALL_CLOSE CALL_FENCE | {rule.upper()}B CALL_ARGS "
                  f"{rule}a CALL_CLOSE",
                  f"{rule.upper()}F: /{opening(f['name'], True)}/", f"{rule.upper()}B: /{opening(f['name'], False)}/",
                  f"{rule}a: %json {json.dumps(schema)}"]
    if functions:
        rules += [f'CALL_ARGS: /{GAP},{GAP}"arguments"{GAP}:{GAP}/', f"CALL_CLOSE: /{GAP}\\}}/",
                  f"CALL_FENCE: /{GAP}{FENCE}/"]
    return names, rules


def read_opening(text: str, names: list[str]) -> str | None:
    """"call" where `text` opens with a trigger, "text" where it cannot any more, None while it
    still may (a stream holds such text back)."""
    if not names:
        return "text"
    m = regex.match(openings(names), text, partial=True)
    if m is None:
        return "text"
    return None if m.partial else "call"


def parse(text: str, names: list[str]) -> list[dict] | None:
    """The call of an answer in one of these forms ([{"name", "arguments"}]); [] where it opened as
    a call but was cut short (the length limit); None where it is text."""
    if read_opening(text, names) != "call":
        return None
    body = text.lstrip()
    if body.startswith(FENCE):
        body = re.sub(r"^```(?:json)?", "", body).lstrip()
    try:
        call, _ = json.JSONDecoder().raw_decode(body)
    except ValueError:
        return []
    if not isinstance(call, dict) or not isinstance(call.get("arguments"), dict):
        return []
    return [{"name": call["name"], "arguments": call["arguments"]}]
