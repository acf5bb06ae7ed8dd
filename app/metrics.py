"""Live metrics of the message being generated, computed from its token events (no Qt, no torch).

While a message streams only events are known; the engine's exact Stats replace these figures
when it finishes. Draft length per step: taken from the event when the engine provides it
(`draft_length`), else inferred (bonus after n accepted: k = n; corrected after n accepted:
k >= n + 1, counted as n + 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

RATE_WINDOW_STEPS = 8


@dataclass
class StepRecord:
    step: int
    t: float
    tokens: int = 0
    accepted: int = 0
    last_kind: str = ""
    draft_length: int | None = None  # from the engine when known

    @property
    def proposed(self) -> int:
        if self.draft_length is not None:
            return self.draft_length
        if self.last_kind == "bonus":
            return self.accepted
        if self.last_kind == "corrected":
            return self.accepted + 1
        return 0


def _kind(ev) -> str:
    k = getattr(ev, "kind", "")
    return getattr(k, "value", k)


@dataclass
class LiveStats:
    mode: str = "speculative"
    steps: list[StepRecord] = field(default_factory=list)
    tokens: int = 0
    kinds: dict[str, int] = field(default_factory=lambda: {"accepted": 0, "corrected": 0, "bonus": 0, "standard": 0})
    rate_series: list[tuple[float, float]] = field(default_factory=list)  # (t seconds, tok/s)
    last_t: float = 0.0

    def add(self, events) -> None:
        for ev in events:
            kind = _kind(ev)
            self.tokens += 1
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            if not self.steps or self.steps[-1].step != ev.step:
                self.steps.append(StepRecord(ev.step, ev.t))
                self._add_rate_point()
            rec = self.steps[-1]
            rec.tokens += 1
            rec.t = ev.t
            rec.last_kind = kind
            if kind == "accepted":
                rec.accepted += 1
            dl = getattr(ev, "draft_length", None)
            if dl is not None:
                rec.draft_length = dl
            self.last_t = ev.t
        self._add_rate_point(final=True)

    def _add_rate_point(self, final: bool = False) -> None:
        # rate over the last few completed steps (the prefill step 0 is excluded)
        done = self.steps if final else self.steps[:-1]
        done = [s for s in done if s.step > 0] if len(done) > 1 else []
        if len(done) < 1 or len(self.steps) < 2:
            return
        window = done[-RATE_WINDOW_STEPS:]
        first_idx = self.steps.index(window[0])
        t_start = self.steps[first_idx - 1].t if first_idx > 0 else 0.0
        dt = window[-1].t - t_start
        if dt <= 0:
            return
        point = (window[-1].t, sum(s.tokens for s in window) / dt)
        if self.rate_series and self.rate_series[-1][0] == point[0]:
            self.rate_series[-1] = point
        else:
            self.rate_series.append(point)

    # -- figures --------------------------------------------------------------------------
    @property
    def tokens_per_second(self) -> float:
        """Decoding speed after the first token (prefill excluded) when possible."""
        if len(self.steps) >= 2:
            first = self.steps[0]
            dt = self.last_t - first.t
            if dt > 0:
                return (self.tokens - first.tokens) / dt
        return self.tokens / self.last_t if self.last_t > 0 else 0.0

    @property
    def proposed(self) -> int:
        return sum(s.proposed for s in self.steps)

    @property
    def accepted(self) -> int:
        return sum(s.accepted for s in self.steps)

    @property
    def acceptance_rate(self) -> float:
        p = self.proposed
        return self.accepted / p if p else 0.0

    @property
    def mean_accepted_per_step(self) -> float:
        return self.tokens / len(self.steps) if self.steps else 0.0

    @property
    def current_draft_length(self) -> int | None:
        for s in reversed(self.steps):
            if s.proposed:
                return s.proposed
        return None

    @property
    def per_position_acceptance(self) -> list[float]:
        k_max = max((s.proposed for s in self.steps), default=0)
        out = []
        for i in range(k_max):
            prop = sum(1 for s in self.steps if s.proposed > i)
            acc = sum(1 for s in self.steps if s.accepted > i)
            out.append(acc / prop if prop else 0.0)
        return out

    def to_dict(self) -> dict:
        """Same keys as Stats.to_dict() where they exist (used for a stopped message)."""
        return {
            "new_tokens": self.tokens,
            "seconds": self.last_t,
            "tokens_per_second": self.tokens_per_second,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_per_step": self.mean_accepted_per_step,
            "per_position_acceptance": self.per_position_acceptance,
            "draft_lengths": [s.proposed for s in self.steps if s.proposed],
            "draft_tokens": self.proposed,
            "accepted_draft_tokens": self.accepted,
            "target_forward_passes": len(self.steps),
            "mode": self.mode,
        }
