"""Draft length and source: fixed, or an adaptive controller driven by what it measures.

The rule (README, "Adaptive draft length"):

1. Within a step the draft model keeps proposing, up to k_max (16) tokens, while its own
   probability that everything it proposed so far is right -- the product of its
   probabilities of its picks -- stays at least a threshold; the token that takes it below
   is still proposed. The decision depends on the draft's own values only, so the
   acceptance rule stays exact.
2. The threshold is what one more drafted token costs, in plain target steps: the draft's
   time per token plus the extra verification time per proposed row, both measured (EMA)
   and divided by the measured plain step time, then divided by the draft's calibration
   (tokens kept / tokens its confidences expected, decayed sums: a small draft is often
   surer than it is right); clamped to [0.2, 0.9], 0.5 until measured. A token worth
   proposing is accepted with at least that chance. Prompt lookup has no probabilities to
   stop on: its length is a cap instead, starting at 4, +2 after a step whose whole proposal
   was accepted, -1 after a rejection (1..k_max).
3. Which source, if any: the controller keeps measured rates -- tokens per second of plain
   target steps (1 / the time of a one-token step), of lookup steps (emitted / verification
   time) and of draft steps (emitted / (drafting + verification time)), each an exponential
   average -- and lets a source propose while its rate is at least the plain one (lookup's
   also at least the draft's while the draft is on). A source that lost is probed again after
   `probe_every` steps; a probe that does not change the choice doubles the wait (up to
   `probe_max`), a change resets it; a probe's rate replaces the stale one of its choice.
   While sources propose, a plain step every `probe_max` steps keeps the plain rate current.
4. Start plain: the draft model reads nothing -- not even the prompt -- until speculation is
   predicted to pay. The prediction costs nothing a standard step does not compute: the
   target's own margins (greedy: top-1 minus top-2 logit, which every greedy step takes for
   the near-tie check) say how predictable the text is; the share of tokens the target was
   sure of predicts the draft's acceptance (calibrated on the embedded pair, docs/speed-notes.md).
   With that and the costs (a draft token and a verified row, measured or, before the first
   draft step, from the prompt's prefill and a prior), the draft starts once the tokens it is
   expected to save within the next `horizon` tokens outweigh its read of the text so far.
   A step whose text the draft has not read pays that read apart (the proposal's catch-up),
   and it counts in neither rate: it is the price of switching, not of the drafted tokens.
   Prompt lookup costs no read at all, so it may propose from the first step.

Why the draft's running confidence and not a draft length from the textbook
E(k) = (1 - alpha^(k+1)) / (1 - alpha): real text is not i.i.d. -- code has long runs the
draft is sure of, chat has forks it is not -- and the draft's own probabilities see both as
they come. Replayed on the built-in prompts (docs/speed-notes.md, item 12) this beat the
earlier rule on four of five prompts and tied on the fifth. The acceptance rate alpha is still
estimated and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .proposers.base import DRAFT, LOOKUP, DraftPlan


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one step after the prefill did and cost, as the decoder measured it."""

    source: str  # DRAFT, LOOKUP, or "" for a plain step
    proposed: int
    accepted: int
    draft_seconds: float  # producing the proposal, its catch-up read excluded
    verify_seconds: float  # the target's pass
    catchup_seconds: float = 0.0  # the draft's read of text it had not seen
    catchup_tokens: int = 0  # how many tokens that read took in
    expected_accepted: float | None = None  # the draft's own expectation (sum of its running confidences)
    # greedy: the target's top-1 minus top-2 logit at each emitted token (None when sampling)
    margins: list[float] | None = None


class FixedDraftLength:
    """k tokens every step, from each source the proposer has; no early stop."""

    def __init__(self, k: int, sources: tuple[str, ...] = (DRAFT,)):
        if k < 1:
            raise ValueError(f"draft length must be >= 1, got {k}")
        self.k = k
        self._plan = DraftPlan(k if DRAFT in sources else 0, k if LOOKUP in sources else 0, 0.0)

    def plan(self, backlog: int = 0, remaining: int | None = None) -> DraftPlan:
        return self._plan

    def observe_prefill(self, rows: int, seconds: float) -> None:
        pass

    def observe(self, outcome: StepOutcome) -> None:
        pass


@dataclass
class _Choice:
    """One source's measured speed against plain steps', and when to try it again once it lost."""

    rate: float | None = None  # tokens / s of its steps
    steps: int = 0
    wait: int = 8  # steps between probes while it is off (probe_every, doubled by each lost probe)
    since: int = 0  # steps since it last proposed


@dataclass
class AdaptiveDraftLength:
    sources: tuple[str, ...] = (DRAFT,)
    k_max: int = 16
    cap_start: int = 4
    threshold_start: float = 0.5  # until both costs are measured
    threshold_min: float = 0.2
    threshold_max: float = 0.9
    ema: float = 0.3
    probe_every: int = 8
    probe_max: int = 32
    decay: float = 0.9
    # start plain (rule 4): a drafted token's cost in plain steps before one was measured, the
    # margin above which the target counts as sure of a token, how the share of such tokens
    # maps to the draft's acceptance, and how many tokens ahead a read must pay for itself
    draft_cost_prior: float = 0.35
    sure_margin: float = 2.0
    alpha_floor: float = 0.3
    alpha_slope: float = 0.65
    horizon: int = 64
    sure_weight: float = 0.25  # per token: the share follows the last handful of tokens
    # pseudo-counts for alpha (reporting): a prior of 0.6 worth a handful of tokens
    accepted: float = 3.0
    trials: float = 5.0
    # the draft's calibration: tokens kept against the number its confidences expected
    # (decayed sums; a prior of "calibrated" worth a couple of steps)
    kept: float = 2.0
    expected: float = 2.0
    cap: int | None = None  # prompt lookup's current length cap
    draft_per_token: float | None = None  # seconds
    read_per_token: float | None = None  # seconds the draft takes to read a token of backlog
    row_cost: float | None = None  # extra verification time per proposed row, in plain steps
    prefill_row_seconds: float | None = None  # the prompt's prefill time per row (a prior for row_cost)
    plain_rate: float | None = None  # tokens / s of plain steps
    sure_share: float = 0.0  # EMA over emitted tokens of 'the target was sure of it' (0 until it was)
    remaining: int | None = None  # the answer's token budget left, when the decoder tells
    draft: _Choice = field(default_factory=_Choice)
    lookup: _Choice = field(default_factory=_Choice)
    draft_started: bool = False
    _since_plain: int = 0
    _probing: str | None = None  # the source a probe is testing ("" = a plain probe), else None

    def __post_init__(self) -> None:
        self.cap = self.cap_start
        self.draft.wait = self.lookup.wait = self.probe_every

    # -- what the controller reports --------------------------------------------------------
    @property
    def alpha(self) -> float:
        return min(self.accepted / self.trials, 0.999) if self.trials > 0 else 0.0

    @property
    def calibration(self) -> float:
        """Tokens kept / tokens the draft's confidences expected (1: calibrated; < 1:
        overconfident), held to [0.5, 1.5] so a few odd steps cannot run away with it."""
        return min(max(self.kept / self.expected, 0.5), 1.5) if self.expected > 0 else 1.0

    @property
    def cost_ratio(self) -> float | None:
        """c = draft time per token / time of a plain target step."""
        if self.draft_per_token is None or self.plain_rate is None:
            return None
        return self.draft_per_token * self.plain_rate

    @property
    def min_confidence(self) -> float:
        """The draft stops once its running confidence falls below this (rule 2)."""
        c = self.cost_ratio
        if c is None or self.row_cost is None:
            return self.threshold_start
        # the draft's confidence, scaled by how often such confidence was borne out, must
        # pay for the token: confidence >= cost / calibration
        return min(max((c + self.row_cost) / self.calibration, self.threshold_min), self.threshold_max)

    def wins(self, source: str) -> bool:
        """Does this source's measured rate beat what a step would do without it?"""
        choice = self.draft if source == DRAFT else self.lookup
        if choice.rate is None or self.plain_rate is None:
            return True  # unmeasured: try it (the draft's start is rule 4's, see draft_predicted_to_pay)
        rival = self.plain_rate
        if source == LOOKUP and DRAFT in self.sources and self.draft_started and self.wins(DRAFT):
            rival = max(rival, self.draft.rate or 0.0)
        return choice.rate >= rival

    # -- rule 4 ----------------------------------------------------------------------------
    @property
    def predicted_alpha(self) -> float:
        return min(self.alpha_floor + self.alpha_slope * self.sure_share, 0.95)

    def predicted_gain(self) -> float:
        """Tokens per plain-step time of draft steps over plain steps' 1, at the predicted
        acceptance and the costs known now (the best fixed k of 1..8, i.i.d. acceptance)."""
        if self.plain_rate is None:
            return 0.0
        c = self.cost_ratio if self.cost_ratio is not None else self.draft_cost_prior
        r = self.row_cost
        if r is None:
            r = self.prefill_row_seconds * self.plain_rate if self.prefill_row_seconds is not None else 0.25
        a = self.predicted_alpha
        best, run = 0.0, 1.0
        for k in range(1, 9):
            run += a**k  # E(k) = 1 + a + ... + a^k
            best = max(best, run / (1.0 + k * (c + r)))
        return best

    def draft_predicted_to_pay(self, backlog: int) -> bool:
        """Start (or, after it lost, probe) the draft: do the tokens it is expected to save
        over the next `horizon` tokens outweigh reading `backlog` tokens first?"""
        gain = self.predicted_gain()
        if gain <= 1.0:
            return False
        horizon = self.horizon if self.remaining is None else min(self.horizon, self.remaining)
        saved = horizon * (1.0 - 1.0 / gain)  # plain steps
        if self.read_per_token is not None and self.plain_rate is not None:
            read = backlog * self.read_per_token * self.plain_rate
        else:  # a draft row of a long pass: a draft token's cost times a target row's
            c = self.cost_ratio if self.cost_ratio is not None else self.draft_cost_prior
            r = self.prefill_row_seconds * self.plain_rate if self.prefill_row_seconds is not None else 0.25
            read = backlog * c * r
        return saved > read

    # -- the plan --------------------------------------------------------------------------
    def plan(self, backlog: int = 0, remaining: int | None = None) -> DraftPlan:
        """This step's plan. backlog: tokens the draft model would read before proposing (its
        catch-up); remaining: the answer's budget left."""
        self.remaining = remaining
        if self.plain_rate is None:
            return DraftPlan()  # step 1: a plain step measures what not speculating costs
        self._probing = None
        lookup = draft = 0
        if LOOKUP in self.sources:
            self.lookup.since += 1
            if self.wins(LOOKUP) or self._probe_due(self.lookup, LOOKUP):
                lookup = self.cap
        if DRAFT in self.sources:
            self.draft.since += 1
            if not self.draft_started:
                on = self.draft_predicted_to_pay(backlog)
            else:
                on = self.wins(DRAFT) or (self._probe_due(self.draft, DRAFT) and self.draft_predicted_to_pay(backlog))
            if on:
                draft = self.k_max
        self._since_plain += 1
        if (lookup or draft) and self._since_plain >= self.probe_max:
            self._probing = ""  # a plain step keeps the plain rate current
            return DraftPlan()
        return DraftPlan(draft, lookup, self.min_confidence)

    def _probe_due(self, choice: _Choice, source: str) -> bool:
        if choice.since < choice.wait:
            return False
        self._probing = source
        return True

    # -- learning --------------------------------------------------------------------------
    def observe_prefill(self, rows: int, seconds: float) -> None:
        """The target's prompt pass: its time per row is a prior for a verified row's cost."""
        if rows > 1 and seconds > 0:
            self.prefill_row_seconds = seconds / rows

    def observe(self, o: StepOutcome) -> None:
        for m in o.margins or ():
            self.sure_share = _ema(self.sure_share, 1.0 if m >= self.sure_margin else 0.0, self.sure_weight)
        seconds = o.draft_seconds + o.verify_seconds
        if seconds <= 0:
            return
        rate = (o.accepted + 1) / seconds
        probed = self._probing
        self._probing = None
        if not o.proposed:
            self._since_plain = 0
            fresh = probed == "" or self.plain_rate is None
            self.plain_rate = rate if fresh else _ema(self.plain_rate, rate, self.ema)
            return
        choice = self.draft if o.source == DRAFT else self.lookup
        choice.since = 0
        before = self.wins(o.source)
        # a probe's rate replaces the stale one: other text, other context length by now
        fresh = choice.rate is None or probed == o.source
        choice.rate = rate if fresh else _ema(choice.rate, rate, self.ema)
        choice.steps += 1
        if probed == o.source:  # did the probe change the choice?
            lost = self.wins(o.source) == before
            choice.wait = min(2 * choice.wait, self.probe_max) if lost else self.probe_every
        if self.plain_rate is not None:
            # a verification of k + 1 rows against a one-row plain step: what each proposed
            # row added (never below zero: a fast verification is not a gain per row)
            row = max(o.verify_seconds * self.plain_rate - 1.0, 0.0) / o.proposed
            self.row_cost = row if self.row_cost is None else _ema(self.row_cost, row, self.ema)
        if o.source == LOOKUP:
            if o.accepted < o.proposed:
                self.cap = max(self.cap - 1, 1)
            elif o.proposed >= self.cap:
                self.cap = min(self.cap + 2, self.k_max)
            return
        self.draft_started = True
        self.accepted = self.decay * self.accepted + o.accepted
        self.trials = self.decay * self.trials + o.accepted + (1 if o.accepted < o.proposed else 0)
        per_tok = o.draft_seconds / o.proposed
        self.draft_per_token = per_tok if self.draft_per_token is None else _ema(self.draft_per_token, per_tok, self.ema)
        if o.expected_accepted is not None:
            self.kept = self.decay * self.kept + o.accepted
            self.expected = self.decay * self.expected + o.expected_accepted
        if o.catchup_seconds > 0 and o.catchup_tokens > 0:
            per_read = o.catchup_seconds / o.catchup_tokens
            self.read_per_token = per_read if self.read_per_token is None else _ema(self.read_per_token, per_read, self.ema)


def _ema(old: float, new: float, w: float) -> float:
    return (1 - w) * old + w * new


def make_policy(draft_tokens: int | str, sources: tuple[str, ...] = (DRAFT,)):
    """`draft_tokens`: an int k >= 1, or "adaptive"; `sources`: what the proposer drafts from."""
    if draft_tokens == "adaptive":
        return AdaptiveDraftLength(sources=tuple(sources))
    return FixedDraftLength(int(draft_tokens), tuple(sources))
