"""A real llama-server as the target, on the tests' tiny Qwen2 pair (F32 GGUFs, milliseconds).

Tier 2 (exact equality against a reference): the kinds rebuilt from the server's streamed
draft counters equal the kinds our own engine gives the same target and draft at the same
draft length (llama-server's default, 3), token for token -- the run where the answer is
known. Also: a draft equal to the target is always accepted; the server's Prometheus
counters reconcile with the per-token figures; the OpenAI-compatible path gives the same
text. The CLI and the errors a user meets are provoked for real (a closed port, a plain
HTTP server answering 404, a server that never answers, an HTTP error with a body, a
server killed mid-answer).
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import pytest

from llama_server import LlamaServer, free_port, serve, server_ggufs, tiny_pair_models

PROMPT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    return server_ggufs(tmp_path_factory.mktemp("server-ggufs"))


@pytest.fixture(scope="module")
def server(ggufs):
    """target + its noisy draft, speculative (draft-simple, n_max 3), with /metrics."""
    yield from serve(ggufs["target"], ggufs["draft"], extra=("--metrics",), log=ggufs["folder"] / "server.log")


@pytest.fixture(scope="module")
def twin_server(ggufs):
    """target whose draft is the target itself."""
    yield from serve(ggufs["target"], ggufs["target"], log=ggufs["folder"] / "twin.log")


@pytest.fixture
def endless_server(ggufs):
    """A server whose answer never ends (killed or stopped by the test; stopped after it)."""
    yield from serve(ggufs["endless"], ctx=16384, log=ggufs["folder"] / "endless.log")


def settings(n, temperature=0.0, seed=0, top_k=0, top_p=1.0):
    from specdec_core.settings import DecodeSettings
    from specdec_core.sampling import SamplingParams

    return DecodeSettings(n, SamplingParams(temperature, top_k, top_p), 3, seed)


def answer(engine, n=40, prompt=PROMPT, **kw):
    gen = engine.generate(engine.encode_prompt(prompt), settings(n, **kw), cancel=threading.Event())
    return gen.run()


# -- what the server is --------------------------------------------------------------------
def test_connect_reads_what_the_server_is(server):
    from specdec_core.remote import connect

    engine = connect(server.url)
    assert engine.flavour == "llama.cpp" and engine.speculative is True
    assert engine.model.endswith("target.gguf") and engine.draft_info is not None
    info = engine.server_info()
    assert info.colours == "per token" and not info.can_race and "cannot be raced" in info.race_note
    # the prompt goes through the server's own template and tokenizer: our tokenizer agrees
    from tiny_models import make_tokenizer

    tok = make_tokenizer()
    ours = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True)
    ours = ours["input_ids"] if hasattr(ours, "keys") else ours
    assert engine.encode_prompt(PROMPT) == list(ours)


# -- tier 2: the rebuilt kinds against our own engine --------------------------------------
@pytest.mark.parametrize("prompt", [PROMPT, "is it done", "no"])
def test_kinds_rebuilt_from_the_counters_equal_our_engine_on_the_same_pair(server, prompt):
    """llama-server drafts greedily with n_max 3 (p_min 0: always 3, clipped to the budget) and
    verifies greedily: our engine with k=3 on the same weights makes the same steps."""
    from specdec_core.decoder import Decoder
    from specdec_core.proposers import DraftModelProposer
    from specdec_core.remote import connect
    from tiny_models import make_tokenizer

    engine = connect(server.url)
    ids = engine.encode_prompt(prompt)
    n = 48
    gen = engine.generate(ids, settings(n), cancel=threading.Event()).run()

    tok = make_tokenizer()
    target, draft = tiny_pair_models(0.05)
    ref = Decoder(target, tok, [2, 0]).generate(ids, settings(n), DraftModelProposer(draft, len(tok))).run()
    assert gen.token_ids == ref.token_ids
    assert gen.kinds == ref.kinds
    assert {"accepted", "corrected"} <= set(gen.kinds)
    s, r = gen.stats, ref.stats
    assert (s.proposed_tokens, s.accepted_tokens) == (r.proposed_tokens, r.accepted_tokens)
    assert s.per_position_proposed == r.per_position_proposed
    assert s.per_position_accepted == r.per_position_accepted
    assert s.draft_lengths == r.draft_lengths
    assert s.target_forward_passes == r.target_forward_passes and s.server["steps_exact"]
    assert (s.speculative_steps, s.speculative_step_tokens) == (r.speculative_steps, r.speculative_step_tokens)
    assert s.tokens_per_speculative_step == r.tokens_per_speculative_step and s.last_draft_length == r.last_draft_length
    assert s.new_tokens == len(gen.events) == r.new_tokens
    assert [e.draft_length for e in gen.events] == [e.draft_length for e in ref.events]


def test_stats_are_the_servers_own_figures(server):
    from specdec_core.remote import connect

    gen = answer(connect(server.url), n=30)
    s = gen.stats
    t = s.server["timings"]
    assert s.proposed_tokens == t["draft_n"] and s.accepted_tokens == t["draft_n_accepted"]
    assert s.new_tokens == t["predicted_n"] == 30 and s.stop_reason == "max_new_tokens"
    assert s.server["tokens_per_second"] == t["predicted_per_second"] > 0
    assert s.server["prompt_tokens"] == t["prompt_n"] > 0
    assert s.mode == "speculative" and s.proposer == "draft-simple"
    assert 0 < s.acceptance_rate < 1
    d = s.to_dict()
    assert d["server"]["figures"].startswith("llama-server timings") and json.dumps(d)
    # tau: every verification emits one target token after its kept drafts
    assert s.target_forward_passes == s.new_tokens - s.accepted_tokens


def test_a_draft_equal_to_the_target_is_always_accepted(twin_server):
    from specdec_core.remote import connect

    gen = answer(connect(twin_server.url), n=40)
    s = gen.stats
    assert s.acceptance_rate == 1.0 and s.proposed_tokens > 0
    assert set(gen.kinds) <= {"standard", "accepted", "bonus"} and "corrected" not in gen.kinds
    # every speculative step is its k accepted tokens and then the bonus
    by_step: dict[int, list[str]] = {}
    for e in gen.events:
        by_step.setdefault(e.step, []).append(e.kind.value)
    for kinds in by_step.values():
        if kinds != ["standard"]:
            assert kinds == ["accepted"] * (len(kinds) - 1) + ["bonus"]
    assert s.tokens_per_speculative_step > 3  # k = 3: four tokens a step, but for the first and the budget's end


def test_prometheus_counters_reconcile_with_the_per_token_figures(server):
    """The same four counters vLLM exports, under llama-server's `llamacpp:` prefix: their
    difference around one request equals the figures the stream gave."""
    from specdec_core.remote import connect
    from specdec_core.remote.http import Endpoint
    from specdec_core.remote.prometheus import figures_from_counters, read_spec_counters

    ep = Endpoint(server.url)
    before = read_spec_counters(ep.get_text("/metrics"), "llamacpp:")
    gen = answer(connect(server.url), n=36, prompt="the hat is on the cat")
    after = read_spec_counters(ep.get_text("/metrics"), "llamacpp:")
    assert before.present and after.present
    f = figures_from_counters(after - before)
    s = gen.stats
    assert (f.proposed, f.accepted) == (s.proposed_tokens, s.accepted_tokens)
    assert f.steps == s.server["speculative_steps"] == len(s.draft_lengths)
    n = len(f.per_position_accepted)
    assert f.per_position_accepted == (s.per_position_accepted + [0] * n)[:n]


def test_the_openai_compatible_path_on_a_real_server(server):
    """llama-server is also an OpenAI-compatible server: the generic reader (the one vLLM gets)
    streams the same greedy text, with kind `server`, and reads the drafts from /metrics."""
    from specdec_core.remote import connect
    from specdec_core.contract import ChatPrompt
    from specdec_core.remote.engine import OPENAI, ServerEngine
    from specdec_core.remote.generation import Request, ServerGeneration, stream_openai

    native = connect(server.url)
    text = answer(native, n=24).text
    generic = ServerEngine(native.endpoint, OPENAI, native.model, None, "")
    gen = answer(generic, n=24)
    assert gen.text == text and set(gen.kinds) == {"server"}
    assert gen.stats.new_tokens == 24 and gen.stats.stop_reason == "max_new_tokens"
    assert gen.stats.server["figures"].startswith("none") and gen.stats.mode == "server"
    # the same stream with the Prometheus counters read around it (vLLM's fallback)
    req = Request(settings(24), "server", None, False, threading.Event())
    prompt = ChatPrompt(({"role": "user", "content": PROMPT},))
    gen2 = ServerGeneration(stream_openai(native.endpoint, native.model, prompt, req, {}, "llamacpp:", False)).run()
    s = gen2.stats
    assert gen2.text == text and s.mode == "speculative" and s.server["server_wide"]
    assert s.proposed_tokens > 0 and s.target_forward_passes == 24 - s.accepted_tokens


def test_sampling_reproduces_with_a_seed(server):
    from specdec_core.remote import connect

    engine = connect(server.url)
    a = answer(engine, n=20, temperature=0.9, seed=5)
    b = answer(engine, n=20, temperature=0.9, seed=5)
    assert a.token_ids == b.token_ids and a.stats.proposed_tokens > 0


# -- the command line --------------------------------------------------------------------
def run_cli(args, capsys):
    from specdec_core.cli import main

    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_generate_streams_with_the_servers_figures(server, capsys):
    rc, out, err = run_cli(["generate", "--target", server.url, "--prompt", PROMPT, "--max-new-tokens", "16",
                            "--json"], capsys)
    assert rc == 0, err
    obj = json.loads(out.strip().splitlines()[-1])
    assert len(obj["token_ids"]) == 16 and set(obj["kinds"]) <= {"standard", "accepted", "corrected", "bonus"}
    st = obj["stats"]
    assert st["proposed_tokens"] > 0 and st["server"]["engine"] == "llama.cpp"
    assert st["acceptance_rate"] == st["accepted_tokens"] / st["proposed_tokens"]
    assert "draft: the server's own draft" in err

    rc, out, err = run_cli(["generate", "--target", server.url + "/v1/", "--prompt", PROMPT, "--max-new-tokens", "8"],
                           capsys)
    assert rc == 0 and out.strip()
    assert "[speculative] 8 tokens" in err and "server: llama.cpp at " + server.url in err
    assert "figures from llama-server timings" in err


def test_cli_refuses_what_a_server_cannot_do(server, capsys):
    cases = [
        (["--mode", "standard"], "cannot decode standard"),
        (["--draft", "/some/draft.gguf"], "server's own draft"),
        (["--proposer", "prompt-lookup"], "--proposer prompt-lookup"),
    ]
    for extra, words in cases:
        rc, out, err = run_cli(["generate", "--target", server.url, "--prompt", "hi", *extra], capsys)
        assert rc == 2 and words in err, err
        assert err.strip().splitlines()[-1].startswith("specdec: error:") and "Traceback" not in err
    rc, out, err = run_cli(["race", "--target", server.url, "--prompt", "hi"], capsys)
    assert rc == 2 and "cannot be raced" in err and "Traceback" not in err


def test_cli_prompt_ids_reach_the_server(server, capsys):
    from specdec_core.remote import connect

    ids = connect(server.url).encode_prompt(PROMPT)
    rc, out, err = run_cli(["generate", "--target", server.url, "--prompt-ids", ",".join(map(str, ids)),
                            "--max-new-tokens", "10", "--json"], capsys)
    assert rc == 0, err
    rc2, out2, _ = run_cli(["generate", "--target", server.url, "--prompt", PROMPT, "--max-new-tokens", "10",
                            "--json"], capsys)
    assert json.loads(out)["token_ids"] == json.loads(out2)["token_ids"]


# -- errors, provoked for real ------------------------------------------------------------
def one_error_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.startswith("specdec: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_nothing_listening(capsys):
    port = free_port()  # bound and released: nothing listens there now
    rc, _, err = run_cli(["generate", "--target", f"http://127.0.0.1:{port}", "--prompt", "hi"], capsys)
    assert rc == 2 and "nothing is listening at" in one_error_line(err)


def test_a_wrong_url(server, capsys):
    cases = [
        ("http://127.0.0.1:port", "port that is not a number"),
        ("http:/127.0.0.1:8080", "is not a server address"),
        # the right server, a wrong path (a proxy prefix it does not have): its own 404
        (server.url + "/api", "is not an OpenAI-compatible server"),
    ]
    for url, words in cases:
        rc, _, err = run_cli(["generate", "--target", url, "--prompt", "hi"], capsys)
        assert rc == 2 and words in one_error_line(err), (url, err)


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 -- http.server's naming
        body = b"<html><body>404: no such page</body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def plain_http_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_server_that_is_not_openai_compatible(plain_http_server, capsys):
    rc, _, err = run_cli(["generate", "--target", plain_http_server, "--prompt", "hi"], capsys)
    line = one_error_line(err)
    assert rc == 2 and "is not an OpenAI-compatible server" in line and "HTTP 404" in line
    assert "404: no such page" in line  # the body, as the server wrote it


@pytest.fixture
def silent_server():
    """Accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(2)
        for c in held:
            c.close()
        sock.close()


def test_a_timeout(silent_server, capsys):
    t0 = time.monotonic()
    rc, _, err = run_cli(["generate", "--target", silent_server, "--prompt", "hi", "--timeout", "1"], capsys)
    assert rc == 2 and "sent no answer within 1 s" in one_error_line(err)
    assert time.monotonic() - t0 < 10


def test_an_http_error_with_a_body(server, capsys):
    """A prompt longer than the server's context: llama-server answers HTTP 400 with a message."""
    ids = ",".join(["17"] * 1500)  # the server's context is 1024 tokens
    rc, out, err = run_cli(["generate", "--target", server.url, "--prompt-ids", ids, "--max-new-tokens", "4"], capsys)
    line = one_error_line(err)
    assert rc == 2 and "HTTP 400" in line and "context" in line.lower()


def test_a_server_killed_mid_answer_keeps_the_part_that_came(endless_server):
    from specdec_core.remote import StreamBroken, connect

    engine = connect(endless_server.url)
    gen = engine.generate(engine.encode_prompt(PROMPT), settings(8000), cancel=threading.Event())
    seen = []
    with pytest.raises(StreamBroken) as err:
        for ev in gen:
            seen.append(ev)
            if len(seen) == 5:
                endless_server.kill()
    assert "broke off" in str(err.value) or "without finishing" in str(err.value)
    assert len(gen.events) >= 5 and err.value.tokens == len(gen.events)
    assert gen.stats.stop_reason == "error" and gen.stats.new_tokens == len(gen.events)
    assert gen.stats.server["error"] == str(err.value)


def test_cli_keeps_a_cut_answer_and_says_why_in_one_line(endless_server, capsys):
    killer = threading.Timer(1.0, endless_server.kill)
    killer.start()
    try:
        rc, out, err = run_cli(["generate", "--target", endless_server.url, "--prompt", PROMPT,
                                "--max-new-tokens", "8000", "--json"], capsys)
    finally:
        killer.cancel()
    assert rc == 2
    obj = json.loads(out.strip().splitlines()[-1])
    assert obj["cut"] is True and obj["stats"]["stop_reason"] == "error" and len(obj["token_ids"]) > 0
    assert "mid-answer" in one_error_line(err) or "without finishing" in one_error_line(err)


def test_a_stopped_answer_ends_at_once_and_the_server_stops_too(endless_server):
    from specdec_core.remote import connect

    engine = connect(endless_server.url)
    cancel = threading.Event()
    gen = engine.generate(engine.encode_prompt(PROMPT), settings(8000), cancel=cancel)
    t0 = None
    for ev in gen:
        if len(gen.events) == 10:
            cancel.set()
            t0 = time.monotonic()
    assert gen.stats.stop_reason == "cancelled" and 10 <= len(gen.events) < 8000
    assert time.monotonic() - t0 < 2
    # the server dropped the request: the next one is answered at once
    assert answer(engine, n=5).stats.new_tokens == 5


# -- the benchmark -------------------------------------------------------------------------
def test_bench_against_a_server(server, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "code", "prompt": "the cat sat"}\n'
                       '{"id": "b", "category": "chat", "prompt": "is it on the mat"}\n')
    out = tmp_path / "bench"
    rc, _, err = run_cli(["bench", "--target", server.url, "--prompts", str(prompts), "--repeats", "2",
                          "--max-new-tokens", "12", "--warmup-tokens", "4", "--no-progress", "--out", str(out)],
                         capsys)
    assert rc == 0, err
    report = json.loads((out / "report.json").read_text())
    runs = report["runs"]
    assert [r["prompt"] for r in runs] == ["a", "a", "b", "b"] and all(r["new_tokens"] == 12 for r in runs)
    # greedy: the repeats give the same text; the figures are the server's
    assert runs[0]["text"] == runs[1]["text"] and runs[0]["figures"].startswith("llama-server timings")
    o = report["summary"]["overall"]
    assert o["acceptance_rate"] == sum(r["accepted_tokens"] for r in runs) / sum(r["proposed_tokens"] for r in runs)
    assert o["tokens_per_speculative_step"] == 48 / sum(r["verifications"] for r in runs)
    assert report["server"]["engine"] == "llama.cpp" and "| **overall** | 4 |" in (out / "report.md").read_text()
    # the command as run, without the flags that only a local pair takes
    assert report["command"] == (f"specdec bench --target {server.url} --prompts {prompts} --max-new-tokens 12 "
                                 f"--temperature 0 --repeats 2 --warmup-tokens 4 --out {out}")
    rc, _, err = run_cli(["bench", "--target", server.url, "--baseline", "hf", "--out", str(out)], capsys)
    assert rc == 2 and "--baseline" in one_error_line(err)


def test_a_server_without_a_draft_decodes_standard(ggufs):
    from specdec_core.remote import connect

    s = LlamaServer(ggufs["target"], log=ggufs["folder"] / "plain.log")
    try:
        engine = connect(s.wait_ready().url)
        assert engine.speculative is False and engine.draft_info is None and engine.mode == "standard"
        assert "has no draft model" in engine.race_refusal and "--model-draft" in engine.race_refusal
        gen = engine.generate(engine.encode_prompt(PROMPT), settings(12).replace(mode="standard"),
                              cancel=threading.Event()).run()
        st = gen.stats
        assert set(gen.kinds) == {"standard"} and st.mode == "standard" and st.proposed_tokens == 0
        assert st.target_forward_passes == st.new_tokens == 12 and st.plain_step_share == 1.0
        assert st.speculative_steps == 0 and st.tokens_per_speculative_step == 0.0  # no speculative step: no tau
    finally:
        s.stop()


def test_running_snapshots_count_the_tokens_seen(server):
    """What the app shows while an answer streams: the stats of exactly the tokens so far."""
    from specdec_core.remote import connect

    engine = connect(server.url)
    gen = engine.generate(engine.encode_prompt(PROMPT), settings(20), cancel=threading.Event())
    drafted = []
    for ev in gen:
        snap = gen.snapshot()  # the tiny vocabulary is ASCII: one chunk per token
        assert snap.new_tokens == len(gen.events) and snap.stop_reason == ""
        assert snap.speculative_step_tokens == sum(e.kind.value != "standard" for e in gen.events)
        drafted.append(snap.proposed_tokens)
    assert drafted == sorted(drafted) and gen.snapshot() is gen.stats and gen.stats.stop_reason == "max_new_tokens"
