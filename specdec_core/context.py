"""Fitting a chat into the target's context window: which oldest turns to leave out.

Pure functions over message lists (no torch, no tokenizer: an engine passes its own encoder),
so an engine can say "drop the oldest turns" before anything is computed. A dropped turn is
only left out of the prompt; the chat keeps it (the app never deletes a saved message for this).
The rule, the same for every engine: whole turns, oldest first, system messages always kept,
the fewest that make the prompt plus the answer budget fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .settings import SettingsError

Messages = list[dict[str, str]]

# An answer without a budget of its own runs until the context is full; where the context is not
# known (a model whose config does not say), this many tokens at most (what `specdec serve` uses too)
UNKNOWN_CONTEXT_BUDGET = 4096


class ContextError(SettingsError):
    """A prompt and its answer budget do not fit the target's context window. Raised before any
    computing: a 40,000-token prompt for a 32,768-token model is refused at once."""

    def __init__(self, prompt_tokens: int, max_new_tokens: int | None, context: int):
        self.prompt_tokens, self.max_new_tokens, self.context = prompt_tokens, max_new_tokens, context
        if prompt_tokens >= context or max_new_tokens is None:
            msg = (f"the prompt is {prompt_tokens} tokens but the target's context holds {context} "
                   f"(the prompt plus the answer): shorten it to under {context} tokens")
        else:
            msg = (f"the prompt ({prompt_tokens} tokens) plus max-new-tokens ({max_new_tokens}) is "
                   f"{prompt_tokens + max_new_tokens} tokens, more than the target's context of {context}: "
                   f"lower max-new-tokens to {context - prompt_tokens} or shorten the prompt")
        super().__init__(msg)


def room(max_new_tokens: int | None) -> int:
    """What an answer needs from the context: its budget, or (no budget: it runs until the
    context is full) at least one token."""
    return 1 if max_new_tokens is None else max_new_tokens


def fits(prompt_tokens: int | None, max_new_tokens: int | None, context: int | None) -> bool:
    """Whether a prompt plus its answer budget fit; an unknown length or context refuses nothing."""
    return prompt_tokens is None or context is None or prompt_tokens + room(max_new_tokens) <= context


def answer_budget(max_new_tokens: int | None, prompt_tokens: int, context: int | None) -> int:
    """How many tokens the answer may take: its own budget, else what the context leaves."""
    if max_new_tokens is not None:
        return max_new_tokens
    return context - prompt_tokens if context is not None else UNKNOWN_CONTEXT_BUDGET


def check_fits(prompt_tokens: int, max_new_tokens: int | None, context: int | None) -> None:
    """Raise ContextError when the prompt plus the answer budget exceed the context."""
    if not fits(prompt_tokens, max_new_tokens, context):
        raise ContextError(prompt_tokens, max_new_tokens, context)


def context_length(model) -> int | None:
    """The most positions a model was built for (config.max_position_embeddings), or None."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    n = getattr(config, "max_position_embeddings", None)
    return n if isinstance(n, int) and n > 0 else None


@dataclass(frozen=True)
class Fit:
    """A chat measured against the target's context, with `dropped` oldest messages left out.

    fits      -- the prompt plus the answer budget fit (always, where the length or the context
                 is unknown: a server that tokenizes its own chat);
    prompt    -- what to generate from (the engine's own prompt form), set when it fits;
    max_new_tokens -- the answer's budget; None: until the context is full (it needs one token);
    drop      -- when it does not fit: the fewest oldest conversation messages to leave out,
                 counting `dropped`; None when even the last user turn alone does not fit.
    """

    fits: bool
    prompt: Any
    prompt_tokens: int | None
    max_new_tokens: int | None
    context: int | None
    dropped: int = 0
    drop: int | None = None

    def error(self) -> ContextError:
        """The one-line refusal of a chat that does not fit."""
        return ContextError(self.prompt_tokens or 0, self.max_new_tokens, self.context or 0)


def fit_chat(messages: Messages, max_new_tokens: int | None, context: int | None,
             encode: Callable[[Messages], Any], length: Callable[[Any], int | None], dropped: int = 0) -> Fit:
    """The rule every engine applies: leave out the `dropped` oldest messages, encode the rest
    (`encode`: the engine's chat encoder; `length`: its prompt's token count, None if unknown),
    and when that does not fit, find the fewest more to leave out."""
    kept = drop_oldest(messages, dropped)
    prompt = encode(kept)
    n = length(prompt)
    if fits(n, max_new_tokens, context):
        return Fit(True, prompt, n, max_new_tokens, context, dropped)
    more = messages_to_drop(kept, lambda m: length(encode(m)) or 0, max_new_tokens, context)
    return Fit(False, None, n, max_new_tokens, context, dropped, None if more is None else dropped + more)


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


def messages_to_drop(messages: Messages, count_tokens: Callable[[Messages], int], max_new_tokens: int | None,
                     context: int | None) -> int | None:
    """The fewest oldest conversation messages to leave out so that the prompt of what is kept
    plus `max_new_tokens` fits `context`: 0 when the whole chat fits, None when not even the last
    user turn does (shortening it, or a smaller answer budget, is the only way then).

    Whole turns only (the kept part starts at a user message). Dropping more never lengthens a
    prompt, so a binary search over the turn starts finds the fewest with few token counts."""

    def fits_without(n: int) -> bool:
        return count_tokens(drop_oldest(messages, n)) + room(max_new_tokens) <= context

    if context is None or fits_without(0):
        return 0
    starts = [s for s in turn_starts(messages) if s > 0]
    if not starts or not fits_without(starts[-1]):
        return None
    lo, hi = 0, len(starts) - 1  # the answer is starts[i] for the smallest i that fits
    while lo < hi:
        mid = (lo + hi) // 2
        if fits_without(starts[mid]):
            hi = mid
        else:
            lo = mid + 1
    return starts[lo]
