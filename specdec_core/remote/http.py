"""A small HTTP client for one server, on httpx: JSON requests and server-sent-event streams.

httpx does the HTTP (and TLS, chunked bodies, a timeout per network read); this module adds
what a chat needs on top of it:

- every failure becomes one ServerError line that names the URL and says what to do
  (nothing listening, an unknown host, TLS, a timeout, an HTTP error with the server's message);
- a stream can be stopped from another thread: a watcher shuts the socket down when the
  request's cancel event is set, so a stop lands at once even while the server is silent
  (a long prompt's prefill), not at the next chunk. Shut down, not closed: closing a socket does
  not wake a read that waits on it, and httpx's response and client are not made to be closed
  from another thread mid-read. The socket comes from httpx's `trace` request extension, at the
  moment the connection is made, so even a wait for the answer's first byte can be stopped;
- `timeout` bounds the wait for each read, not the whole answer (a long answer is fine,
  a server that stops sending is not) -- httpx's read timeout is per read.

Each call opens its own connection (a chat sends a request every few seconds, so reuse would save
nothing, and a fresh connection is what gives the watcher its socket). The environment's proxy
settings are not used (`trust_env=False`), as before httpx: the server is usually on the local
network, which a desktop's HTTP proxy cannot reach. TLS trusts the system's certificates
(`ssl.create_default_context`), so a self-hosted server with an in-house CA works as it did.

httpx is imported by the functions that use it, on the first request: the app's window and the
CLI import this package for its names at start-up, and httpx would add 0.1-0.3 s to that.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .errors import HTTPStatusError, ServerError, StreamBroken
from .sse import sse_data, sse_lines

if TYPE_CHECKING:
    import httpx

DEFAULT_TIMEOUT = 120.0  # seconds one read may wait (a big prompt's prefill on a busy server)
CONNECT_TIMEOUT = 10.0
_CANCEL_POLL = 0.05
_ERROR_BODY = 65536  # bytes of an error answer kept for its message
_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "User-Agent": "specdec-chat",
    # a compressed event stream would be held back in the server's compressor between tokens
    "Accept-Encoding": "identity",
}


def normalize_url(spec: str) -> str:
    """'http://host:8000/v1/' -> 'http://host:8000' (the engines' own paths are added to it).
    A path before /v1 is kept, for a server behind a proxy prefix."""
    url = spec.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The system's trust store, loaded once (an SSLContext may be shared between threads)."""
    return ssl.create_default_context()


class Endpoint:
    """One server at `url` (http:// or https://). Thread-safe: each call has its own client."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 connect_timeout: float = CONNECT_TIMEOUT):
        self.url = normalize_url(url)
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerError(f"{url!r} is not a server address; give http://HOST:PORT (or https://)")
        try:
            self.port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ServerError(f"{url!r} has a port that is not a number; give http://HOST:PORT") from None
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.api_key = api_key or None
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)

    # -- plain requests -------------------------------------------------------------------
    def get_json(self, path: str) -> object:
        return _json(self.get_text(path), self.url + path)

    def get_text(self, path: str) -> str:
        with self._exchange("GET", path, None) as resp:
            return self._read_all(resp, path)

    def post_json(self, path: str, body: dict) -> object:
        with self._exchange("POST", path, body) as resp:
            return _json(self._read_all(resp, path), self.url + path)

    # -- streams --------------------------------------------------------------------------
    def stream(self, path: str, body: dict, cancel: threading.Event | None = None) -> Iterator[dict]:
        """POST `body` and yield each server-sent event's JSON payload as it arrives. Ends at
        `data: [DONE]` or when the server closes the stream; the caller decides whether the
        answer was complete. A payload {"error": ...} raises ServerError. When `cancel` is set,
        the stream ends quietly (the connection is shut, which makes the server stop)."""
        if cancel is not None and cancel.is_set():
            return
        with _Hangup(cancel) as hangup:
            try:
                with self._exchange("POST", path, body, hangup.trace) as resp:
                    if resp.status_code >= 400:
                        raise self._http_error(resp, path, _error_body(self._chunks(resp, path)))
                    for payload in sse_data(sse_lines(self._chunks(resp, path))):
                        if payload.strip() == "[DONE]":
                            return
                        obj = _json(payload, self.url + path)
                        if isinstance(obj, dict) and obj.get("error"):
                            raise ServerError(f"{self.url}{path} reported an error mid-answer: {_error_text(obj)}")
                        yield obj
            except ServerError:
                if hangup.fired:  # the failure is the stop itself: the socket was shut under the read
                    return
                raise

    # -- internals ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _exchange(self, method: str, path: str, body: dict | None, trace=None) -> Iterator[httpx.Response]:
        """The server's answer (its status and headers read, its body not yet), closed after."""
        import httpx

        headers = dict(_HEADERS)
        payload = None
        if body is not None:  # encoded as before httpx (json.dumps' defaults), the same bytes on the wire
            payload = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        timeout = httpx.Timeout(self.timeout, connect=self.connect_timeout)
        with httpx.Client(timeout=timeout, verify=_tls_context(), trust_env=False) as client:
            request = client.build_request(method, self.url + path, content=payload, headers=headers,
                                           extensions={"trace": trace} if trace else None)
            try:
                resp = client.send(request, stream=True)
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise self._send_error(exc, path) from None
            try:
                yield resp
            finally:
                resp.close()

    def _read_all(self, resp: httpx.Response, path: str) -> str:
        raw = b"".join(self._chunks(resp, path))
        if resp.status_code >= 400:
            raise self._http_error(resp, path, raw)
        return raw.decode("utf-8", errors="replace")

    def _chunks(self, resp: httpx.Response, path: str) -> Iterator[bytes]:
        """The body as it arrives; a read that fails is a broken answer (StreamBroken)."""
        import httpx

        try:
            yield from resp.iter_bytes()
        except httpx.HTTPError as exc:
            raise self._broken(exc, path) from None

    def _http_error(self, resp: httpx.Response, path: str, raw: bytes) -> HTTPStatusError:
        text = raw.decode("utf-8", errors="replace").strip()
        try:
            detail = _error_text(json.loads(text))
        except ValueError:
            detail = " ".join(text.split())[:200]
        msg = f"{self.url}{path} answered HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
        if detail:
            msg += f": {detail}"
        if resp.status_code in (401, 403):
            msg += " (give the server's key with --api-key KEY or the SPECDEC_API_KEY environment variable)"
        return HTTPStatusError(msg, resp.status_code)

    def _send_error(self, exc: Exception, path: str) -> ServerError:
        """A request that got no answer: what went wrong, from httpx's error and its cause."""
        import httpx

        where = self.url
        if isinstance(exc, httpx.ConnectTimeout):
            return ServerError(f"{where} did not accept a connection within {self.connect_timeout:g} s: "
                               "is the host reachable and the port right?")
        if isinstance(exc, httpx.TimeoutException):
            return ServerError(f"{where}{path} accepted the connection but sent no answer within "
                               f"{self.timeout:g} s (--timeout S waits longer)")
        cause = _root_cause(exc)
        if isinstance(cause, ConnectionRefusedError):
            return ServerError(f"nothing is listening at {where} (connection refused): start the server, "
                               "or check the host and port")
        if isinstance(cause, socket.gaierror):
            return ServerError(f"cannot find the host {self.host!r} of {where}: check the address")
        if isinstance(cause, ssl.SSLError):
            return ServerError(f"the TLS connection to {where} failed: {cause}")
        if isinstance(exc, (httpx.ProtocolError, httpx.ReadError, httpx.WriteError)):
            return ServerError(f"{where}{path} did not answer as an HTTP server ({_describe(cause)}); "
                               "is this the address of an OpenAI-compatible server?")
        return ServerError(f"cannot reach {where}: {cause}")

    def _broken(self, exc: Exception, path: str) -> StreamBroken:
        import httpx

        if isinstance(exc, httpx.TimeoutException):
            return StreamBroken(f"{self.url}{path} sent nothing for {self.timeout:g} s and was given up "
                                "(--timeout S waits longer)")
        return StreamBroken(f"the connection to {self.url} broke off mid-answer ({_describe(_root_cause(exc))}): "
                            "the server may have stopped or crashed")


class _Hangup:
    """Shuts a stream's socket when `cancel` is set, from a watcher thread: a blocked read then
    returns at once. The socket arrives through httpx's trace callback when the connection is
    made (and again, wrapped, after a TLS handshake); a cancel before that shuts it on arrival."""

    _CONNECTED = ("connection.connect_tcp.complete", "connection.start_tls.complete")

    def __init__(self, cancel: threading.Event | None):
        self.cancel = cancel
        self.fired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()

    def __enter__(self) -> _Hangup:
        if self.cancel is not None:
            threading.Thread(target=self._watch, daemon=True, name="specdec-server-cancel").start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()

    def trace(self, event: str, info: dict) -> None:
        if event in self._CONNECTED and info.get("return_value") is not None:
            with self._lock:
                self._sock = info["return_value"].get_extra_info("socket")
                if self.fired:
                    self._shut()

    def _watch(self) -> None:
        while not self._done.is_set():
            if self.cancel.wait(_CANCEL_POLL):
                with self._lock:
                    if not self._done.is_set():
                        self.fired = True
                        self._shut()
                return

    def _shut(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed, or the plain socket a TLS wrapper has taken over
                pass


def _root_cause(exc: BaseException) -> BaseException:
    """The OS or TLS error under httpx's and httpcore's wrappers (each raises its own in an
    `except` of the last: httpx `from` it, httpcore with it as the context)."""
    seen = {id(exc)}
    while (nxt := exc.__cause__ or exc.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        exc = nxt
    return exc


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}{': ' + str(exc) if str(exc) else ''}"


def _error_body(chunks: Iterator[bytes]) -> bytes:
    """The start of an error answer's body (its message), whatever happens to the rest."""
    raw = b""
    with contextlib.suppress(StreamBroken):
        for chunk in chunks:
            raw += chunk
            if len(raw) >= _ERROR_BODY:
                break
    return raw[:_ERROR_BODY]


def _json(text: str, where: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        snippet = " ".join(text.split())[:80]
        raise ServerError(f"{where} did not answer with JSON ({snippet!r}): is this an OpenAI-compatible "
                          "server (llama.cpp's llama-server, vLLM)?") from None


def _error_text(obj: object) -> str:
    """The message in an error body: {"error": {"message": ...}}, {"error": "..."},
    {"message": ...} or {"detail": ...} (the shapes llama-server, vLLM and FastAPI use)."""
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if err.get(key):
                    return " ".join(str(err[key]).split())
        elif isinstance(err, str):
            return " ".join(err.split())
        if obj.get("detail"):
            return " ".join(str(obj["detail"]).split())
    return " ".join(json.dumps(obj).split())[:200]
