"""A draft's reduced head (FR-Spec, arXiv 2502.14856): the tokens it may propose.

A draft model's output head over a 152k vocabulary is a quarter of what the embedded 0.5B draft
reads per drafted token. Its proposals are only ever checked by the target, which still scores
the whole vocabulary, so the draft may be limited to the tokens text most often holds: a token
outside the set is simply never proposed (its step is a rejection or a plain step), and the
output stays the target's, exactly.

Which tokens: a ranking shipped per tokenizer (assets/draft_vocab_<key>.npy, most frequent
first), made by scripts/draft_vocab.py from the code and technical prose any Debian machine with
Python holds and wordfreq's everyday-language word frequencies (its docstring says how). A
tokenizer is known by its vocabulary: drafts that share one (every Qwen2.5 size does) share the
ranking; a draft whose vocabulary has none keeps its whole head.
"""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np

from .. import assets

HEAD_TOKENS = 65536  # of the 151,936: 97.8% of the embedded target's bench answers (speed notes)


def vocab_key(tokenizer) -> str:
    """16 hex digits naming a vocabulary: the same token strings at the same ids."""
    items = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode()).hexdigest()[:16]


def ranking_name(tokenizer) -> str:
    return f"draft_vocab_{vocab_key(tokenizer)}.npy"


def head_tokens(tokenizer, vocab_size: int, n: int = HEAD_TOKENS) -> np.ndarray | None:
    """The sorted ids of the `n` most frequent tokens for this tokenizer, within the model's
    head (`vocab_size` rows); None when no ranking ships for its vocabulary or it would keep
    (nearly) every row anyway."""
    try:
        data = assets.read_bytes(ranking_name(tokenizer))
    except (FileNotFoundError, OSError):
        return None
    ranked = np.load(io.BytesIO(data))
    ids = np.unique(ranked[:n].astype(np.int64))
    ids = ids[ids < vocab_size]
    return ids if len(ids) < 0.9 * vocab_size else None
