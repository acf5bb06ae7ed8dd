"""`specdec serve` on the tests' tiny pair, through the official `openai` client (streamed and
not, chat and completions) and plain HTTP (httpx) for the errors: the same answers as
`specdec generate`, every token's kind and source and the engine's Stats under "specdec", a
client that goes away stopping the engine within one step, the line and its 429, the key, and
a bounded load test."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from specdec_core.cli import main
from specdec_core.serve.queue import DecodeQueue
from specdec_serve import in_process
from tiny_models import save_pair

KINDS = {"standard", "accepted", "corrected", "bonus"}
# what an older `specdec serve` called three of the figures
OLD_NAMES = {"proposed_tokens": "draft_tokens", "accepted_tokens": "accepted_draft_tokens",
             "tokens_per_speculative_step": "mean_accepted_per_step"}
STATS_KEYS = ("acceptance_rate", "tokens_per_speculative_step", "tokens_per_second", "decode_tokens_per_second",
              "plain_step_share", "plain_steps", "proposed_tokens", "accepted_tokens", "new_tokens", "stop_reason")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_pair(tmp_path_factory.mktemp("serve-pair"))


@pytest.fixture(scope="module")
def engine(pair):
    from specdec_core.open_engine import open_engine

    return open_engine(str(pair[0]), str(pair[1]))


def generate(capsys, pair, *args) -> dict:
    """`specdec generate --json` on the same pair: what the server must answer."""
    assert main(["generate", "--target", str(pair[0]), "--draft", str(pair[1]), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out.splitlines()[0])


def ext_of(obj) -> dict:
    return obj.model_extra["specdec"]


def check_tokens(tokens: list[dict], text: str) -> None:
    assert "".join(t["text"] for t in tokens) == text
    for t in tokens:
        assert t["kind"] in KINDS and t["source"] in ("", "draft", "lookup")
        assert (t["kind"] == "standard") == (t["source"] == "")  # a plain step proposed nothing


# -- the same answers as `specdec generate` ------------------------------------------------------
def test_greedy_chat_is_specdec_generates_answer(client, pair, capsys):
    want = generate(capsys, pair, "--prompt", "the cat sat on the mat", "--max-new-tokens", "24")
    r = client.chat.completions.create(model="target", messages=[{"role": "user", "content": "the cat sat on the mat"}],
                                       max_tokens=24, temperature=0)
    ext = ext_of(r)
    assert r.choices[0].message.content == want["text"] and [t["id"] for t in ext["tokens"]] == want["token_ids"]
    assert r.object == "chat.completion" and r.model == "target" and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == ("length" if want["stats"]["stop_reason"] == "max_new_tokens" else "stop")
    check_tokens(ext["tokens"], want["text"])
    stats = ext["stats"]
    assert all(k in stats for k in STATS_KEYS) and stats["new_tokens"] == len(want["token_ids"])
    assert stats["plain_steps"] == sum(t["kind"] == "standard" for t in ext["tokens"])
    assert r.usage.completion_tokens == len(want["token_ids"]) and r.usage.total_tokens == r.usage.prompt_tokens + 24
    assert ext["settings"]["seed"] is not None and ext["queue_seconds"] >= 0


def test_a_streamed_chat_carries_each_steps_tokens_and_ends_with_the_stats(client, pair, capsys):
    want = generate(capsys, pair, "--prompt", "is it done", "--max-new-tokens", "20", "--draft-tokens", "3")
    stream = client.chat.completions.create(
        model="target", messages=[{"role": "user", "content": "is it done"}], max_tokens=20, temperature=0,
        stream=True, stream_options={"include_usage": True}, extra_body={"specdec": {"draft_tokens": 3}})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(ext_of(c)["tokens"] is not None for c in chunks)  # every chunk carries the extension
    text, tokens, finals = "", [], []
    for c in chunks[1:-1]:
        piece = c.choices[0].delta.content or ""
        ext = ext_of(c)
        check_tokens(ext["tokens"], piece)
        # a chunk is one engine step (or the end): its tokens after the first of a step are the step's
        assert len({t["step"] for t in ext["tokens"]}) <= 1
        text += piece
        tokens += ext["tokens"]
        if c.choices[0].finish_reason:
            finals.append(ext)
    assert text == want["text"] and [t["id"] for t in tokens] == want["token_ids"]
    # greedy with a fixed k: every step the same as the CLI's, so every colour too
    assert [t["kind"] for t in tokens] == want["kinds"]
    assert len(finals) == 1 and all(k in finals[0]["stats"] for k in STATS_KEYS)
    assert not set(OLD_NAMES.values()) & set(finals[0]["stats"])  # today's names only
    assert finals[0]["stats"]["accepted_tokens"] == want["stats"]["accepted_tokens"]
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == len(want["token_ids"])


def test_a_seeded_sample_is_specdec_generates_sample(client, pair, capsys):
    """Sampled, with a fixed k (adaptive k follows measured time): the same draws exactly."""
    want = generate(capsys, pair, "--prompt", "the hat", "--max-new-tokens", "16", "--temperature", "1.1",
                    "--top-k", "20", "--top-p", "0.95", "--seed", "9", "--draft-tokens", "2")
    r = client.chat.completions.create(model="target", messages=[{"role": "user", "content": "the hat"}],
                                       max_tokens=16, temperature=1.1, top_p=0.95, seed=9,
                                       extra_body={"top_k": 20, "specdec": {"draft_tokens": 2}})
    ext = ext_of(r)
    assert [t["id"] for t in ext["tokens"]] == want["token_ids"] and [t["kind"] for t in ext["tokens"]] == want["kinds"]
    assert r.choices[0].message.content == want["text"] and ext["settings"]["seed"] == 9


def test_completions_take_token_ids_and_raw_text(client, pair, capsys, engine):
    want = generate(capsys, pair, "--prompt-ids", "1,5,29,7", "--max-new-tokens", "12")
    r = client.completions.create(model="target", prompt=[1, 5, 29, 7], max_tokens=12, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text == want["text"]
    assert [t["id"] for t in ext_of(r)["tokens"]] == want["token_ids"] and r.usage.prompt_tokens == 4
    streamed = client.completions.create(model="target", prompt=[1, 5, 29, 7], max_tokens=12, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == want["text"]
    # raw text: the tokenizer alone, no chat template (OpenAI's completions)
    text = client.completions.create(model="target", prompt="the cat", max_tokens=6, temperature=0)
    assert text.usage.prompt_tokens == len(engine.encode_text("the cat")) < len(engine.encode_prompt("the cat"))


def test_standard_mode_and_the_draft_length_are_the_requests_to_choose(client):
    msg = [{"role": "user", "content": "the cat sat"}]
    std = client.chat.completions.create(model="target", messages=msg, max_tokens=16, temperature=0,
                                         extra_body={"specdec": {"mode": "standard"}})
    spec = client.chat.completions.create(model="target", messages=msg, max_tokens=16, temperature=0,
                                          extra_body={"specdec": {"draft_tokens": 4, "proposer": "draft"}})
    s, p = ext_of(std), ext_of(spec)
    assert {t["kind"] for t in s["tokens"]} == {"standard"} and s["stats"]["mode"] == "standard"
    assert s["stats"]["plain_step_share"] == 1.0 and std.choices[0].message.content == spec.choices[0].message.content
    assert p["stats"]["mode"] == "speculative" and p["stats"]["proposer"] == "draft"
    assert set(p["stats"]["draft_lengths"]) <= {1, 2, 3, 4} and 4 in p["stats"]["draft_lengths"]
    assert {t["source"] for t in p["tokens"] if t["kind"] != "standard"} == {"draft"}


def test_a_stop_string_ends_the_text_before_it(client):
    msg = [{"role": "user", "content": "the cat sat"}]
    full = client.chat.completions.create(model="target", messages=msg, max_tokens=24, temperature=0)
    text = full.choices[0].message.content
    stop = text[5:8]
    r = client.chat.completions.create(model="target", messages=msg, max_tokens=24, temperature=0, stop=[stop])
    cut = r.choices[0].message.content
    assert cut == text[: text.index(stop)] and r.choices[0].finish_reason == "stop"
    ext = ext_of(r)
    assert "".join(t["text"] for t in ext["tokens"]) == cut and ext["stats"]["stop_reason"] == "stop_word"
    assert r.usage.completion_tokens == len(ext["tokens"])
    streamed = client.chat.completions.create(model="target", messages=msg, max_tokens=24, temperature=0, stop=stop,
                                              stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == cut


def test_models_health_and_tokenize(server, client, engine):
    models = client.models.list().data
    assert [m.id for m in models] == ["target"] and models[0].owned_by == "specdec"
    card = models[0].model_extra
    assert card["max_model_len"] == engine.context_length and card["specdec"]["draft"]["name"] == "draft"
    assert client.models.retrieve("target").id == "target"
    health = httpx.get(server.url + "/health").json()
    assert health["status"] == "ok" and health["model"] == "target" and health["busy"] is False
    msgs = [{"role": "user", "content": "the cat"}]
    tok = httpx.post(server.url + "/tokenize", json={"messages": msgs}).json()
    assert tok["tokens"] == engine.encode_chat(msgs) and tok["count"] == len(tok["tokens"])


# -- an assistant prefill: the answer continues the last message ---------------------------------
def test_a_last_assistant_message_is_continued_not_closed(server, client, engine, monkeypatch):
    msgs = [{"role": "user", "content": "count to five"}, {"role": "assistant", "content": "1, 2, 3,"}]
    rendered = engine.tokenizer.apply_chat_template(msgs, continue_final_message=True, add_generation_prompt=False,
                                                    tokenize=False)
    assert rendered.endswith("<|im_start|>assistant\n1, 2, 3,")  # the turn left open: no <|im_end|>, no new turn
    want = list(engine.tokenizer.apply_chat_template(msgs, continue_final_message=True, add_generation_prompt=False,
                                                     tokenize=True)["input_ids"])
    assert engine.encode_chat(msgs, continue_final=True) == want and engine.encode_chat(msgs) != want
    prompts = []
    real = engine.generate

    def spy(prompt, *args, **kwargs):
        prompts.append(list(prompt))
        return real(prompt, *args, **kwargs)

    monkeypatch.setattr(engine, "generate", spy)
    r = client.chat.completions.create(model="target", messages=msgs, max_tokens=12, temperature=0)
    assert prompts == [want] and r.usage.prompt_tokens == len(want)
    # the content is the continuation alone: what the same ids answer as a raw prompt
    raw = client.completions.create(model="target", prompt=want, max_tokens=12, temperature=0)
    assert r.choices[0].message.content == raw.choices[0].text and prompts[-1] == want
    streamed = client.chat.completions.create(model="target", messages=msgs, max_tokens=12, temperature=0,
                                              stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == raw.choices[0].text
    assert prompts[-1] == want
    # /tokenize gives what the chat endpoint feeds the model; a chat ending with the user's is unchanged
    assert httpx.post(server.url + "/tokenize", json={"messages": msgs}).json()["tokens"] == want
    client.chat.completions.create(model="target", messages=msgs[:1], max_tokens=2, temperature=0)
    assert prompts[-1] == engine.encode_chat(msgs[:1])
    # a specdec serve as a server target continues it too (its /tokenize), asked or not
    from specdec_core.contract import EngineError
    from specdec_core.remote import connect

    remote = connect(server.url)
    assert remote.encode_chat(msgs, continue_final=True) == want
    with pytest.raises(EngineError, match="last message is not the assistant's"):
        remote.encode_chat(msgs[:1], continue_final=True)


def test_a_server_target_reads_an_older_servers_figures_under_their_new_names(server, served, engine, monkeypatch):
    """The client (remote/specdec.py) against today's server and against one that sends the
    figures under their older names (draft_tokens, accepted_draft_tokens, mean_accepted_per_step,
    as the previous release did): the same Stats, the engine's own."""
    from specdec_core.remote import connect
    from specdec_core.serve import responses
    from specdec_core.settings import DecodeSettings

    msgs = [{"role": "user", "content": "the cat sat"}]
    settings = DecodeSettings(20, draft_tokens=3)
    want = served.generate(engine.encode_chat(msgs), settings).run().stats
    remote = connect(server.url)
    today = remote.generate(remote.encode_chat(msgs), settings).run().stats
    older_wire = lambda st: {OLD_NAMES.get(k, k): v for k, v in st.to_dict().items()}  # noqa: E731
    monkeypatch.setattr(responses, "stats_to_wire", older_wire)
    older = remote.generate(remote.encode_chat(msgs), settings).run().stats
    figures = lambda st: (st.proposed_tokens, st.accepted_tokens, st.acceptance_rate, st.tokens_per_speculative_step,
                          st.speculative_steps, st.per_position_accepted)
    assert want.proposed_tokens > 0 and figures(today) == figures(older) == figures(want)
    assert older.server["figures"] == "the serving engine's own Stats"


# -- CORS, for a browser client ---------------------------------------------------------------
ORIGIN = "http://localhost:3000"


def preflight(url: str, origin: str, method: str = "POST") -> httpx.Response:
    return httpx.options(url, headers={"Origin": origin, "Access-Control-Request-Method": method,
                                       "Access-Control-Request-Headers": "authorization, content-type"})


def test_cors_for_the_listed_origins_only(engine):
    user = [{"role": "user", "content": "the cat"}]
    for srv in in_process(engine, cors_origins=[ORIGIN, "https://app.example"], api_key="k"):
        chat = srv.url + "/v1/chat/completions"
        ok = preflight(chat, ORIGIN)
        assert ok.status_code in (200, 204) and ok.headers["access-control-allow-origin"] == ORIGIN
        assert "POST" in ok.headers["access-control-allow-methods"]
        assert "authorization" in ok.headers["access-control-allow-headers"].lower()
        assert preflight(srv.url + "/v1/models", "https://app.example", "GET").headers[
            "access-control-allow-origin"] == "https://app.example"
        refused = preflight(chat, "http://evil.example")
        assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
        auth = {"Authorization": "Bearer k", "Origin": ORIGIN}
        body = {"messages": user, "max_tokens": 3, "temperature": 0}
        whole = httpx.post(chat, json=body, headers=auth)
        assert whole.status_code == 200 and whole.headers["access-control-allow-origin"] == ORIGIN
        with httpx.stream("POST", chat, json={**body, "stream": True}, headers=auth) as streamed:
            assert streamed.headers["access-control-allow-origin"] == ORIGIN
            assert "[DONE]" in "".join(streamed.iter_text())
        # an error is readable by the page too (its key is wrong, its prompt too long ...)
        assert httpx.post(chat, json=body, headers={"Origin": ORIGIN}).headers[
            "access-control-allow-origin"] == ORIGIN
        other = httpx.post(chat, json=body, headers={**auth, "Origin": "http://evil.example"})
        assert other.status_code == 200 and not any(h.startswith("access-control-") for h in other.headers)


def test_no_cors_without_the_flag(server):
    chat = server.url + "/v1/chat/completions"
    assert preflight(chat, ORIGIN).status_code == 405  # as before: no OPTIONS route
    r = httpx.post(chat, json={"messages": [{"role": "user", "content": "the cat"}], "max_tokens": 2},
                   headers={"Origin": ORIGIN})
    assert r.status_code == 200 and not any(h.startswith("access-control-") for h in r.headers)
    assert "origin" not in r.headers.get("vary", "").lower()


# -- errors, in the OpenAI shape ------------------------------------------------------------------
def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


def test_every_refusal_has_its_status_and_the_openai_shape(server, engine, monkeypatch):
    url = server.url
    chat = url + "/v1/chat/completions"
    user = [{"role": "user", "content": "the cat"}]
    assert error_of(httpx.post(chat, content=b"{not json", headers={"content-type": "application/json"}),
                    400)["code"] == "invalid_json"
    assert error_of(httpx.post(chat, json=[1, 2]), 400)["code"] == "invalid_json"
    assert error_of(httpx.post(chat, json={"messages": user, "n": 3}), 400)["param"] == "n"
    assert error_of(httpx.post(chat, json={"model": "gpt-4o", "messages": user}), 404)["code"] == "model_not_found"
    assert error_of(httpx.get(url + "/v1/models/gpt-4o"), 404)["param"] == "model"
    assert error_of(httpx.get(url + "/v2/nothing"), 404)["code"] == "not_found"
    assert error_of(httpx.get(chat), 405)["code"] == "method_not_allowed"
    assert error_of(httpx.post(chat, json={"messages": user, "max_tokens": "many"}), 422)["param"] == "max_tokens"
    assert error_of(httpx.post(chat, json={"messages": [{"role": "user"}]}), 400)["param"] == "messages[0].content"
    # a prompt over the context: 400 context_length_exceeded, as OpenAI, vLLM and llama-server answer it
    context = engine.context_length
    over = error_of(httpx.post(url + "/v1/completions", json={"prompt": [5] * (context + 1), "max_tokens": 4}), 400)
    assert over["param"] == "prompt" and over["code"] == "context_length_exceeded" and str(context) in over["message"]
    assert over["type"] == "invalid_request_error"
    long_chat = [{"role": "user", "content": " the cat" * context}]
    err = error_of(httpx.post(chat, json={"messages": long_chat, "max_tokens": 4}), 400)
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", "messages", "context_length_exceeded")
    err = error_of(httpx.post(chat, json={"messages": long_chat}), 400)  # no max_tokens: no room left for one
    assert (err["param"], err["code"]) == ("messages", "context_length_exceeded")
    budget = error_of(httpx.post(chat, json={"messages": user, "max_tokens": context}), 400)
    assert budget["param"] == "max_tokens" and budget["code"] == "context_length_exceeded"
    assert "lower max_tokens" in budget["message"]
    with pytest.raises(openai.BadRequestError) as too_long:  # what the official client raises from it
        openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0).chat.completions.create(
            model="target", messages=long_chat, max_tokens=4)
    assert too_long.value.code == "context_length_exceeded" and too_long.value.param == "messages"
    assert error_of(httpx.post(url + "/v1/completions", json={"prompt": [10**6]}), 400)["param"] == "prompt"
    from specdec_core.serve import app as serve_app

    monkeypatch.setattr(serve_app, "MAX_BODY_BYTES", 1000)  # a body over the limit, small enough to send
    assert error_of(httpx.post(chat, json={"messages": [{"role": "user", "content": "x" * 2000}]}),
                    413)["code"] == "request_too_large"
    # the official client raises its own classes from them
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="gpt-4o", messages=user)
    with pytest.raises(openai.UnprocessableEntityError):
        c.chat.completions.create(model="target", messages=user, temperature="hot")
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="target", messages=user, extra_body={"specdec": {"mode": "fast"}})
    assert httpx.get(url + "/health").json()["waiting"] == 0  # nothing refused stayed in the line


def test_a_proposer_that_needs_a_draft_on_a_pair_without_one(engine):
    from specdec_core.engine import Engine

    alone = Engine(engine.target, None)
    for srv in in_process(alone):
        chat = srv.url + "/v1/chat/completions"
        user = [{"role": "user", "content": "the cat"}]
        err = error_of(httpx.post(chat, json={"messages": user, "specdec": {"proposer": "draft"}}), 400)
        assert err["param"] == "specdec.proposer" and "prompt-lookup" in err["message"]
        r = httpx.post(chat, json={"messages": user, "max_tokens": 6, "temperature": 0}).json()
        assert r["specdec"]["stats"]["proposer"] == "prompt-lookup"  # the default that needs no draft
        assert srv.url and httpx.get(srv.url + "/v1/models").json()["data"][0]["specdec"]["draft"] is None


def test_the_key(engine):
    user = [{"role": "user", "content": "the cat"}]
    for srv in in_process(engine, api_key="s3cret"):
        chat = srv.url + "/v1/chat/completions"
        assert "Bearer" in error_of(httpx.post(chat, json={"messages": user}), 401)["message"]
        assert error_of(httpx.post(chat, json={"messages": user}, headers={"Authorization": "Bearer nope"}),
                        401)["code"] == "invalid_api_key"
        assert error_of(httpx.get(srv.url + "/v1/models"), 401)["code"] == "invalid_api_key"
        assert httpx.get(srv.url + "/health").status_code == 200  # for load balancers, as vLLM's
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0).models.list()
        good = openai.OpenAI(base_url=srv.url + "/v1", api_key="s3cret", max_retries=0)
        assert good.chat.completions.create(model="target", messages=user, max_tokens=3,  # greedy: a sample may draw EOS
                                       temperature=0).usage.completion_tokens == 3


# -- the line, and a client that goes away ----------------------------------------------------------
def wait_until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_one_decode_at_a_time_the_line_and_429(engine):
    """Another user of the engine (the app's chat) holds it: a request waits its turn, streaming
    comments meanwhile; with the line full the next gets 429 with Retry-After, and none stays."""
    queue = DecodeQueue(max_waiting=1)
    for srv in in_process(engine, queue=queue):
        held = queue.join(bounded=False)
        assert queue.wait(held)  # the engine is busy elsewhere
        user = [{"role": "user", "content": "the cat"}]
        answers = []
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)

        def ask():
            s = c.chat.completions.create(model="target", messages=user, max_tokens=8, temperature=0, stream=True)
            answers.append("".join(ch.choices[0].delta.content or "" for ch in s))

        waiting = threading.Thread(target=ask)
        waiting.start()
        wait_until(lambda: queue.waiting == 1)
        r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": user})
        err = error_of(r, 429)
        assert err["code"] == "queue_full" and int(r.headers["retry-after"]) >= 1
        with pytest.raises(openai.RateLimitError):
            c.chat.completions.create(model="target", messages=user)
        assert httpx.get(srv.url + "/health").json() | {"served": 0} == {
            "status": "ok", "model": "target", "busy": True, "waiting": 1, "max_waiting": 1, "served": 0}
        queue.release()
        waiting.join(60)
        assert len(answers) == 1 and answers[0]
        # the engine is free again once the draft's read between turns (a pass or two) is done
        wait_until(lambda: not queue.busy)
        assert queue.waiting == 0


class Recorder:
    """The engine's own generations, watched: which events came out after their cancel was set
    (the decoder reads it before each step), and when each generation ended. `delay` seconds
    pass before each event is handed on, so a long answer is still running when a client leaves."""

    def __init__(self, engine, delay: float):
        self.engine = engine.fork()  # the same models, its own decoder
        self.runs: list[dict] = []
        inner = self.engine.generate

        def generate(prompt, settings, *, cancel=None, reuse_cache=False):
            gen = inner(prompt, settings, cancel=cancel, reuse_cache=reuse_cache)
            run = {"gen": gen, "after_cancel": [], "ended": threading.Event()}
            self.runs.append(run)
            return _Watched(gen, run, cancel, delay)

        self.engine.generate = generate


class _Watched:
    def __init__(self, gen, run, cancel, delay):
        self._gen, self._run, self._cancel, self._delay = gen, run, cancel, delay

    def __iter__(self):
        try:
            for ev in self._gen:
                if self._cancel.is_set():
                    self._run["after_cancel"].append(ev)
                time.sleep(self._delay)
                yield ev
        finally:
            self._run["ended"].set()

    def __getattr__(self, name):
        return getattr(self._gen, name)


def stopped_within_a_step(run) -> None:
    assert run["ended"].wait(10), "the engine did not stop"
    gen = run["gen"]
    assert gen.stats.stop_reason == "cancelled" and gen.stats.new_tokens < 300
    # what the decoder emitted after the client had gone: the rest of one step at most
    assert len({ev.step for ev in run["after_cancel"]}) <= 1


def test_a_client_that_closes_its_stream_stops_the_engine_within_a_step(engine):
    rec = Recorder(engine, delay=0.01)
    for srv in in_process(rec.engine):
        with httpx.stream("POST", srv.url + "/v1/completions",
                          json={"prompt": [1, 5, 29, 7], "max_tokens": 300, "temperature": 0, "stream": True}) as r:
            seen = 0
            for line in r.iter_lines():
                seen += line.startswith("data:")
                if seen >= 5:
                    break
        stopped_within_a_step(rec.runs[-1])
        wait_until(lambda: not srv.queue.busy)


def test_a_client_that_gives_up_on_a_whole_answer_stops_the_engine(engine):
    rec = Recorder(engine, delay=0.01)
    for srv in in_process(rec.engine):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.url + "/v1/completions", json={"prompt": [1, 5, 29, 7], "max_tokens": 300, "temperature": 0},
                       timeout=httpx.Timeout(60, read=0.5))
        stopped_within_a_step(rec.runs[-1])
        wait_until(lambda: not srv.queue.busy)


def test_a_client_that_leaves_while_waiting_leaves_the_line(engine):
    queue = DecodeQueue(4)
    rec = Recorder(engine, delay=0.0)
    for srv in in_process(rec.engine, queue=queue):
        held = queue.join(bounded=False)
        assert queue.wait(held)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.url + "/v1/completions", json={"prompt": [1, 5], "max_tokens": 8},
                       timeout=httpx.Timeout(60, read=0.5))
        wait_until(lambda: queue.waiting == 0)
        queue.release()
        assert rec.runs[-1]["gen"].events == []  # never decoded: nothing computed for nobody


# -- load -------------------------------------------------------------------------------------------
def test_load_200_requests_from_8_clients(server, served, engine):
    """Bounded: 200 short greedy requests, 8 at a time -- chat and completions, streamed and not,
    so prompts are tokenized while another answer decodes. Every answer is its own prompt's (the
    engine's own answer, computed beforehand), none lost; the only refusal allowed is 429
    (retried after its Retry-After)."""
    from specdec_core.settings import DecodeSettings

    words = ["the", "cat", "sat", "on", "mat", "a", "hat", "is", "it", "in", "and", "not", "no", "yes", "to"]
    prompts = [[1, 5, 3 + i, 7] for i in range(20)] + [f"{words[i]} {words[-1 - i]} the cat" for i in range(len(words))]
    expect = {}
    for p in prompts:
        ids = p if isinstance(p, list) else engine.encode_prompt(p)
        gen = served.generate(ids, DecodeSettings(max_new_tokens=8)).run()  # in its turn (conftest: served)
        expect[str(p)] = (gen.token_ids, gen.text, len(ids))
    results, statuses = {}, []

    def one(i: int, http: httpx.Client) -> None:
        prompt = prompts[i % len(prompts)]
        body = {"model": "target", "max_tokens": 8, "temperature": 0, "stream": i % 2 == 1}
        if isinstance(prompt, list):
            path, body["prompt"] = "/v1/completions", prompt
        else:
            path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": prompt}]

        def text_of(choice: dict) -> str:
            return choice.get("text") or (choice.get("delta") or choice.get("message") or {}).get("content") or ""

        while True:
            if body["stream"]:
                with http.stream("POST", path, json=body) as r:
                    statuses.append(r.status_code)
                    if r.status_code == 200:
                        chunks = [json.loads(line[5:]) for line in r.iter_lines()
                                  if line.startswith("data:") and line != "data: [DONE]"]
                        ids = [t["id"] for c in chunks for t in c["specdec"]["tokens"]]
                        text = "".join(text_of(c["choices"][0]) for c in chunks if c["choices"])
                        used = None
                        break
                    r.read()
            else:
                r = http.post(path, json=body)
                statuses.append(r.status_code)
                if r.status_code == 200:
                    obj = r.json()
                    ids, text = [t["id"] for t in obj["specdec"]["tokens"]], text_of(obj["choices"][0])
                    used = obj["usage"]["prompt_tokens"]
                    break
            assert r.status_code == 429, r.text
            time.sleep(min(float(r.headers["retry-after"]), 1.0))
        results[i] = (prompt, ids, text, used)

    def client_loop(k: int) -> None:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            for i in range(k, 200, 8):
                one(i, http)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        for f in [pool.submit(client_loop, k) for k in range(8)]:
            f.result(timeout=600)
    seconds = time.perf_counter() - t0
    assert sorted(results) == list(range(200))  # none lost
    for prompt, ids, text, used in results.values():
        want_ids, want_text, prompt_tokens = expect[str(prompt)]
        assert (ids, text) == (want_ids, want_text)  # none mixed up
        assert used in (None, prompt_tokens)
    assert set(statuses) <= {200, 429}
    print(f"\nload: 200 requests, 8 clients, {seconds:.1f} s, {200 / seconds:.1f} req/s, "
          f"{statuses.count(429)} x 429")
    assert httpx.get(server.url + "/health").json()["waiting"] == 0
