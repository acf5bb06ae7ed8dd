"""One decoding step: plan, propose, verify, decide -- and the frozen value that says what it did.

`decode_step` runs one target verification (gpt-fast's `speculative_decode` shape: draft, one
target pass, acceptance) and returns a `StepResult`: the tokens it emits with their kinds, the
figures the events carry, where both caches roll back to, why the answer stops (if it does)
and the clock readings the controller and the Stats need. It changes no cache beyond the
target's pass itself and commits nothing: `commit_step` moves the answer on by the result.
The loop that yields events and keeps the Stats is decoder.py's.

A step (speculative; standard decoding is this with nothing proposed):
  1. the controller's plan says what each source may propose (never more than the budget takes);
  2. the proposer drafts up to k tokens continuing the committed sequence;
  3. the target verifies them in one forward pass over [pending..., d_1..d_k], keeping logits
     only for the last k+1 positions (a constrained answer's grammar masks each row);
  4. acceptance (greedy or speculative sampling) keeps n of the k and adds one target token;
  5. an EOS among the emitted tokens ends the sequence right after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from .acceptance import Verdict, greedy_verify, speculative_verify
from .adaptive import StepOutcome
from .events import Logprobs, TokenKind
from .lm import CachedLM
from .logprobs import TokenTexts, token_logprobs
from .proposers.base import GRAMMAR, DraftPlan, Proposal, Proposer
from .sampling import greedy_picks, probabilities, shaped_logits
from .settings import SamplingParams
from .textkind import PROSE, TextKind

Clock = Callable[[], float]  # seconds, monotonic (time.perf_counter; a test's pinned clock)


class Controller(Protocol):
    """The draft-length controller as the decoder uses it (adaptive.py: fixed or adaptive)."""

    def plan(self, backlog: int = 0, remaining: int | None = None, kind: str = PROSE) -> DraftPlan: ...

    def observe_prefill(self, rows: int, seconds: float) -> None: ...

    def observe(self, outcome: StepOutcome) -> None: ...


_NO_PLAN = DraftPlan()
_NOTHING = Proposal([])  # what a plain step proposes


@dataclass
class DecodeRun:
    """One answer's state between steps: the committed sequence and what decides the next step."""

    ids: list[int]  # prompt + emitted so far (committed)
    params: SamplingParams  # penalties count the answer's tokens only: answer_start is the prompt's end
    rng: torch.Generator
    budget: int  # most tokens this answer may emit
    limited: bool  # the budget is the user's max_new_tokens (else: what the context leaves)
    eos: frozenset[int]
    proposer: Proposer | None = None
    policy: Controller | None = None  # None: standard decoding
    constraint: object | None = None  # a constrained answer's grammar state
    top_logprobs: int | None = None  # DecodeSettings.logprobs
    token_texts: TokenTexts | None = None
    emitted: int = 0
    step: int = 0
    text_kind: TextKind = field(default_factory=TextKind)


@dataclass(frozen=True, slots=True)
class StepTimes:
    """The step's clock readings: before proposing, before the target's pass, after deciding."""

    draft_start: float
    verify_start: float
    done: float


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step did. tokens[i] has kinds[i]; margins (greedy only) and logprobs (when
    asked for) per token too; `accepted` counts the proposals kept before any EOS cut."""

    step: int
    tokens: tuple[int, ...]
    kinds: tuple[TokenKind, ...]
    margins: tuple[float, ...] | None  # the target's top-1 minus top-2 logit (greedy only)
    logprobs: tuple[Logprobs | None, ...]
    proposed: int  # k: tokens that reached verification
    accepted: int
    source: str  # what proposed them (proposers.base); "" for a plain step
    rows_fed: int  # rows of the target's pass (what its cache lacked plus the k proposals)
    crop: int  # both caches keep this many tokens after the step (all but the newest)
    stop_reason: str  # "eos" | "max_new_tokens" | "context", "" while the answer goes on
    times: StepTimes
    draft_passes: int = 0
    catchup_seconds: float = 0.0  # the draft's read of text it had not seen (part of drafting)
    catchup_tokens: int = 0
    expected_accepted: float | None = None
    match: int = 0  # a lookup proposal's match length
    # the target's margins at the emitted tokens for the controller's start rule (greedy and
    # sampled), taken only where a controller reads them; None elsewhere
    sureness: tuple[float, ...] | None = None

    @property
    def draft_seconds(self) -> float:
        """Producing the proposal, its catch-up read excluded."""
        return self.times.verify_start - self.times.draft_start - self.catchup_seconds

    @property
    def verify_seconds(self) -> float:
        return self.times.done - self.times.verify_start

    @property
    def seconds(self) -> float:
        """The whole step: drafting (catch-up included), verification, decision."""
        return self.times.done - self.times.draft_start


def decode_step(target: CachedLM, run: DecodeRun, clock: Clock) -> StepResult:
    """Run one step of `run` on `target`; the caller commits the result (commit_step)."""
    ids, k_room = run.ids, run.budget - run.emitted - 1  # room for k accepted + 1 target token
    plan = _plan(run, k_room)
    t_draft = clock()
    proposal = run.proposer.propose(ids, plan, run.params, run.rng) if not plan.empty else _NOTHING
    draft = proposal.tokens
    k = len(draft)
    t_verify = clock()
    rows = len(ids) - target.length + k
    logits = target.forward(ids[target.length :] + draft, logits_to_keep=k + 1)  # [k+1, V]
    if run.constraint is not None:  # row i: the grammar's state after draft[:i]
        logits = run.constraint.mask(logits, draft)
    verdict, margins = decide(ids, draft, proposal.q_draft, logits, run.params, run.rng)
    t_done = clock()
    tokens, kinds = _cut_at_eos(draft, verdict, run.eos)
    # a controller learns from a step after the prefill that it chose (a forced run is no choice
    # of its): how peaked the target's rows were predicts how often the draft would agree
    # (adaptive.py, rule 5); greedy has them already, a sampled step takes them only here
    sureness = None
    if run.policy is not None and run.step > 0 and proposal.source != GRAMMAR:
        sureness = tuple((margins if margins is not None else greedy_picks(logits[: len(tokens)])[1])[: len(tokens)])
    return StepResult(
        run.step, tokens, kinds, None if margins is None else tuple(margins[: len(tokens)]),
        tuple(_logprobs(logits, tokens, run)), k, verdict.n_accepted, proposal.source, rows,
        len(ids) + len(tokens) - 1, _stop_reason(run, tokens), StepTimes(t_draft, t_verify, t_done),
        proposal.forward_passes, proposal.catchup_seconds, proposal.catchup_tokens,
        proposal.expected_accepted, proposal.match, sureness)


def commit_step(target: CachedLM, run: DecodeRun, result: StepResult) -> None:
    """Move the answer on by the step: its tokens committed, both caches rolled back to the
    committed prefix (one crop each), the grammar and the proposer told what was kept."""
    run.ids.extend(result.tokens)
    run.emitted += len(result.tokens)
    if run.constraint is not None:
        run.constraint.commit(list(result.tokens))
    target.rollback(result.crop)
    if run.proposer is not None and result.proposed:
        run.proposer.observe(run.ids, result.accepted)
    run.step += 1


def decide(ids, draft, q_draft, logits, params: SamplingParams, rng: torch.Generator) -> tuple[Verdict, list | None]:
    """logits [k+1, V] -> (Verdict, margins [k+1] or None). Row i follows the committed `ids`
    and draft[:i]: what the penalties count there, as standard decoding would have had it
    emitted those proposals. margins: greedy only, the top-1 minus top-2 logit at each row (how
    close each call was, for the near-tie check)."""
    k = len(draft)
    if params.greedy:
        # no softmax: argmax is all greedy needs (the first of equal maxima, as generate()
        # breaks exact ties); the top-2 margin says how close each call was.
        argmax, margins = greedy_picks(shaped_logits(logits, params, ids, draft))
        return greedy_verify(draft, argmax), margins
    p_target = probabilities(logits, params, ids, draft)  # [k+1, V]
    u_accept = torch.rand(k, generator=rng)
    u_next = float(torch.rand((), generator=rng))
    tokens = torch.tensor(draft, dtype=torch.long, device=p_target.device)
    q = None if q_draft is None else q_draft.to(p_target.device)
    return speculative_verify(tokens, q, p_target, u_accept.to(p_target.device), u_next), None


def _plan(run: DecodeRun, k_room: int) -> DraftPlan:
    """What each source may propose. Step 0 is the target's prompt prefill alone, in both modes:
    the first token comes as fast as standard decoding gives it. An empty plan is a plain step,
    which costs what a standard step costs: nothing is asked of the proposer."""
    plan = _NO_PLAN
    if run.policy is not None and run.step > 0 and k_room > 0:
        plan = run.policy.plan(run.proposer.unread(run.ids), k_room, run.text_kind.kind).clip(k_room)
    if run.constraint is not None and run.proposer is not None:
        plan = dataclasses.replace(plan, grammar=k_room)  # a forced run is free, even in step 0
    return plan


def _cut_at_eos(draft: list[int], verdict: Verdict, eos: frozenset[int]) -> tuple[tuple[int, ...], tuple[TokenKind, ...]]:
    """The step's tokens and kinds: the accepted proposals, then the verdict's target token --
    corrected, bonus (all k >= 1 kept) or, when nothing was proposed, standard (a plain step
    earns the draft nothing). An accepted EOS ends the text: later tokens never count."""
    new = draft[: verdict.n_accepted] + [verdict.next_token]
    kinds = [TokenKind.ACCEPTED] * verdict.n_accepted + [verdict.next_kind]
    for i, tok in enumerate(new):
        if tok in eos:
            return tuple(new[: i + 1]), tuple(kinds[: i + 1])
    return tuple(new), tuple(kinds)


def _stop_reason(run: DecodeRun, tokens: tuple[int, ...]) -> str:
    if tokens[-1] in run.eos:
        return "eos"
    if run.emitted + len(tokens) >= run.budget:
        # the user's limit, or (none set) the context is full
        return "max_new_tokens" if run.limited else "context"
    return ""


def _logprobs(logits: torch.Tensor, tokens: tuple[int, ...], run: DecodeRun) -> list:
    """Each emitted token's Logprobs (None each when not asked for): row j of the pass decided
    tokens[j], so they need no other pass."""
    if run.top_logprobs is None:
        return [None] * len(tokens)
    return token_logprobs(logits, list(tokens), run.top_logprobs, run.token_texts)
