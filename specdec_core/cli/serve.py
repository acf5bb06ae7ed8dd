"""`specdec serve`: the loaded pair as a local OpenAI-compatible server (specdec_core/serve/),
every token with its origin. Bound to 127.0.0.1 unless --host says otherwise; Ctrl+C stops it."""

from __future__ import annotations

import argparse
import os
import re
import sys

from .args import UsageError, add_model_args, int_at_least
from .terminal import print_loaded, progress_printer


def _port(value: str) -> int:
    port = int_at_least("--port", 0)(value)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"--port must be <= 65535, got {port}")
    return port


def _origin(value: str) -> str:
    """A web origin as a browser sends it in its Origin header: scheme://host[:port], no path
    (a trailing slash would never match); "*": any origin."""
    if value == "*" or re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s?#]+", value):
        return value
    raise argparse.ArgumentTypeError(f"--cors-origin must be an origin such as http://localhost:3000 (scheme, host "
                                     f"and port, no path or trailing slash) or *, got {value!r}")


def add_parser(sub) -> None:
    from ..serve.runner import API_KEY_ENV, DEFAULT_HOST, DEFAULT_MAX_WAITING, DEFAULT_PORT

    s = sub.add_parser(
        "serve",
        help="serve the models as a local OpenAI-compatible server, each token with its origin",
        description="Serve the target (and draft) as an OpenAI-compatible server: /v1/models, /v1/chat/completions "
        "and /v1/completions, streamed or not, greedy and sampled output exactly as `specdec generate` gives it, "
        "and under \"specdec\" in every response each token's kind and source and the engine's Stats. One request "
        "decodes at a time; the others wait in a bounded line (429 past it).",
    )
    add_model_args(s, server_target=False)
    s.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}: this machine only; 0.0.0.0 for every "
                        "interface, which wants --api-key)")
    s.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0: any free port")
    s.add_argument("--api-key", default=None, metavar="KEY",
                   help=f"the key clients must send as Authorization: Bearer KEY (default: ${API_KEY_ENV}, which "
                        "keeps it out of ps; with neither, no key is asked)")
    s.add_argument("--max-waiting", type=int_at_least("--max-waiting", 0), default=DEFAULT_MAX_WAITING,
                   metavar="N", help=f"requests that may wait for the engine (default {DEFAULT_MAX_WAITING}); "
                                     "past that they get 429 with Retry-After")
    s.add_argument("--model-name", default=None, metavar="NAME",
                   help="the model id clients send (default: the target's name in lower case, one word)")
    s.add_argument("--cors-origin", action="append", type=_origin, default=None, metavar="ORIGIN",
                   dest="cors_origins",
                   help="a web origin (e.g. http://localhost:3000) whose pages may call the server from a browser "
                        "(CORS); repeatable; * allows any site (default: none, no CORS headers)")


def run(args) -> int:
    from ..open_engine import open_engine
    from ..serve.runner import API_KEY_ENV, LocalServer, exposure_warning
    from ..remote import is_server_spec

    if is_server_spec(args.target):
        raise UsageError("--target: specdec serve serves models loaded here, not another server; give a local "
                         "model (a folder, a .gguf file, a hub id, or default)")
    key = args.api_key or os.environ.get(API_KEY_ENV) or None
    draft = None if str(args.draft).lower() in ("none", "") else args.draft
    progress = progress_printer() if sys.stderr.isatty() else None
    engine = open_engine(args.target, draft, device=args.device, dtype=args.dtype, quantization=args.quantization,
                         trust_remote_code=args.trust_remote_code, progress=progress)
    print_loaded(engine)
    # requests keep the cached prefix they share (reuse_cache, on by default), so every chat
    # after the first finds the template's head read: read it now for the first one as well
    engine.read_template_head()
    server = LocalServer(engine, args.host, args.port, key, args.max_waiting, args.model_name,
                         cors_origins=args.cors_origins or ())
    warning = exposure_warning(args.host, key)
    if warning:
        print(f"specdec serve: warning: {warning}", file=sys.stderr)
    print(f"specdec serve: {server.model} at {server.url}/v1 (OpenAI-compatible; "
          f"{'an API key is asked' if key else 'no API key'}; "
          f"{'CORS for ' + ', '.join(args.cors_origins) + '; ' if args.cors_origins else ''}Ctrl+C stops)",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # Ctrl+C is how a server is meant to stop: uvicorn has shut down cleanly
        pass
    print("specdec serve: stopped", file=sys.stderr)
    return 0
