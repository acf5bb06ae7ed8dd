"""tool_choice "auto" and the forms small Qwen2.5 models write a call in (serve/call_forms.py): a
fenced ```json block or the bare object besides the template's <tool_call> tags.

Hand-built cases of reading an answer (whole and streamed) and of the grammar on a tiny tokenizer
(the text branch and the call branches take complementary openings; once an answer opens as a
call, its arguments are held to the function's schema); then end to end through the openai
client on the tiny structured pair, where a biased first token opens the call and the model's
own constrained tokens finish it; greedy speculative equal to standard; the end token left out of
logprobs (as OpenAI's)."""

from __future__ import annotations

import json

import pytest

from specdec_core.grammar.constraint import Grammars
from specdec_core.serve.tools import CallStream, ToolUse, opening, parse_calls, tools_grammar
from structured_models import make_structured_tokenizer, save_structured_pair

WEATHER = {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["paris", "rome"]}, "days": {"type": "integer", "minimum": 1,
                                                                                   "maximum": 9}},
    "required": ["city", "days"], "additionalProperties": False}}
NOOP = {"name": "noop", "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}
NAMES = ["get_weather", "noop"]
FENCED = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "rome",\n    "days": 3\n  }\n}\n```'
BARE = '{"name": "noop", "arguments": {}}'
TAGS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "paris", "days": 2}}\n</tool_call>'
# one token each in the e2e pair's vocabulary (with the words' leading space): a call's opening in
# each JSON form, and a JSON answer that is not a call
OPEN_FENCED, OPEN_BARE, NOT_A_CALL = '```json{"name":"get_weather"', '{"name":"noop"', '{"name":"cat"'


# -- reading an answer ------------------------------------------------------------------------------
def args_of(calls):
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, want", [
    (FENCED, [("get_weather", {"city": "rome", "days": 3})]),
    ("\n" + BARE, [("noop", {})]),
    ('```\n{"name":"noop","arguments":{}}\n```', [("noop", {})]),
    (TAGS, [("get_weather", {"city": "paris", "days": 2})]),
])
def test_each_form_of_a_call_is_read_as_its_call(text, want):
    assert opening(text, NAMES) in ("json", "tags")
    assert args_of(parse_calls(text, NAMES)) == want


@pytest.mark.parametrize("text", [
    "the cat sat", "```python\nprint 1\n```", '{"name": "cat", "age": 3}',  # a JSON answer, no function's name
    '```json\n{"name": "get_time", "arguments": {}}\n```',  # a function not offered
    '{"arguments": {}, "name": "noop"}',  # not how a call opens (llama.cpp's trigger: the name first)
])
def test_text_stays_text(text):
    assert opening(text, NAMES) == "text" and parse_calls(text, NAMES) is None


@pytest.mark.parametrize("text", ["", "  ", "```", "```json\n", "{", '{\n  "na', '{"name": "get_w', "<tool_"])
def test_an_opening_that_may_still_go_either_way_is_undecided(text):
    assert opening(text, NAMES) is None


def test_a_call_cut_short_is_no_call_and_its_text_is_the_content():
    cut = FENCED[:60]
    assert opening(cut, NAMES) == "json" and parse_calls(cut, NAMES) == []
    stream = CallStream(NAMES)
    assert stream.feed(cut) == ("", []) and stream.flush() == cut


@pytest.mark.parametrize("text, calls", [(FENCED, 1), (BARE, 1), (TAGS, 1), ("```python\nprint 1\n```", 0)])
def test_a_stream_holds_an_opening_back_until_it_is_decided(text, calls):
    """Fed a character at a time: text comes out whole once it cannot open a call any more; a
    call comes out once, whole, the moment it is complete."""
    stream, content, got = CallStream(NAMES), "", []
    for ch in text:
        piece, new = stream.feed(ch)
        content += piece
        got += new
    content += stream.flush()
    assert len(got) == calls and content == ("" if calls else text)
    if calls:
        assert args_of(got) == args_of(parse_calls(text, NAMES))


# -- the grammar ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def grammars():
    tok = make_structured_tokenizer(("```json",))  # the backtick: a character the words lacked
    return tok, Grammars(tok, len(tok), [tok.convert_tokens_to_ids("<|im_end|>")])


def accepts(grammars, spec, text: str) -> bool:
    """Whether the grammar takes `text` (in the tokenizer's own tokens) as a whole answer."""
    tok, g = grammars
    c = g.constraint(spec)
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text  # every character is in the tiny vocabulary
    if c.valid_prefix(ids) < len(ids):
        return False
    c.commit(ids)
    return c.finished


@pytest.mark.parametrize("special", [True, False])
def test_auto_takes_text_and_every_form_of_a_call(grammars, special):
    spec = tools_grammar(ToolUse((WEATHER, NOOP), "auto"), special)
    for text in [FENCED, BARE, "the cat sat", "```python\nprint 1\n```", '{"name": "cat", "age": 3}']:
        assert accepts(grammars, spec, text), text
    if special:  # (without, the grammar spells the marker as text, and this tokenizer has it as a token)
        assert accepts(grammars, spec, TAGS)


@pytest.mark.parametrize("text", [
    FENCED.replace('"rome"', '"oslo"'),  # an argument outside its schema
    FENCED.replace("3", "12"),
    FENCED[:-3],  # a fenced call must close its fence
    BARE.replace("{}}", '{"x": 1}}'),  # noop takes no arguments (additionalProperties false)
    '{"name": "noop"} and some text',  # opened as a call: the rest is the call's
    '```json\n{"name": "get_weather", "arguments": {"city": "rome", "days": 3}}\n``` more',
])
def test_once_an_answer_opens_as_a_call_the_rest_is_held_to_it(grammars, text):
    assert not accepts(grammars, tools_grammar(ToolUse((WEATHER, NOOP), "auto"), True), text)


def test_the_text_and_call_branches_take_complementary_openings(grammars):
    """Along a call's text, the grammar allows every next character while the opening is still
    undecided (the model's own distribution, nothing taken away), and only the call's
    continuation once it has opened: what the text branch gives up, the call branch takes."""
    tok, g = grammars
    spec = tools_grammar(ToolUse((WEATHER, NOOP), "auto"), True)
    probe = [tok.convert_tokens_to_ids(ch) for ch in ["x", "z"]]  # letters no part of this call has
    markers = {tok.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>")}
    text_tokens = [i for i in range(len(tok)) if i not in set(tok.all_special_ids) | markers]
    ids = tok(FENCED)["input_ids"]
    c = g.constraint(spec)
    kinds = []
    for n in range(len(ids)):
        allowed = c.allowed(ids[:n])
        head = tok.decode(ids[:n])
        kinds.append(opening(head, NAMES))
        if kinds[-1] is None:
            assert bool(allowed[text_tokens].all()), head  # undecided: any text goes
        else:
            assert kinds[-1] == "json" and not any(bool(allowed[t]) for t in probe), head  # held to the call
        assert bool(allowed[ids[n]])
    assert None in kinds and "json" in kinds


def test_parallel_tags_and_required_are_unchanged(grammars):
    spec = tools_grammar(ToolUse((WEATHER, NOOP), "required"), True)
    assert accepts(grammars, spec, TAGS) and not accepts(grammars, spec, FENCED)
    assert not accepts(grammars, spec, "the cat")


# -- end to end -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from specdec_core.open_engine import open_engine

    target, draft = save_structured_pair(tmp_path_factory.mktemp("tools-pair"), (OPEN_FENCED, OPEN_BARE, NOT_A_CALL))
    return open_engine(str(target), str(draft))


def opened_with(engine, word: str) -> dict:
    """A logit_bias that makes `word` (one token) the answer's first token: the grammar then
    holds the rest to whatever it opened."""
    return {str(engine.token_id("Ġ" + word)): 60}


def ask(client, server, engine, word, max_tokens=300, **kw):
    return client.chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "the cat"}], max_tokens=max_tokens, temperature=0,
        tools=[{"type": "function", "function": WEATHER}, {"type": "function", "function": NOOP}],
        logit_bias=opened_with(engine, word), **kw)


@pytest.mark.parametrize("word, name", [(OPEN_FENCED, "get_weather"), (OPEN_BARE, "noop")])
def test_a_call_in_a_json_form_comes_back_as_tool_calls(client, server, engine, word, name):
    r = ask(client, server, engine, word)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and msg.content is None, msg
    [call] = msg.tool_calls
    args = json.loads(call.function.arguments)
    assert call.function.name == name
    if name == "get_weather":
        assert set(args) == {"city", "days"} and args["city"] in ("paris", "rome") and 1 <= args["days"] <= 9
    else:
        assert args == {}
    calls, finish, content = {}, None, ""
    for chunk in ask(client, server, engine, word, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            content += delta.content or ""
            calls.update({d.index: (d.function.name, json.loads(d.function.arguments)) for d in delta.tool_calls or []})
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and content == "" and list(calls.values()) == [(name, args)]


def test_json_that_names_no_function_is_text(client, server, engine):
    r = ask(client, server, engine, NOT_A_CALL, max_tokens=12)
    msg = r.choices[0].message
    assert msg.tool_calls is None and msg.content.startswith(' {"name":"cat"')


def test_greedy_speculative_auto_answers_are_the_standard_ones(client, server, engine):
    for word in (OPEN_FENCED, OPEN_BARE, NOT_A_CALL):
        spec = ask(client, server, engine, word, max_tokens=60)
        std = ask(client, server, engine, word, max_tokens=60, extra_body={"specdec": {"mode": "standard"}})
        ids = [[t["id"] for t in r.model_extra["specdec"]["tokens"]] for r in (spec, std)]
        assert ids[0] == ids[1]


def test_the_end_token_is_not_in_logprobs(client, server, engine):
    r = ask(client, server, engine, OPEN_BARE, logprobs=True, top_logprobs=2)
    tokens = [t["id"] for t in r.model_extra["specdec"]["tokens"]]
    assert r.choices[0].finish_reason == "tool_calls" and tokens[-1] in engine.end_token_ids
    listed = r.choices[0].logprobs.content
    assert len(listed) == len(tokens) - 1 and "<|im_end|>" not in [t.token for t in listed]
    assert "".join(t.token for t in listed) == engine.tokenizer.decode(tokens[:-1])


def test_the_engine_says_which_texts_are_tokens_and_which_tokens_end(engine):
    assert engine.token_id("<tool_call>") == engine.tokenizer.convert_tokens_to_ids("<tool_call>")
    assert engine.token_id("not one token") is None and engine.token_id("<|im_end|>") in engine.end_token_ids
