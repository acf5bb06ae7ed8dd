"""uvicorn on a socket of its own: `specdec serve` in the foreground, the app's View ▸ Local
server and the tests in a background thread.

The socket is bound here, before uvicorn starts, so a port in use or an address that is not
this machine's is one line (ServeError) rather than a log; port 0 takes a free port (`port`
says which). Binding anything but a loopback address without a key is allowed -- the user may
mean it -- and `exposure_warning()` says what it means.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Sequence

from ..contract import EngineLike
from ..models.errors import ModelError
from .queue import DecodeQueue

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_WAITING = 16
API_KEY_ENV = "SPECDEC_SERVE_API_KEY"  # the key clients must send; the variable keeps it out of `ps`


class ServeError(ModelError):
    """One line: what keeps the server from starting and how to fix it (a ModelError, so the CLI
    prints it and exits 2, and the app shows it in a dialog)."""


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def exposure_warning(host: str, api_key: str | None) -> str:
    """What binding `host` without a key means ("" when it is loopback or there is a key)."""
    if api_key or is_loopback(host):
        return ""
    return (f"listening on {host} without an API key: anyone who can reach this machine can use the models; "
            f"give --api-key KEY (or ${API_KEY_ENV}) or --host 127.0.0.1")


class LocalServer:
    """`engine` served at http://host:port. `queue`: the engine's line, shared with whatever else
    decodes on it (the app's chat); a new one when not given. `cors_origins`: the web origins
    whose pages may call it from a browser (none: no CORS)."""

    def __init__(self, engine: EngineLike, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 api_key: str | None = None, max_waiting: int = DEFAULT_MAX_WAITING, model_name: str | None = None,
                 queue: DecodeQueue | None = None, log_level: str = "info", access_log: bool = True,
                 cors_origins: Sequence[str] = ()):
        if engine.server_info() is not None:
            raise ServeError("specdec serve serves models loaded here; the target is already a server "
                             f"({engine.server_info().url}): give a local model (--target SPEC)")
        import uvicorn  # here, not at import: the CLI's parser reads this module's defaults

        from .app import Service, build_app

        self.queue = queue if queue is not None else DecodeQueue(max_waiting)
        self.service = Service(engine, self.queue, model_name, api_key)
        self.host = host
        self._sock = _bind(host, port)
        self.port = self._sock.getsockname()[1]

        config = uvicorn.Config(build_app(self.service, cors_origins or ()), log_level=log_level, access_log=access_log,
                                loop="asyncio", http="h11", ws="none", lifespan="off",
                                timeout_graceful_shutdown=5)
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def model(self) -> str:
        return self.service.model

    def serve_forever(self) -> None:
        """In this thread until Ctrl+C (uvicorn's own signal handling) or stop()."""
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self.service.shutdown()
            self._sock.close()

    def start(self, timeout: float = 30.0) -> LocalServer:
        """In a background thread; returns once it accepts connections."""
        self._thread = threading.Thread(target=self.serve_forever, name="specdec-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ServeError(f"the server at {self.url} did not start")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Answers in flight end within their step; the thread ends."""
        self.service.shutdown()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self._sock.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                              flags=socket.AI_PASSIVE)[0]
    except OSError as exc:
        raise ServeError(f"cannot listen on {host!r}: {exc.strerror or exc}; give an address of this machine, "
                         "e.g. --host 127.0.0.1") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        why = "the port is in use (another server?)" if exc.errno in (98, 48, 10048) else (exc.strerror or str(exc))
        raise ServeError(f"cannot listen on {host}:{port}: {why}; choose another port") from None
    sock.set_inheritable(True)
    return sock
