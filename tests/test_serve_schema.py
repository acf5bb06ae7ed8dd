"""`specdec serve`'s request models (specdec_core/serve/schema.py) on hand-built bodies: every
field the server refuses, refused with its name; wrong types a 422; the OpenAI error shape made
from pydantic's ValidationError, its `param` naming nested fields (messages[1].content); what is
ignored still ignored; and a field added to a model in one line. No engine, no server."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import ValidationError

from specdec_core.serve.errors import APIError
from specdec_core.serve.protocol import REQUEST_FIELDS
from specdec_core.serve.requests import chat_options, completion_options, tokenize_input
from specdec_core.serve.schema import ChatCompletionRequest, CompletionRequest, Extension, api_error, param_of, \
    parse, refused_unless

USER = [{"role": "user", "content": "hi"}]


def refusal(model, body) -> dict:
    """The error body parse() gives, with its status folded in."""
    with pytest.raises(APIError) as err:
        parse(model, body)
    out = err.value.body()["error"]
    assert set(out) == {"message", "type", "param", "code"} and out["type"] == "invalid_request_error"
    assert "\n" not in out["message"] and out["message"]  # one clear line
    return {**out, "status": err.value.status}


def chat(**fields) -> dict:
    return refusal(ChatCompletionRequest, {"messages": USER, **fields})


# -- refused: what the engine does not do ----------------------------------------------------------
REFUSED = {"tools": [{"type": "function"}], "functions": [{"name": "f"}], "tool_choice": "auto",
           "function_call": "auto", "response_format": {"type": "json_object"}, "n": 2}


@pytest.mark.parametrize("name, value", REFUSED.items())
def test_every_field_the_engine_does_not_do_is_refused_by_name(name, value):
    for model, body in ((ChatCompletionRequest, {"messages": USER}), (CompletionRequest, {"prompt": "x"})):
        err = refusal(model, {**body, name: value})
        assert err["status"] == 400 and err["code"] == "unsupported_parameter" and err["param"] == name
        assert err["message"].startswith(f"{name}: ")


@pytest.mark.parametrize("name, value", [("echo", True), ("best_of", 3)])
def test_completions_refuse_echo_and_best_of(name, value):
    err = refusal(CompletionRequest, {"prompt": "x", name: value})
    assert (err["status"], err["param"], err["code"]) == (400, name, "unsupported_parameter")
    assert err["message"] == f"{name}: not supported by this server"
    parse(ChatCompletionRequest, {"messages": USER, name: value})  # not chat fields: ignored there, as before


def test_neutral_values_of_what_is_refused_pass_and_a_look_alike_does_not():
    neutral = {"tools": [], "functions": [], "tool_choice": "none", "function_call": "none",
               "response_format": {"type": "text"}, "n": 1}
    parse(ChatCompletionRequest, {"messages": USER, **neutral})
    parse(CompletionRequest, {"prompt": "x", "echo": False, "best_of": 1, **neutral})
    assert chat(n=1.0)["param"] == "n"  # 1.0 is not the integer 1 (type and value)
    assert chat(n=2)["message"] == "n: only n = 1 is served (one answer per request), got 2"
    assert chat(response_format="text")["message"] == 'response_format: only {"type": "text"} is served'


def test_roles_and_content_parts_that_are_not_served():
    err = refusal(ChatCompletionRequest, {"messages": USER + [{"role": "tool", "content": "x"}]})
    assert (err["status"], err["param"], err["code"]) == (400, "messages[1].role", "unsupported_parameter")
    assert "'tool' messages are not served" in err["message"]
    parts = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]
    err = refusal(ChatCompletionRequest, {"messages": [{"role": "user", "content": parts}]})
    assert err["param"] == "messages[0].content[1].type" and err["status"] == 400
    assert err["message"] == "messages[0].content[1].type: 'image_url' content is not served: text only"


def test_several_prompts_are_refused():
    err = refusal(CompletionRequest, {"prompt": ["a", "b"]})
    assert (err["status"], err["param"], err["code"]) == (400, "prompt", "unsupported_parameter")
    assert err["message"] == "prompt: one prompt per request is served, got 2"


# -- wrong types: 422, naming the field (nested ones too) ------------------------------------------
@pytest.mark.parametrize("body, param, message", [
    ({"messages": USER, "max_tokens": "7"}, "max_tokens", "max_tokens must be an integer, got a string"),
    ({"messages": USER, "max_completion_tokens": 7.0}, "max_completion_tokens",
     "max_completion_tokens must be an integer, got a number"),
    ({"messages": USER, "temperature": True}, "temperature", "temperature must be a number, got a boolean"),
    ({"messages": USER, "top_p": "1"}, "top_p", "top_p must be a number, got a string"),
    ({"messages": USER, "top_k": 1.5}, "top_k", "top_k must be an integer, got a number"),
    ({"messages": USER, "seed": "1"}, "seed", "seed must be an integer, got a string"),
    ({"messages": USER, "n": True}, "n", "n must be an integer, got a boolean"),
    ({"messages": USER, "model": 3}, "model", "model must be a string, got an integer"),
    ({"messages": USER, "stream": 1}, "stream", "stream must be a boolean, got an integer"),
    ({"messages": USER, "stream": True, "stream_options": []}, "stream_options",
     "stream_options must be an object, got an array"),
    ({"messages": USER, "stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage",
     "stream_options.include_usage must be a boolean, got a string"),
    ({"messages": USER, "stop": {"a": 1}}, "stop", "stop must be a string or an array of strings, got an object"),
    ({"messages": USER, "stop": ["a", 5]}, "stop[1]", "stop[1] must be a string, got an integer"),
    ({"messages": {"role": "user"}}, "messages", "messages must be an array of messages, got an object"),
    ({"messages": USER + ["hi"]}, "messages[1]", "messages[1] must be an object with role and content, got a string"),
    ({"messages": USER + [{"content": "x"}]}, "messages[1].role", "messages[1].role must be a string, got null"),
    ({"messages": USER + [{"role": "user", "content": 5}]}, "messages[1].content",
     "messages[1].content must be a string or an array of text parts, got an integer"),
    ({"messages": USER + [{"role": "user", "content": None}]}, "messages[1].content",
     "messages[1].content must be a string or an array of text parts, got null"),
    ({"messages": [{"role": "user", "content": ["a"]}]}, "messages[0].content[0]",
     "messages[0].content[0] must be a content part object, got a string"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, "messages[0].content[0].text",
     "messages[0].content[0].text must be a string, got an integer"),
    ({"messages": USER, "specdec": "fast"}, "specdec", "specdec must be an object, got a string"),
    ({"messages": USER, "specdec": {"mode": 1}}, "specdec.mode", "specdec.mode must be a string, got an integer"),
    ({"messages": USER, "specdec": {"draft_tokens": "4"}}, "specdec.draft_tokens",
     'specdec.draft_tokens must be an integer k >= 1 or "adaptive", got a string'),
    ({"messages": USER, "specdec": {"draft_tokens": None}}, "specdec.draft_tokens",
     'specdec.draft_tokens must be an integer k >= 1 or "adaptive", got null'),
    ({"messages": USER, "specdec": {"running_stats": 0}}, "specdec.running_stats",
     "specdec.running_stats must be a boolean, got an integer"),
    ({"messages": USER, "specdec": {"engine_seed": 1.0}}, "specdec.engine_seed",
     "specdec.engine_seed must be an integer, got a number"),
])
def test_a_wrong_type_is_422_with_its_place_and_a_clear_message(body, param, message):
    err = refusal(ChatCompletionRequest, body)
    assert (err["status"], err["code"], err["param"], err["message"]) == (422, "invalid_type", param, message)


@pytest.mark.parametrize("prompt", [5, {"text": "x"}, [1, "a"], [1, True], [[1, "x"]]])
def test_a_prompt_of_the_wrong_type(prompt):
    err = refusal(CompletionRequest, {"prompt": prompt})
    assert (err["status"], err["param"], err["code"]) == (422, "prompt", "invalid_type")


# -- missing and out of range: 400 ---------------------------------------------------------------
@pytest.mark.parametrize("model, body, param", [
    (ChatCompletionRequest, {}, "messages"),
    (ChatCompletionRequest, {"messages": None}, "messages"),
    (ChatCompletionRequest, {"messages": USER + [{"role": "user"}]}, "messages[1].content"),
    (CompletionRequest, {}, "prompt"),
    (CompletionRequest, {"prompt": None}, "prompt"),
])
def test_a_missing_field_is_400_missing_required_parameter(model, body, param):
    err = refusal(model, body)
    assert (err["status"], err["code"], err["param"]) == (400, "missing_required_parameter", param)
    assert err["message"] == f"{param} is missing"


@pytest.mark.parametrize("fields, param, message", [
    ({"max_tokens": 0}, "max_tokens", "max_tokens must be >= 1, got 0"),
    ({"max_completion_tokens": -1}, "max_completion_tokens", "max_completion_tokens must be >= 1, got -1"),
    ({"temperature": -0.5}, "temperature", "temperature must be >= 0 (0 = greedy), got -0.5"),
    ({"top_p": 1.5}, "top_p", "top_p must be in (0, 1] (1 = off), got 1.5"),
    ({"top_k": -2}, "top_k", "top_k must be >= 0 (0 = off), got -2"),
    ({"seed": 2**63}, "seed", f"seed must be in [0, 2**63), got {2**63}"),
    ({"stop": ["a", ""]}, "stop", "stop strings must not be empty"),
    ({"stop": ["s"] * 17}, "stop", "stop takes at most 16 strings, got 17"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "stream_options is only allowed with stream: true"),
    ({"specdec": {"mode": "fast"}}, "specdec.mode", "specdec.mode must be one of speculative, standard, got 'fast'"),
    ({"specdec": {"draft_tokens": 0}}, "specdec.draft_tokens",
     'specdec.draft_tokens must be >= 1 or "adaptive", got 0'),
    ({"specdec": {"engine_seed": -1}}, "specdec.engine_seed", "specdec.engine_seed must be in [0, 2**63), got -1"),
    ({"messages": []}, "messages", "messages is empty: give at least one message"),
])
def test_a_value_out_of_range_is_400_invalid_value(fields, param, message):
    err = chat(**fields)
    assert (err["status"], err["code"], err["param"], err["message"]) == (400, "invalid_value", param, message)


def test_the_extension_is_closed_and_its_fields_are_the_protocols():
    assert tuple(Extension.model_fields) == REQUEST_FIELDS
    err = chat(specdec={"mode": "standard", "colour": "red"})
    assert (err["status"], err["param"]) == (400, "specdec.colour")
    assert err["message"] == f"specdec.colour is not a field of the extension; it takes {', '.join(REQUEST_FIELDS)}"
    err = chat(specdec={"proposer": "tree"})
    assert err["param"] == "specdec.proposer" and "lookup+draft" in err["message"]


def test_prompts_out_of_range():
    for prompt, message in (("", "prompt is empty"), ([], "prompt is empty: give text or at least one token id"),
                            ([[]], "prompt is empty: give text or at least one token id"),
                            ([3, -2], "prompt: token ids are >= 0, got -2")):
        err = refusal(CompletionRequest, {"prompt": prompt})
        assert (err["status"], err["param"], err["message"]) == (400, "prompt", message)


# -- what passes, and what it becomes --------------------------------------------------------------
def test_fields_no_model_names_are_ignored_and_user_is_anything():
    req = parse(ChatCompletionRequest, {"messages": USER + [{"role": "assistant", "content": "x", "name": "bot"}],
                                        "user": 5, "metadata": {"a": 1}, "store": "yes", "prompt": 3,
                                        "stream": True, "stream_options": {"include_usage": True, "later": 1}})
    assert req.user == 5 and req.stream_options.include_usage
    assert [m.role for m in req.messages] == ["user", "assistant"]
    assert parse(CompletionRequest, {"prompt": "x", "messages": 5}).prompt == "x"


def test_null_is_absent_where_it_was_before():
    req = parse(ChatCompletionRequest, {"messages": USER, "model": None, "max_tokens": None, "temperature": None,
                                        "top_k": None, "seed": None, "stop": None, "stream": None,
                                        "stream_options": None, "specdec": {"mode": None, "reuse_cache": None}})
    assert req.temperature is None and req.specdec.mode is None and req.specdec.draft_tokens == "adaptive"
    o = chat_options({"messages": USER, "temperature": None, "specdec": None})
    assert o.sampling.temperature == 1.0 and o.mode == "speculative" and o.reuse_cache and o.draft_tokens == "adaptive"


def test_max_completion_tokens_wins_and_max_tokens_beside_it_is_not_read():
    assert chat_options({"messages": USER, "max_completion_tokens": 3, "max_tokens": "x"}).max_tokens == 3
    assert chat_options({"messages": USER, "max_completion_tokens": None, "max_tokens": 5}).max_tokens == 5
    assert chat(max_completion_tokens=None, max_tokens=0)["param"] == "max_tokens"


def test_a_checked_request_becomes_options():
    o = chat_options({"messages": [{"role": "developer", "content": "be brief"},
                                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]}],
                      "top_k": -1, "stop": "x", "specdec": {"draft_tokens": 3, "running_stats": True}})
    assert o.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"}]
    assert o.sampling.top_k == 0 and o.stops == ("x",) and o.draft_tokens == 3 and o.running_stats
    assert completion_options({"prompt": [[4, 5]]}).prompt == [4, 5]
    assert completion_options({"prompt": ["text"]}).prompt == "text"


def test_tokenize_takes_messages_or_a_prompt():
    t = tokenize_input({"messages": USER, "model": "m"})
    assert (t.model, t.messages, t.prompt) == ("m", [{"role": "user", "content": "hi"}], None)
    assert tokenize_input({"prompt": ""}).prompt == ""  # refused later: "the prompt makes no tokens"
    for body, status, param in (({"messages": None}, 400, "messages"), ({}, 400, "prompt"),
                                ({"prompt": [1]}, 422, "prompt"), ({"prompt": "x", "model": 5}, 422, "model"),
                                ({"messages": USER + [5]}, 422, "messages[1]")):
        with pytest.raises(APIError) as err:
            tokenize_input(body)
        assert (err.value.status, err.value.param) == (status, param)


# -- the error shape from pydantic's ValidationError ------------------------------------------------
def test_param_names_a_place_inside_the_body():
    assert param_of(("messages", 1, "content")) == "messages[1].content"
    assert param_of(("messages", 0, "content", 2, "text")) == "messages[0].content[2].text"
    assert param_of(("specdec", "draft_tokens")) == "specdec.draft_tokens"
    assert param_of(()) is None


def test_the_first_error_of_several_is_the_one_reported():
    with pytest.raises(ValidationError) as exc:
        ChatCompletionRequest.model_validate({"messages": USER, "n": 2, "seed": "x"}, strict=True)
    assert len(exc.value.errors()) == 2
    first = api_error(exc.value.errors()[0])
    assert first.param == "n" and first.status == 400
    assert chat(n=2, seed="x")["param"] == "n"


def test_pydantics_own_errors_keep_the_shape():
    """A check no helper of schema.py words (a future field's plain constraint) still gives
    the OpenAI shape: 422 for a type error, 400 otherwise, its param and pydantic's message."""
    err = api_error({"type": "greater_than", "loc": ("logprobs_count",), "msg": "Input should be greater than 0",
                     "input": 0, "ctx": {"gt": 0}})
    assert (err.status, err.param, err.code) == (400, "logprobs_count", "invalid_value")
    assert err.message == "logprobs_count: Input should be greater than 0"
    err = api_error({"type": "tuple_type", "loc": ("x", 0), "msg": "Input should be a valid tuple", "input": 1})
    assert (err.status, err.message) == (422, "x[0] must be a valid tuple, got an integer")


def test_a_field_is_one_line_in_a_model():
    """What future work does (logprobs, response_format...): one line, its checks and errors for free."""
    from pydantic import Field

    class WithLogprobs(ChatCompletionRequest):
        logprobs: bool | None = None
        top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
        mirostat: Annotated[Any, refused_unless(None, 0)] = None  # llama.cpp's: refused

    assert parse(WithLogprobs, {"messages": USER, "logprobs": True, "top_logprobs": 3}).top_logprobs == 3
    err = refusal(WithLogprobs, {"messages": USER, "logprobs": "yes"})
    assert (err["status"], err["param"]) == (422, "logprobs")
    err = refusal(WithLogprobs, {"messages": USER, "top_logprobs": 21})
    assert (err["status"], err["param"], err["code"]) == (400, "top_logprobs", "invalid_value")
    assert refusal(WithLogprobs, {"messages": USER, "mirostat": 2})["param"] == "mirostat"
