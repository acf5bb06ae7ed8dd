"""`specdec serve` for the tests: in this process on an engine already loaded (`in_process`),
or as the real command in a process of its own (`SpecdecServe`), on 127.0.0.1 and a free port."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADDRESS = re.compile(r"at (http://\S+)/v1 ")


def in_process(engine, **kwargs):
    """A fixture's body (`yield from in_process(...)`): a LocalServer on `engine`, stopped after."""
    from specdec_core.serve.runner import LocalServer

    kwargs.setdefault("log_level", "warning")
    kwargs.setdefault("access_log", False)
    server = LocalServer(engine, port=0, **kwargs).start()
    try:
        yield server
    finally:
        server.stop()


class SpecdecServe:
    """`python -m specdec_core.cli serve ARGS --port 0`; `url` once it listens, `stop()` ends it
    (SIGINT, as Ctrl+C) and `output` is what it said on stderr."""

    def __init__(self, *args: str, timeout: float = 180.0):
        cmd = [sys.executable, "-m", "specdec_core.cli", "serve", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._found = threading.Event()
        self.url = ""
        threading.Thread(target=self._read, daemon=True).start()
        if not self._found.wait(timeout) or not self.url:
            self.stop()
            raise RuntimeError(f"specdec serve did not start: {self.output}")

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            m = ADDRESS.search(line)
            if m and not self.url:
                self.url = m.group(1)
                self._found.set()
        self._found.set()  # it ended

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        time.sleep(0.05)  # the reader takes its last lines
        return self.proc.returncode


def serve(*args: str):
    """A fixture's body: a `specdec serve` process, stopped after the tests that use it."""
    s = SpecdecServe(*args)
    try:
        yield s
    finally:
        s.stop()
