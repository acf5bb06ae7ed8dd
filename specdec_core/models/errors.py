"""The one exception the models layer raises for anything a user can fix."""

from __future__ import annotations


class ModelError(Exception):
    """A one-line, user-facing message: what is wrong and how to fix it.

    The CLI prints str(err) and exits non-zero; the GUI shows it in a dialog. No traceback is
    meant to reach the user, so every message must stand on its own.
    """

    def __init__(self, message: str):
        # Keep it to one line whatever the cause's text was (OS errors can embed newlines).
        super().__init__(" ".join(str(message).split()))
