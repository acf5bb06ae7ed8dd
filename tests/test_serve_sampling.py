"""`specdec serve` with what shapes the distribution (penalties, logit_bias, min_p), the target's
logprobs, fill in the middle (a completion's `suffix`, llama-server's `/infill`) and the cache
across requests -- through the official `openai` client and plain HTTP, on a tiny pair whose
tokenizer has Qwen2.5-Coder's FIM tokens (and one without them, which refuses)."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from specdec_core.fim import Infill
from specdec_core.settings import DecodeSettings, SamplingParams
from specdec_serve import in_process
from tiny_models import make_model, make_tokenizer, save_model, save_pair

FIM = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"]
USER = [{"role": "user", "content": "the cat sat on the mat"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The tiny pair on a tokenizer with FIM tokens (ids past the words)."""
    from specdec_core.open_engine import open_engine

    root = tmp_path_factory.mktemp("fim-pair")
    tok = make_tokenizer()
    tok.add_tokens(FIM, special_tokens=True)
    v = len(tok)
    save_model(root / "target", make_model(v, seed=0, hidden=32, layers=2), tok)
    save_model(root / "draft", make_model(v, seed=1, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32), tok)
    return open_engine(str(root / "target"), str(root / "draft"))


def ids_of(r) -> list[int]:
    return [t["id"] for t in r.model_extra["specdec"]["tokens"]]


def standard(engine, prompt, n, **sampling) -> list[int]:
    """What the engine alone decodes, standard mode, a fresh cache: the reference (`served`: in its
    turn, as the server's requests are)."""
    s = DecodeSettings(n, SamplingParams(**sampling), mode="standard")
    return engine.generate(list(prompt), s).run().token_ids


# -- the fields that shape the distribution ---------------------------------------------------------
SHAPES = [
    ({"frequency_penalty": 1.5}, {}),
    ({"presence_penalty": 2.0}, {}),
    ({"logit_bias": {"9": 5, "12": -100}}, {}),
    ({}, {"repetition_penalty": 2.0}),
    ({"frequency_penalty": 0.8, "presence_penalty": 0.5, "logit_bias": {"8": 3}},
     {"repetition_penalty": 1.3, "min_p": 0.2}),
]


@pytest.mark.parametrize("fields, extra", SHAPES)
def test_greedy_speculative_answers_equal_the_engines_standard_ones(client, served, engine, fields, extra):
    r = client.chat.completions.create(model="target", messages=USER, max_tokens=24, temperature=0,
                                       extra_body={**extra, "specdec": {"draft_tokens": 3}}, **fields)
    given = {**fields, **extra}
    bias = tuple(sorted((int(t), float(b)) for t, b in given.pop("logit_bias", {}).items()))
    want = standard(served, engine.encode_chat(USER), 24, logit_bias=bias, **given)
    assert ids_of(r) == want
    assert want != standard(served, engine.encode_chat(USER), 24)  # the field changed the answer
    settings = r.model_extra["specdec"]["settings"]
    assert settings["logit_bias"] == {str(t): b for t, b in bias}
    assert r.model_extra["specdec"]["stats"]["proposed_tokens"] > 0  # proposals were verified under it


def test_a_seeded_sample_with_penalties_is_the_engines(client, served, engine):
    sampling = dict(temperature=0.9, presence_penalty=1.0, frequency_penalty=0.5)
    r = client.chat.completions.create(model="target", messages=USER, max_tokens=20, seed=5, **sampling,
                                       extra_body={"min_p": 0.05, "specdec": {"draft_tokens": 2}})
    s = DecodeSettings(20, SamplingParams(min_p=0.05, **sampling), draft_tokens=2, seed=5).for_sample(0)
    assert ids_of(r) == served.generate(engine.encode_chat(USER), s).run().token_ids


# -- a specdec serve as the target: the client forwards them ---------------------------------------
@pytest.mark.parametrize("fields, extra", SHAPES)
def test_a_specdec_serve_target_decodes_with_the_same_shaping(server, served, engine, fields, extra):
    """The app and the CLI on `--target http://...` (remote/specdec.py): the settings' penalties,
    min_p and logit_bias reach the serving engine, whose greedy answer is the local one's."""
    from specdec_core.remote import connect

    given = {**fields, **extra}
    bias = tuple(sorted((int(t), float(b)) for t, b in given.pop("logit_bias", {}).items()))
    remote = connect(server.url)
    settings = DecodeSettings(24, SamplingParams(logit_bias=bias, **given), draft_tokens=3)
    gen = remote.generate(remote.encode_chat(USER), settings).run()
    assert gen.token_ids == standard(served, engine.encode_chat(USER), 24, logit_bias=bias, **given)
    echoed = gen.stats.server["settings"]
    assert echoed["logit_bias"] == {str(t): b for t, b in bias} and all(echoed[k] == v for k, v in given.items())


def test_what_a_specdec_serve_request_cannot_carry_is_refused_before_sending(server):
    from specdec_core.grammar import GrammarSpec
    from specdec_core.remote import connect
    from specdec_core.remote.errors import ServerError

    remote = connect(server.url)
    prompt = remote.encode_chat(USER)
    with pytest.raises(ServerError, match="lark grammar"):
        remote.generate(prompt, DecodeSettings(8, grammar=GrammarSpec.lark('start: "a"')))


def test_a_server_target_says_what_it_cannot_know_here(server):
    from specdec_core.contract import EngineError
    from specdec_core.remote import connect

    remote = connect(server.url)
    assert remote.token_id("<|fim_prefix|>") is None and remote.end_token_ids == frozenset()
    assert remote.encode_tool_chat(USER, None) == remote.encode_chat(USER)
    with pytest.raises(EngineError, match="shows tools to its model itself"):
        remote.encode_tool_chat(USER, [{"type": "function", "function": {"name": "f"}}])


def test_a_specdec_serve_target_hands_back_the_targets_logprobs(server, served, engine):
    from specdec_core.remote import connect

    remote = connect(server.url)
    settings = DecodeSettings(10, logprobs=2, draft_tokens=2)
    got = remote.generate(remote.encode_chat(USER), settings).run()
    local = served.generate(engine.encode_chat(USER), settings.replace(mode="standard")).run()
    assert got.token_ids == local.token_ids
    for a, b in zip(got.events, local.events):
        assert a.logprobs.chosen.logprob == pytest.approx(b.logprobs.chosen.logprob, abs=1e-4)
        assert [t.token_id for t in a.logprobs.top] == [t.token_id for t in b.logprobs.top]


# -- logprobs -------------------------------------------------------------------------------------
@torch.inference_mode()
def target_logprobs(engine, prompt, tokens) -> list[torch.Tensor]:
    """The target's log-softmax before each token, from whole-sequence passes (no cache)."""
    model = engine.target.model
    return [torch.log_softmax(model(torch.tensor([prompt + tokens[:j]])).logits[0, -1].float(), -1)
            for j in range(len(tokens))]


def test_chat_logprobs_are_the_targets_streamed_or_not(client, engine):
    r = client.chat.completions.create(model="target", messages=USER, max_tokens=12, temperature=0, logprobs=True,
                                       top_logprobs=3)
    tokens = ids_of(r)
    rows = target_logprobs(engine, engine.encode_chat(USER), tokens)
    content = r.choices[0].logprobs.content
    assert len(content) == len(tokens)
    for entry, tok, row in zip(content, tokens, rows):
        assert entry.logprob == pytest.approx(float(row[tok]), abs=1e-4)
        top = torch.topk(row, 3)
        assert [t.logprob for t in entry.top_logprobs] == pytest.approx(top.values.tolist(), abs=1e-4)
        assert entry.top_logprobs[0].token == entry.token  # greedy: the chosen token is the likeliest
        assert bytes(entry.bytes).decode() == entry.token
    special = {engine.tokenizer.convert_tokens_to_ids(t) for t in FIM}  # text the answer leaves out
    assert "".join(e.token for e, t in zip(content, tokens) if t not in special) == r.choices[0].message.content
    streamed = client.chat.completions.create(model="target", messages=USER, max_tokens=12, temperature=0,
                                              logprobs=True, top_logprobs=3, stream=True)
    parts = [e for c in streamed if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in parts] == [e.token for e in content]
    # the second request starts from the first's cached prefix: the same values up to rounding
    assert [e.logprob for e in parts] == pytest.approx([e.logprob for e in content], abs=1e-4)
    plain = client.chat.completions.create(model="target", messages=USER, max_tokens=4, temperature=0)
    assert plain.choices[0].logprobs is None  # not asked for: not computed


def test_completion_logprobs_in_the_legacy_shape(client, engine):
    r = client.completions.create(model="target", prompt="the cat", max_tokens=8, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    rows = target_logprobs(engine, engine.encode_text("the cat"), ids_of(r))
    assert lp.token_logprobs == pytest.approx([float(row[t]) for row, t in zip(rows, ids_of(r))], abs=1e-4)
    assert all(len(d) in (2, 3) and d[tok] == lp for d, tok, lp in zip(lp.top_logprobs, lp.tokens, lp.token_logprobs))
    text = r.choices[0].text
    assert [text[o: o + len(t)] for o, t in zip(lp.text_offset, lp.tokens)] == lp.tokens


# -- refusals -------------------------------------------------------------------------------------
def error_of(r: httpx.Response, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def test_bad_values_are_400s_naming_the_field(server, engine):
    chat = server.url + "/v1/chat/completions"
    for body, param in (({"logit_bias": {str(engine.vocab_size): 1}}, "logit_bias"),
                        ({"logit_bias": {"x": 1}}, "logit_bias"), ({"logit_bias": {"5": -101}}, "logit_bias"),
                        ({"top_logprobs": 2}, "top_logprobs"), ({"presence_penalty": 2.1}, "presence_penalty"),
                        ({"min_p": -0.1}, "min_p"), ({"repetition_penalty": -1}, "repetition_penalty")):
        assert error_of(httpx.post(chat, json={"messages": USER, **body}))["param"] == param
    assert error_of(httpx.post(chat, json={"messages": USER, "frequency_penalty": "high"}), 422)["param"] == \
        "frequency_penalty"
    completions, infill = server.url + "/v1/completions", server.url + "/infill"
    assert error_of(httpx.post(completions, json={"prompt": [1, 5], "suffix": "x"}))["param"] == "suffix"
    assert error_of(httpx.post(completions, json={"prompt": "x", "logprobs": 21}))["param"] == "logprobs"
    assert error_of(httpx.post(infill, json={"input_prefix": "a", "n_predict": 0}))["param"] == "n_predict"
    assert error_of(httpx.post(infill, json={"input_prefix": "a", "input_extra": ["x"]}), 422)["param"] == \
        "input_extra[0]"
    assert httpx.get(server.url + "/health").json()["waiting"] == 0


# -- fill in the middle -----------------------------------------------------------------------------
def fim_ids(engine, *pieces) -> list[int]:
    tok = engine.tokenizer
    out = []
    for p in pieces:
        out += [tok.convert_tokens_to_ids(p)] if p in FIM else tok(p, add_special_tokens=False)["input_ids"]
    return out


def test_a_completions_suffix_fills_the_middle(client, served, engine):
    r = client.completions.create(model="target", prompt="the cat", suffix=" on the mat", max_tokens=10,
                                  temperature=0)
    prompt = fim_ids(engine, "<|fim_prefix|>", "the cat", "<|fim_suffix|>", " on the mat", "<|fim_middle|>")
    assert r.usage.prompt_tokens == len(prompt)
    assert ids_of(r) == standard(served, prompt, 10)
    # a FIM token written in the code is text, not a marker
    inside = client.completions.create(model="target", prompt="a <|fim_suffix|>", suffix="b", max_tokens=1)
    assert inside.usage.prompt_tokens == len(engine.encode_infill(Infill("a <|fim_suffix|>", "b"))) > 6


def test_infill_as_llama_server_answers_it(server, served, engine):
    body = {"input_prefix": "the cat", "input_suffix": " on the mat", "prompt": " sat",
            "input_extra": [{"filename": "a.txt", "text": "it is a hat"}], "n_predict": 8, "temperature": 0}
    prompt = fim_ids(engine, "<|repo_name|>", "myproject\n", "<|file_sep|>", "a.txt\n", "it is a hat",
                     "<|file_sep|>", "filename\n", "<|fim_prefix|>", "the cat", " sat", "<|fim_suffix|>",
                     " on the mat", "<|fim_middle|>")
    want = standard(served, prompt, 8)
    r = httpx.post(server.url + "/infill", json=body, timeout=60).json()
    assert r["tokens"] == want and r["stop"] is True and r["tokens_evaluated"] == len(prompt)
    assert r["content"] == engine.tokenizer.decode(want, skip_special_tokens=True) and r["tokens_predicted"] == len(want)
    assert r["stop_type"] in ("eos", "limit") and set(r["timings"]) >= {"prompt_n", "predicted_n", "predicted_ms"}
    with httpx.stream("POST", server.url + "/infill", json={**body, "stream": True}, timeout=60) as s:
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    assert all(not e["stop"] for e in events[:-1]) and events[-1]["stop"] is True
    assert [t for e in events[:-1] for t in e["tokens"]] == want  # and no [DONE]: llama-server's streams have none
    assert "".join(e["content"] for e in events) == r["content"]


def test_a_target_without_fim_tokens_refuses_with_a_400(tmp_path):
    from specdec_core.open_engine import open_engine

    target, draft = save_pair(tmp_path)
    for srv in in_process(open_engine(str(target), str(draft))):
        err = error_of(httpx.post(srv.url + "/v1/completions", json={"prompt": "the cat", "suffix": "x"}))
        assert (err["param"], err["code"]) == ("suffix", "unsupported_parameter") and "fill-in-the-middle" in \
            err["message"]
        err = error_of(httpx.post(srv.url + "/infill", json={"input_prefix": "the cat"}))
        assert err["param"] == "input_prefix" and "<|fim_prefix|>" in err["message"]


# -- the cache across requests -------------------------------------------------------------------
def test_the_next_request_reuses_the_longest_common_prefix(client, engine):
    """An editor resends the file: the second request's prompt tokens come from the cache up to
    where it differs, and the answer is the one a fresh prefill gives."""
    code = "the cat sat on the mat and the hat is on the cat"
    first = client.completions.create(model="target", prompt=code, max_tokens=6, temperature=0)
    again = client.completions.create(model="target", prompt=code, max_tokens=6, temperature=0)
    n = first.usage.prompt_tokens
    assert again.usage.prompt_tokens_details.cached_tokens == n - 1  # all but the token fed for the next one
    assert ids_of(again) == ids_of(first)
    edited = code.replace("hat is", "cat is")
    ids, old = engine.encode_text(edited), engine.encode_text(code)
    shared = next(i for i, (a, b) in enumerate(zip(ids, old)) if a != b)
    r = client.completions.create(model="target", prompt=edited, max_tokens=6, temperature=0)
    assert r.usage.prompt_tokens_details.cached_tokens == shared > 0
    fresh = client.completions.create(model="target", prompt=edited, max_tokens=6, temperature=0,
                                      extra_body={"specdec": {"reuse_cache": False}})
    assert ids_of(r) == ids_of(fresh) and fresh.usage.prompt_tokens_details.cached_tokens == 0
    # fill in the middle too: the same prefix and a longer suffix keep the prefix's entries
    a = client.completions.create(model="target", prompt=code, suffix=" yes", max_tokens=3, temperature=0)
    b = client.completions.create(model="target", prompt=code, suffix=" yes no", max_tokens=3, temperature=0)
    assert b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 2


# -- what a request becomes (no server) ---------------------------------------------------------
def refused(read, body):
    from specdec_core.serve.errors import APIError

    with pytest.raises(APIError) as err:
        read(body)
    return err.value


def test_requests_become_the_engines_settings():
    from specdec_core.serve.requests import chat_options, completion_options, infill_options

    o = chat_options({"messages": USER, "presence_penalty": 0.5, "frequency_penalty": -1, "repetition_penalty": 1.2,
                      "min_p": 0.1, "logit_bias": {"12": 3, "5": -100}, "logprobs": True, "top_logprobs": 4})
    assert o.sampling == SamplingParams(temperature=1.0, min_p=0.1, presence_penalty=0.5, frequency_penalty=-1.0,
                                        repetition_penalty=1.2, logit_bias=((5, -100.0), (12, 3.0)))
    assert o.logprobs == 4 and o.settings(16, True).logprobs == 4
    assert chat_options({"messages": USER, "logprobs": True}).logprobs == 0  # the token's own, no alternatives
    assert chat_options({"messages": USER, "logprobs": False, "top_logprobs": None}).logprobs is None
    c = completion_options({"prompt": "the cat", "suffix": " mat", "logprobs": 2})
    assert c.infill == Infill("the cat", " mat") and c.logprobs == 2 and c.prompt_param == "prompt"
    i = infill_options({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "x.py", "text": "y"}],
                        "n_predict": 7, "top_k": 40})
    assert i.infill == Infill("a", "b", (("x.py", "y"),), "", repo_level=True) and i.max_tokens == 7
    assert i.prompt_param == "input_prefix" and i.sampling.top_k == 40
    assert infill_options({"input_prefix": "a", "n_predict": -1}).max_tokens is None  # up to the context
    # llama.vim's request: its sampler chain is not read, its neutral llama.cpp values pass
    infill_options({"input_prefix": "a", "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True,
                    "repeat_penalty": 1.0, "n_probs": 0, "t_max_predict_ms": 500})
    err = refused(infill_options, {"input_prefix": "a", "repeat_penalty": 1.1})
    assert (err.status, err.param, err.code) == (400, "repeat_penalty", "unsupported_parameter")
    assert infill_options({"input_prefix": "a", "n_predict": 5, "max_tokens": 3}).max_tokens == 3
