"""Draft length: fixed k, or an adaptive controller driven by what it measures.

The rule (documented in README, "Adaptive draft length"):

1. The draft length cap K follows the measured acceptance: after a step whose full K-token
   draft was accepted, K += 2; after a step with a rejection, K -= 1 (1 <= K <= 16). A step
   whose draft stopped early (below) and was all accepted leaves K as it is.
2. Within a step the draft stops early after a token it gives less than `min_confidence`
   (0.4): long drafts where the draft is sure, short ones where it is not. The stop depends
   on the draft's own values only, so the acceptance rule stays exact.
3. Speculate or not: the controller keeps two measured rates, tokens per second of
   speculative steps (emitted tokens / (draft + verify time)) and of plain target steps
   (1 / time of a one-token step), each an exponential average. It speculates while the
   speculative rate is at least the plain one, otherwise takes plain steps (k = 0), and
   probes the other choice every `probe_every` steps because both drift with the text. The
   plain rate is measured with one plain step after the first two speculative ones.

Why measured rates and not the textbook E(k) = (1 - alpha^(k+1)) / (1 - alpha) with a cost
model: on CPU a multi-row verification costs ~2x a one-row step whatever k (a kernel-path
step, not a line), and real text is not i.i.d. -- code has long fully-predictable runs, where
the confidence stop lets drafts run far past what a geometric model predicts. The acceptance
rate alpha, the draft's time per token d and the cost ratio c = d / (plain step time) are
still estimated and reported.
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
    k_max: int = 16
    k_start: int = 4
    min_confidence: float = 0.4  # transformers' assisted generation uses the same default
    ema: float = 0.3
    probe_every: int = 8
    decay: float = 0.9
    # pseudo-counts for alpha (reporting): a prior of 0.6 worth a handful of tokens
    accepted: float = 3.0
    trials: float = 5.0
    cap: int | None = None
    draft_per_token: float | None = None
    spec_rate: float | None = None  # tokens / s of speculative steps
    plain_rate: float | None = None  # tokens / s of plain steps
    _spec_steps: int = 0
    _since_probe: int = 0

    def __post_init__(self) -> None:
        if self.cap is None:
            self.cap = self.k_start

    @property
    def alpha(self) -> float:
        return min(self.accepted / self.trials, 0.999) if self.trials > 0 else 0.0

    @property
    def speculating(self) -> bool:
        return self.plain_rate is None or self.spec_rate is None or self.spec_rate >= self.plain_rate

    def next_k(self) -> int:
        if self.plain_rate is None and self._spec_steps >= 2:
            return 0  # one plain step, to measure what not speculating costs
        self._since_probe += 1
        probe = self._since_probe >= self.probe_every
        if probe:
            self._since_probe = 0
        if self.speculating != probe:  # speculating and not probing, or plain and probing
            return self.cap
        return 0

    def observe(self, k: int, n_accepted: int, draft_seconds: float, verify_seconds: float) -> None:
        seconds = draft_seconds + verify_seconds
        if seconds <= 0:
            return
        rate = (n_accepted + 1) / seconds
        if k == 0:
            self.plain_rate = rate if self.plain_rate is None else _ema(self.plain_rate, rate, self.ema)
            return
        self._spec_steps += 1
        self.spec_rate = rate if self.spec_rate is None else _ema(self.spec_rate, rate, self.ema)
        self.accepted = self.decay * self.accepted + n_accepted
        self.trials = self.decay * self.trials + n_accepted + (1 if n_accepted < k else 0)
        per_tok = draft_seconds / k
        self.draft_per_token = per_tok if self.draft_per_token is None else _ema(self.draft_per_token, per_tok, self.ema)
        if n_accepted < k:
            self.cap = max(self.cap - 1, 1)
        elif k >= self.cap:
            self.cap = min(self.cap + 2, self.k_max)

    @property
    def cost_ratio(self) -> float | None:
        """c = draft time per token / time of a plain target step."""
        if self.draft_per_token is None or self.plain_rate is None:
            return None
        return self.draft_per_token * self.plain_rate


def _ema(old: float, new: float, w: float) -> float:
    return (1 - w) * old + w * new


def make_policy(draft_tokens: int | str):
    """`draft_tokens`: an int k >= 1, or "adaptive"."""
    if draft_tokens == "adaptive":
        return AdaptiveDraftLength()
    return FixedDraftLength(int(draft_tokens))
