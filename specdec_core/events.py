"""The values the engine hands out: token events while it runs, stats when it is done.

Nothing here imports torch, so the GUI thread can import these types freely.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class TokenKind(str, Enum):
    """Where an emitted token came from.

    STANDARD  -- standard decoding: the target sampled it alone.
    ACCEPTED  -- a proposer's token that the target's acceptance test kept.
    CORRECTED -- sampled from the residual after a rejection (greedy: the target's argmax there).
    BONUS     -- sampled from the target after every proposed token was accepted
                 (also the target's own token when a proposer had nothing to offer).
    SERVER    -- a server target's token whose origin the server does not report
                 (specdec_core/server: an OpenAI-compatible server that gives no per-token
                 draft figures, or a stretch where llama-server's counters cannot place it).
    """

    STANDARD = "standard"
    ACCEPTED = "accepted"
    CORRECTED = "corrected"
    BONUS = "bonus"
    SERVER = "server"


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One emitted token.

    step            -- index of the target forward pass that decided this token (0-based).
    draft_position  -- index inside that step's proposal (0-based); for CORRECTED/BONUS the
                       position the target filled; None in standard decoding.
    t               -- seconds since generation started (prefill included, model load not).
    draft_length    -- tokens proposed in this step (k after clipping to the budget; 0 when the
                       proposer had nothing, or in standard decoding).
    margin          -- greedy only: the target's top-1 minus top-2 logit where this token was
                       chosen. A small margin marks a near-tie that reduced precision may flip.
    text            -- the text this token adds to the decoded output ("" while a multi-byte
                       character is still incomplete; it then arrives with a later token).
    """

    token_id: int
    text: str
    kind: TokenKind
    step: int
    draft_position: int | None
    t: float
    margin: float | None = None
    draft_length: int = 0


class EventSequence:
    """Views over an `events` list of TokenEvents (a generation, a race lane)."""

    events: list[TokenEvent]

    @property
    def token_ids(self) -> list[int]:
        return [e.token_id for e in self.events]

    @property
    def kinds(self) -> list[str]:
        return [e.kind.value for e in self.events]


@dataclass(slots=True)
class Stats:
    """What one generation did, returned as a value (printing lives in the CLI/GUI/bench)."""

    new_tokens: int = 0
    seconds: float = 0.0  # generation only: prefill + decoding, no model loading
    prefill_seconds: float = 0.0  # time to the first token
    draft_tokens: int = 0  # proposed tokens that reached verification
    accepted_draft_tokens: int = 0
    target_forward_passes: int = 0  # prefill included
    draft_forward_passes: int = 0
    per_position_proposed: list[int] = field(default_factory=list)  # index i: steps that proposed >= i+1 tokens
    per_position_accepted: list[int] = field(default_factory=list)  # index i: steps that accepted position i
    draft_lengths: list[int] = field(default_factory=list)  # k used at each verification step
    stop_reason: str = ""  # "eos" | "max_new_tokens" | "cancelled"
    reused_prompt_tokens: int = 0  # prompt tokens whose KV entries an earlier turn left in the cache
    mode: str = "standard"
    proposer: str | None = None

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def acceptance_rate(self) -> float:
        """alpha = accepted / proposed (0 when nothing was proposed)."""
        return self.accepted_draft_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def decode_steps(self) -> int:
        """Target verifications after the prefill (each emits >= 1 token)."""
        return max(self.target_forward_passes - 1, 0)

    @property
    def mean_accepted_per_step(self) -> float:
        """tau = tokens emitted per target verification (the prefill counts as one: it emits one)."""
        return self.new_tokens / self.target_forward_passes if self.target_forward_passes else 0.0

    @property
    def per_position_acceptance(self) -> list[float]:
        return [a / p if p else 0.0 for a, p in zip(self.per_position_accepted, self.per_position_proposed)]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            tokens_per_second=self.tokens_per_second,
            acceptance_rate=self.acceptance_rate,
            mean_accepted_per_step=self.mean_accepted_per_step,
            per_position_acceptance=self.per_position_acceptance,
        )
        return d


@dataclass(frozen=True, slots=True)
class Divergence:
    """First position where two greedy runs differ, and how close the target's call was there."""

    position: int
    token_a: int
    token_b: int
    margin_a: float | None
    margin_b: float | None

    @property
    def margin(self) -> float | None:
        margins = [m for m in (self.margin_a, self.margin_b) if m is not None]
        return min(margins) if margins else None

    def is_near_tie(self, threshold: float) -> bool:
        m = self.margin
        return m is not None and m <= threshold


def first_divergence(a: list[TokenEvent], b: list[TokenEvent]) -> Divergence | None:
    """Compare two greedy event streams token by token; None when one is a prefix of the other
    of the same length (identical)."""
    for i, (ea, eb) in enumerate(zip(a, b)):
        if ea.token_id != eb.token_id:
            return Divergence(i, ea.token_id, eb.token_id, ea.margin, eb.margin)
    if len(a) != len(b):
        i = min(len(a), len(b))
        ea = a[i] if i < len(a) else None
        eb = b[i] if i < len(b) else None
        return Divergence(
            i,
            ea.token_id if ea else -1,
            eb.token_id if eb else -1,
            ea.margin if ea else None,
            eb.margin if eb else None,
        )
    return None
