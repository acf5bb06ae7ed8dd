"""Tier 2: exact equalities against transformers, on tiny random models of the real
architecture (Qwen2), float32: speculative greedy == standard greedy == generate()."""

import threading

import pytest
import torch
from transformers import GenerationConfig

from specdec_core.context import ContextError
from specdec_core.decoder import Decoder
from specdec_core.settings import DecodeSettings, sample_seed
from specdec_core.events import Stats, TokenKind, first_divergence
from specdec_core.lm import CachedLM
from specdec_core.proposers import DraftModelProposer, DraftPlan, LookupDraftProposer, PromptLookupProposer
from specdec_core.sampling import SamplingParams

PROMPTS = [
    [1, 5, 29, 7, 9, 11, 12, 7, 13, 2, 1, 6],
    [1, 5, 33, 40, 41, 42, 43, 44, 2, 1, 6],
    [30, 31, 32],
    [7],  # a one-token prompt
    [8, 9, 10, 8, 9, 10, 8, 9],  # repetitive: prompt lookup has matches
]


def hf_greedy(model, prompt, n, eos):
    cfg = GenerationConfig(do_sample=False, max_new_tokens=n, eos_token_id=eos, pad_token_id=0)
    out = model.generate(torch.tensor([prompt]), generation_config=cfg)
    return out[0, len(prompt) :].tolist()


def eos_of(model):
    return list(model.generation_config.eos_token_id)


def assert_truthful_kinds(events, speculative=True):
    """Each step's tokens name where they came from: a step that proposed nothing (k = 0) emits
    one standard token; a speculative step emits its accepted tokens, then one corrected token
    (a rejection) or a bonus one -- only when all of its k >= 1 proposals were kept."""
    steps: dict[int, list] = {}
    for e in events:
        steps.setdefault(e.step, []).append(e)
    for step, evs in steps.items():
        k = evs[0].draft_length
        kinds = [e.kind for e in evs]
        if k == 0:
            assert kinds == [TokenKind.STANDARD] and evs[0].draft_position is None, (step, kinds)
            continue
        assert speculative, "standard decoding proposes nothing"
        n = kinds.count(TokenKind.ACCEPTED)
        assert kinds[:n] == [TokenKind.ACCEPTED] * n and n <= k, (step, kinds)
        if len(kinds) > n:  # (an accepted EOS ends the step without a target token)
            assert kinds[n:] == [TokenKind.BONUS if n == k else TokenKind.CORRECTED], (step, k, kinds)
        assert {e.source for e in evs} <= {"draft", "lookup"} and len({e.source for e in evs}) == 1, (step, evs)
    for e in events:
        if e.draft_length == 0:
            assert e.source == ""  # a plain step proposed nothing: no source
    kinds = [e.kind for e in events]
    assert kinds.count(TokenKind.BONUS) <= kinds.count(TokenKind.ACCEPTED)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_standard_greedy_equals_transformers(tiny, prompt):
    dec = Decoder(tiny.target, tiny.tokenizer)
    g = dec.generate(prompt, DecodeSettings(max_new_tokens=24)).run()
    assert g.token_ids == hf_greedy(tiny.target, prompt, 24, eos_of(tiny.target))
    assert set(g.kinds) == {"standard"}


@pytest.mark.parametrize("draft_name", ["draft", "near_draft", "lookup", "lookup+draft"])
@pytest.mark.parametrize("k", [1, 2, 4, 7, "adaptive"])
def test_speculative_greedy_equals_standard_and_transformers(tiny, draft_name, k):
    dec = Decoder(tiny.target, tiny.tokenizer)
    if draft_name == "lookup":
        prop = PromptLookupProposer()
    elif draft_name == "lookup+draft":
        prop = LookupDraftProposer(DraftModelProposer(tiny.near_draft, tiny.vocab))
    else:
        prop = DraftModelProposer(getattr(tiny, draft_name), tiny.vocab)
    for prompt in PROMPTS:
        ref = hf_greedy(tiny.target, prompt, 24, eos_of(tiny.target))
        std = dec.generate(prompt, DecodeSettings(max_new_tokens=24)).run()
        spec = dec.generate(prompt, DecodeSettings(max_new_tokens=24, draft_tokens=k), prop).run()
        assert spec.token_ids == std.token_ids == ref, (prompt, first_divergence(std.events, spec.events))
        assert len(spec.kinds) == len(spec.token_ids)
        assert spec.kinds[0] == "standard"  # the first token is the target's prefill alone
        assert_truthful_kinds(spec.events)
        assert_truthful_kinds(std.events, speculative=False)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_draft_identical_to_target_never_rejects(tiny, k):
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.target, tiny.vocab)
    for prompt in PROMPTS:
        g = dec.generate(prompt, DecodeSettings(max_new_tokens=20, draft_tokens=k), prop).run()
        assert "corrected" not in g.kinds
        assert g.stats.acceptance_rate == 1.0
        assert g.stats.accepted_tokens == g.stats.proposed_tokens > 0


def test_identical_draft_never_rejects_when_sampling(tiny):
    # p == q: min(1, p/q) = 1 everywhere, so even sampled drafts are all kept.
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.target, tiny.vocab)
    s = DecodeSettings(max_new_tokens=20, draft_tokens=3, sampling=SamplingParams(0.8, 20, 0.95), seed=5)
    g = dec.generate(PROMPTS[0], s, prop).run()
    assert "corrected" not in g.kinds and g.stats.acceptance_rate == 1.0


def test_stats_add_up(tiny):
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    g = dec.generate(PROMPTS[0], DecodeSettings(max_new_tokens=30, draft_tokens=4), prop).run()
    s = g.stats
    kinds = g.kinds
    assert s.new_tokens == len(g.token_ids) == 30 and s.stop_reason == "max_new_tokens"
    assert s.accepted_tokens == kinds.count("accepted")
    # every target pass emits exactly one non-accepted token: corrected or bonus after a
    # proposal, standard in a plain step (the prefill; the last step when only one token is left)
    assert kinds.count("corrected") + kinds.count("bonus") == s.speculative_steps == len(s.draft_lengths)
    assert kinds.count("standard") == s.plain_steps == s.target_forward_passes - s.speculative_steps >= 1
    assert s.plain_step_share == pytest.approx(s.plain_steps / s.target_forward_passes)
    assert s.proposed_tokens == sum(s.draft_lengths)
    assert s.per_position_proposed[0] == len(s.draft_lengths)
    assert sum(s.per_position_accepted) == s.accepted_tokens
    # tau counts the speculative steps only: their tokens over their number
    assert s.speculative_step_tokens == 30 - s.plain_steps
    assert s.tokens_per_speculative_step == pytest.approx((30 - s.plain_steps) / s.speculative_steps)
    # the draft ran k passes per step, and one more for its read of the prompt (a pass of its
    # own, before its first drafted token: what starting late costs is timed apart)
    assert s.draft_forward_passes == s.proposed_tokens + 1
    steps = [e.step for e in g.events]
    assert steps == sorted(steps)
    # each event knows its step's k: the first event of every step carries that step's k
    firsts = {}
    for e in g.events:
        firsts.setdefault(e.step, e.draft_length)
    assert [k for k in firsts.values() if k] == s.draft_lengths  # steps with no proposal are not draft steps
    assert_truthful_kinds(g.events)
    assert all(e.t >= 0 for e in g.events) and s.seconds >= g.events[-1].t


def test_eos_inside_draft_stops_right_after_it(tiny):
    # Make <|im_end|> (id 2) the target's greedy choice after "cat": find the position where
    # standard decoding emits it, then check speculative stops at the same place.
    dec = Decoder(tiny.target, tiny.tokenizer)
    std = dec.generate(PROMPTS[1], DecodeSettings(max_new_tokens=40)).run()
    stop_tok = std.token_ids[5]
    dec_eos = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[stop_tok])
    std_eos = dec_eos.generate(PROMPTS[1], DecodeSettings(max_new_tokens=40)).run()
    first = std.token_ids.index(stop_tok)
    assert std_eos.token_ids == std.token_ids[: first + 1] and std_eos.stats.stop_reason == "eos"
    for prop in (DraftModelProposer(tiny.target, tiny.vocab), DraftModelProposer(tiny.draft, tiny.vocab)):
        spec = dec_eos.generate(PROMPTS[1], DecodeSettings(max_new_tokens=40, draft_tokens=6), prop).run()
        assert spec.token_ids == std_eos.token_ids
        assert spec.stats.stop_reason == "eos"


@pytest.mark.parametrize("n", [1, 2, 3, 9])
def test_max_new_tokens_is_exact(tiny, n):
    dec = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[])
    prop = DraftModelProposer(tiny.target, tiny.vocab)  # accepts everything: would overshoot
    g = dec.generate(PROMPTS[0], DecodeSettings(max_new_tokens=n, draft_tokens=8), prop).run()
    assert len(g.token_ids) == n and g.stats.stop_reason == "max_new_tokens"
    assert_truthful_kinds(g.events)
    # n = 2: after the prefill one token is left, no room for a proposal: a plain step, and its
    # token is standard although the draft would have been right
    expected = {1: ["standard"], 2: ["standard", "standard"], 3: ["standard", "accepted", "bonus"]}
    if n in expected:
        assert g.kinds == expected[n]


def test_a_draft_the_target_rejects_earns_no_bonus(tiny, monkeypatch):
    """The issue's case: a weak draft under adaptive k, where the controller falls back to plain
    steps. Those tokens are the target's alone (standard), never bonus: a run has no more bonus
    tokens than accepted ones. (The costs are pinned -- a target pass twenty times a drafted
    token's -- so the controller starts the draft and then drops it by the same figures on any
    machine: on the wall clock, whether it started hung on how fast and busy this one was.)"""
    from clocks import WorkClock

    clock = WorkClock({tiny.target: (0.02, 0.0005), tiny.draft: (0.001, 0.0001)}).install(monkeypatch)
    dec = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[], clock=clock)
    prop = DraftModelProposer(tiny.draft, tiny.vocab, clock=clock)
    g = dec.generate(PROMPTS[0], DecodeSettings(max_new_tokens=60, draft_tokens="adaptive"), prop).run()
    kinds, s = g.kinds, g.stats
    assert s.proposed_tokens > 0  # it tried ...
    assert kinds.count("standard") > kinds.count("accepted")  # ... and the fallback happened
    assert kinds.count("bonus") <= kinds.count("accepted")
    assert_truthful_kinds(g.events)
    # alpha and tau count only the steps that proposed something; the plain share is apart
    assert s.acceptance_rate == pytest.approx(kinds.count("accepted") / s.proposed_tokens)
    assert s.plain_step_share > 0.5 and s.plain_steps == kinds.count("standard")


def test_running_stats_count_exactly_the_tokens_handed_out(tiny):
    """Between steps, Generation.snapshot() is the engine's Stats for the events so far -- the
    figures the app shows live -- and it ends equal to the final stats."""
    dec = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[])
    prop = DraftModelProposer(tiny.near_draft, tiny.vocab)
    g = dec.generate(PROMPTS[0], DecodeSettings(max_new_tokens=25, draft_tokens=3), prop)
    seen = []
    snaps = []
    for ev in g:
        seen.append(ev)
        snaps.append((len(seen), ev.step, g.snapshot()))
    last_of_step = {}
    for n, step, snap in snaps:
        last_of_step[step] = (n, snap)
    for step, (n, snap) in last_of_step.items():
        upto = seen[:n]
        assert snap.new_tokens == n and snap.target_forward_passes == step + 1
        assert snap.accepted_tokens == sum(e.kind is TokenKind.ACCEPTED for e in upto)
        assert snap.plain_steps == sum(e.kind is TokenKind.STANDARD for e in upto)
        assert snap.seconds >= upto[-1].t and snap.prefill_seconds == g.stats.prefill_seconds
        assert snap.stop_reason == ("" if n < 25 else "max_new_tokens")
    final = g.snapshot()
    assert final.to_dict() == g.stats.to_dict()
    assert final is not g.stats  # a copy: the app may keep it while the engine goes on


def test_the_two_rates_hand_checked():
    # 11 tokens in 3 s, the first after 1 s: end-to-end 11 / 3, decode 10 tokens / 2 s
    s = Stats(new_tokens=11, seconds=3.0, prefill_seconds=1.0)
    assert s.tokens_per_second == pytest.approx(11 / 3) and s.decode_tokens_per_second == pytest.approx(5.0)
    one = Stats(new_tokens=1, seconds=1.0, prefill_seconds=1.0)
    assert one.decode_tokens_per_second == 0.0 and one.tokens_per_second == 1.0
    # tau over speculative steps: 3 steps emitted 10 tokens; 2 plain steps of 5 are apart
    t = Stats(new_tokens=12, target_forward_passes=5, speculative_steps=3, speculative_step_tokens=10,
              proposed_tokens=12, accepted_tokens=7)
    assert t.tokens_per_speculative_step == pytest.approx(10 / 3) and t.plain_steps == 2
    assert t.plain_step_share == pytest.approx(0.4) and t.acceptance_rate == pytest.approx(7 / 12)


def test_a_prompt_that_does_not_fit_the_context_is_refused_before_decoding(tiny):
    """The tiny target holds 512 positions: the prompt plus the answer budget must fit."""
    dec = Decoder(tiny.target, tiny.tokenizer)
    assert dec.context_length == 512
    with pytest.raises(ContextError, match="600 tokens") as e:
        dec.generate([5] * 600, DecodeSettings(max_new_tokens=4))  # refused at the call, not while iterating
    assert (e.value.prompt_tokens, e.value.context) == (600, 512)
    with pytest.raises(ContextError, match="lower max-new-tokens to 12"):
        dec.generate([5] * 500, DecodeSettings(max_new_tokens=13))
    g = dec.generate([5] * 500, DecodeSettings(max_new_tokens=12))  # exactly fits
    assert len(g.run().token_ids) == 12


def test_cache_rollback_equals_fresh_run(tiny):
    # Feed a prefix and 4 speculative tokens, roll back 3 of them, feed a new token: the logits
    # must equal those of a fresh run on the accepted prefix plus that token.
    prefix = [1, 5, 29, 7, 9]
    drafts = [11, 12, 13, 14]
    lm = CachedLM(tiny.target)
    lm.reset()
    lm.forward(prefix + drafts, logits_to_keep=5)
    lm.rollback(len(prefix) + 1)  # keep the first draft token only
    assert lm.length == len(prefix) + 1
    rolled = lm.forward([20], logits_to_keep=1)
    fresh = CachedLM(tiny.target)
    fresh.reset()
    ref = fresh.forward(prefix + drafts[:1] + [20], logits_to_keep=1)
    torch.testing.assert_close(rolled, ref, rtol=1e-5, atol=1e-5)
    assert lm.cache.get_seq_length() == len(prefix) + 2


def test_draft_cache_tracks_committed_prefix(tiny):
    # after every step, the draft cache holds a prefix of the committed sequence
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    gen = dec.generate(PROMPTS[0], DecodeSettings(max_new_tokens=25, draft_tokens=3), prop)
    seq = list(PROMPTS[0])
    for ev in gen:
        seq.append(ev.token_id)
    assert prop.lm.length <= len(seq) - 1
    assert dec.target.length == len(seq) - 1


def test_cancel_from_another_thread_stops_between_steps(tiny):
    dec = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[])
    cancel = threading.Event()
    gen = dec.generate(PROMPTS[0], DecodeSettings(max_new_tokens=400, draft_tokens=2),
                       DraftModelProposer(tiny.draft, tiny.vocab), cancel)
    seen = []
    for ev in gen:
        seen.append(ev)
        if len(seen) == 3:
            t = threading.Thread(target=cancel.set)
            t.start()
            t.join()
    assert gen.stats.stop_reason == "cancelled"
    assert gen.stats.new_tokens == len(seen) < 10  # at most the step in flight finishes


def test_seeded_sampling_is_reproducible_and_per_sample(tiny):
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    params = SamplingParams(1.0, 0, 1.0)

    def run(seed):
        return dec.generate(PROMPTS[0], DecodeSettings(max_new_tokens=15, sampling=params, seed=seed), prop).run().token_ids

    assert run(sample_seed(3, 0)) == run(sample_seed(3, 0))
    outs = {tuple(run(sample_seed(3, i))) for i in range(6)}
    assert len(outs) > 1  # different samples differ
    assert sample_seed(3, 1) != sample_seed(4, 0) and sample_seed(3, 0) != sample_seed(3, 1)


def test_events_carry_greedy_margins_and_text(tiny):
    dec = Decoder(tiny.target, tiny.tokenizer)
    g = dec.generate(PROMPTS[0], DecodeSettings(max_new_tokens=10)).run()
    assert all(e.margin is not None and e.margin >= 0 for e in g.events)
    assert "".join(e.text for e in g.events).strip() == g.text.strip()
    assert g.events[0].kind is TokenKind.STANDARD and g.events[0].draft_position is None


def test_the_controller_reads_the_target_s_margins_when_sampling_too(tiny, monkeypatch):
    """The start rule predicts the draft's acceptance from how peaked the target's rows are; a
    sampled step gives it the same margins a greedy one does (the events keep theirs greedy
    only: a near-tie is a greedy notion)."""
    import specdec_core.decoder as decoder_module
    from specdec_core.adaptive import AdaptiveDraftLength

    seen = []

    class Spy(AdaptiveDraftLength):
        def observe(self, o):
            seen.append(o.margins)
            super().observe(o)

    monkeypatch.setattr(decoder_module, "make_policy", lambda k, sources, prior=0: Spy(sources=sources))
    dec = Decoder(tiny.target, tiny.tokenizer, eos_token_ids=[])
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    settings = DecodeSettings(max_new_tokens=12, draft_tokens="adaptive", sampling=SamplingParams(0.7, 0, 1.0))
    g = dec.generate(PROMPTS[0], settings, prop).run()
    assert seen and all(m is not None and len(m) >= 1 and min(m) >= 0 for m in seen)
    assert all(e.margin is None for e in g.events)


def test_first_divergence_reports_position_and_margin(tiny):
    dec = Decoder(tiny.target, tiny.tokenizer)
    a = dec.generate(PROMPTS[0], DecodeSettings(max_new_tokens=10)).run().events
    b = list(a[:4]) + [a[4].__class__(99, "", a[4].kind, 4, None, 0.0, 0.001)] + list(a[5:])
    d = first_divergence(a, b)
    assert d.position == 4 and d.token_b == 99 and d.margin == pytest.approx(min(a[4].margin, 0.001))
    assert d.is_near_tie(0.01)
    assert first_divergence(a, a) is None


def test_confidence_stop_shortens_drafts_and_keeps_exactness(tiny):
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    for prompt in PROMPTS[:3]:
        ref = dec.generate(prompt, DecodeSettings(max_new_tokens=20)).run().token_ids
        prop.reset()
        p = prop.propose(list(prompt), DraftPlan(draft=8, min_confidence=1.01), SamplingParams(), torch.Generator())
        assert len(p.tokens) == 1  # nothing is more than certain: stop after the first token
        spec = dec.generate(prompt, DecodeSettings(max_new_tokens=20, draft_tokens="adaptive"), prop).run()
        assert spec.token_ids == ref


def picking_forward(vocab: int, picks: list[tuple[int, float]]):
    """A draft forward that picks the given (token, probability) in turn, the rest of the mass
    spread evenly; a read without logits (the prompt) returns none."""
    calls = iter(picks)

    def forward(ids, logits_to_keep=1):
        if logits_to_keep == 0:
            return torch.empty(0, vocab)
        tok, p = next(calls)
        probs = torch.full((vocab,), (1 - p) / (vocab - 1))
        probs[tok] = p
        return probs.log()[None]
    return forward


def test_the_draft_stops_once_its_confidence_in_the_whole_run_falls_below_the_threshold(tiny):
    # hand-built draft probabilities for its picks: 0.9, 0.8, 0.7, 0.9, 0.9 -> running products
    # 0.9, 0.72, 0.504, 0.454, ...: with 0.5 the fourth token (the one that crosses) is the
    # last proposed, although no single token is below 0.5
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    prop.lm.forward = picking_forward(tiny.vocab, [(5, 0.9), (6, 0.8), (7, 0.7), (8, 0.9), (9, 0.9)])
    got = prop.propose([1, 2, 3], DraftPlan(draft=5, min_confidence=0.5), SamplingParams(), torch.Generator())
    assert got.tokens == [5, 6, 7, 8]



def test_the_draft_takes_the_threshold_of_each_length(tiny):
    # the same picks; per-length thresholds (the controller's confidence_steps): after one
    # token 0.95 would stop it, after two 0.1 would not -- the first entry decides, and the plan's
    # single threshold is not used
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    prop.lm.forward = picking_forward(tiny.vocab, [(5, 0.9), (6, 0.8), (7, 0.7), (8, 0.9), (9, 0.9)])
    plan = DraftPlan(draft=5, min_confidence=0.01, confidence_steps=(0.1, 0.1, 0.6))
    # running products 0.9, 0.72, 0.504: the third is below its length's 0.6, so it is the last
    got = prop.propose([1, 2, 3], plan, SamplingParams(), torch.Generator())
    assert got.tokens == [5, 6, 7]
    assert plan.confidence_after(1) == 0.1 and plan.confidence_after(9) == 0.6  # the last entry holds on
    assert DraftPlan(min_confidence=0.4).confidence_after(3) == 0.4


def test_a_draft_catching_up_after_plain_steps_proposes_what_it_would_have_token_by_token(tiny):
    # After plain target steps the draft has text it never read. It reads that backlog with its
    # first drafted token (timed apart, so the adaptive controller does not charge it to the
    # drafted tokens); the proposal must be exactly what a draft fed every token as it came would
    # make.
    prompt, backlog = PROMPTS[0], [7, 9, 11, 12, 5]
    caught_up = DraftModelProposer(tiny.draft, tiny.vocab)
    caught_up.propose(prompt, DraftPlan(draft=2), SamplingParams(), torch.Generator())
    caught_up.observe(prompt, 0)  # nothing kept: the cache holds the prompt less its last token
    steady = DraftModelProposer(tiny.draft, tiny.vocab)
    steady.propose(prompt, DraftPlan(draft=2), SamplingParams(), torch.Generator())
    steady.observe(prompt, 0)
    ids = list(prompt)
    for t in backlog:  # one token at a time: never more than two unread
        ids.append(t)
        p = steady.propose(ids, DraftPlan(draft=1), SamplingParams(), torch.Generator())
        assert p.catchup_seconds == 0.0
        steady.observe(ids, 0)
    a = caught_up.propose(ids, DraftPlan(draft=3), SamplingParams(), torch.Generator())
    b = steady.propose(ids, DraftPlan(draft=3), SamplingParams(), torch.Generator())
    assert a.catchup_tokens == len(backlog) and b.catchup_tokens == 0  # (its time: the next test)
    assert a.tokens == b.tokens
    torch.testing.assert_close(a.q_draft, b.q_draft, rtol=1e-5, atol=1e-6)


def test_a_backlog_rides_in_the_first_drafting_pass_and_is_timed_apart(tiny, monkeypatch):
    # a pass costs 10 ms and 1 ms a row fed: the first backlog, before any one-token pass was
    # timed, is read in a pass of its own (its time exact); later ones ride in the first
    # drafting pass, one pass fewer, and their time is that pass's less a one-token pass's
    from clocks import WorkClock

    clock = WorkClock({tiny.draft: (0.010, 0.001)}).install(monkeypatch)
    prop = DraftModelProposer(tiny.draft, tiny.vocab, clock=clock)
    prompt = PROMPTS[0]
    first = prop.propose(prompt, DraftPlan(draft=3), SamplingParams(), torch.Generator())
    assert first.forward_passes == 4  # the prompt but its last token, then 3 one-token passes
    assert first.catchup_tokens == len(prompt) - 1
    assert first.catchup_seconds == pytest.approx(0.010 + 0.001 * (len(prompt) - 1))
    assert prop.one_row_seconds == pytest.approx(0.011)
    prop.observe(prompt, 0)
    ids = prompt + [7, 9, 11, 12, 5]  # plain steps' tokens it did not read
    later = prop.propose(ids, DraftPlan(draft=3), SamplingParams(), torch.Generator())
    assert later.forward_passes == 3  # the backlog fed with the first drafted token
    assert later.catchup_tokens == 5  # the prompt's last token and four of the five: the fifth is fed for the logits
    assert later.catchup_seconds == pytest.approx(0.001 * 5)  # its rows alone: no pass of its own


class _Scripted:
    """A draft-length policy that plays a fixed pattern: k drafted tokens, then plain steps."""

    def __init__(self, pattern):
        self.pattern, self.i = pattern, 0

    def plan(self, backlog=0, remaining=None, kind="prose"):
        self.i += 1
        return DraftPlan(draft=self.pattern[(self.i - 1) % len(self.pattern)])

    def observe_prefill(self, rows, seconds):
        pass

    def observe(self, outcome):
        pass


@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_a_draft_that_skips_most_of_a_plain_stretch_keeps_the_output_exact(tiny, prompt, monkeypatch):
    # Long plain stretches; the draft reads only the last 2 tokens of each: its view of the
    # text has gaps, its proposals are its own, and the output is still standard greedy's.
    import specdec_core.decoder as decoder_module
    monkeypatch.setattr(decoder_module, "make_policy", lambda *a: _Scripted([3] + [0] * 7 + [4] + [0] * 5))
    dec = Decoder(tiny.target, tiny.tokenizer)
    std = dec.generate(prompt, DecodeSettings(max_new_tokens=40)).run()
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    prop.catchup_window = 2
    spec = dec.generate(prompt, DecodeSettings(max_new_tokens=40, draft_tokens=3), prop).run()
    assert spec.token_ids == std.token_ids
    assert_truthful_kinds(spec.events)
    assert prop.offset > 0  # it did skip
    # what the draft holds is the committed text with those gaps: its tail is the last
    # tokens it read, aligned with the committed sequence
    seq = list(prompt) + spec.token_ids
    n = prop.lm.length
    assert prop.lm.ids[len(prompt):] != seq[len(prompt) : n]
    assert prop.lm.ids[-3:] == seq[n + prop.offset - 3 : n + prop.offset]
    # a new message starting with this text keeps the whole view, gaps included
    length, gaps = prop.lm.length, list(prop.gaps)
    prop.reset(keep=seq + [5])
    assert prop.lm.length == length and prop.gaps == gaps
    # an edited turn that parts from it inside the second gap keeps the view up to there
    second = prop.gaps[1][0] + 1
    edited = seq[:second] + [5, 6, 7]
    prop.reset(keep=edited)
    assert prop.gaps == [gaps[0], (gaps[1][0], 1)] and prop.lm.ids[-1] == seq[gaps[1][0] - 1]
    # one that parts from it in the prompt keeps the prompt's shared start
    prop.reset(keep=list(prompt[:2]) + [9, 9, 9])
    assert prop.gaps == [] and prop.lm.ids == list(prompt[:2])


def test_a_conversation_keeps_the_draft_s_cache_and_reads_only_the_new_turn(tiny):
    # Turn 2 starts with turn 1's prompt and answer: the draft keeps what it read of them and
    # reads at most its window of the rest (issue 28: it never started again once a chat had
    # grown); the output is still standard greedy's, turn by turn.
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    prop.first_read_window = 4
    turn1 = list(PROMPTS[0])
    a1 = dec.generate(turn1, DecodeSettings(max_new_tokens=12, draft_tokens=3), prop).run()
    std1 = Decoder(tiny.target, tiny.tokenizer).generate(turn1, DecodeSettings(max_new_tokens=12)).run()
    assert a1.token_ids == std1.token_ids
    viewed = prop.lm.length
    turn2 = turn1 + a1.token_ids + [3, 4, 5, 6, 7, 8, 9, 10]
    a2 = dec.generate(turn2, DecodeSettings(max_new_tokens=12, draft_tokens=3), prop, reuse_cache=True)
    events = iter(a2)
    next(events)  # the prefill: the draft has read nothing of turn 2 yet
    assert prop.lm.length >= viewed - 1 and prop.unread(a2_ids := turn2 + [a2.events[0].token_id]) <= 4
    a2.run()
    std2 = Decoder(tiny.target, tiny.tokenizer).generate(turn2, DecodeSettings(max_new_tokens=12)).run()
    assert a2.token_ids == std2.token_ids and a2_ids[-1] == std2.token_ids[0]
    assert a2.stats.catchup_tokens <= 4 and prop.gaps  # it skipped to the window
    assert dec.last_answer_tokens == 12


def test_only_the_same_conversation_lends_its_answer_length_to_the_controller(tiny, monkeypatch):
    # The controller's answer prior is the last answer's length in the same conversation (a
    # next turn, a regenerate); a new chat that shares only a prefix (the system prompt) with
    # the last one starts without it.
    import specdec_core.decoder as decoder_module

    priors = []
    real = decoder_module.make_policy
    monkeypatch.setattr(decoder_module, "make_policy",
                        lambda k, sources, prior: priors.append(prior) or real(k, sources, prior))
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.draft, tiny.vocab)
    turn1 = list(PROMPTS[0])
    a1 = dec.generate(turn1, DecodeSettings(max_new_tokens=9, draft_tokens=3), prop).run()
    next_turn = turn1 + a1.token_ids + [3, 4, 5]
    dec.generate(next_turn, DecodeSettings(max_new_tokens=5, draft_tokens=3), prop, reuse_cache=True).run()
    dec.generate(list(next_turn), DecodeSettings(max_new_tokens=4, draft_tokens=3), prop, reuse_cache=True).run()
    other_chat = turn1[:4] + [40, 41, 42]  # shares the first 4 tokens only
    dec.generate(other_chat, DecodeSettings(max_new_tokens=4, draft_tokens=3), prop, reuse_cache=True).run()
    assert priors == [0, 9, 5, 0]
