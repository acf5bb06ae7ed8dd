"""Can this draft propose tokens for this target? Same token ids must mean the same strings.

Speculative decoding hands the draft's token ids straight to the target, so the two
vocabularies must agree on every id the target can emit (all ids < len(target tokenizer));
the draft may know more ids (it then must not propose them -- the decoder's business).
The tokens that end or frame a turn (eos, bos, unk, and every end-of-generation id) must
also be the same, or one model would stop where the other goes on.

The *model* vocab sizes may differ even when the tokenizers agree (Qwen2.5-7B pads its
embedding to 152,064 rows, 0.5B to 151,936); that is fine and not checked here.
"""

from __future__ import annotations

from .errors import ModelError
from .types import LoadedModel

_HINT = "use a draft from the same model family (`specdec models` lists known-good pairs)"


def _tokens(tokenizer, n: int) -> list[str | None]:
    # convert_ids_to_tokens on a list is one call into the Rust tokenizer: fast for 150k ids.
    return list(tokenizer.convert_ids_to_tokens(list(range(n))))


def check_compatible(target: LoadedModel, draft: LoadedModel) -> None:
    """Raise ModelError naming the first difference between the two tokenizers."""
    t_tok, d_tok = target.tokenizer, draft.tokenizer
    n_target, n_draft = len(t_tok), len(d_tok)
    if n_draft < n_target:
        raise ModelError(
            f"target and draft are incompatible: the target has {n_target:,} tokens but the draft only "
            f"{n_draft:,} (first missing id {n_draft}, {t_tok.convert_ids_to_tokens(n_draft)!r}); {_HINT}"
        )
    t_ids, d_ids = _tokens(t_tok, n_target), _tokens(d_tok, n_target)
    if t_ids != d_ids:
        i = next(i for i, (a, b) in enumerate(zip(t_ids, d_ids)) if a != b)
        raise ModelError(
            f"target and draft are incompatible: token id {i} is {t_ids[i]!r} in the target "
            f"but {d_ids[i]!r} in the draft; {_HINT}"
        )
    for attr in ("eos_token", "bos_token", "unk_token"):
        a, b = getattr(t_tok, attr, None), getattr(d_tok, attr, None)
        if a != b:
            raise ModelError(
                f"target and draft are incompatible: {attr} is {a!r} in the target but {b!r} in the draft; {_HINT}"
            )
    t_eos, d_eos = sorted(target.eos_token_ids), sorted(draft.eos_token_ids)
    if t_eos != d_eos:
        diff = sorted(set(t_eos) ^ set(d_eos))[0]
        side = "target" if diff in t_eos else "draft"
        raise ModelError(
            f"target and draft are incompatible: token id {diff} ({t_tok.convert_ids_to_tokens(diff)!r}) ends "
            f"generation for the {side} only (target eos ids {t_eos}, draft {d_eos}); {_HINT}"
        )
