"""A real llama.cpp `llama-server` for the server-target tests, started on 127.0.0.1.

Where the binary comes from: $SPECDEC_LLAMA_SERVER (what .ci/run builds), else the project's
build (`bash scripts/build-llamacpp.sh`, ~/.cache/specdec-llamacpp: without AMX where a VM lists
it but faults on it), else an earlier native build's folder (~/.cache/llamacpp-peer). Without one
the tests skip -- unless SPECDEC_REQUIRE_LLAMA_SERVER is set (CI), where they fail: the point
of these tests is a real server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REQUIRE = bool(os.environ.get("SPECDEC_REQUIRE_LLAMA_SERVER"))


def find_llama_server() -> Path | None:
    env = os.environ.get("SPECDEC_LLAMA_SERVER")
    candidates = [Path(env)] if env else []
    for folder in ("specdec-llamacpp", "llamacpp-peer"):
        candidates.append(Path.home() / ".cache" / folder / "build" / "bin" / "llama-server")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None


def need_llama_server() -> Path:
    path = find_llama_server()
    if path is None:
        msg = ("no llama-server: set SPECDEC_LLAMA_SERVER, or build it with "
               "`bash scripts/build-llamacpp.sh` (.ci/run builds it)")
        if REQUIRE:
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(*args, timeout: float = 180.0, **kwargs):
    """A server fixture's body (`yield from serve(...)`): the server once it answers, stopped
    after the tests that use it whatever happens."""
    s = LlamaServer(*args, **kwargs)
    try:
        yield s.wait_ready(timeout)
    finally:
        s.stop()


class LlamaServer:
    """One llama-server process; `stop()` ends it (always call it: a fixture's finalizer)."""

    def __init__(self, model: Path, draft: Path | None = None, ctx: int = 1024, threads: int = 1,
                 extra: tuple[str, ...] = (), log: Path | None = None):
        self.binary = need_llama_server()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [str(self.binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                "-t", str(threads), "-c", str(ctx), "-np", "1", "--no-webui", *extra]
        if draft is not None:
            args += ["-md", str(draft), "--spec-type", "draft-simple", "-td", str(threads)]
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = f"{self.binary.parent}:{env.get('LD_LIBRARY_PATH', '')}"
        self.log = log
        self._log_file = open(log, "wb") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen(args, stdout=self._log_file, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float = 180.0) -> LlamaServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-2000:] if self.log else ""
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {tail}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if json.loads(r.read()).get("status") == "ok":
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama-server at {self.url} was not ready within {timeout:.0f} s")

    def kill(self) -> None:
        """Kill it at once (SIGKILL): a server that dies mid-answer."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._log_file is not subprocess.DEVNULL:
            self._log_file.close()


def server_ggufs(folder: Path) -> dict:
    """What the server tests serve, written into `folder` (a fixture's folder): the tiny
    target, its noisy draft, the never-ending target, and the folder itself (for logs)."""
    need_llama_server()
    target, draft = tiny_pair_ggufs(folder, noise=0.05)
    return {"target": target, "draft": draft, "endless": endless_gguf(folder), "folder": folder}


def tiny_pair_ggufs(folder: Path, noise: float = 0.05) -> tuple[Path, Path]:
    """The tests' tiny Qwen2 target and a draft that is the target plus a little noise, as F32
    GGUFs llama-server loads in milliseconds; returns (target, draft) paths. The same models in
    torch come from `tiny_pair_models(noise)`."""
    from tiny_models import make_tokenizer, save_gguf

    tok = make_tokenizer()
    target, draft = tiny_pair_models(noise)
    return save_gguf(folder / "target.gguf", target, tok), save_gguf(folder / f"draft-{noise:g}.gguf", draft, tok)


def tiny_pair_models(noise: float = 0.05):
    import copy

    import torch

    from tiny_models import make_model, make_tokenizer

    tok = make_tokenizer()
    target = make_model(len(tok), seed=0, hidden=32, layers=2)
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.abs().mean())
    return target, draft


def endless_gguf(folder: Path) -> Path:
    """A tiny target whose special tokens (end of turn, end of text) score 0 while the rest
    score large, so its greedy answer never ends: a stream that is still running when a test
    kills the server or stops the answer."""
    import torch

    from tiny_models import make_model, make_tokenizer, save_gguf

    tok = make_tokenizer()
    model = make_model(len(tok), seed=3, hidden=32, layers=2, tie_word_embeddings=False, max_positions=16384)
    with torch.no_grad():
        model.lm_head.weight[:3] = 0.0
    return save_gguf(folder / "endless.gguf", model, tok)
