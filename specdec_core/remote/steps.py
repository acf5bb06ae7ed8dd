"""Each token's kind, rebuilt from llama-server's running draft counters.

With `timings_per_token: true`, every streamed chunk of llama-server carries the request's
running `draft_n` (tokens the draft proposed so far) and `draft_n_accepted` (of those, kept),
and `tokens_predicted` (tokens generated so far). The server counts a step's draft before it
verifies it and emits the step's tokens (the kept drafts, then the target's own token) after
both counters moved, so:

- the first token whose chunk shows new counters starts a speculative step that proposed
  d = the growth of draft_n and kept a = the growth of draft_n_accepted; the step is that
  token and the next a (a + 1 in all): `accepted` x a, then `bonus` when a == d (the target's
  extra token after all were kept) or `corrected` (its token at the first rejection);
- a token whose counters did not move and that no open step covers is a plain step: the target
  alone, no proposal (the prompt's first token, a step whose draft came back empty): `standard`.

Colours never flatter: a token is only accepted/bonus/corrected when the counters prove it.
The server holds back a token that ends inside a UTF-8 character and sends no chunk for it
(its count arrives with the next chunk); when such a gap hides where a step began, or the
counters do not fit the rule above (a server that counts differently), the tokens are `server`
(origin unknown) until the next step that starts in plain sight.

No I/O here: `StepRebuilder.feed()` takes one chunk's numbers and returns the kinds of the
tokens that chunk completes, so it is tested on hand-built counter sequences as well as on a
real llama-server's stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..events import TokenKind


@dataclass(frozen=True, slots=True)
class TokenOrigin:
    """Where one token came from: its kind, its step (0-based, in this answer), its position
    in that step's proposal (None for `standard` and `server`) and that step's draft length."""

    kind: TokenKind
    step: int
    draft_position: int | None
    draft_length: int


@dataclass
class StepRebuilder:
    """Feed every chunk in order; read the figures once the answer is done."""

    n: int = 0  # tokens accounted for
    draft_n: int = 0  # the counters as of the last chunk that had them
    accepted_n: int = 0
    step: int = -1  # index of the step the latest token belongs to
    steps_known: bool = True  # every step boundary was seen (else the step count is a bound)
    # the open speculative step: its shape and how many of its tokens are still to come
    _d: int = 0
    _a: int = 0
    _pos: int = 0
    _left: int = 0
    _lost: bool = False  # alignment unknown until a step starts in plain sight
    # per speculative step, as rebuilt: (proposed, accepted)
    spec_steps: list[tuple[int, int]] = field(default_factory=list)
    spec_step_tokens: int = 0  # tokens those steps emitted (kept drafts and the target's own)
    last_draft_length: int | None = None  # k of the latest step (0: plain); None before one
    plain_steps: int = 0
    unknown_tokens: int = 0  # tokens marked `server`
    mismatch: str = ""  # why colours were withheld, the first time it happened

    def feed(self, n: int, counters: tuple[int, int] | None) -> list[TokenOrigin]:
        """One chunk: `n` = tokens generated so far (its `tokens_predicted`), `counters` =
        (draft_n, draft_n_accepted) from its timings, or None when the chunk had no timings.
        Returns the origins of tokens self.n+1 .. n (empty when n did not grow)."""
        out: list[TokenOrigin] = []
        if n <= self.n:
            return out
        if counters is None:
            self._lost = True
            self.steps_known = False
            for _ in range(n - self.n):
                out.append(self._unknown("the server sent a chunk without its draft counters"))
            self.n = n
            return out
        d_new, a_new = counters
        moved = (d_new, a_new) != (self.draft_n, self.accepted_n)
        hidden = False  # a token of this chunk may hold the step start: the rest is unknown
        for i in range(self.n + 1, n + 1):
            if moved and i == n and not hidden:
                # the first token shown with new counters, and every token before it is
                # accounted for: the step that moved them starts here, in plain sight
                if self._left > 0 and not self._lost:
                    self._withhold(f"a step ended {self._left} token(s) before its counters said")
                out.append(self._start(d_new - self.draft_n, a_new - self.accepted_n))
            elif self._left > 0 and not self._lost:
                out.append(self._in_step())
            elif not moved:
                out.append(self._unknown("") if self._lost else self._plain())
            else:
                # the counters moved somewhere among tokens sent without a chunk of their own
                hidden = True
                self._lost = True
                self.steps_known = False
                out.append(self._unknown("a token held back (a split character) hid where a step began"))
        self.n = n
        self.draft_n, self.accepted_n = d_new, a_new
        return out

    # -- token kinds ----------------------------------------------------------------------
    def _start(self, d: int, a: int) -> TokenOrigin:
        if d < 1 or a < 0 or a > d:
            self._withhold(f"the counters moved by {d} proposed / {a} accepted, which no step can do")
            return self._unknown("")
        self._lost = False
        self.step += 1
        self.spec_steps.append((d, a))
        self._d, self._a, self._pos, self._left = d, a, 0, a + 1
        return self._in_step()

    def _in_step(self) -> TokenOrigin:
        self.spec_step_tokens += 1
        self.last_draft_length = self._d
        pos = self._pos
        if pos < self._a:
            kind = TokenKind.ACCEPTED
        else:
            kind = TokenKind.BONUS if self._a == self._d else TokenKind.CORRECTED
        self._pos += 1
        self._left -= 1
        return TokenOrigin(kind, self.step, pos, self._d)

    def _plain(self) -> TokenOrigin:
        self.step += 1
        self.plain_steps += 1
        if self.step > 0:  # the prompt's first token is no step after the prefill
            self.last_draft_length = 0
        return TokenOrigin(TokenKind.STANDARD, self.step, None, 0)

    def _withhold(self, why: str) -> None:
        """The counters do not fit: no colour until a step starts in plain sight again."""
        self._lost = True
        self._left = 0
        self.steps_known = False
        if not self.mismatch:
            self.mismatch = why

    def _unknown(self, why: str) -> TokenOrigin:
        if why and not self.mismatch:
            self.mismatch = why
        self.step += 1  # counted as its own step: a bound that never flatters tau
        self.unknown_tokens += 1
        return TokenOrigin(TokenKind.SERVER, self.step, None, 0)

    # -- figures --------------------------------------------------------------------------
    @property
    def verifications(self) -> int:
        """Target passes that emitted tokens: speculative + plain steps, and one per `server`
        token (so when steps are not all known, tau is a lower bound, never flattered)."""
        return len(self.spec_steps) + self.plain_steps + self.unknown_tokens

    def per_position(self) -> tuple[list[int], list[int]]:
        """(proposed, accepted) per draft position over the rebuilt speculative steps."""
        k = max((d for d, _ in self.spec_steps), default=0)
        proposed, accepted = [0] * k, [0] * k
        for d, a in self.spec_steps:
            for i in range(d):
                proposed[i] += 1
            for i in range(a):
                accepted[i] += 1
        return proposed, accepted
