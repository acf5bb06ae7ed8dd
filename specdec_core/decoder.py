"""The decoding loop: standard and speculative, one code path.

Standard decoding is the speculative loop with nothing proposed: each step feeds what the
target's KV cache lacks, reads k+1 next-token distributions, decides, emits, rolls back.

The loop is thin: `step.decode_step` runs one step (plan, propose, verify, decide) and
returns a frozen StepResult; `step.commit_step` moves the answer on by it (both caches roll
back to the committed prefix); the draft-length controller hears how it went and the running
Stats count it (step_stats.py); then the loop yields the step's TokenEvents.

Every time the decoder measures is read from its clock (time.perf_counter unless one is
given): the controller decides from those costs, so a test that asserts what it chose gives
the decoder and the draft a clock whose costs it pins.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

import torch

from .adaptive import conversation_prior, make_policy
from .context import answer_budget, check_fits, context_length
from .detok import IncrementalDetokenizer
from .events import EventStream, Stats, TokenEvent, TokenKind
from .lm import CachedLM
from .logprobs import TokenTexts
from .proposers.base import Proposer
from .proposers.grammar import GrammarProposer
from .settings import DecodeSettings, SettingsError
from .step import Clock, DecodeRun, StepResult, commit_step, decode_step
from .step_stats import count_step, tell_controller
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

    def __init__(self, target: torch.nn.Module, tokenizer=None, eos_token_ids: list[int] | None = None, lean=None,
                 clock: Clock = time.perf_counter):
        """lean: the target's lean forward where it has one (see CachedLM). clock: what every
        time the decoder measures (the Stats', the events' and the controller's costs) is read
        from; a test pins the costs with its own (the draft model's proposer takes the same)."""
        self.target = CachedLM(target, lean=lean)
        self.clock = clock
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
        reuse_at_most: int | None = None,
        idle_work: Callable[[int], dict] = lambda reused: {},
    ) -> Generation:
        """reuse_cache: keep the KV caches' entries for the longest prefix of `prompt_ids` that
        they already hold (a chat's next turn) instead of recomputing the whole prompt. Off by
        default: a benchmark or a race must pay every prompt's prefill. reuse_at_most: keep no
        more than that many of the prompt's first tokens (the bench's first turns: the chat
        template's head, which every new chat in the app finds cached, and not the rest of an
        earlier run of the same prompt).

        answer_prefix: the last that many prompt ids are the start of the answer this
        generation continues (an assistant prefill): the text handed out continues theirs.
        settings.max_new_tokens None: the answer runs until the context is full.
        idle_work(reused prompt tokens) -> Stats fields: what was read for this generation while
        nothing ran (Engine.read_ahead's draft tokens, Engine.read_prompt's target tokens): the
        Stats say so, outside the answer's time. Asked when the generation starts, not when it is
        made: a server makes a request's generation before its turn, while the read between
        requests may still be going (QueuedEngine)."""
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
        # presence and frequency penalties count the answer's tokens only: those after the prompt
        params = dataclasses.replace(settings.sampling, answer_start=len(prompt_ids))
        run = DecodeRun(list(prompt_ids), params, torch.Generator().manual_seed(settings.seed), budget,
                        settings.max_new_tokens is not None, self.eos, proposer, constraint=constraint,
                        top_logprobs=settings.logprobs, token_texts=self.token_texts)
        keep = (list(prompt_ids) if reuse_at_most is None else list(prompt_ids[: reuse_at_most + 1])) if reuse_cache else None
        loop = self._loop(run, settings, cancel, detok, stats, keep, idle_work)
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

    def _loop(self, run: DecodeRun, settings: DecodeSettings, cancel: threading.Event | None,
              detok: IncrementalDetokenizer, stats: Stats, keep: list[int] | None,
              idle_work: Callable[[int], dict]) -> Iterator[TokenEvent]:
        """Step until a stop reason; each step counted in `stats` before its events are handed
        out. Nothing runs before the first event is asked for."""
        self._start(run, settings, stats, keep)
        for name, value in idle_work(stats.reused_prompt_tokens).items():
            setattr(stats, name, value)
        t0 = self.clock()
        while not stats.stop_reason:
            if cancel is not None and cancel.is_set():
                stats.stop_reason = "cancelled"
                break
            result = decode_step(self.target, run, self.clock)
            commit_step(self.target, run, result)
            if run.policy is not None:
                tell_controller(run.policy, result)
            # the running stats count this step before its tokens are handed out, so whoever
            # reads them between steps sees figures for exactly the tokens it has
            count_step(stats, result, run.proposer is not None)
            stats.target_forward_passes = self.target.forward_passes
            if result.step == 0:
                stats.prefill_seconds = result.times.done - t0
            stats.seconds = self.clock() - t0
            yield from _events(result, detok, run.text_kind, result.times.done - t0)
        self.last_answer_tokens, self.last_prompt_tokens = run.emitted, run.params.answer_start
        return stats

    def _start(self, run: DecodeRun, settings: DecodeSettings, stats: Stats, keep: list[int] | None) -> None:
        """Ready the caches and the controller for a new answer. keep: the prompt, or the part of
        it whose cached entries may be kept (None: none)."""
        if keep is not None:
            stats.reused_prompt_tokens = self.target.keep_prefix(keep)
        else:
            self.target.reset()
        self.target.forward_passes = 0
        if run.proposer is not None:
            # in a conversation the controller expects the next answer to run about as long as
            # the last (adaptive.py, rule 5) -- in the same conversation only
            prior = conversation_prior(stats.reused_prompt_tokens, self.last_prompt_tokens, self.last_answer_tokens)
            run.policy = make_policy(settings.draft_tokens, run.proposer.sources, prior)
            run.proposer.reset(keep=keep)


def _events(r: StepResult, detok: IncrementalDetokenizer, text_kind: TextKind, t: float) -> Iterator[TokenEvent]:
    """The step's tokens as events, each with the text it adds (t: when the step was decided)."""
    for i, (tok, kind) in enumerate(zip(r.tokens, r.kinds)):
        piece = detok.push(tok)
        text_kind.push(piece)
        yield TokenEvent(tok, piece, kind, r.step, None if kind is TokenKind.STANDARD else i, t,
                         None if r.margins is None else r.margins[i], r.proposed, r.source, r.logprobs[i])
