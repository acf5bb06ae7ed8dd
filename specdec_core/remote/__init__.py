"""A server as the target: an OpenAI-compatible engine (llama.cpp's llama-server, vLLM) that
decodes itself, with its own draft, on its own hardware; the client streams its answer and
reads its speculative figures. The way past one machine is an existing engine, never one of
ours. No Qt and no torch here.

    from specdec_core.remote import connect, is_server_spec
    engine = connect("http://127.0.0.1:8080")          # ServerError: one line, if it is not one
    gen = engine.generate(engine.encode_prompt("hi"), settings)
    for ev in gen: ...                                   # TokenEvents, kinds as the server tells
    gen.stats                                            # ServerStats: the server's own figures

Files: http.py (requests and streams on httpx, errors as one line), sse.py (the event-stream
format), engine.py (probe, and ServerEngine: the engine boundary, contract.EngineLike, over
HTTP), generation.py (the two stream readers, ServerStats), steps.py (each token's kind from
llama-server's draft counters), prometheus.py (vLLM's and llama-server's /metrics counters),
errors.py.
"""

from .engine import API_KEY_ENV, ServerEngine, connect, is_server_spec
from .errors import ServerError, StreamBroken
from .generation import ServerGeneration, ServerStats

__all__ = ["API_KEY_ENV", "ServerEngine", "ServerError", "ServerGeneration", "ServerStats",
           "StreamBroken", "connect", "is_server_spec"]
