"""The one exception a server target raises for anything a user can act on."""

from __future__ import annotations

from ..models.errors import ModelError


class ServerError(ModelError):
    """One line that names the server and says what went wrong (nothing listening, not an
    OpenAI-compatible server, an HTTP error and its message, a timeout, a stream that broke
    off). A ModelError, so the CLI prints it as one line (exit 2) and the app shows a dialog."""


class HTTPStatusError(ServerError):
    """The server answered with an HTTP error; `status` is its code."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class StreamBroken(ServerError):
    """The answer's stream ended before the server said it was done. What streamed before it
    is kept: `tokens` says how many tokens had arrived."""

    def __init__(self, message: str, tokens: int = 0):
        super().__init__(message)
        self.tokens = tokens

    @classmethod
    def unfinished(cls, url: str, tokens: int) -> StreamBroken:
        """The stream closed cleanly, but without the server's last word on the answer."""
        return cls(f"{url} ended the answer's stream after {tokens} token(s) without finishing it: "
                   "the server may have stopped or crashed", tokens)
