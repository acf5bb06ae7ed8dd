"""`open_engine(spec, ...)`: the one way a front end (the CLI's commands, the app's worker, the
race, the bench) gets an engine (contract.EngineLike).

A server address (http://HOST:PORT) connects to that server; any other SPEC loads a local pair
(a folder, a .gguf file, a hub id, "default"). Light to import: what each needs is imported
when it is opened.
"""

from __future__ import annotations

from collections.abc import Callable

from .contract import EngineError, EngineLike
from .remote.http import DEFAULT_TIMEOUT


def open_engine(
    target: str = "default",
    draft: str | None = "default",
    *,
    device: str = "auto",
    dtype: str = "auto",
    quantization: str | None = None,
    trust_remote_code: bool = False,
    api_key: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Callable[[str, float | None], None] | None = None,
) -> EngineLike:
    """Open `target` (and `draft`, None for none). `progress(message, fraction | None)` hears
    the steps; a local pair's load is recorded for `specdec models` (models.last_load).
    ModelError (ServerError for a server) or EngineError: one line saying what to fix."""
    from .remote import connect, is_server_spec

    if is_server_spec(target):
        if draft not in (None, "", "default", "none"):
            raise EngineError("a server target drafts with the server's own draft model (llama-server "
                              "--model-draft, vLLM --speculative-config): give no draft")
        return connect(target, api_key=api_key, timeout=timeout, progress=progress)
    from transformers.utils import logging as hf_logging

    from .engine import Engine
    from .models import last_load

    # the caller's progress speaks for loading; transformers' per-file bars and advice would
    # clutter the terminal and break the CLI's one-line error promise
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    engine = Engine.load(target, draft, device=device, dtype=dtype, quantization=quantization, progress=progress,
                         trust_remote_code=trust_remote_code)
    last_load.save(engine.target_info, engine.draft_info)  # what `specdec models` shows as the last load
    return engine
