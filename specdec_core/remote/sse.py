"""Server-sent events, read from the bytes of a streamed answer: what the data of each event says.

A few lines of our own rather than a library (httpx-sse), for one reason that matters to a chat:
httpx's `iter_lines` splits like `str.splitlines`, also at U+2028, U+2029, NEL and the other
Unicode line breaks -- characters a JSON payload may carry raw in a token's text (llama-server
writes non-ASCII text unescaped), which would cut the payload in two. The SSE format ends a line
only at CR LF, LF or CR; the bytes are split there, before decoding, so a character whose bytes
arrive in two chunks is decoded whole. The field rules follow the WHATWG format: `data:` lines of
one event are joined with a newline, a blank line ends the event, other fields and `:` comments
are skipped, and an event the stream ends in the middle of is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

_LINE_END = re.compile(rb"\r\n|\r|\n")


def sse_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a byte stream, without their line ends; a last line without one is dropped
    (the stream ended in the middle of it)."""
    pending = b""
    for chunk in chunks:
        if not chunk:
            continue
        pending += chunk
        # a CR at the very end may be the first half of CR LF: decide when the next byte comes
        end = len(pending) - 1 if pending.endswith(b"\r") else len(pending)
        start = 0
        for m in _LINE_END.finditer(pending, 0, end):
            yield pending[start:m.start()].decode("utf-8", errors="replace")
            start = m.end()
        pending = pending[start:]
    if pending.endswith(b"\r"):  # the last line ended with a lone CR: it is complete
        yield pending[:-1].decode("utf-8", errors="replace")


def sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each complete event, its `data:` lines joined with a newline."""
    data: list[str] = []
    for line in lines:
        if not line:  # a blank line dispatches the event; one without data is a keep-alive
            if data:
                yield "\n".join(data)
                data = []
            continue
        name, colon, value = line.partition(":")
        if name != "data":  # "event:", "id:", "retry:", ": comment"
            continue
        data.append(value[1:] if colon and value.startswith(" ") else value)
