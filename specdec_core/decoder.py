"""The decoding loops: standard and speculative, one code path.

Standard decoding is the speculative loop with nothing proposed: each step feeds what the
target's KV cache lacks, reads k+1 next-token distributions, decides, emits, rolls back.

One step (speculative):
  1. the proposer drafts up to k tokens continuing the committed sequence;
  2. the target verifies them in one forward pass over [pending..., d_1..d_k], keeping
     logits only for the last k+1 positions;
  3. acceptance (greedy or speculative sampling) keeps n of the k and adds one target token;
  4. an EOS among the emitted tokens ends the sequence right after it;
  5. both caches roll back to the committed prefix (one crop each);
  6. the draft-length policy hears how the step went.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

import torch

from .acceptance import greedy_verify, speculative_verify
from .adaptive import StepOutcome, conversation_prior, make_policy
from .context import answer_budget, check_fits, context_length
from .detok import IncrementalDetokenizer
from .events import EventStream, Stats, TokenEvent, TokenKind
from .lm import CachedLM
from .logprobs import TokenTexts, token_logprobs
from .proposers.base import GRAMMAR, DraftPlan, Proposal, Proposer
from .proposers.grammar import GrammarProposer
from .sampling import greedy_picks, probabilities, shaped_logits
from .settings import DecodeSettings, SamplingParams, SettingsError
from .textkind import TextKind


DETOK_SEED = 16  # tokens of a continued answer the detokenizer reads as context


class Generation(EventStream):
    """Iterate for TokenEvents; afterwards `stats`, `token_ids`, `text` hold the result.

    While it runs, `snapshot()` is the engine's running Stats for the tokens handed out so far
    (exact at a step's end, where front ends cut their batches): the one source of live figures."""

    def __init__(self, gen: Iterator[TokenEvent], detok: IncrementalDetokenizer, running: Stats):
        self._gen = gen
        self._detok = detok
        self._running = running
        self.events: list[TokenEvent] = []
        self.stats: Stats | None = None

    def __iter__(self) -> Iterator[TokenEvent]:
        while True:
            try:
                ev = next(self._gen)
            except StopIteration as stop:
                if stop.value is not None:  # an exhausted generator, iterated again, returns None
                    self.stats = stop.value
                return
            self.events.append(ev)
            yield ev

    def snapshot(self) -> Stats:
        """A copy of the running stats (the final stats once done). Call from the thread that
        iterates: the decoder updates them between the events it yields."""
        s = self.stats if self.stats is not None else self._running
        # every list or dict field copied, whatever fields Stats grows
        return dataclasses.replace(s, **{f.name: type(v)(v) for f in dataclasses.fields(s)
                                         if isinstance(v := getattr(s, f.name), (list, dict))})

    @property
    def text(self) -> str:
        return self._detok.text()


class Decoder:
    """Decodes with one target model; pass a Proposer for speculative decoding, None for standard."""

    def __init__(self, target: torch.nn.Module, tokenizer=None, eos_token_ids: list[int] | None = None, lean=None):
        """lean: the target's lean forward where it has one (see CachedLM)."""
        self.target = CachedLM(target, lean=lean)
        self.context_length = context_length(target)  # None: unknown, nothing is refused
        self.tokenizer = tokenizer
        if eos_token_ids is None:
            eos = getattr(getattr(target, "generation_config", None), "eos_token_id", None)
            eos_token_ids = [eos] if isinstance(eos, int) else list(eos or [])
        self.eos = frozenset(eos_token_ids)
        # how long the last answer was: in a conversation (a generation that reuses the cache)
        # the controller expects the next answer to run about as long (adaptive.py, rule 5)
        self.last_answer_tokens = 0
        self.last_prompt_tokens = 0  # ... and its prompt: whether the next one continues it
        self.token_texts = TokenTexts(tokenizer)  # logprobs' token texts, looked up once each
        self._grammars = None  # the grammar library's view of the tokenizer, built on first use

    def generate(
        self,
        prompt_ids: list[int],
        settings: DecodeSettings = DecodeSettings(),
        proposer: Proposer | None = None,
        cancel: threading.Event | None = None,
        reuse_cache: bool = False,
        answer_prefix: int = 0,
    ) -> Generation:
        """reuse_cache: keep the KV caches' entries for the longest prefix of `prompt_ids` that
        they already hold (a chat's next turn) instead of recomputing the whole prompt. Off by
        default: a benchmark or a race must pay every prompt's prefill.

        answer_prefix: the last that many prompt ids are the start of the answer this
        generation continues (an assistant prefill): the text handed out continues theirs.
        settings.max_new_tokens None: the answer runs until the context is full."""
        if not prompt_ids:
            raise SettingsError("the prompt is empty: give at least one token")
        check_fits(len(prompt_ids), settings.max_new_tokens, self.context_length)
        budget = answer_budget(settings.max_new_tokens, len(prompt_ids), self.context_length)
        detok = IncrementalDetokenizer(self.tokenizer)
        if answer_prefix > 0:  # a few tokens of context are all a word's space or a split character need
            detok.seed(list(prompt_ids[-min(answer_prefix, DETOK_SEED):]))
        stats = Stats(mode="speculative" if proposer else "standard", proposer=proposer.name if proposer else None)
        constraint = self.constraint(settings.grammar) if settings.grammar is not None else None
        if constraint is not None and proposer is not None:
            proposer = GrammarProposer(proposer, constraint)  # forced tokens first, masked proposals else
        loop = self._loop(list(prompt_ids), settings, proposer, cancel, detok, stats, reuse_cache, budget, constraint)
        return Generation(loop, detok, stats)

    def constraint(self, spec):
        """A fresh grammar state for one answer (GrammarError where the library refuses `spec`)."""
        from .grammar.constraint import Grammars

        if self._grammars is None:
            if self.tokenizer is None:
                raise SettingsError("a grammar needs the target's tokenizer, and this decoder has none")
            width = self.target.model.config.get_text_config().vocab_size
            self._grammars = Grammars(self.tokenizer, width, sorted(self.eos))
        return self._grammars.constraint(spec)

    def _loop(self, ids, settings, proposer, cancel, detok, stats: Stats, reuse_cache=False,
              budget: int = 0, constraint=None) -> Iterator[TokenEvent]:
        # presence and frequency penalties count the answer's tokens only: those from here on
        params = dataclasses.replace(settings.sampling, answer_start=len(ids))
        rng = torch.Generator().manual_seed(settings.seed)
        policy = None
        target = self.target
        if reuse_cache:
            stats.reused_prompt_tokens = target.keep_prefix(ids)
        else:
            target.reset()
        target.forward_passes = 0
        if proposer is not None:
            prior = conversation_prior(stats.reused_prompt_tokens, self.last_prompt_tokens, self.last_answer_tokens)
            policy = make_policy(settings.draft_tokens, proposer.sources, prior)
            proposer.reset(keep=ids if reuse_cache else None)
        t0 = time.perf_counter()
        emitted = 0
        step = 0
        no_plan = DraftPlan()
        text_kind = TextKind()
        while True:
            if cancel is not None and cancel.is_set():
                stats.stop_reason = "cancelled"
                break
            remaining = budget - emitted
            # 1. propose what the controller's plan allows; never more than the budget can take
            # (k accepted + 1 target token). Step 0 is the target's prompt prefill alone, in
            # both modes: the first token comes as fast as standard decoding gives it. An empty
            # plan is a plain step, which costs what a standard step costs: nothing is asked of
            # the proposer.
            plan = no_plan
            if policy is not None and step > 0 and remaining > 1:
                plan = policy.plan(proposer.unread(ids), remaining - 1, text_kind.kind).clip(remaining - 1)
            if constraint is not None and proposer is not None:
                plan = dataclasses.replace(plan, grammar=remaining - 1)  # a forced run is free, even in step 0
            proposal = _NOTHING
            t_draft = time.perf_counter()
            if not plan.empty:
                proposal = proposer.propose(ids, plan, params, rng)
                stats.draft_forward_passes += proposal.forward_passes
            draft = proposal.tokens
            k = len(draft)
            t_verify = time.perf_counter()
            # 2. verify: one target pass over what its cache lacks plus the k proposals
            n_fed = len(ids) - target.length + k
            pending = ids[target.length :]
            logits = target.forward(pending + draft, logits_to_keep=k + 1)  # [k+1, V]
            if constraint is not None:  # row i: the grammar's state after draft[:i]
                logits = constraint.mask(logits, draft)
            # 3. accept
            verdict, margins = self._decide(ids, draft, proposal.q_draft, logits, params, rng)
            t_done = time.perf_counter()
            new = draft[: verdict.n_accepted] + [verdict.next_token]
            # the verdict names the step's target token: corrected, bonus (all k >= 1 kept) or,
            # when nothing was proposed, standard -- a plain step earns the draft nothing
            kinds = [TokenKind.ACCEPTED] * verdict.n_accepted + [verdict.next_kind]
            # 4. EOS inside the draft: an accepted EOS ends the text; later tokens never count
            for i, tok in enumerate(new):
                if tok in self.eos:
                    new, kinds = new[: i + 1], kinds[: i + 1]
                    break
            logprobs = self._logprobs(logits, new, settings.logprobs)
            ids.extend(new)
            emitted += len(new)
            if constraint is not None:
                constraint.commit(new)
            # 5. roll back both caches to the committed prefix (all but the newest token)
            target.rollback(len(ids) - 1)
            if proposer is not None:
                if k:
                    proposer.observe(ids, verdict.n_accepted)
                # 6. the controller learns from the step's measured costs; the prompt's prefill
                # (step 0) tells it what a row of a long pass costs before any verification ran
                if step == 0:
                    policy.observe_prefill(n_fed, t_done - t_verify)
                elif proposal.source != GRAMMAR:  # a forced run is no choice of the controller's
                    # how peaked the target's rows were predicts how often the draft would agree
                    # (adaptive.py, rule 5): greedy has them already, a sampled step takes them
                    # here, only where a controller reads them
                    sureness = margins if margins is not None else greedy_picks(logits[: len(new)])[1]
                    policy.observe(StepOutcome(
                        proposal.source, k, verdict.n_accepted, t_verify - t_draft - proposal.catchup_seconds,
                        t_done - t_verify, proposal.catchup_seconds, proposal.catchup_tokens,
                        proposal.expected_accepted, sureness[: len(new)], proposal.match))
            # the running stats count this step before its tokens are handed out, so whoever
            # reads them between steps sees figures for exactly the tokens it has
            _count_step(stats, step, k, verdict.n_accepted, len(new), proposer is not None, proposal.source)
            if step > 0:
                _time_step(stats, k, proposal, t_done - t_draft)
            stats.new_tokens = emitted
            stats.target_forward_passes = target.forward_passes
            if step == 0:
                stats.prefill_seconds = t_done - t0
            stats.seconds = time.perf_counter() - t0
            if new[-1] in self.eos:
                stats.stop_reason = "eos"
            elif emitted >= budget:
                # the user's limit, or (none set) the context is full
                stats.stop_reason = "max_new_tokens" if settings.max_new_tokens is not None else "context"
            t = t_done - t0
            for i, (tok, kind) in enumerate(zip(new, kinds)):
                piece = detok.push(tok)
                text_kind.push(piece)
                yield TokenEvent(
                    tok,
                    piece,
                    kind,
                    step,
                    None if kind is TokenKind.STANDARD else i,
                    t,
                    None if margins is None else margins[i],
                    k,
                    proposal.source,
                    logprobs[i],
                )
            step += 1
            if stats.stop_reason:  # set above: the last step's stats are complete with its tokens
                break
        self.last_answer_tokens, self.last_prompt_tokens = emitted, params.answer_start
        return stats

    def _logprobs(self, logits: torch.Tensor, new: list[int], top: int | None) -> list:
        """Each emitted token's Logprobs (None each when not asked for): row j of the pass
        decided new[j], so they need no other pass."""
        if top is None:
            return [None] * len(new)
        return token_logprobs(logits, new, top, self.token_texts)

    @staticmethod
    def _decide(ids, draft, q_draft, logits, params: SamplingParams, rng: torch.Generator):
        """logits [k+1, V] -> (Verdict, margins [k+1] or None). Row i follows the committed
        `ids` and draft[:i]: what the penalties count there, as standard decoding would have had
        it emitted those proposals. margins: greedy only, the top-1 minus top-2 logit at each row
        (how close each call was, for the near-tie check)."""
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


_NOTHING = Proposal([])  # what a plain step proposes


def _count_step(stats: Stats, step: int, k: int, n_accepted: int, emitted: int, speculative: bool,
                source: str) -> None:
    """Add one verification step to the running stats (plain steps count only as passes)."""
    if speculative and step > 0:
        stats.last_draft_length = k
    if k == 0:
        return
    for counts, n in ((stats.steps_by_source, 1), (stats.proposed_by_source, k), (stats.accepted_by_source, n_accepted)):
        counts[source] = counts.get(source, 0) + n
    stats.speculative_steps += 1
    stats.speculative_step_tokens += emitted
    stats.draft_tokens += k
    stats.accepted_draft_tokens += n_accepted
    stats.draft_lengths.append(k)
    _grow(stats.per_position_proposed, k)
    _grow(stats.per_position_accepted, k)
    for i in range(k):
        stats.per_position_proposed[i] += 1
    for i in range(n_accepted):
        stats.per_position_accepted[i] += 1


def _time_step(stats: Stats, k: int, proposal: Proposal, seconds: float) -> None:
    """Add a step after the prefill to the running times: a plain step's, or its source's."""
    if k == 0:
        stats.plain_step_seconds += seconds
        stats.timed_plain_steps += 1
        return
    src = proposal.source
    stats.seconds_by_source[src] = stats.seconds_by_source.get(src, 0.0) + seconds
    stats.catchup_seconds += proposal.catchup_seconds
    stats.catchup_tokens += proposal.catchup_tokens


def _grow(xs: list[int], n: int) -> None:
    while len(xs) < n:
        xs.append(0)
