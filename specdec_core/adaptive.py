"""Draft length and source: fixed, or an adaptive controller driven by what it measures.

The rule (README, "Adaptive draft length"):

1. Within a step the draft model keeps proposing, up to k_max (16) tokens, while its own
   probability that everything it proposed so far is right -- the product of its
   probabilities of its picks -- stays at least a threshold; the token that takes it below
   is still proposed. The decision depends on the draft's own values only, so the
   acceptance rule stays exact.
2. The threshold is what one more drafted token costs, in plain target steps: the draft's
   time per token plus what the verification grows by with it, both measured (EMA) and
   divided by the measured plain step time, then divided by the draft's calibration
   (tokens kept / tokens its confidences expected, decayed sums: a small draft is often
   surer than it is right); clamped to [0.2, 0.9], 0.5 until measured. A token worth
   proposing is accepted with at least that chance. The verification is measured per
   number of proposals (`verify_cost`), not as one cost per row: where a one-row step is
   memory-bound, the 2nd and 3rd rows come nearly free and the 4th does not (speed notes,
   item 64), so the threshold is set per length (`confidence_steps`). Past the longest
   length measured, each further row costs what a row of the prompt's prefill did (a long
   pass, where rows no longer ride under the weights' reads), never less than the rows
   measured so far: a two-row verification that happened to run as fast as a plain step must
   not make a 17-row one look free (speed notes, item 121).
3. Prompt lookup is judged per proposal, by the length n of the match it found (the last n
   tokens occurred before): what followed a 1-token match is rarely what comes next, what
   followed an 8-token match in an edit or a summary usually is (docs/speed-notes.md). For
   each n the controller keeps a per-token acceptance beta_n (tokens kept against
   rejections, decayed, from a prior), and plans for each n the length k that maximises
   E(k) / (1 + k r) -- E(k) = 1 + beta_n + ... + beta_n^k tokens for the cost of a plain
   step and k verified rows of r each -- or 0 where even that best rate is below the
   alternative: a draft step's measured rate when the draft is on, else a plain step's.
4. The draft model: the controller keeps measured rates -- tokens per second of plain target
   steps (1 / the time of a one-token step) and of draft steps (emitted / (drafting +
   verification time)), each an exponential average -- and lets the draft propose while its
   rate is at least the plain one. Once it lost, it is probed again after `probe_every`
   steps; a probe that does not change the choice doubles the wait (up to `probe_max`), a
   change resets it; a probe's rate replaces the stale one. While the draft speculates, a
   plain step every `probe_max` steps keeps the plain rate current.
5. Start plain: the draft model reads nothing -- not even the prompt -- until speculation is
   predicted to pay. The prediction costs next to nothing (~0.1 ms a row): the target's own
   margins (top-1 minus top-2 logit, which every greedy step takes for the near-tie check, and
   a sampled step takes for this alone) say how predictable the text is. On the embedded pair the draft
   agreed with the target on 96-100% of the tokens whose margin was >= 2 and on 43-81% of the
   others (17 bench prompts, speed notes), so the running share s of such tokens predicts
   its acceptance as 0.6 + 0.36 s. With that and the costs (a drafted token and a verified
   row, measured, or before the first draft step from the prompt's prefill and a prior), the
   draft starts once the tokens it is expected to save over the rest of the answer outweigh
   its read of the text it has not seen (at most a window of the latest tokens: the
   proposer's `unread`); "the rest of the answer" being as many tokens as the answer has had
   so far or, in a conversation, as the previous answer had (a first answer: 64, most run
   longer), whichever is more (at most 512, never past the budget): a long answer is likely
   to go on, and a conversation's answers tend to be alike. A step whose text the draft has not
   read pays that read apart (the proposal's catch-up), which counts in neither rate: it is
   the price of switching, not of the drafted tokens. Lookup reads nothing and may propose
   at once. The first step after the prefill is plain: it measures what not speculating
   costs.
6. Never a loss: per source (the draft model; lookup per match length) and per kind of text
   (prose, or code inside a fence: textkind.py), the controller keeps a ledger of the time
   its proposals lost against plain steps -- a step's drafting and verification time minus
   its tokens times a plain step's measured time; a gain is a negative loss, credited up to
   `credit_cap` plain steps so that an earlier good stretch cannot pay for a long bad one.
   A source whose loss is past `budget_share` (2%) of the answer's decoding time so far stops
   proposing in that kind of text; it may again once the budget, growing with the answer,
   covers what it lost, or when the kind of text changes (a code block opens or closes: the
   draft's rate is then measured afresh). So a 12% lookup in prose stops after a couple of
   steps, and a draft that loses in an explanation costs at most its share. Before a step,
   the draft proposes at most as many tokens as its ledger has room to lose if the first of
   them is rejected (`draft_room`; at least one): a draft that has earned nothing yet
   proposes short runs, lengthened as it earns, and one overconfident run cannot spend an
   answer's budget at once.

Why the draft's running confidence and not a draft length from the textbook
E(k) = (1 - alpha^(k+1)) / (1 - alpha): real text is not i.i.d. -- code has long runs the
draft is sure of, chat has forks it is not -- and the draft's own probabilities see both as
they come. Replayed on the built-in prompts (docs/speed-notes.md, item 12) this beat the
earlier rule on four of five prompts and tied on the fifth. The acceptance rate alpha is still
estimated and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .proposers.base import DRAFT, LOOKUP, MATCH_MAX, DraftPlan
from .textkind import PROSE

# Prompt lookup's per-token acceptance by match length before any is measured (index n, the
# last bucket holding every match of MATCH_MAX tokens or more): from the embedded pair's greedy
# answers to the bench prompts, all categories (speed notes).
LOOKUP_PRIOR = (0.0, 0.3, 0.55, 0.65, 0.7, 0.72, 0.72, 0.72, 0.88)


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
    # the target's top-1 minus top-2 logit at each emitted token (greedy and sampled; None:
    # not known, the prediction then rests on its floor)
    margins: list[float] | None = None
    match: int = 0  # a lookup proposal's match length


class FixedDraftLength:
    """k tokens every step, from each source the proposer has; no early stop."""

    def __init__(self, k: int, sources: tuple[str, ...] = (DRAFT,)):
        if k < 1:
            raise ValueError(f"draft length must be >= 1, got {k}")
        self.k = k
        self._plan = DraftPlan(k if DRAFT in sources else 0, (0,) + (k if LOOKUP in sources else 0,) * MATCH_MAX)

    def plan(self, backlog: int = 0, remaining: int | None = None, kind: str = PROSE) -> DraftPlan:
        return self._plan

    def observe_prefill(self, rows: int, seconds: float) -> None:
        pass

    def observe(self, outcome: StepOutcome) -> None:
        pass


@dataclass
class AdaptiveDraftLength:
    sources: tuple[str, ...] = (DRAFT,)
    k_max: int = 16
    threshold_start: float = 0.5  # until both costs are measured
    threshold_min: float = 0.2
    threshold_max: float = 0.9
    ema: float = 0.3
    probe_every: int = 8
    probe_max: int = 32
    decay: float = 0.9
    # rule 5: a drafted token's cost in plain steps before one was measured, the margin above
    # which the target counts as sure of a token (and its weight in the running share), how
    # that share maps to the draft's acceptance, how far ahead a read must pay for itself
    draft_cost_prior: float = 0.35
    sure_margin: float = 2.0
    sure_weight: float = 0.25
    alpha_floor: float = 0.6
    alpha_slope: float = 0.36
    horizon_min: int = 1
    horizon_max: int = 512
    answer_prior: int = 0  # tokens the previous answer of the same conversation had (0: none)
    # what a first answer is expected to run to before it has shown anything: on the corpus's
    # tuning half 56 of 78 first answers ran past 128 tokens and 7 ended under 32; 64 bets on
    # the common case without staking a read on the long tail (speed notes, item 48)
    first_answer_prior: int = 64
    read_margin: float = 1.5  # the savings must cover the read this many times over (a prediction, not a measurement)
    # pseudo-counts for alpha (reporting): a prior of 0.6 worth a handful of tokens
    accepted: float = 3.0
    trials: float = 5.0
    # the draft's calibration: tokens kept against the number its confidences expected
    # (decayed sums; a prior of "calibrated" worth a couple of steps)
    kept: float = 2.0
    expected: float = 2.0
    # rule 3: lookup's kept tokens and rejections per match length (decayed), from the prior
    # worth `lookup_prior_weight` rejections
    lookup_prior_weight: float = 2.0
    # per kind of text (rule 6: what lookup copies in code is not what it copies in prose)
    lookup_kept: dict[str, list[float]] = field(default_factory=dict)
    lookup_lost: dict[str, list[float]] = field(default_factory=dict)
    draft_per_token: float | None = None  # seconds
    read_per_token: float | None = None  # seconds the draft takes to read a token of backlog
    row_cost: float | None = None  # extra verification time per proposed row, in plain steps
    # a verification of k proposals (k + 1 rows), in plain steps, per k measured (EMA): where a
    # one-row step is memory-bound a few more rows come almost free and the next ones do not
    # (speed notes, item 64), which one cost per row cannot say
    verify_seen: dict[int, float] = field(default_factory=dict)
    # the prompt's prefill: its rows and seconds (per row a prior for row_cost; `long_row`)
    prefill_rows: int = 0
    prefill_seconds: float = 0.0
    long_pass_min: int = 8  # a pass this long is past the rows a one-row step's reads hide (item 121)
    plain_rate: float | None = None  # tokens / s of plain steps
    draft_rate: float | None = None  # tokens / s of draft steps
    draft_step_cost: float | None = None  # a draft step's time (drafting + verification) in plain steps
    sure_share: float = 0.0  # EMA over emitted tokens of "the target was sure of it" (0 until it was)
    lookup_share: float = 0.0  # EMA over emitted tokens of "lookup copied it"
    lookup_weight: float = 0.1
    emitted: int = 1  # tokens so far (the prefill's first)
    draft_started: bool = False
    _wait: int = 8  # steps between draft probes while it is off (doubled by each lost probe)
    _since_draft: int = 0
    _since_plain: int = 0
    _probing: str | None = None  # what a probe this step tests (DRAFT, or "" for a plain step)
    # rule 6: seconds each (source, kind of text, match length) lost against plain steps
    # (negative: won, down to -credit_cap plain steps), and the decoding time so far
    budget_share: float = 0.02
    credit_cap: float = 3.0
    risk_cap: bool = True  # draft_room: a step's worst case within the ledger's room
    losses: dict[tuple[str, str, int], float] = field(default_factory=dict)
    elapsed: float = 0.0
    kind: str = PROSE  # the kind of text of the step planned last

    def __post_init__(self) -> None:
        self._wait = self.probe_every
        self._lookup_counts()

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

    @property
    def confidence_steps(self) -> tuple[float, ...]:
        """Rule 2 per length: entry i - 1 is the running confidence the draft needs, after i
        tokens, to propose token i + 1 -- what that token costs (a drafted token and the
        verification's growth from i to i + 1 proposals) over the calibration. Empty until both
        costs are measured (then `min_confidence` holds)."""
        c = self.cost_ratio
        if c is None or not self.verify_seen:
            return ()
        v = [self.verify_cost(k) for k in range(self.k_max + 1)]
        return tuple(min(max((c + max(v[i + 1] - v[i], 0.0)) / self.calibration, self.threshold_min),
                         self.threshold_max) for i in range(1, self.k_max))

    def verify_cost(self, k: int) -> float:
        """A verification of k proposals in plain steps: measured at k; else between the nearest
        measured lengths; else on from the longest measured at a row's cost each -- the rows
        measured so far, or a long pass's row (`long_row`) where that is dearer."""
        if k <= 0:
            return 1.0
        seen = self.verify_seen
        if k in seen:
            return seen[k]
        below = max((j for j in seen if j < k), default=0)
        above = min((j for j in seen if j > k), default=None)
        at_below = seen.get(below, 1.0)
        if above is None:
            return at_below + (k - below) * max(self.rows, self.long_row or 0.0)
        return at_below + (seen[above] - at_below) * (k - below) / (above - below)

    def step_costs(self, per_token: float) -> list[float]:
        """[k] -> a step of k proposals in plain steps: its verification and k tokens at
        `per_token` each (the draft's cost; 0 for lookup). Index 0 is a plain step."""
        return [self.verify_cost(k) + k * per_token for k in range(self.k_max + 1)]

    @property
    def rows(self) -> float:
        """A verified row's cost in plain steps: measured, else the prompt's prefill per row."""
        if self.row_cost is not None:
            return self.row_cost
        if self.prefill_rows and self.plain_rate is not None:
            return self.prefill_seconds / self.prefill_rows * self.plain_rate
        return 0.25

    @property
    def long_row(self) -> float | None:
        """A row's cost in plain steps in a long pass: the prompt's prefill less one plain step,
        over its other rows (None for a prefill too short to say, or before a plain step). The
        first few rows of a verification come almost free where a one-row step is memory-bound;
        a long one pays this per row (avx2 on the Zen 4 VM: rows 2-4 0.1-0.2 of a step each,
        rows 5-17 ~0.25-0.3)."""
        if self.prefill_rows < self.long_pass_min or self.plain_rate is None:
            return None
        return max(self.prefill_seconds * self.plain_rate - 1.0, 0.0) / (self.prefill_rows - 1)

    @property
    def draft_wins(self) -> bool:
        """The draft's measured rate is at least a plain step's (True while unmeasured)."""
        return self.draft_rate is None or self.plain_rate is None or self.draft_rate >= self.plain_rate

    def _lookup_counts(self) -> tuple[list[float], list[float]]:
        """(kept, lost) per match length in the current kind of text, from the prior at first."""
        if self.kind not in self.lookup_kept:
            w = self.lookup_prior_weight
            self.lookup_kept[self.kind] = [b / (1 - b) * w for b in LOOKUP_PRIOR]
            self.lookup_lost[self.kind] = [w] * len(LOOKUP_PRIOR)
        return self.lookup_kept[self.kind], self.lookup_lost[self.kind]

    def lookup_beta(self, n: int) -> float:
        kept, lost = self._lookup_counts()
        return kept[n] / (kept[n] + lost[n])

    # -- rule 5 ----------------------------------------------------------------------------
    @property
    def predicted_alpha(self) -> float:
        return min(self.alpha_floor + self.alpha_slope * self.sure_share, 0.95)

    def predicted_gain(self) -> float:
        """Tokens per plain-step time of draft steps over plain steps' 1, at the predicted
        acceptance and the costs known now (the best fixed k of 1..8, i.i.d. acceptance)."""
        c = self.cost_ratio if self.cost_ratio is not None else self.draft_cost_prior
        return _best_rate(self.predicted_alpha, self.step_costs(c)[:9])[1]

    def draft_predicted_to_pay(self, backlog: int, remaining: int | None) -> bool:
        """Start (or, after it lost, probe) the draft: do the tokens it is expected to save
        over the next tokens outweigh reading `backlog` tokens first?"""
        gain = self.predicted_gain()
        if gain <= 1.0:
            return False
        expected = self.answer_prior or self.first_answer_prior
        horizon = min(max(self.horizon_min, self.emitted, expected), self.horizon_max)
        if remaining is not None:
            horizon = min(horizon, remaining)
        # tokens that lookup copies are fast already: the draft would save time on the others
        saved = horizon * (1.0 - self.lookup_share) * (1.0 - 1.0 / gain)  # plain steps
        return saved > self.read_margin * self.read_cost(backlog)

    def read_cost(self, backlog: int) -> float:
        """The draft's read of `backlog` tokens, in plain steps: measured per token, else a row
        of the draft's long pass costing a draft token times a target row."""
        if self.read_per_token is not None and self.plain_rate is not None:
            return backlog * self.read_per_token * self.plain_rate
        return backlog * (self.cost_ratio or self.draft_cost_prior) * self.rows

    # -- the plan --------------------------------------------------------------------------
    # -- rule 6 ----------------------------------------------------------------------------
    def lost(self, source: str, match: int = 0) -> float:
        """Seconds that source's proposals lost against plain steps in this kind of text."""
        return self.losses.get((source, self.kind, match), 0.0)

    def within_budget(self, source: str, match: int = 0) -> bool:
        return self.lost(source, match) <= self.budget_share * self.elapsed

    def draft_room(self) -> int:
        """Rule 6 before the step: the most tokens the draft may propose, so that a step whose
        first token is rejected -- k drafted tokens and a verification of k, for the target's
        one token -- cannot lose more than the source's ledger still has room for (at least
        one token: the ledger decides whether it runs at all). So a draft that has earned
        nothing yet proposes short runs and lengthens them as it earns, and one overconfident
        run cannot spend a whole answer's budget (speed notes, item 64)."""
        if self.plain_rate is None or not self.risk_cap:
            return self.k_max
        room = (self.budget_share * self.elapsed - self.lost(DRAFT)) * self.plain_rate  # plain steps
        c = self.cost_ratio if self.cost_ratio is not None else self.draft_cost_prior
        k = 1
        while k < self.k_max and k * c + self.verify_cost(k) - 1.0 + c + self.verify_cost(k + 1) - self.verify_cost(k) <= room:
            k += 1
        return k

    def _book(self, o: StepOutcome) -> None:
        """Rule 6: what a proposing step lost (or won) against plain steps' time."""
        plain = 1.0 / self.plain_rate
        key = (o.source, self.kind, min(max(o.match, 1), MATCH_MAX) if o.source == LOOKUP else 0)
        lost = o.draft_seconds + o.verify_seconds - (o.accepted + 1) * plain
        self.losses[key] = max(self.losses.get(key, 0.0) + lost, -self.credit_cap * plain)

    def _new_kind(self, kind: str) -> None:
        """The text turned from prose to code or back: the draft's rate on record is of the
        other kind; it is measured afresh (the ledger of this kind decides whether it may)."""
        self.kind = kind
        if self.draft_started:
            self.draft_rate = None
            self._wait = self.probe_every

    # -- the plan --------------------------------------------------------------------------
    def plan(self, backlog: int = 0, remaining: int | None = None, kind: str = PROSE) -> DraftPlan:
        """This step's plan. backlog: tokens the draft model would read before proposing (its
        catch-up); remaining: the answer's budget left; kind: the text's kind now (PROSE or
        CODE, textkind.py)."""
        self._probing = None
        if kind != self.kind:
            self._new_kind(kind)
        if self.plain_rate is None:
            return DraftPlan()  # a plain step measures what not speculating costs
        draft = 0
        rival = 1.0  # tokens per plain-step time of the step lookup must beat
        if DRAFT in self.sources:
            self._since_draft += 1
            if not self.draft_started:
                on = self.draft_predicted_to_pay(backlog, remaining)
                rival = self.predicted_gain() if on else 1.0
            elif self.draft_wins:
                on = True
                # a draft step behind the text pays its read first: while lookup proposes, the
                # draft falls behind, and each switch back costs that read
                step = self.draft_step_cost or 1.0
                rate = self.draft_rate / self.plain_rate if self.draft_rate is not None else self.predicted_gain()
                rival = max(rate * step / (step + self.read_cost(backlog)), 1.0)
            else:
                on = self._since_draft >= self._wait and self.draft_predicted_to_pay(backlog, remaining)
                if on:
                    self._probing = DRAFT
            if on and not self.within_budget(DRAFT):  # rule 6: it lost its share in this kind of text
                on, rival, self._probing = False, 1.0, None
            draft = self.draft_room() if on else 0
        lookup = (0,) * (MATCH_MAX + 1)
        if LOOKUP in self.sources:
            costs = self.step_costs(0.0)
            lookup = (0,) + tuple(self._lookup_length(n, costs, rival) if self.within_budget(LOOKUP, n) else 0
                                  for n in range(1, MATCH_MAX + 1))
        self._since_plain += 1
        if draft and self.draft_started and self._probing is None and self._since_plain >= self.probe_max:
            self._probing = ""  # a plain step keeps the plain rate current
            return DraftPlan()
        return DraftPlan(draft, lookup, self.min_confidence, confidence_steps=self.confidence_steps if draft else ())

    def _lookup_length(self, n: int, costs: list[float], rival: float) -> int:
        k, rate = _best_rate(self.lookup_beta(n), costs)
        return k if rate > rival else 0

    # -- learning --------------------------------------------------------------------------
    def observe_prefill(self, rows: int, seconds: float) -> None:
        """The target's prompt pass: its time per row is a prior for a verified row's cost."""
        if rows > 1 and seconds > 0:
            self.prefill_rows, self.prefill_seconds = rows, seconds

    def observe(self, o: StepOutcome) -> None:
        for m in o.margins or ():
            self.sure_share = _ema(self.sure_share, 1.0 if m >= self.sure_margin else 0.0, self.sure_weight)
        self.emitted += o.accepted + 1
        for i in range(o.accepted + 1):  # the tokens lookup copied (not the target's own)
            self.lookup_share = _ema(self.lookup_share, 1.0 if o.source == LOOKUP and i < o.accepted else 0.0,
                                     self.lookup_weight)
        probed, self._probing = self._probing, None
        seconds = o.draft_seconds + o.verify_seconds
        if seconds <= 0:
            return
        self.elapsed += seconds + o.catchup_seconds
        rate = (o.accepted + 1) / seconds
        if not o.proposed:
            self._since_plain = 0
            fresh = probed == "" or self.plain_rate is None
            self.plain_rate = rate if fresh else _ema(self.plain_rate, rate, self.ema)
            return
        if self.plain_rate is not None:
            self._book(o)
            # a verification of k + 1 rows against a one-row plain step: what each proposed
            # row added (never below zero: a fast verification is not a gain per row)
            row = max(o.verify_seconds * self.plain_rate - 1.0, 0.0) / o.proposed
            self.row_cost = row if self.row_cost is None else _ema(self.row_cost, row, self.ema)
            v = max(o.verify_seconds * self.plain_rate, 1.0)
            old = self.verify_seen.get(o.proposed)
            self.verify_seen[o.proposed] = v if old is None else _ema(old, v, self.ema)
        if o.source == LOOKUP:
            n = min(max(o.match, 1), MATCH_MAX)
            kept, lost = self._lookup_counts()
            kept[n] = self.decay * kept[n] + o.accepted
            lost[n] = self.decay * lost[n] + (1 if o.accepted < o.proposed else 0)
            return
        self._observe_draft(o, rate, fresh=probed == DRAFT or self.draft_rate is None)

    def _observe_draft(self, o: StepOutcome, rate: float, fresh: bool) -> None:
        self._since_draft = 0
        wins_before = self.draft_wins
        # a probe's rate replaces the stale one: other text, other context length by now
        self.draft_rate = rate if fresh else _ema(self.draft_rate, rate, self.ema)
        if self.draft_started and fresh:  # a probe: did it change the choice?
            lost = self.draft_wins == wins_before
            self._wait = min(2 * self._wait, self.probe_max) if lost else self.probe_every
        self.draft_started = True
        self.accepted = self.decay * self.accepted + o.accepted
        self.trials = self.decay * self.trials + o.accepted + (1 if o.accepted < o.proposed else 0)
        if self.plain_rate is not None:
            cost = (o.draft_seconds + o.verify_seconds) * self.plain_rate
            self.draft_step_cost = cost if self.draft_step_cost is None else _ema(self.draft_step_cost, cost, self.ema)
        per_tok = o.draft_seconds / o.proposed
        self.draft_per_token = per_tok if self.draft_per_token is None else _ema(self.draft_per_token, per_tok, self.ema)
        if o.expected_accepted is not None:
            self.kept = self.decay * self.kept + o.accepted
            self.expected = self.decay * self.expected + o.expected_accepted
        if o.catchup_seconds > 0 and o.catchup_tokens > 0:
            per_read = o.catchup_seconds / o.catchup_tokens
            self.read_per_token = per_read if self.read_per_token is None else _ema(self.read_per_token, per_read, self.ema)


def _best_rate(beta: float, costs: list[float]) -> tuple[int, float]:
    """The k in 1..len(costs)-1 maximising E(k) / costs[k], E(k) = 1 + beta + ... + beta^k
    (i.i.d. acceptance at beta per token), costs[k] a step of k proposals in plain steps:
    (k, that rate in tokens per plain-step time)."""
    best_k, best, run, term = 1, 0.0, 1.0, 1.0
    for k in range(1, len(costs)):
        term *= beta
        run += term
        rate = run / costs[k]
        if rate > best:
            best_k, best = k, rate
    return best_k, best


def _ema(old: float, new: float, w: float) -> float:
    return (1 - w) * old + w * new


def conversation_prior(reused: int, last_prompt: int, last_answer: int) -> int:
    """The answer prior (rule 5) for a generation that reused `reused` cached tokens, after one
    whose prompt was `last_prompt` tokens and whose answer `last_answer`: that answer's length
    when this is the same conversation -- a next turn or a regenerated answer, whose prompt
    starts with the whole last prompt (the cache keeps all but its last token) -- else 0. A new
    chat shares only the system prompt with the last one: its first answer is not the other
    chat's (before, a two-line answer in one chat made the next chat's first answer expect
    two lines, and its draft wait)."""
    if last_prompt <= 0 or reused < last_prompt - 1:
        return 0
    return last_answer


def make_policy(draft_tokens: int | str, sources: tuple[str, ...] = (DRAFT,), answer_prior: int = 0):
    """`draft_tokens`: an int k >= 1, or "adaptive"; `sources`: what the proposer drafts from;
    `answer_prior`: how long the previous answer of the same conversation was (0: none)."""
    if draft_tokens == "adaptive":
        return AdaptiveDraftLength(sources=tuple(sources), answer_prior=answer_prior)
    return FixedDraftLength(int(draft_tokens), tuple(sources))
