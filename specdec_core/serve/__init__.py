"""`specdec serve`: the exact speculative engine served as a local OpenAI-compatible server, each
token with its origin. (Not to be confused with specdec_core/remote/, the *client* that uses
someone else's server -- llama-server, vLLM, or this one -- as the target.)

    /v1/models, /v1/chat/completions, /v1/completions (streamed as server-sent events or not),
    /tokenize, /health

Files: protocol.py (the extension to the OpenAI wire format, shared with the client),
queue.py (one decode at a time on an engine, the rest wait in a bounded line; also what lets
the app's chat share the engine with the server), schema.py (the OpenAI request bodies as
pydantic models, and a validation error as the OpenAI error), requests.py (a checked request
turned into the engine's settings), errors.py (the OpenAI error shape), answer.py (one request's decode
in a thread of its own: the answer in pieces, stop strings, cancellation), responses.py (the
OpenAI response and chunk objects), app.py (the Starlette application: routes, key, queue),
runner.py (uvicorn on a socket of its own, in the foreground or a background thread).

Light to import: nothing here loads torch; starlette and uvicorn are imported by app.py and
runner.py only, pydantic by schema.py (through requests.py, which app.py imports), so the client
can read protocol.py without them.
"""
