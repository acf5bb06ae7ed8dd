"""Draft length: fixed k, or an adaptive controller driven by what it measures.

The rule (documented in README, "Adaptive draft length"):

With per-token acceptance rate alpha, a step that proposes k tokens emits on average

    E(k) = (1 - alpha^(k+1)) / (1 - alpha)          tokens  (Leviathan et al. 2023, eq. 1)

and costs  k * d + v(k)  seconds, where d is the draft's time per proposed token and v(k) the
target's time to verify k proposals (k+1 positions). The controller picks

    k* = argmax_{k_min <= k <= k_max}  E(k) / (k * d + v(k))

i.e. the k with the most expected tokens per second. alpha is estimated from the observed
steps as accepted / trials (a trial is an accepted token or the rejection that ended a step),
both sums decayed by `decay` per step so the estimate follows the text; d is an exponential
average of measured draft time per token; v(k) is an exponential average per k, with k's not
yet tried read off the straight line through the ones that were (before any are measured:
flat, the GPU-like assumption, so the first steps explore).

k = 0 is a plain target step (E = 1, no draft cost). It competes once measured -- after two
speculative steps the controller takes one plain step to measure v(0), since a one-row pass can
run another kernel than a multi-row one (on CPU it is about half the cost) -- so where
speculation does not pay, the controller stops speculating. While at 0 it speculates again
every `probe_every` steps, because acceptance changes with the text. The cost ratio
c = d / v(0) is reported as a diagnostic.
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

    def observe(self, k: int, n_accepted: int, draft_seconds: float, verify_seconds: float) -> None:
        pass


@dataclass
class AdaptiveDraftLength:
    k_min: int = 0  # 0 = a plain target step: chosen when speculation does not pay here
    k_max: int = 16
    # the draft stops early after a token it gives less than this (transformers' assisted
    # generation uses 0.4): long drafts where the draft is sure, short ones where it is not
    min_confidence: float = 0.4
    k_start: int = 4
    decay: float = 0.9
    ema: float = 0.3
    probe_every: int = 8  # while at k = 0, try speculating again every this many steps
    # pseudo-counts: a prior alpha of 0.6 worth a handful of tokens
    accepted: float = 3.0
    trials: float = 5.0
    draft_per_token: float | None = None
    verify: dict[int, float] = field(default_factory=dict)
    _next: int | None = None
    _observed: int = 0
    _at_zero: int = 0

    @property
    def alpha(self) -> float:
        return min(self.accepted / self.trials, 0.999) if self.trials > 0 else 0.0

    def next_k(self) -> int:
        if self._next is None:
            return self.k_start
        if self.k_min == 0 and 0 not in self.verify and self._observed >= 2:
            return 0  # one plain step, to measure what not speculating costs
        if self._next == 0:
            self._at_zero += 1
            if self._at_zero >= self.probe_every:  # alpha and costs drift with the text
                self._at_zero = 0
                return max(range(1, self.k_max + 1), key=self.throughput)
        return self._next

    def observe(self, k: int, n_accepted: int, draft_seconds: float, verify_seconds: float) -> None:
        if k < 0:
            return
        self._observed += 1
        if k > 0:
            self.accepted = self.decay * self.accepted + n_accepted
            self.trials = self.decay * self.trials + n_accepted + (1 if n_accepted < k else 0)
            per_tok = draft_seconds / k
            self.draft_per_token = (per_tok if self.draft_per_token is None
                                    else _ema(self.draft_per_token, per_tok, self.ema))
        old = self.verify.get(k)
        self.verify[k] = verify_seconds if old is None else _ema(old, verify_seconds, self.ema)
        self._next = self.best_k()

    def verify_cost(self, k: int) -> float:
        if k in self.verify:
            return self.verify[k]
        # k >= 1 from the line through the measured k >= 1 (a one-row pass can take another
        # kernel path than a multi-row one -- on CPU it does -- so k = 0 is never extrapolated)
        pts = sorted((kk, v) for kk, v in self.verify.items() if kk > 0)
        if not pts:
            return 1.0
        if len(pts) == 1:
            return pts[0][1]  # flat until a second k is measured
        # least-squares line through the measured (k, v) points, never below the cheapest
        n = len(pts)
        mk = sum(p[0] for p in pts) / n
        mv = sum(p[1] for p in pts) / n
        var = sum((p[0] - mk) ** 2 for p in pts)
        slope = sum((p[0] - mk) * (p[1] - mv) for p in pts) / var if var else 0.0
        return max(mv + max(slope, 0.0) * (k - mk), min(p[1] for p in pts))

    def expected_tokens(self, k: int) -> float:
        a = self.alpha
        return (1 - a ** (k + 1)) / (1 - a)

    def throughput(self, k: int) -> float:
        d = self.draft_per_token or 0.0
        return self.expected_tokens(k) / (k * d + self.verify_cost(k))

    def best_k(self) -> int:
        # k = 0 competes only once measured: its cost cannot be read off the k >= 1 line
        ks = [k for k in range(self.k_min, self.k_max + 1) if k > 0 or k in self.verify]
        return max(ks, key=self.throughput)

    @property
    def cost_ratio(self) -> float | None:
        """c = draft time per token / the target's time for one plain step (or the cheapest
        verification measured, before a plain step was)."""
        if self.draft_per_token is None or not self.verify:
            return None
        return self.draft_per_token / self.verify_cost(min(self.verify))


def _ema(old: float, new: float, w: float) -> float:
    return (1 - w) * old + w * new


def make_policy(draft_tokens: int | str):
    """`draft_tokens`: an int k >= 1, or "adaptive"."""
    if draft_tokens == "adaptive":
        return AdaptiveDraftLength()
    return FixedDraftLength(int(draft_tokens))
