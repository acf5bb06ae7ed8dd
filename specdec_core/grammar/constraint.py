"""One answer's grammar, as the decoder uses it: which tokens it allows after the committed text
plus a few tokens ahead (a proposal being drafted or verified), which tokens it forces next, and
moving on as tokens are emitted. Built on llguidance (chosen over xgrammar, docs/speed-notes.md
item 50: a schema compiles in ~1 ms rather than ~19, a mask costs ~0.05 ms a token on the
embedded pair's 152k vocabulary, and it needs no triton).

The masked distribution is the target's own with every token the grammar forbids at -inf, before
temperature, top-k and top-p (the masked logits go to sampling.py's warp): standard decoding samples it, and the
acceptance rule keeps speculative decoding exact against it, because the target's k+1 rows of a
verification are each masked at the state after the proposal's prefix, and the draft's rows the
same way (so a token the grammar forbids is never proposed by a model, and one a deterministic
proposer copied is rejected with certainty).

The matcher follows `ahead`: it stands at the committed text plus the tokens it was last asked
about, and moves by rolling back to the common prefix and consuming the rest -- so the draft's
k questions and the target's k+1 cost one consume and one mask each (masks are kept per state
until the next commit: the target's rows reuse the draft's).
"""

from __future__ import annotations

import numpy as np
import torch

from ..lm import common_prefix
from .spec import JSON_LAYOUT, GrammarSpec


class GrammarError(ValueError):
    """A grammar the library refuses (a malformed schema, a keyword it does not implement): the
    message names the problem, as the library words it."""


class Grammars:
    """The grammar library's view of one tokenizer (built once, ~1 s for 152k tokens), and the
    constraints compiled against it. `vocab_size`: the width of the target's logits (its head may
    have more rows than the tokenizer has tokens: those are never allowed)."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: list[int]):
        import llguidance  # here: only a constrained answer needs it

        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise GrammarError("constrained decoding needs a fast (tokenizers) tokenizer, and this model has none")
        eos = list(eos_token_ids) or [tokenizer.eos_token_id]
        self.tokenizer = llguidance.LLTokenizer(backend.to_str(), n_vocab=vocab_size, eos_token=eos)
        self.vocab_size = vocab_size
        self.eos = frozenset(eos)

    def grammar_text(self, spec: GrammarSpec) -> str:
        from llguidance import LLMatcher

        if spec.kind == "json_schema":
            try:
                return LLMatcher.grammar_from_json_schema(spec.text, overrides=JSON_LAYOUT)
            except ValueError as exc:
                raise GrammarError(f"the JSON schema is not valid JSON: {exc}") from None
        return LLMatcher.grammar_from_lark(spec.text) if spec.kind == "lark" else LLMatcher.grammar_from_regex(spec.text)

    def check(self, spec: GrammarSpec) -> None:
        """GrammarError naming what the library refuses in `spec`; nothing when it compiles."""
        self.constraint(spec)

    def constraint(self, spec: GrammarSpec) -> Constraint:
        from llguidance import LLMatcher

        matcher = LLMatcher(self.tokenizer, self.grammar_text(spec), log_level=0)
        if matcher.is_error():
            raise GrammarError(f"the {spec.kind.replace('_', ' ')} was refused: {matcher.get_error()}")
        return Constraint(matcher, self.vocab_size, self.eos)


class Constraint:
    """The grammar state of one answer (see the module docstring)."""

    def __init__(self, matcher, vocab_size: int, eos: frozenset[int] = frozenset()):
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.eos = eos  # the end tokens: allowed where the grammar is complete, never consumed
        self._words = (vocab_size + 31) // 32
        self._ahead: list[int] = []  # tokens past the committed text the matcher stands after
        self._masks: dict[tuple[int, ...], torch.Tensor | None] = {}  # per state ahead, until a commit

    # -- moving --------------------------------------------------------------------------
    def _goto(self, ahead: list[int]) -> bool:
        """Stand after the committed text plus `ahead`; False where the grammar forbids one of
        its tokens (the matcher then stands after the allowed part)."""
        n = common_prefix(self._ahead, ahead, min(len(self._ahead), len(ahead)))
        if n < len(self._ahead):
            self.matcher.rollback(len(self._ahead) - n)
            del self._ahead[n:]
        if n < len(ahead):
            took = self.matcher.try_consume_tokens(list(ahead[n:]))  # stops before a forbidden token
            self._ahead.extend(ahead[n : n + took])
            return n + took == len(ahead)
        return True

    def commit(self, tokens: list[int]) -> None:
        """The answer went on with `tokens` (each one sampled from a masked row, so allowed); an
        end token, last, ends it where the grammar is complete."""
        ends = bool(tokens) and tokens[-1] in self.eos
        body = list(tokens[:-1]) if ends else list(tokens)
        if not self._goto(body) or (ends and not self.matcher.is_accepting()):
            raise GrammarError(f"an emitted token is outside the grammar: {self.matcher.get_error() or tokens}")
        self._ahead = []
        self._masks.clear()

    # -- asking ----------------------------------------------------------------------------
    def allowed(self, ahead: list[int] = ()) -> torch.Tensor | None:
        """[V] bool: the tokens the grammar allows after the committed text plus `ahead`; None
        where `ahead` itself leaves the grammar (a state no acceptance test can reach)."""
        key = tuple(ahead)
        if key in self._masks:
            return self._masks[key]
        mask = None
        if self._goto(list(ahead)):
            bits = torch.empty(self._words, dtype=torch.int32)
            self.matcher.unsafe_compute_mask_ptr(bits.data_ptr(), self._words * 4)
            mask = torch.from_numpy(np.unpackbits(bits.numpy().view(np.uint8), bitorder="little")[: self.vocab_size]
                                    .astype(bool))
            if not bool(mask.any()):
                raise GrammarError(f"the grammar allows no token here: {self.matcher.get_error() or 'a dead end'}")
        self._masks[key] = mask
        return mask

    def mask(self, logits: torch.Tensor, draft: list[int], first: int = 0) -> torch.Tensor:
        """logits [rows, V] -> the same with forbidden tokens at -inf, row i at the state after
        draft[: first + i]. A row past a forbidden proposal is left as it is: the acceptance test
        stops at that proposal (its masked probability is 0), so no row after it is ever read."""
        out = logits.clone()
        for i in range(logits.shape[0]):
            allowed = self.allowed(draft[: first + i])
            if allowed is None:
                break
            width = min(out.shape[-1], allowed.shape[0])
            out[i, :width].masked_fill_(~allowed[:width].to(out.device), float("-inf"))
            out[i, width:] = float("-inf")
        return out

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of `tokens` the grammar allows in a row after the committed text."""
        self._goto([])
        return self.matcher.validate_tokens(list(tokens))

    def forced(self, limit: int) -> list[int]:
        """Up to `limit` tokens the grammar forces next (the text it forces, in the tokenizer's own
        tokenization): a proposal that needs no model."""
        if limit <= 0:
            return []
        self._goto([])
        return list(self.matcher.compute_ff_tokens())[:limit]

    @property
    def finished(self) -> bool:
        """Whether the committed text is complete for the grammar (it may end here)."""
        self._goto([])
        return self.matcher.is_accepting()
