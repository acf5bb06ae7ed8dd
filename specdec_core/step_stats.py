"""What a step's result adds to the running Stats and tells the draft-length controller.

The decoder's loop calls these once per step, before it hands the step's tokens out: whoever
reads the Stats between steps sees figures for exactly the tokens it has.
"""

from __future__ import annotations

from .adaptive import StepOutcome
from .events import Stats
from .proposers.base import GRAMMAR
from .step import Controller, StepResult


def count_step(stats: Stats, r: StepResult, speculative: bool) -> None:
    """Add one verification step to the running stats (plain steps count only as passes)."""
    stats.draft_forward_passes += r.draft_passes
    stats.new_tokens += len(r.tokens)
    if speculative and r.step > 0:
        stats.last_draft_length = r.proposed
    if r.proposed:
        _count_proposals(stats, r)
    if r.step > 0:
        _time_step(stats, r)
    stats.stop_reason = r.stop_reason


def _count_proposals(stats: Stats, r: StepResult) -> None:
    k, n = r.proposed, r.accepted
    for counts, add in ((stats.steps_by_source, 1), (stats.proposed_by_source, k), (stats.accepted_by_source, n)):
        counts[r.source] = counts.get(r.source, 0) + add
    stats.speculative_steps += 1
    stats.speculative_step_tokens += len(r.tokens)
    stats.proposed_tokens += k
    stats.accepted_tokens += n
    stats.draft_lengths.append(k)
    _grow(stats.per_position_proposed, k)
    _grow(stats.per_position_accepted, k)
    for i in range(k):
        stats.per_position_proposed[i] += 1
    for i in range(n):
        stats.per_position_accepted[i] += 1


def _time_step(stats: Stats, r: StepResult) -> None:
    """Add a step after the prefill to the running times: a plain step's, or its source's."""
    if not r.proposed:
        stats.plain_step_seconds += r.seconds
        stats.timed_plain_steps += 1
        return
    stats.seconds_by_source[r.source] = stats.seconds_by_source.get(r.source, 0.0) + r.seconds
    stats.catchup_seconds += r.catchup_seconds
    stats.catchup_tokens += r.catchup_tokens


def _grow(xs: list[int], n: int) -> None:
    while len(xs) < n:
        xs.append(0)


def tell_controller(policy: Controller, r: StepResult) -> None:
    """The controller learns from the step's measured costs; the prompt's prefill (step 0) tells
    it what a row of a long pass costs before any verification ran. A grammar's forced run is no
    choice of the controller's: it hears nothing of it."""
    if r.step == 0:
        policy.observe_prefill(r.rows_fed, r.verify_seconds)
    elif r.source != GRAMMAR:
        policy.observe(StepOutcome(
            r.source, r.proposed, r.accepted, r.draft_seconds, r.verify_seconds, r.catchup_seconds,
            r.catchup_tokens, r.expected_accepted, list(r.sureness), r.match))
