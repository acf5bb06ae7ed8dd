"""The command line's side of a server target (`--target http://HOST:PORT`): connecting, and
the line that says what the server itself reported. Kept apart from cli.py so the local-model
path reads as before."""

from __future__ import annotations

import sys


def connect_engine(args):
    """--target http://... -> a ServerEngine, with --api-key / $SPECDEC_API_KEY and --timeout.
    A --draft other than the default is refused: the server drafts with its own draft."""
    from .cli import UsageError
    from .server import connect

    draft = getattr(args, "draft", "default")
    if draft not in (None, "", "default", "none"):
        raise UsageError("--draft: a server target drafts with the server's own draft model (llama-server "
                         "--model-draft, vLLM --speculative-config); drop --draft")
    if getattr(args, "proposer", "draft") == "prompt-lookup":
        raise UsageError("--proposer prompt-lookup: a server target proposes with the server's own drafting; "
                         "drop --proposer")
    progress = None
    if sys.stderr.isatty():
        def progress(message, fraction):
            if fraction is None:
                print(message, file=sys.stderr)
    return connect(args.target, api_key=getattr(args, "api_key", None), timeout=getattr(args, "timeout", 120.0),
                   progress=progress)


def server_line(stats) -> str:
    """One line of what the server reported about an answer (empty for a local model)."""
    from .server.generation import figure_notes

    server = getattr(stats, "server", None)
    if not server:
        return ""
    bits = [f"server: {server.get('engine', '?')} at {server.get('url', '?')}"]
    bits += figure_notes(server, stats.draft_tokens, stats.accepted_draft_tokens)
    return ", ".join(bits)
