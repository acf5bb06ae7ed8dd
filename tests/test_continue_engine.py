"""The engine's side of Continue and of answers without a budget (issue 30, item 1).

- A continued answer is read by the model as the assistant's open turn with exactly the tokens it
  wrote (contract.encode_chat's `answer_ids`), so a greedy answer stopped and continued is token
  for token, and character for character, the answer that was never stopped -- in standard and
  in speculative decoding (exact equality against the reference).
- Without a budget (max_new_tokens None) an answer runs until the context is full: stop reason
  "context", and the prompt plus the answer fill the context exactly.
- The figures of two parts join into one answer's (Stats.joined, hand-checked).
"""

from __future__ import annotations

import pytest

from specdec_core.context import ContextError, answer_budget, fits
from specdec_core.detok import IncrementalDetokenizer
from specdec_core.events import Stats
from specdec_core.settings import DecodeSettings

CHAT = [{"role": "user", "content": "is the cat on the mat"}]


@pytest.fixture(scope="module")
def engine():
    from app_fixtures import tiny_factory

    return tiny_factory(report=False)(lambda *_a: None)  # a tiny target and a draft near it, no eos


@pytest.mark.parametrize("mode", ["standard", "speculative"])
@pytest.mark.parametrize("cut", [1, 7, 20])
def test_a_greedy_answer_stopped_and_continued_is_the_answer_never_stopped(engine, mode, cut):
    total = 32
    settings = DecodeSettings(total, draft_tokens=3, mode=mode)
    whole = engine.generate(engine.encode_chat(CHAT), settings).run()
    assert len(whole.token_ids) == total

    # the first part, as the app keeps it after a Stop (its own decode, its cache left behind)
    part = engine.generate(engine.encode_chat(CHAT), settings.replace(max_new_tokens=cut), reuse_cache=True).run()
    assert part.token_ids == whole.token_ids[:cut]
    said = "".join(e.text for e in part.events)
    chat = [*CHAT, {"role": "assistant", "content": said}]
    fit = engine.fit(chat, total - cut, continue_final=True, answer_ids=part.token_ids)
    # the prompt: the assistant's turn opened, then the answer's own tokens, the turn left open
    assert fit.fits and fit.prompt == engine.encode_chat(CHAT) + part.token_ids
    rest = engine.generate(fit.prompt, settings.replace(max_new_tokens=total - cut), reuse_cache=True,
                           answer_prefix=cut).run()
    assert part.token_ids + rest.token_ids == whole.token_ids
    assert said + "".join(e.text for e in rest.events) == "".join(e.text for e in whole.events)
    assert rest.text == "".join(e.text for e in rest.events)  # the seed's text is not handed out again
    # the cache held the conversation and the first part: only the part's last token is read again
    assert rest.stats.reused_prompt_tokens >= len(fit.prompt) - 1


def test_where_the_template_would_not_take_the_tokens_the_text_is_continued(engine):
    """A template that renders the assistant's turn differently with its content (no common
    opener): the prompt is the chat template's own continue_final rendering of the text."""
    chat = [*CHAT, {"role": "assistant", "content": "the cat"}]
    original = engine.encode_chat
    opener = original(CHAT)

    def odd(messages, *, continue_final=False, answer_ids=None):
        ids = original(messages, continue_final=continue_final, answer_ids=answer_ids)
        return ids if continue_final else [opener[0]] + ids  # the opener differs from the rendering

    engine.encode_chat = odd
    try:
        assert engine.fit(chat, 4, continue_final=True, answer_ids=[5, 6, 7]).prompt == \
            original(chat, continue_final=True)
    finally:
        del engine.encode_chat


def test_without_a_budget_an_answer_runs_until_the_context_is_full():
    from app_fixtures import tiny_factory

    small = tiny_factory(report=False, max_positions=48)(lambda *_a: None)
    prompt = small.encode_chat(CHAT)
    gen = small.generate(prompt, DecodeSettings(None, draft_tokens="adaptive")).run()
    assert gen.stats.stop_reason == "context"
    assert len(prompt) + len(gen.token_ids) == 48 == small.context_length
    # with a budget, the budget: the stop reason says which limit it was
    assert small.generate(prompt, DecodeSettings(5, mode="standard")).run().stats.stop_reason == "max_new_tokens"
    # a full context leaves no room: refused before computing, as any prompt too long is
    with pytest.raises(ContextError, match="shorten it"):
        small.generate(list(range(3, 51)), DecodeSettings(None))
    fit = small.fit([*CHAT, {"role": "assistant", "content": "the " * 60}], None, continue_final=True)
    assert not fit.fits and fit.max_new_tokens is None and fit.drop is None


def test_an_answers_room_without_a_budget_is_what_the_context_leaves():
    assert answer_budget(None, 100, 512) == 412 and answer_budget(7, 100, 512) == 7
    assert answer_budget(None, 100, None) == 4096  # a context nobody knows: a bound all the same
    assert fits(511, None, 512) and not fits(512, None, 512) and fits(400, None, None)


def test_a_seeded_detokenizer_hands_out_only_what_follows_the_seed(engine):
    tok = engine.tokenizer
    ids = tok(" the cat sat on the mat")["input_ids"]
    d = IncrementalDetokenizer(tok)
    d.seed(ids[:3])
    out = "".join(d.push(i) for i in ids[3:])
    assert out == tok.decode(ids)[len(tok.decode(ids[:3])):] == " on the mat" and d.text() == out


def test_two_parts_figures_join_into_one_answers():
    first = Stats(new_tokens=10, seconds=2.0, prefill_seconds=0.5, proposed_tokens=8, accepted_tokens=6,
                  target_forward_passes=5, draft_forward_passes=8, speculative_steps=3, speculative_step_tokens=9,
                  per_position_proposed=[3, 3, 2], per_position_accepted=[3, 2, 1], draft_lengths=[3, 3, 2],
                  last_draft_length=2, stop_reason="cancelled", reused_prompt_tokens=40, mode="speculative",
                  proposer="lookup+draft", steps_by_source={"draft": 3}, proposed_by_source={"draft": 8},
                  accepted_by_source={"draft": 6}, seconds_by_source={"draft": 1.0})
    then = Stats(new_tokens=6, seconds=1.0, prefill_seconds=0.1, proposed_tokens=4, accepted_tokens=4,
                 target_forward_passes=3, speculative_steps=1, speculative_step_tokens=5,
                 per_position_proposed=[1, 1, 1, 1], per_position_accepted=[1, 1, 1, 1], draft_lengths=[4],
                 last_draft_length=0, stop_reason="max_new_tokens", reused_prompt_tokens=59, mode="speculative",
                 proposer="lookup+draft", steps_by_source={"lookup": 1}, proposed_by_source={"lookup": 4},
                 accepted_by_source={"lookup": 4}, seconds_by_source={"lookup": 0.2})
    both = first.joined(then)
    assert (both.new_tokens, both.seconds, both.prefill_seconds) == (16, 3.0, pytest.approx(0.6))
    assert (both.proposed_tokens, both.accepted_tokens, both.acceptance_rate) == (12, 10, pytest.approx(10 / 12))
    assert (both.speculative_steps, both.tokens_per_speculative_step) == (4, pytest.approx(14 / 4))
    assert both.target_forward_passes == 8 and both.plain_steps == 4 and both.plain_step_share == 0.5
    assert both.per_position_proposed == [4, 4, 3, 1] and both.per_position_accepted == [4, 3, 2, 1]
    assert both.draft_lengths == [3, 3, 2, 4] and both.last_draft_length == 0
    assert both.stop_reason == "max_new_tokens" and both.reused_prompt_tokens == 40
    assert both.steps_by_source == {"draft": 3, "lookup": 1} and both.accepted_by_source == {"draft": 6, "lookup": 4}
    assert (both.mode, both.proposer) == ("speculative", "lookup+draft")
    # a standard part's steps are plain steps of the whole; the mode says the answer speculated
    plain = Stats(new_tokens=4, seconds=1.0, target_forward_passes=4, mode="standard", stop_reason="eos")
    mixed = first.joined(plain)
    assert mixed.mode == "speculative" and mixed.plain_steps == 2 + 4 and mixed.acceptance_rate == 6 / 8
    assert Stats.from_dict(both.to_dict()) == both  # what a saved message holds comes back whole
