"""A real TCP server on 127.0.0.1 whose answers a test writes byte by byte, for what a real
server does only by accident: silence, a stream cut in the middle, an error in a stream, garbage
instead of HTTP, a connection it never accepts. Optionally TLS, with a self-signed certificate.
Each connection runs its test's `script(server, conn, request)` in a thread of its own."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass


@dataclass
class Request:
    head: str  # the request line and headers, as sent
    body: bytes

    @property
    def line(self) -> str:
        return self.head.split("\r\n", 1)[0]

    def header(self, name: str) -> str | None:
        for line in self.head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None


class ScriptedServer:
    def __init__(self, script, tls: ssl.SSLContext | None = None):
        self.script = script
        self.tls = tls
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.requests: list[Request] = []
        self.connections = 0
        self.hung_up_at: float | None = None  # when the client closed a connection the server held
        self.stop = threading.Event()  # ends every script's waits (teardown)
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                self._conns.append(conn)
            request = read_request(conn)
            self.requests.append(request)
            self.script(self, conn, request)
        except (OSError, ValueError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self._thread.join(2)
        for c in self._conns:
            c.close()
        self.sock.close()

    # -- what a script does ----------------------------------------------------------------
    def hold(self, conn: socket.socket) -> None:
        """Send nothing more; note when the client hangs up (its end closed or reset)."""
        conn.settimeout(0.05)
        while not self.stop.is_set():
            try:
                if conn.recv(4096) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        else:
            return  # the test ended first
        self.hung_up_at = time.monotonic()


def read_request(conn: socket.socket) -> Request:
    raw = b""
    while b"\r\n\r\n" not in raw:
        more = conn.recv(65536)
        if not more:
            raise ValueError("the client closed before its request was complete")
        raw += more
    head, _, body = raw.partition(b"\r\n\r\n")
    req = Request(head.decode("latin-1"), body)
    need = int(req.header("content-length") or 0)
    while len(req.body) < need:
        req.body += conn.recv(65536)
    return req


def answer(conn: socket.socket, status: int, body: bytes, ctype: str = "application/json",
           reason: str = "") -> None:
    """A whole answer, with its length."""
    reason = reason or {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
                        422: "Unprocessable Entity", 500: "Internal Server Error"}.get(status, "")
    conn.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)


def start_stream(conn: socket.socket) -> None:
    """The head of an event stream, its body chunked (as llama-server, vLLM and uvicorn send it)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")


def chunk(conn: socket.socket, data: bytes) -> None:
    conn.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def event(conn: socket.socket, obj) -> None:
    chunk(conn, f"data: {json.dumps(obj)}\n\n".encode())


def end_stream(conn: socket.socket) -> None:
    conn.sendall(b"0\r\n\r\n")
