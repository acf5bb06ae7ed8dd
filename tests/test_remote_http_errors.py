"""Each way a remote server fails, provoked for real on 127.0.0.1, is one ServerError line that
names the address and says what to do: nothing listening, an unknown host, a port that never
accepts, TLS, something that is not HTTP, not JSON, and HTTP errors with the server's own message
in the shapes llama-server, vLLM and FastAPI write them (401/403 say how to give the key)."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest

from llama_server import free_port
from scripted_server import answer

from specdec_core.remote.errors import HTTPStatusError, ServerError
from specdec_core.remote.http import Endpoint


def error_of(call) -> ServerError:
    with pytest.raises(ServerError) as err:
        call()
    assert "\n" not in str(err.value)
    return err.value


def every_call(ep: Endpoint):
    """The client's four calls, each to the path its message must name."""
    return [("/v1/models", lambda: ep.get_json("/v1/models")),
            ("/metrics", lambda: ep.get_text("/metrics")),
            ("/tokenize", lambda: ep.post_json("/tokenize", {"content": "x"})),
            ("/completion", lambda: list(ep.stream("/completion", {"prompt": "x"})))]


# -- no answer at all ----------------------------------------------------------------------
def test_nothing_listening():
    ep = Endpoint(f"http://127.0.0.1:{free_port()}")
    for _, call in every_call(ep):
        assert str(error_of(call)) == (f"nothing is listening at {ep.url} (connection refused): start the server, "
                                       "or check the host and port")


def test_an_unknown_host():
    ep = Endpoint("http://no-such-host.invalid:8080/v1")
    assert str(error_of(lambda: ep.get_json("/v1/models"))) == (
        "cannot find the host 'no-such-host.invalid' of http://no-such-host.invalid:8080: check the address")


def test_a_port_that_never_accepts():
    """A listening socket whose queue is full and which never accepts: the SYN goes unanswered."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    port = sock.getsockname()[1]
    queued = []
    try:
        for _ in range(3):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            queued.append(c)
        ep = Endpoint(f"http://127.0.0.1:{port}", connect_timeout=0.5)
        for _, call in every_call(ep)[::3]:
            assert str(error_of(call)) == (f"{ep.url} did not accept a connection within 0.5 s: "
                                           "is the host reachable and the port right?")
    finally:
        for c in queued:
            c.close()
        sock.close()


class _Plain(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_tls_to_a_server_that_speaks_plain_http():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Plain)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        ep = Endpoint(f"https://127.0.0.1:{srv.server_address[1]}")
        msg = str(error_of(lambda: ep.get_json("/v1/models")))
        assert msg.startswith(f"the TLS connection to {ep.url} failed: [SSL")
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("reply", [b"SSH-2.0-OpenSSH_9.6\r\n", b""])
def test_something_that_is_not_an_http_server(scripted, reply):
    def script(srv, conn, req):
        conn.sendall(reply)  # then the line is closed

    ep = Endpoint(scripted(script).url)
    for path, call in every_call(ep):
        msg = str(error_of(call))
        assert msg.startswith(f"{ep.url}{path} did not answer as an HTTP server (RemoteProtocolError")
        assert msg.endswith("); is this the address of an OpenAI-compatible server?")


def test_an_answer_that_is_not_json(scripted):
    ep = Endpoint(scripted(lambda srv, conn, req: answer(conn, 200, b"<html>\n  welcome\n</html>", "text/html")).url)
    assert str(error_of(lambda: ep.get_json("/v1/models"))) == (
        f"{ep.url}/v1/models did not answer with JSON ('<html> welcome </html>'): is this an OpenAI-compatible "
        "server (llama.cpp's llama-server, vLLM)?")


# -- HTTP errors: the server's own message -------------------------------------------------
KEY_HINT = " (give the server's key with --api-key KEY or the SPECDEC_API_KEY environment variable)"
SHAPES = [
    # llama-server
    (400, {"error": {"code": 400, "message": "the request exceeds the available context size,\n try increasing it",
                     "type": "exceed_context_size_error"}},
     "HTTP 400 Bad Request: the request exceeds the available context size, try increasing it"),
    # vLLM
    (400, {"object": "error", "message": "This model's maximum context length is 2048 tokens.",
           "type": "BadRequestError", "param": None, "code": 400},
     "HTTP 400 Bad Request: This model's maximum context length is 2048 tokens."),
    # FastAPI, and llama-server's key check
    (404, {"detail": "Not Found"}, "HTTP 404 Not Found: Not Found"),
    (401, {"error": {"message": "Invalid API Key", "type": "authentication_error"}},
     "HTTP 401 Unauthorized: Invalid API Key" + KEY_HINT),
    (403, {"error": "forbidden"}, "HTTP 403 Forbidden: forbidden" + KEY_HINT),
    # a proxy's page in front of the server
    (502, "<html><body>\n<h1>502 Bad Gateway</h1>\n</body></html>",
     "HTTP 502 Bad Gateway: <html><body> <h1>502 Bad Gateway</h1> </body></html>"),
]


@pytest.mark.parametrize("status, body, words", SHAPES)
def test_an_http_error_says_what_the_server_said(scripted, status, body, words):
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    reason = "Bad Gateway" if status == 502 else ""
    ep = Endpoint(scripted(lambda srv, conn, req: answer(conn, status, raw, reason=reason)).url)
    for path, call in every_call(ep):
        err = error_of(call)
        assert isinstance(err, HTTPStatusError) and err.status == status
        assert str(err) == f"{ep.url}{path} answered {words}"


def test_connect_passes_a_refused_key_on_and_names_what_else_is_wrong(scripted):
    from specdec_core.remote import connect

    srv = scripted(lambda srv, conn, req: answer(conn, 401, b'{"error": "no key"}'))
    with pytest.raises(HTTPStatusError) as err:
        connect(srv.url, api_key="wrong")
    assert str(err.value) == f"{srv.url}/v1/models answered HTTP 401 Unauthorized: no key" + KEY_HINT
    assert srv.requests[0].header("authorization") == "Bearer wrong"
    srv = scripted(lambda srv, conn, req: answer(conn, 404, b'{"detail": "Not Found"}'))
    with pytest.raises(ServerError, match=r"is not an OpenAI-compatible server \(.* answered HTTP 404 Not Found: "):
        connect(srv.url)
