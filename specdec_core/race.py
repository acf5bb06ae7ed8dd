"""Race: the same prompt through standard and speculative decoding, side by side, fairly timed.

The two lanes share one device, so they run in ONE thread, interleaved step by step, and each
lane has its own clock that advances only by the compute time spent inside that lane:

- a lane is a Generation (an iterator of TokenEvents). A verification step's compute happens
  inside the first `next()` of that step; the rest of the step's events come out instantly.
  Every `next()` call on a lane is timed and added to that lane's clock, and nothing else is;
- the runner always advances the lane whose clock is behind (ties: standard first), so the two
  lanes progress in lane-time lockstep and a live view can render both "by their own clock";
- the decoder's own timestamps (TokenEvent.t, Stats.seconds) are wall time since the lane
  started, which here includes the other lane's turns; the race replaces them with the lane
  clock (events' `t`, lane `seconds`, `tokens_per_second`).

Before the clocks start, each lane runs a short untimed warm-up generation so neither pays the
first-call costs (allocator, kernel selection) inside the race.

No Qt here; the GUI's race worker and `specdec race` both drive `start_race()`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from .contract import EngineError, EngineLike, GenerationLike, Prompt
from .events import Divergence, EventSequence, Stats, TokenEvent, first_divergence, near_tie_margin
from .settings import DecodeSettings

LANES = ("standard", "speculative")

CLOCK_NOTE = "times are each lane's own compute time"


@dataclass(frozen=True, slots=True)
class RaceEvent:
    """One token of one lane. `clock`: that lane's own compute seconds when the token was
    decided (the event's `t` is set to the same value)."""

    lane: str
    event: TokenEvent
    clock: float


@dataclass
class LaneResult(EventSequence):
    lane: str
    events: list[TokenEvent] = field(default_factory=list)
    seconds: float = 0.0  # the lane's own clock at its end
    stats: Stats | None = None

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events)

    @property
    def tokens_per_second(self) -> float:
        """End-to-end tok/s by the lane's own clock (its Stats', whose seconds are that clock)."""
        if self.stats is not None:
            return self.stats.tokens_per_second
        return len(self.events) / self.seconds if self.seconds > 0 else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        """tok/s after the first token, by the lane's own clock."""
        return self.stats.decode_tokens_per_second if self.stats is not None else 0.0

    def to_dict(self) -> dict:
        stats = self.stats.to_dict() if self.stats is not None else {}
        return {
            "token_ids": self.token_ids,
            "kinds": self.kinds,
            "text": self.text,
            "new_tokens": len(self.events),
            "seconds": self.seconds,
            "tokens_per_second": self.tokens_per_second,
            "decode_tokens_per_second": self.decode_tokens_per_second,
            "stats": stats,
        }


@dataclass
class RaceResult:
    standard: LaneResult
    speculative: LaneResult
    proposer: str
    settings: DecodeSettings
    cancelled: bool = False
    near_tie_margin: float = 1e-2

    @property
    def greedy(self) -> bool:
        return self.settings.sampling.greedy

    @property
    def speedup(self) -> float:
        """Speculative tok/s over standard tok/s, both by their own clocks (at T=0 with
        identical texts this is standard seconds / speculative seconds)."""
        s, p = self.standard.tokens_per_second, self.speculative.tokens_per_second
        return p / s if s > 0 else 0.0

    @property
    def identical(self) -> bool:
        return self.standard.token_ids == self.speculative.token_ids

    @property
    def divergence(self) -> Divergence | None:
        """Greedy only: where the two texts first differ, with the target's top-2 margin there."""
        if not self.greedy or self.identical or self.cancelled:
            return None
        return first_divergence(self.standard.events, self.speculative.events)

    @property
    def verdict(self) -> str:
        """The one sentence on the two texts that `specdec race` prints and the race view shows."""
        if self.cancelled:
            return "Race stopped before the end."
        if self.identical:
            return ("Texts identical: at temperature 0 speculative decoding is exact." if self.greedy else
                    "Texts identical: both are samples of the same distribution, equal by chance.")
        if not self.greedy:
            return ("Texts differ, as expected at temperature > 0: both lanes are samples of the same "
                    "distribution (speculative sampling is exact), drawn with different random numbers.")
        d = self.divergence
        m = "unknown" if d.margin is None else f"{d.margin:.4g}"
        if d.is_near_tie(self.near_tie_margin):
            return (f"Texts differ from token {d.position}: the target's top-2 margin there is {m} logits, a "
                    "near-tie that reduced precision can flip (verifying many tokens in one pass rounds "
                    "differently from one at a time); both continuations are the target's greedy choice "
                    "up to rounding.")
        return (f"Texts differ from token {d.position} (the target's top-2 margin there is {m} logits): not a "
                "near-tie; at temperature 0 this should not happen, please report it.")

    def to_dict(self) -> dict:
        spec = self.speculative.stats
        d = self.divergence
        return {
            "standard": self.standard.to_dict(),
            "speculative": self.speculative.to_dict(),
            "speedup": self.speedup,
            "identical": self.identical,
            "divergence": None if d is None else {
                "position": d.position,
                "token_standard": d.token_a,
                "token_speculative": d.token_b,
                "margin": d.margin,
                "near_tie": d.is_near_tie(self.near_tie_margin),
            },
            "acceptance_rate": spec.acceptance_rate if spec else 0.0,
            "tokens_per_speculative_step": spec.tokens_per_speculative_step if spec else 0.0,
            "plain_step_share": spec.plain_step_share if spec else 0.0,
            "verdict": self.verdict,
            "proposer": self.proposer,
            "cancelled": self.cancelled,
            "settings": self.settings.to_dict(),
            "clock": CLOCK_NOTE,
        }


class Race:
    """Iterate for RaceEvents (both lanes, interleaved by lane clock); afterwards `result`.

    `lanes` maps "standard" and "speculative" to generations (the engine contract's
    GenerationLike: events, then `stats`; `own_clock` when decoded elsewhere)."""

    def __init__(self, lanes: dict[str, GenerationLike], cancel: threading.Event, proposer: str,
                 settings: DecodeSettings, near_tie_margin: float = 1e-2):
        missing = [n for n in LANES if n not in lanes]
        if missing:
            raise ValueError(f"a race needs both lanes; missing {missing}")
        self._lanes = lanes
        self.cancel = cancel
        self.proposer = proposer
        self.settings = settings
        self.near_tie_margin = near_tie_margin
        self.clocks = {n: 0.0 for n in LANES}
        self.shown = {n: 0 for n in LANES}
        self.result: RaceResult | None = None

    def lane_stats(self, lane: str) -> Stats | None:
        """A lane's running Stats, timed by its own clock: the engine's figures for a live view."""
        snap = self._lanes[lane].snapshot()
        return dataclasses.replace(snap, seconds=self.clocks[lane], new_tokens=self.shown[lane])

    def __iter__(self) -> Iterator[RaceEvent]:
        results = {n: LaneResult(n) for n in LANES}
        iters = {n: iter(self._lanes[n]) for n in LANES}
        # a lane decoded elsewhere (a `specdec serve`) brings its engine's own clock in its events'
        # `t`; waiting on the network or for the other lane's turn there is no compute of its own
        own = {n for n in LANES if self._lanes[n].own_clock}
        running = list(LANES)
        cancelled = False
        while running:
            if self.cancel.is_set():
                cancelled = True
                break
            lane = min(running, key=lambda n: (self.clocks[n], LANES.index(n)))  # the one behind
            t0 = time.perf_counter()
            try:
                ev = next(iters[lane])
            except StopIteration as stop:
                if lane not in own:
                    self.clocks[lane] += time.perf_counter() - t0
                results[lane].stats = stop.value if stop.value is not None else self._lanes[lane].stats
                running.remove(lane)
                continue
            if lane in own:
                self.clocks[lane] = max(self.clocks[lane], ev.t)
            else:
                self.clocks[lane] += time.perf_counter() - t0
            clock = self.clocks[lane]
            ev = dataclasses.replace(ev, t=clock)
            results[lane].events.append(ev)
            self.shown[lane] += 1
            yield RaceEvent(lane, ev, clock)
        if cancelled:
            # the decoder sees the same cancel event at its next step and ends at once; drain
            # (untimed, unshown) so each lane still hands back its stats
            for lane in running:
                for _ in iters[lane]:
                    pass
                results[lane].stats = self._lanes[lane].stats
        for lane, res in results.items():
            res.seconds = self.clocks[lane]
            if res.stats is not None:
                # the decoder's wall clock includes the other lane's turns: use the lane's own
                res.stats = dataclasses.replace(res.stats, seconds=res.seconds, new_tokens=len(res.events))
                if cancelled:
                    res.stats.stop_reason = "cancelled"
        self.result = RaceResult(results["standard"], results["speculative"], self.proposer, self.settings,
                                 cancelled, self.near_tie_margin)

    def run(self) -> RaceResult:
        for _ in self:
            pass
        return self.result


def start_race(engine: EngineLike, prompt: Prompt, settings: DecodeSettings = DecodeSettings(),
               cancel: threading.Event | None = None, warmup: bool = True) -> Race:
    """Set up a race on an engine: two forks of it (each lane its own KV caches), the standard
    lane with the settings' mode set to standard, the speculative lane with the settings'
    proposer. EngineError where the engine cannot be raced (a server that drafts on every request)."""
    server = engine.server_info()
    if server is not None and not server.can_race:
        raise EngineError(server.race_note)
    cancel = cancel if cancel is not None else threading.Event()
    lanes = {n: engine.fork() for n in LANES}
    lane_settings = {n: settings.replace(mode=n) for n in LANES}
    if warmup:
        head = list(prompt[:16])
        for n in LANES:
            lanes[n].generate(head, lane_settings[n].replace(max_new_tokens=2), cancel=cancel).run()
    gens = {n: lanes[n].generate(prompt, lane_settings[n], cancel=cancel) for n in LANES}
    margin = near_tie_margin(engine.target_info.dtype)
    return Race(gens, cancel, settings.proposer, settings, margin)
