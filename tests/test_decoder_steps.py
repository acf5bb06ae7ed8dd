"""The decoder's seams: one step as a value (step.py), the running Stats copied whole, and the
clock the controller's costs are read from (a test pins them: tests/clocks.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from clocks import WorkClock
from specdec_core.decoder import Decoder, Generation
from specdec_core.detok import IncrementalDetokenizer
from specdec_core.events import Stats, TokenKind
from specdec_core.proposers import DraftModelProposer
from specdec_core.settings import DecodeSettings, SamplingParams
from specdec_core.step import DecodeRun, StepResult, commit_step, decode_step
from test_decoder import PROMPTS


class _Fixed:
    """A controller that plans k draft tokens every step after the prefill."""

    def __init__(self, k):
        from specdec_core.proposers import DraftPlan

        self.plan_ = DraftPlan(draft=k)

    def plan(self, backlog=0, remaining=None, kind="prose"):
        return self.plan_


def _run(prompt, proposer=None, policy=None, budget=20):
    return DecodeRun(list(prompt), SamplingParams(answer_start=len(prompt)), torch.Generator().manual_seed(0), budget,
                     True, frozenset(), proposer, policy)


def test_one_step_is_a_frozen_value_and_the_commit_rolls_both_caches_back(tiny):
    """Hand-built: the prefill is step 0 and proposes nothing; a draft identical to the target
    has its 3 proposals kept and a bonus added; the commit crops the target's cache to all but
    the newest token."""
    dec = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[])
    prop = DraftModelProposer(tiny.target, tiny.vocab)
    prompt = PROMPTS[0]
    run = _run(prompt, prop, _Fixed(3))
    dec.target.reset()
    prop.reset()
    first = decode_step(dec.target, run, dec.clock)
    assert isinstance(first, StepResult) and first.step == 0 and first.proposed == 0 and first.source == ""
    assert first.kinds == (TokenKind.STANDARD,) and first.rows_fed == len(prompt)
    assert first.crop == len(prompt) and first.stop_reason == "" and first.sureness is None  # no controller at step 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.tokens = ()
    commit_step(dec.target, run, first)
    assert run.ids == prompt + list(first.tokens) and dec.target.length == len(prompt) and run.step == 1
    second = decode_step(dec.target, run, dec.clock)
    assert second.proposed == 3 and second.accepted == 3 and second.source == "draft"
    assert second.kinds == (TokenKind.ACCEPTED,) * 3 + (TokenKind.BONUS,)
    assert second.rows_fed == 1 + 3 and second.crop == len(prompt) + 1 + 4 - 1
    assert len(second.margins) == 4 and second.logprobs == (None,) * 4 and second.sureness == second.margins
    commit_step(dec.target, run, second)
    assert dec.target.length == second.crop and run.emitted == 5
    # and the tokens are standard greedy's
    std = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[]).generate(prompt, DecodeSettings(max_new_tokens=5)).run()
    assert list(run.ids[len(prompt):]) == std.token_ids


def test_a_step_that_reaches_the_budget_or_an_eos_says_why_it_stops(tiny):
    dec = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[])
    std = dec.generate(PROMPTS[1], DecodeSettings(max_new_tokens=3)).run()
    dec.target.reset()
    run = _run(PROMPTS[1], budget=1)
    assert decode_step(dec.target, run, dec.clock).stop_reason == "max_new_tokens"
    dec.target.reset()
    run = dataclasses.replace(_run(PROMPTS[1]), eos=frozenset({std.token_ids[0]}))
    assert decode_step(dec.target, run, dec.clock).stop_reason == "eos"
    dec.target.reset()
    run = dataclasses.replace(_run(PROMPTS[1], budget=1), limited=False)
    assert decode_step(dec.target, run, dec.clock).stop_reason == "context"  # no budget: the context is full


def _every_field_set() -> Stats:
    """A Stats whose every field differs from its default, whatever fields it has."""
    values = {}
    for i, f in enumerate(dataclasses.fields(Stats)):
        kind = str(f.type).split("|")[0].split("[")[0].strip()
        values[f.name] = {"int": 3 + i, "float": 0.5 + i, "str": f"s{i}", "list": [i, i + 1],
                          "dict": {"draft": i + 1}}[kind]
    stats = Stats(**values)
    for f in dataclasses.fields(Stats):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert getattr(stats, f.name) != default, f.name
    return stats


@pytest.mark.parametrize("done", [False, True])
def test_a_snapshot_copies_every_field_of_the_stats(done):
    """Whatever fields Stats grows: a snapshot holds each one's value, in a container of its own
    (the app keeps a snapshot while the engine goes on counting into the running stats)."""
    stats = _every_field_set()
    gen = Generation(iter(()), IncrementalDetokenizer(None), stats)
    if done:
        gen.run()
        gen.stats = stats
    snap = gen.snapshot()
    assert snap is not stats
    for f in dataclasses.fields(Stats):
        mine, theirs = getattr(snap, f.name), getattr(stats, f.name)
        assert mine == theirs, f.name
        if isinstance(theirs, (list, dict)):
            assert mine is not theirs, f.name
    stats.draft_lengths.append(99)
    stats.steps_by_source["lookup"] = 1
    assert 99 not in snap.draft_lengths and "lookup" not in snap.steps_by_source


# -- the controller's costs, pinned ------------------------------------------------------------
def _pinned(tiny, monkeypatch, target_cost, draft_cost):
    clock = WorkClock({tiny.target: target_cost, tiny.near_draft: draft_cost}).install(monkeypatch)
    dec = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[], clock=clock)
    return clock, dec, DraftModelProposer(tiny.near_draft, tiny.vocab, clock=clock)


def test_the_controller_decides_from_the_decoder_s_clock(tiny, monkeypatch):
    """With the costs pinned, what the adaptive controller chooses is the costs' doing, never the
    machine's: a cheap draft is started and proposes; where each verified row costs about a plain
    step, speculation cannot pay and the draft never runs. The Stats' times are the clock's."""
    settings = DecodeSettings(max_new_tokens=40, draft_tokens="adaptive")
    clock, dec, prop = _pinned(tiny, monkeypatch, (0.02, 0.0005), (0.001, 0.0001))
    cheap = dec.generate(PROMPTS[0], settings, prop).run()
    assert cheap.stats.proposed_tokens > 0 and cheap.stats.accepted_tokens > 0
    assert cheap.stats.prefill_seconds == pytest.approx(0.02 + 0.0005 * len(PROMPTS[0]))
    assert cheap.stats.seconds == pytest.approx(clock.now) and cheap.events[-1].t == pytest.approx(clock.now)
    clock, dec, prop = _pinned(tiny, monkeypatch, (0.001, 0.02), (0.001, 0.0001))
    dear = dec.generate(PROMPTS[0], settings, prop).run()
    assert dear.stats.proposed_tokens == 0 and prop.lm.forward_passes == 0
    assert dear.token_ids == cheap.token_ids  # and either way, the target's greedy text


def test_the_same_costs_give_the_same_choices(tiny, monkeypatch):
    """Two runs on the pinned clock make the same plan step for step, however busy the machine."""
    settings = DecodeSettings(max_new_tokens=40, draft_tokens="adaptive")
    runs = []
    for _ in range(2):
        _, dec, prop = _pinned(tiny, monkeypatch, (0.02, 0.0005), (0.001, 0.0001))
        g = dec.generate(PROMPTS[4], settings, prop).run()
        runs.append(([(e.kind, e.draft_length, e.t) for e in g.events], g.stats.to_dict()))
    assert runs[0] == runs[1]
