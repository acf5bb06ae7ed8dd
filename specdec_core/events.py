"""The values the engine hands out: token events while it runs, stats when it is done.

Nothing here imports torch, so the GUI thread can import these types freely.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum


class TokenKind(str, Enum):
    """Where an emitted token came from. The colours are the product: a kind must never credit
    the draft with a token it did not earn.

    STANDARD  -- the target decided it alone: standard decoding, and every plain step inside
                 speculative mode (the prompt prefill that gives the first token, a step where
                 the adaptive controller proposed nothing or prompt lookup found no match, the
                 last step when the budget leaves no room for a proposal).
    ACCEPTED  -- a proposer's token that the target's acceptance test kept.
    CORRECTED -- sampled from the residual after a rejection (greedy: the target's argmax there).
    BONUS     -- sampled from the target after all of the step's k >= 1 proposals were
                 accepted; so a run never holds more bonus tokens than accepted ones.
    SERVER    -- a server target's token whose origin the server does not report
                 (specdec_core/remote: an OpenAI-compatible server that gives no per-token
                 draft figures, or a stretch where llama-server's counters cannot place it).
    """

    STANDARD = "standard"
    ACCEPTED = "accepted"
    CORRECTED = "corrected"
    BONUS = "bonus"
    SERVER = "server"


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token's log-probability under the target: its id, its own text and UTF-8 bytes (a
    token may hold part of a character: its text then has U+FFFD where the bytes are cut)."""

    token_id: int
    text: str
    utf8: tuple[int, ...]
    logprob: float


@dataclass(frozen=True, slots=True)
class Logprobs:
    """An emitted token's log-probability and the `top` most likely tokens at its position
    (most likely first), from the target's own distribution there: the log-softmax of its
    logits, before any sampling setting (as vLLM and llama-server report them by default)."""

    chosen: TokenLogprob
    top: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One emitted token.

    step            -- index of the target forward pass that decided this token (0-based).
    draft_position  -- index inside that step's proposal (0-based); for CORRECTED/BONUS the
                       position the target filled; None for STANDARD tokens.
    t               -- seconds since generation started (prefill included, model load not).
    draft_length    -- tokens proposed in this step (k after clipping to the budget; 0 in a
                       plain step, and in standard decoding).
    margin          -- greedy only: the target's top-1 minus top-2 logit where this token was
                       chosen. A small margin marks a near-tie that reduced precision may flip.
    text            -- the text this token adds to the decoded output ("" while a multi-byte
                       character is still incomplete; it then arrives with a later token).
    source          -- what proposed this token's step: "draft" (the draft model), "lookup"
                       (copied from the conversation) or "grammar" (forced by a constrained
                       answer's grammar); "" for a step that proposed nothing.
    logprobs        -- the target's log-probabilities at this position, when the settings ask
                       for them (DecodeSettings.logprobs); None otherwise.
    """

    token_id: int
    text: str
    kind: TokenKind
    step: int
    draft_position: int | None
    t: float
    margin: float | None = None
    draft_length: int = 0
    source: str = ""
    logprobs: Logprobs | None = None


class EventSequence:
    """Views over an `events` list of TokenEvents (a generation, a race lane)."""

    events: list[TokenEvent]

    @property
    def token_ids(self) -> list[int]:
        return [e.token_id for e in self.events]

    @property
    def kinds(self) -> list[str]:
        return [e.kind.value for e in self.events]

    @property
    def sources(self) -> list[str]:
        """Per token, what proposed its step: "draft", "lookup", "grammar", or "" (a plain step)."""
        return [e.source for e in self.events]


class EventStream(EventSequence):
    """An answer as it streams (contract.GenerationLike): iterate for its TokenEvents, which
    it keeps in `events`; `run()` takes it to the end."""

    own_clock = False  # decoded here, timed by whoever iterates (contract.GenerationLike.own_clock)

    def __iter__(self):
        raise NotImplementedError

    def run(self):
        for _ in self:
            pass
        return self


@dataclass(slots=True)
class Stats:
    """What one generation did, returned as a value (printing lives in the CLI/GUI/bench).

    The decoder keeps it current while it runs: when a step's tokens are handed out, the
    stats already count that step, so a snapshot taken between steps (`Generation.snapshot`)
    describes exactly the tokens seen so far. Every number the GUI, the bench and the race
    show is one of the fields or properties here; nothing recomputes them from events.

    Steps: every target forward pass is a step. A *speculative* step verified k >= 1
    proposed tokens; every other step is a *plain* step (the prompt prefill that gives the
    first token, a step where the controller proposed nothing or prompt lookup found no match,
    the last step when the budget leaves no room). Each plain step emits one `standard` token.
    """

    new_tokens: int = 0
    seconds: float = 0.0  # generation so far: prefill + decoding up to the end of the latest step, no model loading
    prefill_seconds: float = 0.0  # time to the first token (the target's prompt prefill)
    # proposed tokens (of any source: the draft model, prompt lookup, the grammar) that reached
    # verification, and those of them the target kept
    proposed_tokens: int = 0
    accepted_tokens: int = 0
    target_forward_passes: int = 0  # every step, the prefill included
    draft_forward_passes: int = 0
    speculative_steps: int = 0  # steps that verified k >= 1 proposed tokens
    speculative_step_tokens: int = 0  # tokens those steps emitted (accepted + corrected/bonus)
    per_position_proposed: list[int] = field(default_factory=list)  # index i: steps that proposed >= i+1 tokens
    per_position_accepted: list[int] = field(default_factory=list)  # index i: steps that accepted position i
    draft_lengths: list[int] = field(default_factory=list)  # k of each speculative step
    last_draft_length: int | None = None  # k of the latest step after the prefill (0: plain); None before one
    # "eos" | "max_new_tokens" (the answer's own budget) | "context" (no budget: the context is
    # full) | "cancelled"; "" while running
    stop_reason: str = ""
    reused_prompt_tokens: int = 0  # prompt tokens whose KV entries an earlier turn left in the cache
    mode: str = "standard"
    proposer: str | None = None
    # per source of proposals ("draft", "lookup"): speculative steps, tokens proposed, kept
    steps_by_source: dict[str, int] = field(default_factory=dict)
    proposed_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    # seconds of the speculative steps per source (drafting, the draft's catch-up read and
    # the verification): what each source's tokens cost
    seconds_by_source: dict[str, float] = field(default_factory=dict)
    # the draft's reads of text it had not seen (the prompt or a turn's new message on a late
    # start, what plain and lookup steps wrote): seconds and tokens, part of seconds_by_source
    catchup_seconds: float = 0.0
    catchup_tokens: int = 0
    # the draft's reads while nothing ran, after the turn before this one ended: of what that
    # turn's windows had skipped (Engine.read_ahead: the app does it while the user reads and
    # types) and of the message being written (Engine.read_prompt): time the user did not wait
    # for, so not in `seconds`; it is why this turn's catch-up is short
    idle_read_seconds: float = 0.0
    idle_read_tokens: int = 0
    # the target's read, before the message was sent, of the prompt the input box would make
    # (Engine.read_prompt: the app does it while the user writes under a long attachment): those
    # of reused_prompt_tokens, and the read's time, which the user did not wait for either
    prompt_read_ahead_seconds: float = 0.0
    prompt_read_ahead_tokens: int = 0
    # plain steps after the prefill: their time and number (in standard decoding every step
    # after the first), so a report can show that a plain step inside speculative decoding
    # costs what a standard step costs
    plain_step_seconds: float = 0.0
    timed_plain_steps: int = 0

    @property
    def mean_plain_step_seconds(self) -> float:
        """The mean time of a plain step after the prefill (0 when there was none)."""
        return self.plain_step_seconds / self.timed_plain_steps if self.timed_plain_steps else 0.0

    @property
    def tokens_per_second(self) -> float:
        """End-to-end tok/s: every new token over the whole generation time, the prefill (time
        to the first token) included -- what a user waits for, and what the bench compares."""
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        """Decode tok/s: the tokens after the first over the time after the first token, so a
        long prompt's prefill does not hide the decoding speed (0 until a second token)."""
        dt = self.seconds - self.prefill_seconds
        return (self.new_tokens - 1) / dt if self.new_tokens > 1 and dt > 0 else 0.0

    @property
    def acceptance_rate(self) -> float:
        """alpha = accepted / proposed, over the speculative steps (0 when nothing was proposed)."""
        return self.accepted_tokens / self.proposed_tokens if self.proposed_tokens else 0.0

    @property
    def tokens_per_speculative_step(self) -> float:
        """tau = tokens emitted per speculative step (0 when none): plain steps emit one token
        each by definition and are counted apart (`plain_steps`, `plain_step_share`)."""
        return self.speculative_step_tokens / self.speculative_steps if self.speculative_steps else 0.0

    @property
    def plain_steps(self) -> int:
        """Steps that proposed nothing, the prefill included (one `standard` token each)."""
        return max(self.target_forward_passes - self.speculative_steps, 0)

    @property
    def plain_step_share(self) -> float:
        """plain steps / all steps (1.0 in standard decoding)."""
        return self.plain_steps / self.target_forward_passes if self.target_forward_passes else 0.0

    @property
    def per_position_acceptance(self) -> list[float]:
        return [a / p if p else 0.0 for a, p in zip(self.per_position_accepted, self.per_position_proposed)]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            tokens_per_second=self.tokens_per_second,
            decode_tokens_per_second=self.decode_tokens_per_second,
            acceptance_rate=self.acceptance_rate,
            tokens_per_speculative_step=self.tokens_per_speculative_step,
            plain_steps=self.plain_steps,
            plain_step_share=self.plain_step_share,
            per_position_acceptance=self.per_position_acceptance,
            mean_plain_step_seconds=self.mean_plain_step_seconds,
        )
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Stats:
        """The fields of a to_dict() (a saved message's figures); the derived values are left
        to the properties, anything else in `d` is ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def joined(self, then: Stats) -> Stats:
        """One answer written in two generations (the app's Continue): `self`, then `then`,
        continuing it. Counts, times and per-position tallies add up, the draft lengths follow
        one another, the latest step (where `then` had one after its prefill) and the stop reason
        are `then`'s; the rates and shares
        (properties) follow from the sums. Speculative when either part was (a standard part's
        steps are plain steps, which is how they count)."""
        out = Stats()
        for f in fields(Stats):
            a, b = getattr(self, f.name), getattr(then, f.name)
            if b is None or isinstance(a, bool) or not isinstance(a, (int, float, list, dict)):
                setattr(out, f.name, b if b is not None else a)
            elif isinstance(a, list):
                setattr(out, f.name, _summed_lists(a, b) if f.name.startswith("per_position") else a + b)
            elif isinstance(a, dict):
                setattr(out, f.name, {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}})
            else:
                setattr(out, f.name, a + b)
        out.last_draft_length = then.last_draft_length if then.last_draft_length is not None else self.last_draft_length
        out.reused_prompt_tokens = self.reused_prompt_tokens  # the first part's prompt; a continuation reuses its own
        out.prompt_read_ahead_tokens = self.prompt_read_ahead_tokens  # among the reused ones: the first part's
        out.prompt_read_ahead_seconds = self.prompt_read_ahead_seconds
        if "speculative" in (self.mode, then.mode):
            out.mode = "speculative"
        if self.proposer and then.proposer and self.proposer != then.proposer:
            out.proposer = f"{self.proposer}, then {then.proposer}"
        else:
            out.proposer = then.proposer or self.proposer
        return out


def _summed_lists(a: list, b: list) -> list:
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(max(len(a), len(b)))]


# greedy near-tie threshold on the target's top-1 minus top-2 logit, by the target's dtype: a
# divergence at or below it is a floating-point near-tie (the two candidates score the same to
# within that precision's rounding); above it, different text at temperature 0 points to a bug.
# The one table the race, the race view and the benchmark read.
NEAR_TIE_MARGIN = {"float32": 1e-2, "bfloat16": 0.25, "float16": 0.1}


def near_tie_margin(dtype: object) -> float:
    """The threshold for a dtype ("bfloat16", torch.bfloat16, ...); float32's when unknown."""
    return NEAR_TIE_MARGIN.get(str(dtype).replace("torch.", ""), NEAR_TIE_MARGIN["float32"])


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
