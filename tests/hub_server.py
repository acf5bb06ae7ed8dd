"""A stand-in for the Hugging Face hub: a real HTTP server on 127.0.0.1 serving model files.

huggingface_hub talks to it through HF_ENDPOINT exactly as to huggingface.co: the model info and
file-tree API, HEAD for a file's metadata (X-Repo-Commit, ETag / X-Linked-Etag, X-Linked-Size),
GET with Range for the bytes (206 + Content-Range), and 404s with the X-Error-Code the client
turns into RepositoryNotFoundError / EntryNotFoundError. Large files (weights) are served like
LFS files, their etag the sha256 of the content. `rate` limits bytes per second so a test (or
a screenshot) can watch, and stop, a download in flight. Every request is logged.

    with HubServer({"tiny/model": {"config.json": b"...", ...}}) as hub:
        hub.endpoint   # http://127.0.0.1:PORT
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer:
    def __init__(self, repos: dict[str, dict[str, bytes]], rate: float | None = None, chunk: int = 16384):
        self.repos = repos
        self.rate = rate  # bytes per second per response, None = as fast as it goes
        self.chunk = chunk
        self.log: list[tuple[str, str, dict]] = []  # (method, path, headers)
        self.commits = {r: hashlib.sha1(r.encode()).hexdigest() for r in repos}
        self.release = threading.Event()  # set: a rate-limited response ends at once (test teardown)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet: the log list is the record
                pass

            def do_HEAD(self):
                server._handle(self, head=True)

            def do_GET(self):
                server._handle(self, head=False)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="hub-server", daemon=True)

    def __enter__(self) -> "HubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- helpers --------------------------------------------------------------------------
    def ranges(self, name: str) -> list[str]:
        """The Range headers of GETs for files named `name`."""
        return [h.get("Range", "") for m, p, h in self.log if m == "GET" and p.endswith("/" + name)]

    @staticmethod
    def _lfs(name: str) -> bool:
        return name.endswith(LFS_SUFFIXES)

    def _etag(self, name: str, data: bytes) -> str:
        return hashlib.sha256(data).hexdigest() if self._lfs(name) else git_oid(data)

    def _json(self, h, obj, status: int = 200, extra: dict | None = None) -> None:
        body = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)

    def _not_found(self, h, code: str, message: str, head: bool) -> None:
        if head:
            h.send_response(404)
            h.send_header("X-Error-Code", code)
            h.send_header("X-Error-Message", message)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        self._json(h, {"error": message}, 404, {"X-Error-Code": code, "X-Error-Message": message})

    def _repo_of(self, parts: list[str]) -> tuple[str | None, list[str]]:
        for n in (2, 1):
            rid = "/".join(parts[:n])
            if rid in self.repos:
                return rid, parts[n:]
        return None, parts

    # -- the routes -----------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        url = urlsplit(h.path)
        path = unquote(url.path)
        self.log.append(("HEAD" if head else "GET", path, dict(h.headers)))
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "models"]:
            return self._api(h, parts[2:], head)
        repo, rest = self._repo_of(parts)
        if repo is None:
            return self._not_found(h, "RepoNotFound", "Repository not found", head)
        if len(rest) < 3 or rest[0] != "resolve":
            return self._not_found(h, "EntryNotFound", "Entry not found", head)
        name = "/".join(rest[2:])
        files = self.repos[repo]
        if name not in files:
            return self._not_found(h, "EntryNotFound", f"{name} does not exist", head)
        self._file(h, repo, name, files[name], head)

    def _api(self, h, parts: list[str], head: bool) -> None:
        repo, rest = self._repo_of(parts)
        if repo is None:
            return self._not_found(h, "RepoNotFound", "Repository not found", head)
        files = self.repos[repo]
        sha = self.commits[repo]
        if rest[:1] == ["tree"]:
            tree = []
            for name, data in sorted(files.items()):
                entry = {"type": "file", "path": name, "size": len(data), "oid": git_oid(data)}
                if self._lfs(name):
                    entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                tree.append(entry)
            return self._json(h, tree)
        # model info (with or without /revision/<rev>)
        return self._json(h, {"id": repo, "modelId": repo, "sha": sha, "private": False, "tags": [],
                              "siblings": [{"rfilename": n} for n in sorted(files)]})

    def _file(self, h, repo: str, name: str, data: bytes, head: bool) -> None:
        etag = self._etag(name, data)
        start = 0
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and not head:
            start = int(rng[len("bytes="):].split("-")[0] or 0)
        status = 206 if start else 200
        h.send_response(status)
        h.send_header("X-Repo-Commit", self.commits[repo])
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Type", "application/octet-stream")
        if self._lfs(name):
            h.send_header("X-Linked-Etag", f'"{etag}"')
            h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("ETag", f'"{etag}"')
        h.send_header("Content-Length", str(len(data) - start))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        body = memoryview(data)[start:]
        t0 = time.monotonic()
        sent = 0
        try:
            while sent < len(body):
                piece = body[sent:sent + self.chunk]
                h.wfile.write(piece)
                sent += len(piece)
                if self.rate and not self.release.is_set():
                    ahead = sent / self.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (a cancelled download)


def tiny_repo_files(folder: Path) -> dict[str, bytes]:
    """Every file of a saved model folder, as the server serves them."""
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}
