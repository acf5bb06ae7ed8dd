"""Chat turns keep the KV entries of the conversation so far: the cache remembers its tokens,
keeps the longest prefix a new prompt shares with them, and the text is the same as with a
fresh prefill (and as transformers' generate on the whole prompt)."""

import pytest
import torch

from specdec_core.decoder import Decoder
from specdec_core.settings import DecodeSettings
from specdec_core.lm import CachedLM
from specdec_core.proposers import DraftModelProposer, PromptLookupProposer
from test_decoder import PROMPTS, eos_of, hf_greedy


def test_keep_prefix_keeps_the_shared_tokens_and_leaves_one_to_feed(tiny):
    lm = CachedLM(tiny.target)
    assert lm.keep_prefix([1, 5, 29]) == 0  # nothing cached yet
    lm.forward([1, 5, 29, 7, 9])
    assert lm.keep_prefix([1, 5, 29, 40, 41]) == 3 and lm.ids == [1, 5, 29] and lm.length == 3
    assert lm.keep_prefix([1, 5, 29]) == 2  # the last prompt token is always fed again
    assert lm.keep_prefix([7, 5]) == 0 and lm.length == 0
    # what is kept gives the logits a fresh prefill gives
    lm.forward([1, 5, 29, 7, 9])
    lm.keep_prefix([1, 5, 29, 40])
    kept = lm.forward([40])[-1]
    fresh = CachedLM(tiny.target)
    torch.testing.assert_close(kept, fresh.forward([1, 5, 29, 40])[-1], rtol=1e-5, atol=1e-5)


def test_a_failed_forward_forgets_the_cache(tiny):
    lm = CachedLM(tiny.target)
    lm.forward([1, 5, 29])
    with pytest.raises(IndexError):
        lm.forward([10**6])  # no such token id
    assert lm.length == 0 and lm.keep_prefix([1, 5, 29, 7]) == 0
    assert lm.forward([1, 5, 29, 7]).shape[-1] == tiny.vocab


@pytest.mark.parametrize("proposer", [None, "draft", "lookup"])
def test_next_turn_reuses_the_cache_and_says_the_same(tiny, proposer):
    dec = Decoder(tiny.target, tiny.tokenizer)
    make = {None: lambda: None, "draft": lambda: DraftModelProposer(tiny.near_draft, tiny.vocab),
            "lookup": PromptLookupProposer}[proposer]
    prop = make()
    settings = DecodeSettings(max_new_tokens=10, draft_tokens=3)
    first = PROMPTS[0]
    reply = dec.generate(first, settings, prop, reuse_cache=True).run().token_ids
    second = first + reply + [30, 31, 32]  # the conversation so far, then the next message
    turn2 = dec.generate(second, settings, prop, reuse_cache=True).run()
    # the cache held the first prompt and the reply but its last token (fed as the next input)
    assert turn2.stats.reused_prompt_tokens == len(first) + len(reply) - 1
    fresh = Decoder(tiny.target, tiny.tokenizer).generate(second, settings, make()).run()
    assert fresh.stats.reused_prompt_tokens == 0
    assert turn2.token_ids == fresh.token_ids == hf_greedy(tiny.target, second, 10, eos_of(tiny.target))


def test_without_reuse_every_prompt_pays_its_prefill(tiny):
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.near_draft, tiny.vocab)
    fed = {"target": [], "draft": []}
    for name, lm in (("target", dec.target), ("draft", prop.lm)):
        def spy(ids, logits_to_keep=1, _inner=lm.forward, _name=name):
            fed[_name].append(len(ids))
            return _inner(ids, logits_to_keep)
        lm.forward = spy
    for turn in range(2):
        fed["target"].clear(), fed["draft"].clear()
        g = dec.generate(PROMPTS[1], DecodeSettings(max_new_tokens=6), prop).run()
        assert g.stats.reused_prompt_tokens == 0
        # both models read the whole prompt again: the target alone in step 0, the draft in
        # step 1 with the target's first token -- the first time (no one-token pass timed yet)
        # in a pass of its own, the newest token then fed with its first drafted one; after
        # that all in its first drafting pass
        assert fed["target"][0] == len(PROMPTS[1])
        assert fed["draft"][0] == len(PROMPTS[1]) + turn


def test_reuse_at_most_keeps_only_the_prompts_first_tokens(tiny):
    # the bench's first turns: an earlier run of the very same prompt is in both caches, but
    # only its first `at_most` tokens are kept -- the rest is paid again, by both models
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.near_draft, tiny.vocab)
    settings = DecodeSettings(max_new_tokens=8, draft_tokens=2)
    prompt = PROMPTS[1]
    cold = dec.generate(prompt, settings, prop).run()
    again = dec.generate(prompt, settings, prop, reuse_cache=True, reuse_at_most=3).run()
    assert again.stats.reused_prompt_tokens == 3 and dec.target.length >= len(prompt)
    # the draft read the rest of the prompt, not the head it kept (its catch-up counts the read)
    assert again.stats.catchup_tokens == cold.stats.catchup_tokens - 3
    assert again.token_ids == cold.token_ids
    whole = dec.generate(prompt, settings, prop, reuse_cache=True).run()
    assert whole.stats.reused_prompt_tokens == len(prompt) - 1  # no limit: all but the last token


def test_the_template_head_is_read_once_and_every_new_chat_starts_from_it():
    from app_fixtures import tiny_factory

    engine = tiny_factory(report=False)(lambda *_a: None)
    head = engine.template_head
    chats = [[{"role": "user", "content": c}] for c in ("the cat", "is it on the mat")]
    prompts = [engine.encode_chat(c) for c in chats]
    assert len(head) > 1 and all(p[: len(head)] == head for p in prompts)
    assert prompts[0][len(head)] != prompts[1][len(head)]  # the head ends where the chats differ
    settings = DecodeSettings(6, draft_tokens=2)
    cold = [engine.generate(p, settings).run() for p in prompts]
    assert engine.read_template_head() == len(head)
    for p, ref in zip(prompts, cold):  # the first after the read, the second after the first
        warm = engine.generate(p, settings, reuse_cache=True, reuse_at_most=len(head)).run()
        assert warm.stats.reused_prompt_tokens == len(head)
        assert warm.stats.catchup_tokens == ref.stats.catchup_tokens - len(head)
        assert warm.token_ids == ref.token_ids
