"""Fitting a chat into the target's context window: which oldest turns to leave out.

Pure functions over message lists (no torch, no tokenizer: the caller passes a token counter),
so the worker can offer "drop the oldest turns" before anything is computed. A dropped turn is
only left out of the prompt; the chat keeps it (the app never deletes a saved message for this).
"""

from __future__ import annotations

from collections.abc import Callable

Messages = list[dict[str, str]]


def drop_oldest(messages: Messages, n: int) -> Messages:
    """The chat without its first `n` conversation messages; system messages always stay."""
    system = [m for m in messages if m["role"] == "system"]
    rest = [m for m in messages if m["role"] != "system"]
    return system + rest[n:]


def turn_starts(messages: Messages) -> list[int]:
    """Where the kept part may start, counted in conversation messages (system ones left out):
    at a user message, so the model never sees an answer without its question."""
    rest = [m for m in messages if m["role"] != "system"]
    return [i for i, m in enumerate(rest) if m["role"] == "user"]


def messages_to_drop(messages: Messages, count_tokens: Callable[[Messages], int], max_new_tokens: int,
                     context: int | None) -> int | None:
    """The fewest oldest conversation messages to leave out so that the prompt of what is kept
    plus `max_new_tokens` fits `context`: 0 when the whole chat fits, None when not even the last
    user turn does (shortening it, or a smaller answer budget, is the only way then).

    Whole turns only (the kept part starts at a user message). Dropping more never lengthens a
    prompt, so a binary search over the turn starts finds the fewest with few token counts."""

    def fits(n: int) -> bool:
        return count_tokens(drop_oldest(messages, n)) + max_new_tokens <= context

    if context is None or fits(0):
        return 0
    starts = [s for s in turn_starts(messages) if s > 0]
    if not starts or not fits(starts[-1]):
        return None
    lo, hi = 0, len(starts) - 1  # the answer is starts[i] for the smallest i that fits
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(starts[mid]):
            hi = mid
        else:
            lo = mid + 1
    return starts[lo]
