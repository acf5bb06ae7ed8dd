"""The remote client (specdec_core/remote/http.py, on httpx) against real local servers that
answer byte by byte what a test writes (scripted_server.py): a stop that lands while the server
is silent, a timeout per read and not per answer, one error line for each way a server fails,
the event-stream format's corners. Tier 1: the event-stream reader on hand-built bytes."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

import pytest

from scripted_server import answer, chunk, end_stream, event, start_stream

from specdec_core.remote.errors import HTTPStatusError, ServerError, StreamBroken
from specdec_core.remote.http import Endpoint
from specdec_core.remote.sse import sse_data, sse_lines


def watchers() -> int:
    return sum(t.name == "specdec-server-cancel" for t in threading.enumerate())


def collect(it, cancel=None, after=None):
    """The payloads of a stream; `cancel` is set `after` seconds after the first one arrives."""
    out = []
    for obj in it:
        out.append(obj)
        if cancel is not None and len(out) == 1:
            threading.Timer(after, cancel.set).start()
    return out


# -- tier 1: the event-stream reader -------------------------------------------------------
def test_lines_end_only_at_cr_lf_lf_or_cr():
    sep = "\u2028".encode()  # a Unicode line separator inside a token's text: no line end in SSE
    chunks = [b'data: {"t": "a' + sep + b'b"}\r', b"\n\r\n", b"data: 1\rdata: 2\n", b"\xc3", b"\xa9\n",
              b": keep-alive\r\n", b"data: cut off"]
    assert list(sse_lines(chunks)) == ['data: {"t": "a\u2028b"}', "", "data: 1", "data: 2", "\u00e9", ": keep-alive"]
    assert list(sse_lines([b"a\r"])) == ["a"]  # a lone CR ends the last line
    assert list(sse_lines([b"a\r", b"", b"\nb\n"])) == ["a", "b"]  # CR LF across chunks is one line end


def test_events_join_their_data_lines_and_skip_the_rest():
    lines = ["event: token", "id: 7", ": a comment", 'data: {"a":', "data:  1}", "", "", "retry: 10",
             "data", "data:x", "", "data: never finished"]
    assert list(sse_data(lines)) == ['{"a":\n 1}', "\nx"]
    assert json.loads('{"a":\n 1}') == {"a": 1}


# -- streams -------------------------------------------------------------------------------
def test_a_stream_with_the_formats_corners(scripted):
    """Multi-line data, comments, keep-alives, a character split across chunks, a separator
    U+2028 in a token, and [DONE]: after it nothing is read, though the server keeps the line open."""

    def script(srv, conn, req):
        start_stream(conn)
        chunk(conn, b": ping\n\n")
        event(conn, {"n": 1})
        chunk(conn, b'data: {"n": 2,\ndata:  "t": "\xc3')
        chunk(conn, b'\xa9\xe2\x80\xa8"}\r\n\r\n')
        chunk(conn, b"\n\n")
        chunk(conn, b"data: [DONE]\n\n")
        srv.hold(conn)

    srv = scripted(script)
    ep = Endpoint(srv.url, timeout=30)
    t0 = time.monotonic()
    assert list(ep.stream("/v1/completions", {"prompt": "é"})) == [{"n": 1}, {"n": 2, "t": "\u00e9\u2028"}]
    assert time.monotonic() - t0 < 5
    req = srv.requests[0]
    assert req.line == "POST /v1/completions HTTP/1.1" and json.loads(req.body) == {"prompt": "é"}
    assert req.header("content-type") == "application/json" and req.header("accept-encoding") == "identity"


def test_an_error_in_the_middle_of_a_stream(scripted):
    def script(srv, conn, req):
        start_stream(conn)
        event(conn, {"n": 1})
        event(conn, {"error": {"message": "the slot   was\nreleased", "type": "server_error"}})
        end_stream(conn)

    ep = Endpoint(scripted(script).url)
    seen = []
    with pytest.raises(ServerError) as err:
        for obj in ep.stream("/completion", {}):
            seen.append(obj)
    assert seen == [{"n": 1}] and not isinstance(err.value, StreamBroken)
    assert str(err.value) == f"{ep.url}/completion reported an error mid-answer: the slot was released"


@pytest.mark.parametrize("how", ["closed", "reset"])
def test_a_connection_cut_mid_answer_is_a_broken_stream(scripted, how):
    def script(srv, conn, req):
        start_stream(conn)
        event(conn, {"n": 1})
        if how == "reset":  # a crashed process's socket: RST, not FIN
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
        else:
            conn.shutdown(socket.SHUT_RDWR)  # gone, without the chunked body's last chunk

    ep = Endpoint(scripted(script).url)
    seen = []
    with pytest.raises(StreamBroken) as err:
        for obj in ep.stream("/completion", {}):
            seen.append(obj)
    assert seen == [{"n": 1}]
    assert str(err.value).startswith(f"the connection to {ep.url} broke off mid-answer (")
    assert "the server may have stopped or crashed" in str(err.value)


def test_a_stream_the_server_ends_cleanly_just_ends(scripted):
    """Without [DONE]: the caller decides whether the answer was complete (StreamBroken.unfinished)."""

    def script(srv, conn, req):
        start_stream(conn)
        event(conn, {"n": 1})
        end_stream(conn)

    assert list(Endpoint(scripted(script).url).stream("/completion", {})) == [{"n": 1}]


# -- the timeout is per read, not per answer -----------------------------------------------
def test_a_slow_answer_longer_than_the_timeout_is_fine(scripted):
    def script(srv, conn, req):
        start_stream(conn)
        for i in range(10):  # 10 x 0.2 s: more than the timeout in all, an eighth of it between reads
            time.sleep(0.2)
            event(conn, {"n": i})
        chunk(conn, b"data: [DONE]\n\n")
        end_stream(conn)

    t0 = time.monotonic()
    got = list(Endpoint(scripted(script).url, timeout=1.5).stream("/completion", {}))
    assert [o["n"] for o in got] == list(range(10)) and time.monotonic() - t0 > 1.5


def test_a_server_that_falls_silent_mid_answer_is_given_up(scripted):
    def script(srv, conn, req):
        start_stream(conn)
        event(conn, {"n": 1})
        srv.hold(conn)

    srv = scripted(script)
    ep = Endpoint(srv.url, timeout=0.75)
    seen = []
    t0 = time.monotonic()
    with pytest.raises(StreamBroken) as err:
        for obj in ep.stream("/completion", {}):
            seen.append(obj)
    assert seen == [{"n": 1}] and 0.7 < time.monotonic() - t0 < 5
    assert str(err.value) == (f"{ep.url}/completion sent nothing for 0.75 s and was given up "
                              "(--timeout S waits longer)")


def test_a_server_that_never_answers_is_given_up(scripted):
    ep = Endpoint(scripted(lambda srv, conn, req: srv.hold(conn)).url, timeout=0.5)
    for call in (lambda: ep.get_json("/v1/models"), lambda: list(ep.stream("/completion", {}))):
        with pytest.raises(ServerError, match=r"/v1/models|/completion") as err:
            call()
        assert "accepted the connection but sent no answer within 0.5 s (--timeout S waits longer)" in str(err.value)


# -- a stop from another thread ------------------------------------------------------------
@pytest.mark.parametrize("when", ["mid-answer", "before the first byte"])
def test_a_stop_lands_at_once_while_the_server_is_silent(scripted, when):
    """The server sends nothing and would for a minute (a long prefill, a slow token): the stop
    ends the stream quietly within a fraction of a second, and the server sees the line closed
    (which is what makes llama-server and vLLM drop the request)."""

    def script(srv, conn, req):
        if when == "mid-answer":
            start_stream(conn)
            event(conn, {"n": 1})
        srv.hold(conn)

    srv = scripted(script)
    ep = Endpoint(srv.url, timeout=60)
    cancel = threading.Event()
    before = watchers()
    if when == "before the first byte":
        threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    got = collect(ep.stream("/completion", {}, cancel), cancel, 0.3)
    stopped = time.monotonic()
    assert got == ([{"n": 1}] if when == "mid-answer" else []) and cancel.is_set()
    assert stopped - t0 < 5  # 0.3 s until the stop, then at once (a busy machine's margin) -- not the 60 s timeout
    deadline = time.monotonic() + 2
    while srv.hung_up_at is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.hung_up_at is not None and srv.hung_up_at - stopped < 2
    time.sleep(0.2)
    assert watchers() == before  # the watcher thread ended with the stream


def test_a_stream_stopped_before_it_starts_sends_nothing(scripted):
    srv = scripted(lambda srv, conn, req: srv.hold(conn))
    cancel = threading.Event()
    cancel.set()
    assert list(Endpoint(srv.url).stream("/completion", {}, cancel)) == []
    time.sleep(0.2)
    assert srv.connections == 0


def test_a_stream_that_ends_by_itself_leaves_no_watcher(scripted):
    def script(srv, conn, req):
        start_stream(conn)
        event(conn, {"n": 1})
        end_stream(conn)

    before = watchers()
    cancel = threading.Event()
    assert list(Endpoint(scripted(script).url).stream("/completion", {}, cancel)) == [{"n": 1}]
    time.sleep(0.2)
    assert watchers() == before and not cancel.is_set()


# -- what was sent -------------------------------------------------------------------------
def test_a_proxy_prefix_and_the_key_reach_the_server(scripted):
    srv = scripted(lambda srv, conn, req: answer(conn, 200, b'{"data": []}'))
    ep = Endpoint(srv.url + "/proxy/llm/v1/", api_key="sk-1")
    assert ep.url == srv.url + "/proxy/llm"
    assert ep.get_json("/v1/models") == {"data": []}
    assert ep.post_json("/tokenize", {"content": "hi"}) == {"data": []}
    get, post = srv.requests
    assert get.line == "GET /proxy/llm/v1/models HTTP/1.1" and get.body == b""
    assert post.line == "POST /proxy/llm/tokenize HTTP/1.1" and json.loads(post.body) == {"content": "hi"}
    assert get.header("authorization") == post.header("authorization") == "Bearer sk-1"
    assert Endpoint(srv.url).get_text("/v1/models") == '{"data": []}'
    assert srv.requests[-1].header("authorization") is None


# -- over TLS --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (openssl's command line)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(d / "cert.pem", d / "key.pem")
    return server, d / "cert.pem"


def test_tls_the_systems_trust_refuses_a_self_signed_server(scripted, certificate):
    srv = scripted(lambda srv, conn, req: answer(conn, 200, b"{}"), tls=certificate[0])
    with pytest.raises(ServerError) as err:
        Endpoint(srv.url).get_json("/v1/models")
    assert str(err.value).startswith(f"the TLS connection to {srv.url} failed: [SSL: CERTIFICATE_VERIFY_FAILED]")


def test_tls_a_trusted_server_streams_and_a_stop_lands_while_it_is_silent(scripted, certificate, monkeypatch):
    """The socket the watcher shuts is the TLS one (the plain socket is taken over by it)."""
    import specdec_core.remote.http as client

    trusted = ssl.create_default_context(cafile=str(certificate[1]))
    monkeypatch.setattr(client, "_tls_context", lambda: trusted)

    def script(srv, conn, req):
        start_stream(conn)
        event(conn, {"n": 1})
        srv.hold(conn)

    srv = scripted(script, tls=certificate[0])
    cancel = threading.Event()
    t0 = time.monotonic()
    assert collect(Endpoint(srv.url, timeout=60).stream("/completion", {}, cancel), cancel, 0.3) == [{"n": 1}]
    stopped = time.monotonic()
    assert stopped - t0 < 5 and srv.requests[0].line == "POST /completion HTTP/1.1"
    deadline = time.monotonic() + 2
    while srv.hung_up_at is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.hung_up_at is not None and srv.hung_up_at - stopped < 2


def test_importing_the_client_leaves_httpx_for_the_first_request():
    """The app's window and the CLI import the server package for its names at start-up."""
    code = ("import sys, specdec_core.open_engine, specdec_core.remote.http as h; print('httpx' in sys.modules); "
            "h.Endpoint('http://127.0.0.1:9'); print('httpx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
