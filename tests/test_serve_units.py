"""`specdec serve`'s parts on hand-built cases (tier 1): an OpenAI body checked into settings
(wrong types 422, bad values 400, what does not apply refused), stop strings over token
boundaries, the line of turns on one engine, and the wire format's round trip."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

from specdec_core.events import Logprobs, Stats, TokenEvent, TokenKind, TokenLogprob
from specdec_core.serve.answer import StopText
from specdec_core.serve.errors import APIError
from specdec_core.grammar.spec import GrammarSpec
from specdec_core.serve.protocol import request_to_wire, stats_from_wire, stats_to_wire, token_from_wire, token_to_wire
from specdec_core.serve.queue import DecodeQueue, QueueFull
from specdec_core.serve.requests import chat_options, completion_options
from specdec_core.serve.runner import exposure_warning, is_loopback
from specdec_core.settings import DecodeSettings, SamplingParams, sample_seed

USER = [{"role": "user", "content": "hi"}]


def refused(parse, body) -> APIError:
    with pytest.raises(APIError) as err:
        parse(body)
    return err.value


# -- requests --------------------------------------------------------------------------------
def test_a_chat_request_becomes_the_engines_settings():
    o = chat_options({"model": "m", "messages": USER, "max_tokens": 7, "temperature": 0, "top_p": 0.9,
                      "top_k": 5, "seed": 3, "stop": "x", "stream": True,
                      "stream_options": {"include_usage": True},
                      "specdec": {"mode": "standard", "draft_tokens": 2, "proposer": "draft"}})
    s = o.settings(o.max_tokens, has_draft=True)
    assert (s.max_new_tokens, s.sampling.temperature, s.sampling.top_p, s.sampling.top_k) == (7, 0.0, 0.9, 5)
    # seed S is `specdec generate --seed S`, whose one sample runs with sample_seed(S, 0)
    assert s.seed == sample_seed(3, 0) and s.mode == "standard" and s.draft_tokens == 2 and s.proposer == "draft"
    assert o.stops == ("x",) and o.stream and o.include_usage and o.chat and o.reuse_cache
    # the engine's own seed, as a client engine holds it, passes as it is
    assert chat_options({"messages": USER, "seed": 3, "specdec": {"engine_seed": 11}}).settings(4, True).seed == 11


def test_openai_defaults_and_the_engines_where_openai_has_none():
    o = chat_options({"messages": USER})
    s = o.settings(5, has_draft=False)
    assert o.model is None and o.max_tokens is None and not o.stream and not o.include_usage
    assert s.sampling.temperature == 1.0 and s.sampling.top_p == 1.0 and s.draft_tokens == "adaptive"
    assert s.proposer == "prompt-lookup"  # no draft loaded: the default that needs none
    assert chat_options({"messages": USER}).settings(5, has_draft=True).proposer == "lookup+draft"
    assert o.seed != chat_options({"messages": USER}).seed  # no seed: a fresh one each time (reported back)


def test_message_content_in_parts_and_the_developer_role():
    o = chat_options({"messages": [{"role": "developer", "content": "be brief"},
                                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]}]})
    assert o.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ab"}]


def test_completion_prompts():
    assert completion_options({"prompt": "the cat"}).prompt == "the cat"
    assert completion_options({"prompt": [1, 2, 3]}).prompt == [1, 2, 3]
    assert completion_options({"prompt": [[4, 5]]}).prompt == [4, 5]
    assert completion_options({"prompt": ["x"]}).prompt == "x"
    assert not completion_options({"prompt": "x"}).chat
    assert refused(completion_options, {"prompt": ["a", "b"]}).status == 400  # one prompt per request
    assert refused(completion_options, {"prompt": [1, -2]}).status == 400
    assert refused(completion_options, {}).param == "prompt"
    assert refused(completion_options, {"prompt": "x", "echo": True}).param == "echo"


@pytest.mark.parametrize("body, param", [
    ({"messages": "hi"}, "messages"),
    ({"messages": USER, "max_tokens": "7"}, "max_tokens"),
    ({"messages": USER, "max_tokens": 7.5}, "max_tokens"),
    ({"messages": USER, "temperature": "hot"}, "temperature"),
    ({"messages": USER, "temperature": True}, "temperature"),
    ({"messages": USER, "seed": 1.5}, "seed"),
    ({"messages": USER, "stream": "yes"}, "stream"),
    ({"messages": USER, "stop": 5}, "stop"),
    ({"messages": USER, "model": 3}, "model"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": USER, "specdec": {"draft_tokens": "many"}}, "specdec.draft_tokens"),
    ({"messages": USER, "specdec": {"reuse_cache": "no"}}, "specdec.reuse_cache"),
    ({"messages": USER, "stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
])
def test_a_field_of_the_wrong_type_is_422_naming_it(body, param):
    err = refused(chat_options, body)
    assert err.status == 422 and err.param == param and err.code == "invalid_type"
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("body, param", [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER, "max_completion_tokens": -1}, "max_completion_tokens"),
    ({"messages": USER, "temperature": -1}, "temperature"),
    ({"messages": USER, "top_p": 0}, "top_p"),
    ({"messages": USER, "top_k": -5}, "top_k"),
    ({"messages": USER, "seed": -1}, "seed"),
    ({"messages": USER, "n": 2}, "n"),
    ({"messages": USER, "stop": ["a", ""]}, "stop"),
    ({"messages": USER, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": USER, "top_logprobs": 2}, "top_logprobs"),  # only with logprobs: true
    ({"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": USER, "presence_penalty": 2.5}, "presence_penalty"),
    ({"messages": USER, "frequency_penalty": -3}, "frequency_penalty"),
    ({"messages": USER, "repetition_penalty": 0}, "repetition_penalty"),
    ({"messages": USER, "min_p": 1.5}, "min_p"),
    ({"messages": USER, "logit_bias": {"cat": 1}}, "logit_bias"),
    ({"messages": USER, "logit_bias": {"5": 101}}, "logit_bias"),
    ({"messages": USER, "tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type"),
    ({"messages": USER, "response_format": {"type": "xml"}}, "response_format.type"),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0].type"),
    ({"messages": USER, "specdec": {"mode": "fast"}}, "specdec.mode"),
    ({"messages": USER, "specdec": {"proposer": "tree"}}, "specdec.proposer"),
    ({"messages": USER, "specdec": {"draft_tokens": 0}}, "specdec.draft_tokens"),
    ({"messages": USER, "specdec": {"colour": True}}, "specdec.colour"),
])
def test_a_value_out_of_range_or_not_served_is_400_naming_it(body, param):
    err = refused(chat_options, body)
    assert err.status == 400 and err.param == param, err.message


def test_neutral_values_of_what_is_not_served_pass():
    o = chat_options({"messages": USER, "n": 1, "logprobs": False, "presence_penalty": 0, "frequency_penalty": 0.0,
                      "tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "user": "me",
                      "metadata": {"a": "b"}, "max_completion_tokens": 3, "max_tokens": 9})
    assert o.max_tokens == 3  # max_completion_tokens, OpenAI's newer name, wins


# -- stop strings -------------------------------------------------------------------------------
def ev(i: int, text: str, kind=TokenKind.STANDARD) -> TokenEvent:
    return TokenEvent(i, text, kind, i, None, 0.0)


def texts(events) -> list[str]:
    return [e.text for e in events]


def test_a_stop_string_across_tokens_ends_the_text_before_it():
    stop = StopText(("END",))
    out, hit = stop.feed([ev(0, "ab"), ev(1, "cE")])
    assert texts(out) == ["ab"] and not hit  # "cE" may begin "END": held back, whole
    out, hit = stop.feed([ev(2, "N"), ev(3, "Dxy")])
    assert texts(out) == ["c"] and hit  # the token that holds the stop's start, cut there


def test_text_that_only_looked_like_a_stop_is_released():
    stop = StopText(("END",))
    assert texts(stop.feed([ev(0, "E")])[0]) == []
    out, hit = stop.feed([ev(1, "X")])
    assert texts(out) == ["E", "X"] and not hit
    assert texts(stop.feed([ev(2, "EN")])[0]) == [] and texts(stop.flush()) == ["EN"]


def test_the_first_of_several_stops_wins_and_no_stops_release_everything():
    out, hit = StopText(("z", "b")).feed([ev(0, "abz")])
    assert texts(out) == ["a"] and hit
    out, hit = StopText(()).feed([ev(0, "a"), ev(1, "")])
    assert texts(out) == ["a", ""] and not hit


# -- the line -----------------------------------------------------------------------------------
def test_turns_come_in_order_and_a_full_line_refuses_at_once():
    q = DecodeQueue(max_waiting=2)
    order = []
    first = q.join()
    assert q.wait(first)  # the engine is taken
    tickets = [q.join(), q.join()]
    with pytest.raises(QueueFull) as full:
        q.join()
    assert full.value.retry_after >= 1 and q.waiting == 2
    assert q.join(bounded=False) in q._line  # the app's chat always gets a place
    q.leave(q._line[-1])

    def take(i, t):
        assert q.wait(t)
        order.append(i)
        q.release()

    threads = [threading.Thread(target=take, args=(i, t)) for i, t in reversed(list(enumerate(tickets)))]
    for th in threads:
        th.start()
    time.sleep(0.2)
    assert order == [] and q.busy  # nobody passes the turn in use
    q.release()
    for th in threads:
        th.join(5)
    assert order == [0, 1] and not q.busy and q.turns == 3


def test_a_turn_is_reentrant_in_its_thread_and_cancel_leaves_the_line():
    q = DecodeQueue(4)
    assert q.wait(q.join())
    assert q.wait(q.join())  # a race's second lane, in the same thread
    q.release()
    assert q.busy
    cancel = threading.Event()
    got = []
    other = threading.Thread(target=lambda: got.append(q.wait(q.join(), cancel)))
    other.start()
    time.sleep(0.1)
    cancel.set()
    other.join(5)
    assert got == [False] and q.waiting == 0 and q.busy
    q.release()
    assert not q.busy


# -- the wire -----------------------------------------------------------------------------------
def test_tokens_and_stats_cross_the_wire_unchanged():
    e = TokenEvent(7, "x", TokenKind.BONUS, 3, 2, 0.25, 1.5, 2, "draft")
    assert token_from_wire(token_to_wire(e)) == e and "logprobs" not in token_to_wire(e)
    lp = Logprobs(TokenLogprob(7, "x", (120,), -0.5), (TokenLogprob(7, "x", (120,), -0.5),
                                                         TokenLogprob(9, "\ufffd", (226, 130), -2.25)))
    with_lp = TokenEvent(7, "x", TokenKind.BONUS, 3, 2, 0.25, 1.5, 2, "draft", lp)
    assert token_from_wire(json.loads(json.dumps(token_to_wire(with_lp)))) == with_lp
    forbidden = TokenEvent(1, "", TokenKind.STANDARD, 0, None, 0.0, None, 0, "", Logprobs(
        TokenLogprob(1, "a", (97,), -0.1), (TokenLogprob(2, "b", (98,), float("-inf")),)))
    assert json.loads(json.dumps(token_to_wire(forbidden), allow_nan=False))["logprobs"]["top"][0][3] == -9999.0
    assert token_to_wire(TokenEvent(1, "", TokenKind.STANDARD, 0, None, 0.0, float("inf")))["margin"] is None
    s = Stats(new_tokens=5, seconds=1.0, proposed_tokens=4, accepted_tokens=3, target_forward_passes=3,
              speculative_steps=2, speculative_step_tokens=4, per_position_proposed=[2, 2],
              per_position_accepted=[2, 1], steps_by_source={"draft": 2}, mode="speculative", proposer="draft")
    back = stats_from_wire(stats_to_wire(s))
    assert back == s and back.acceptance_rate == 0.75 and back.plain_step_share == pytest.approx(1 / 3)
    # an older server's names for three of them (draft_tokens, accepted_draft_tokens,
    # mean_accepted_per_step) read as today's; where both are sent, today's count
    wire = stats_to_wire(s)
    older = {{"proposed_tokens": "draft_tokens", "accepted_tokens": "accepted_draft_tokens",
              "tokens_per_speculative_step": "mean_accepted_per_step"}.get(k, k): v for k, v in wire.items()}
    assert "proposed_tokens" not in older and stats_from_wire(older) == s
    assert stats_from_wire({**wire, "draft_tokens": 99, "accepted_draft_tokens": 98}) == s


def test_loopback_and_the_warning():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    assert exposure_warning("127.0.0.1", None) == "" and exposure_warning("0.0.0.0", "k") == ""
    assert "without an API key" in exposure_warning("0.0.0.0", None)


def test_the_served_model_id_is_one_word():
    from specdec_core.serve.app import served_name

    assert served_name("Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)") == "qwen2.5-coder-1.5b-instruct-q4_k_m"
    assert served_name("target") == "target" and served_name("((  ))") == "model"


def test_cors_origins_on_the_command_line():
    from specdec_core.cli.args import UsageError
    from specdec_core.cli.dispatch import build_parser

    parse = build_parser().parse_args
    assert parse(["serve"]).cors_origins is None  # none by default: no CORS
    args = parse(["serve", "--cors-origin", "http://localhost:3000", "--cors-origin", "https://app.example"])
    assert args.cors_origins == ["http://localhost:3000", "https://app.example"]
    assert parse(["serve", "--cors-origin", "*"]).cors_origins == ["*"]
    for bad in ("http://localhost:3000/", "localhost:3000", "https://app.example/chat", ""):
        with pytest.raises(UsageError, match="--cors-origin must be an origin"):
            parse(["serve", "--cors-origin", bad])


@pytest.mark.parametrize("settings", [
    DecodeSettings(),
    DecodeSettings(max_new_tokens=7, draft_tokens="adaptive", seed=12345, mode="standard", logprobs=3),
    DecodeSettings(64, SamplingParams(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, presence_penalty=0.5,
                                      frequency_penalty=-0.25, repetition_penalty=1.1, logit_bias=((5, -2.0), (9, 1.5))),
                   draft_tokens=6, seed=2**40, proposer="prompt-lookup"),
    DecodeSettings(None, proposer="draft"),
])
def test_the_settings_wire_form_reads_back_as_the_same_settings(settings):
    # The client (remote/specdec.py) writes the request with protocol.request_to_wire, the server
    # reads it with requests.py: every field of DecodeSettings must come back as it went.
    body = request_to_wire("m", [1, 2, 3], settings, reuse_cache=True)
    opts = completion_options(json.loads(json.dumps(body)))
    assert opts.reuse_cache and opts.prompt == [1, 2, 3] and opts.max_tokens == settings.max_new_tokens
    back = opts.settings(settings.max_new_tokens, has_draft=True)
    assert back == settings
    names = {f.name for f in dataclasses.fields(DecodeSettings)} - {"grammar"}  # grammar: next test
    assert all(getattr(back, n) == getattr(settings, n) for n in names)


def test_a_json_schema_goes_as_response_format_and_other_grammars_are_refused():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = request_to_wire("m", [1], DecodeSettings(grammar=GrammarSpec.json_schema(schema)), reuse_cache=False)
    opts = completion_options(json.loads(json.dumps(body)))
    fmt = opts.response_format
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == schema
    with pytest.raises(ValueError, match="lark grammar cannot be sent"):
        request_to_wire("m", [1], DecodeSettings(grammar=GrammarSpec("lark", "start: /a/")), reuse_cache=False)
