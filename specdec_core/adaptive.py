"""Draft length: fixed k, or an adaptive controller driven by what it measures.

The rule (documented in README, "Adaptive draft length"):

1. Within a step the draft keeps proposing, up to k_max (16) tokens, while its own
   probability that everything it proposed so far is right -- the product of its
   probabilities of its picks -- stays at least a threshold; the token that takes it below
   is still proposed. The decision depends on the draft's own values only, so the
   acceptance rule stays exact.
2. The threshold is what one more drafted token costs, in plain target steps: the draft's
   time per token plus the extra verification time per proposed row, both measured (EMA)
   and divided by the measured plain step time, then divided by the draft's calibration
   (tokens kept / tokens its confidences expected, decayed sums: a small draft is often
   surer than it is right); clamped to [0.2, 0.9], 0.5 until measured. A token worth
   proposing is accepted with at least that chance. On the project's 2-core
   CPU it settles near 0.7-0.9 (a drafted token ~0.37 of a step, each verified row ~0.25, a
   calibration of ~0.8-0.9); on a GPU, where both costs are small, drafts run long.
   A proposer without a confidence (prompt lookup) cannot stop itself: for it the draft
   length is a cap instead, starting at 4, +2 after a step whose full draft was accepted, -1
   after a rejection (1..k_max).
3. Speculate or not: the controller keeps two measured rates, tokens per second of
   speculative steps (emitted tokens / (draft + verify time)) and of plain target steps
   (1 / time of a one-token step), each an exponential average. It speculates while the
   speculative rate is at least the plain one, otherwise takes plain steps (k = 0), and
   probes the other choice because both drift with the text: after `probe_every` steps, and
   each probe that does not change the choice doubles the wait (up to `probe_max` steps; a
   change resets it), so a prompt where one choice keeps winning pays for few probes. A
   probe's rate replaces the probed choice's old one (stale by then), so one good probe can
   switch. The plain rate is measured with one plain step after the first two speculative
   ones. The draft's time reading the text of plain steps before a probe (the proposal's
   catch-up) is a cost of switching, not of the drafted tokens, and counts in neither rate.

Why the draft's running confidence and not a draft length from the textbook
E(k) = (1 - alpha^(k+1)) / (1 - alpha): real text is not i.i.d. -- code has long runs the
draft is sure of, chat has forks it is not -- and the draft's own probabilities see both as
they come. Replayed on the built-in prompts (docs/speed-notes.md, item 12) this beat the
earlier rule (a cap of 4, +2 after a fully accepted draft, -1 after a rejection, stop after
any token below 0.4) on four of five prompts and tied on the fifth. The acceptance rate alpha
is still estimated and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class FixedDraftLength:
    min_confidence = 0.0  # fixed k means k: no early stop

    def __init__(self, k: int):
        if k < 1:
            raise ValueError(f"draft length must be >= 1, got {k}")
        self.k = k

    def next_k(self) -> int:
        return self.k

    def observe(self, k: int, n_accepted: int, draft_seconds: float, verify_seconds: float,
                expected_accepted: float | None = None) -> None:
        pass


@dataclass
class AdaptiveDraftLength:
    k_max: int = 16
    confident: bool = True  # the proposer stops on its own confidence (rule 1); else a cap
    cap_start: int = 4
    cap: int | None = None  # the cap rule's current length (proposers without a confidence)
    threshold_start: float = 0.5  # until both costs are measured
    threshold_min: float = 0.2
    threshold_max: float = 0.9
    ema: float = 0.3
    probe_every: int = 8
    probe_max: int = 32
    decay: float = 0.9
    # pseudo-counts for alpha (reporting): a prior of 0.6 worth a handful of tokens
    accepted: float = 3.0
    trials: float = 5.0
    # the draft's calibration: tokens kept against the number its confidences expected
    # (decayed sums; a prior of "calibrated" worth a couple of steps)
    kept: float = 2.0
    expected: float = 2.0
    draft_per_token: float | None = None  # seconds
    row_cost: float | None = None  # extra verification time per proposed row, in plain steps
    spec_rate: float | None = None  # tokens / s of speculative steps
    plain_rate: float | None = None  # tokens / s of plain steps
    _spec_steps: int = 0
    _since_probe: int = 0
    _probe_wait: int = 0  # steps between probes now (probe_every, doubled by each lost probe)
    _probing: bool | None = None  # the choice a probe in flight is testing against, else None

    def __post_init__(self) -> None:
        if not self.confident and self.cap is None:
            self.cap = self.cap_start
        self._probe_wait = self.probe_every

    @property
    def alpha(self) -> float:
        return min(self.accepted / self.trials, 0.999) if self.trials > 0 else 0.0

    @property
    def speculating(self) -> bool:
        return self.plain_rate is None or self.spec_rate is None or self.spec_rate >= self.plain_rate

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
    def calibration(self) -> float:
        """Tokens kept / tokens the draft's confidences expected (1: calibrated; < 1:
        overconfident), held to [0.5, 1.5] so a few odd steps cannot run away with it."""
        return min(max(self.kept / self.expected, 0.5), 1.5) if self.expected > 0 else 1.0

    def next_k(self) -> int:
        if self.plain_rate is None and self._spec_steps >= 2:
            return 0  # one plain step, to measure what not speculating costs
        self._since_probe += 1
        probe = self._since_probe >= self._probe_wait
        if probe:
            self._since_probe = 0
            self._probing = self.speculating
        if self.speculating != probe:  # speculating and not probing, or plain and probing
            return self.k_max if self.confident else self.cap
        return 0

    def observe(self, k: int, n_accepted: int, draft_seconds: float, verify_seconds: float,
                expected_accepted: float | None = None) -> None:
        seconds = draft_seconds + verify_seconds
        if seconds <= 0:
            return
        rate = (n_accepted + 1) / seconds
        # A probe measures the choice not taken since the last switch: its old rate is stale
        # (other text, other context length), so the probe replaces it rather than moving an
        # average that one step could never turn.
        fresh = self._probing is not None
        if k == 0:
            self.plain_rate = rate if self.plain_rate is None or fresh else _ema(self.plain_rate, rate, self.ema)
        else:
            self._observe_speculative(k, n_accepted, draft_seconds, verify_seconds, rate, fresh)
            if expected_accepted is not None:
                self.kept = self.decay * self.kept + n_accepted
                self.expected = self.decay * self.expected + expected_accepted
        if self._probing is not None:  # a probe's step: did it change the choice?
            lost = self.speculating == self._probing
            self._probe_wait = min(2 * self._probe_wait, self.probe_max) if lost else self.probe_every
            self._probing = None

    def _observe_speculative(self, k: int, n_accepted: int, draft_seconds: float,
                             verify_seconds: float, rate: float, fresh: bool) -> None:
        self._spec_steps += 1
        self.spec_rate = rate if self.spec_rate is None or fresh else _ema(self.spec_rate, rate, self.ema)
        self.accepted = self.decay * self.accepted + n_accepted
        self.trials = self.decay * self.trials + n_accepted + (1 if n_accepted < k else 0)
        if not self.confident:
            if n_accepted < k:
                self.cap = max(self.cap - 1, 1)
            elif k >= self.cap:
                self.cap = min(self.cap + 2, self.k_max)
        per_tok = draft_seconds / k
        self.draft_per_token = per_tok if self.draft_per_token is None else _ema(self.draft_per_token, per_tok, self.ema)
        if self.plain_rate is not None:
            # a verification of k + 1 rows against a one-row plain step: what each proposed
            # row added (never below zero: a fast verification is not a gain per row)
            row = max(verify_seconds * self.plain_rate - 1.0, 0.0) / k
            self.row_cost = row if self.row_cost is None else _ema(self.row_cost, row, self.ema)

    @property
    def cost_ratio(self) -> float | None:
        """c = draft time per token / time of a plain target step."""
        if self.draft_per_token is None or self.plain_rate is None:
            return None
        return self.draft_per_token * self.plain_rate


def _ema(old: float, new: float, w: float) -> float:
    return (1 - w) * old + w * new


def make_policy(draft_tokens: int | str, confident: bool = True):
    """`draft_tokens`: an int k >= 1, or "adaptive". confident: the proposer stops on its own
    confidence (a draft model); False for one that cannot (prompt lookup)."""
    if draft_tokens == "adaptive":
        return AdaptiveDraftLength(confident=confident)
    return FixedDraftLength(int(draft_tokens))
