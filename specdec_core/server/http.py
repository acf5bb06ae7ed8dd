"""A small HTTP client for one server: JSON requests and server-sent-event streams.

The standard library's http.client, because the venv has no httpx and a chat needs little:
one request at a time, streamed line by line. What it adds:

- every failure becomes one ServerError line that names the URL and says what to do
  (nothing listening, an unknown host, a timeout, an HTTP error with the server's message);
- a stream can be stopped from another thread: a watcher shuts the socket down when the
  request's cancel event is set, so a stop lands at once even while the server is silent
  (a long prompt's prefill), not at the next chunk;
- `timeout` bounds the wait for each read, not the whole answer (a long answer is fine,
  a server that stops sending is not).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

from .errors import HTTPStatusError, ServerError, StreamBroken

DEFAULT_TIMEOUT = 120.0  # seconds one read may wait (a big prompt's prefill on a busy server)
CONNECT_TIMEOUT = 10.0
_CANCEL_POLL = 0.05


def normalize_url(spec: str) -> str:
    """'http://host:8000/v1/' -> 'http://host:8000' (the engines' own paths are added to it).
    A path before /v1 is kept, for a server behind a proxy prefix."""
    url = spec.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


class Endpoint:
    """One server at `url` (http:// or https://). Thread-safe: each call opens its own
    connection (a chat sends a request every few seconds, so reuse would save nothing)."""

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
        self.prefix = parts.path.rstrip("/")
        self.api_key = api_key or None
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)

    # -- plain requests -------------------------------------------------------------------
    def get_json(self, path: str) -> object:
        return _json(self.get_text(path), self.url + path)

    def get_text(self, path: str) -> str:
        conn, resp = self._open("GET", path, None)
        try:
            return self._read_all(resp, path)
        finally:
            conn.close()

    def post_json(self, path: str, body: dict) -> object:
        conn, resp = self._open("POST", path, body)
        try:
            return _json(self._read_all(resp, path), self.url + path)
        finally:
            conn.close()

    # -- streams --------------------------------------------------------------------------
    def stream(self, path: str, body: dict, cancel: threading.Event | None = None) -> Iterator[dict]:
        """POST `body` and yield each server-sent event's JSON payload as it arrives. Ends at
        `data: [DONE]` or when the server closes the stream; the caller decides whether the
        answer was complete. A payload {"error": ...} raises ServerError. When `cancel` is set,
        the stream ends quietly (the connection is shut, which makes the server stop)."""
        conn, resp = self._open("POST", path, body)
        done = threading.Event()
        if cancel is not None:
            threading.Thread(target=_shut_on_cancel, args=(cancel, done, conn), daemon=True,
                             name="specdec-server-cancel").start()
        try:
            if resp.status >= 400:
                raise self._http_error(resp, path, resp.read(65536))
            data: list[str] = []
            while True:
                try:
                    raw = resp.readline()
                except (OSError, http.client.HTTPException, ValueError) as exc:
                    if cancel is not None and cancel.is_set():
                        return
                    raise self._broken(exc, path) from None
                if not raw:  # the server closed the stream
                    return
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].lstrip(" "))
                    continue
                if line or not data:  # "event:", "id:", ": comment" lines, or blank keep-alives
                    continue
                payload = "\n".join(data)
                data = []
                if payload.strip() == "[DONE]":
                    return
                obj = _json(payload, self.url + path)
                if isinstance(obj, dict) and obj.get("error"):
                    raise ServerError(f"{self.url}{path} reported an error mid-answer: {_error_text(obj)}")
                yield obj
        finally:
            done.set()
            conn.close()

    # -- internals ------------------------------------------------------------------------
    def _open(self, method: str, path: str, body: dict | None):
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.connect_timeout)
        headers = {"Accept": "application/json, text/event-stream", "User-Agent": "specdec-chat"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            conn.connect()
        except BaseException as exc:
            conn.close()
            if isinstance(exc, (socket.timeout, TimeoutError)):
                raise ServerError(f"{self.url} did not accept a connection within {self.connect_timeout:g} s: "
                                  "is the host reachable and the port right?") from None
            if isinstance(exc, Exception):
                raise self._connect_error(exc, path) from None
            raise
        try:
            conn.sock.settimeout(self.timeout)  # from here on each read waits at most `timeout`
            conn.request(method, self.prefix + path, body=payload, headers=headers)
            resp = conn.getresponse()
        except BaseException as exc:
            conn.close()
            if isinstance(exc, (socket.timeout, TimeoutError)):
                raise ServerError(f"{self.url}{path} accepted the connection but sent no answer within "
                                  f"{self.timeout:g} s (--timeout S waits longer)") from None
            if isinstance(exc, Exception):
                raise self._connect_error(exc, path) from None
            raise
        return conn, resp

    def _read_all(self, resp, path: str) -> str:
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise self._broken(exc, path) from None
        if resp.status >= 400:
            raise self._http_error(resp, path, raw)
        return raw.decode("utf-8", errors="replace")

    def _http_error(self, resp, path: str, raw: bytes) -> HTTPStatusError:
        text = raw.decode("utf-8", errors="replace").strip()
        try:
            detail = _error_text(json.loads(text))
        except ValueError:
            detail = " ".join(text.split())[:200]
        msg = f"{self.url}{path} answered HTTP {resp.status} {resp.reason}".rstrip()
        if detail:
            msg += f": {detail}"
        if resp.status in (401, 403):
            msg += " (give the server's key with --api-key KEY or the SPECDEC_API_KEY environment variable)"
        return HTTPStatusError(msg, resp.status)

    def _connect_error(self, exc: Exception, path: str) -> ServerError:
        where = self.url
        if isinstance(exc, ConnectionRefusedError):
            return ServerError(f"nothing is listening at {where} (connection refused): start the server, "
                               "or check the host and port")
        if isinstance(exc, socket.gaierror):
            return ServerError(f"cannot find the host {self.host!r} of {where}: check the address")
        if isinstance(exc, ssl.SSLError):
            return ServerError(f"the TLS connection to {where} failed: {exc}")
        if isinstance(exc, (http.client.HTTPException, ConnectionError)):
            return ServerError(f"{where}{path} did not answer as an HTTP server ({type(exc).__name__}: {exc}); "
                               "is this the address of an OpenAI-compatible server?")
        return ServerError(f"cannot reach {where}: {exc}")

    def _broken(self, exc: Exception, path: str) -> StreamBroken:
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return StreamBroken(f"{self.url}{path} sent nothing for {self.timeout:g} s and was given up "
                                "(--timeout S waits longer)")
        return StreamBroken(f"the connection to {self.url} broke off mid-answer ({type(exc).__name__}"
                            f"{': ' + str(exc) if str(exc) else ''}): the server may have stopped or crashed")


def _shut_on_cancel(cancel: threading.Event, done: threading.Event, conn) -> None:
    """Shut the socket when the request is cancelled: a blocked read returns at once."""
    while not done.is_set():
        if cancel.wait(_CANCEL_POLL):
            sock = getattr(conn, "sock", None)
            if sock is not None and not done.is_set():
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return


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
