"""logit_bias, the repetition / presence / frequency penalties and min_p, applied to the target
and the draft alike, speculative decoding staying exact.

Tier 1: a verification pass's rows by hand (row i counts the proposals before it).
Tier 2: greedy speculative == greedy standard == a reference (transformers' own generate for
        the repetition penalty and the bias; a plain per-token loop for presence/frequency).
Tier 3: seeded statistics: sampled tokens follow the shaped, warped distribution, and a decoder
        that forgets the proposals before a row is caught by the same test.
"""

import copy
import dataclasses

import pytest
import torch
from scipy.stats import binomtest
from transformers import GenerationConfig

import specdec_core.sampling as sampling_module
from conftest import soften
from specdec_core.decoder import Decoder
from specdec_core.penalties import shape_logits
from specdec_core.proposers import DraftModelProposer, PromptLookupProposer
from specdec_core.sampling import probabilities
from specdec_core.settings import DecodeSettings, SamplingParams, SettingsError, sample_seed
from test_decoder import PROMPTS, eos_of
from test_distribution import gof_pvalue

INF = float("inf")


# -- tier 1: by hand ----------------------------------------------------------------------------
def test_each_row_counts_the_answer_and_the_proposals_before_it():
    # prompt [0, 1], answer so far [2, 2, 3]; proposals [3, 4]: row 0 follows the answer, row 1
    # also proposal 3, row 2 also 4
    ids, proposals = [0, 1, 2, 2, 3], [3, 4]
    scores = torch.full((3, 6), 4.0)
    p = SamplingParams(frequency_penalty=0.5, presence_penalty=1.0, answer_start=2)
    got = shape_logits(scores, p, ids, proposals)
    want = torch.tensor([[4, 4, 4 - 2.0, 4 - 1.5, 4, 4],  # 2 twice: 0.5*2 + 1; 3 once: 0.5 + 1
                         [4, 4, 4 - 2.0, 4 - 2.0, 4, 4],  # 3 twice now
                         [4, 4, 4 - 2.0, 4 - 2.0, 4 - 1.5, 4]])  # and 4 once
    torch.testing.assert_close(got, want)
    assert torch.equal(scores, torch.full((3, 6), 4.0))  # the input is left as it was


def test_repetition_penalty_reaches_the_prompt_and_divides_or_multiplies_by_sign():
    ids, proposals = [0, 1, 2], [4]
    scores = torch.tensor([[2.0, -2.0, 3.0, 1.0, 6.0, -INF]] * 2)
    p = SamplingParams(repetition_penalty=2.0, answer_start=2)  # prompt [0, 1], answer [2]
    got = shape_logits(scores, p, ids, proposals)
    want = torch.tensor([[1.0, -4.0, 1.5, 1.0, 6.0, -INF],  # 4 only after the proposal
                         [1.0, -4.0, 1.5, 1.0, 3.0, -INF]])
    torch.testing.assert_close(got, want)


def test_logit_bias_is_added_before_the_penalties():
    p = SamplingParams(logit_bias=((1, 5.0), (3, -100.0)), repetition_penalty=2.0)
    got = shape_logits(torch.tensor([[1.0, -3.0, 0.0, 2.0]]), p, [1])
    torch.testing.assert_close(got, torch.tensor([[1.0, 1.0, 0.0, -98.0]]))  # (-3 + 5) / 2 for token 1


def test_min_p_keeps_tokens_within_a_share_of_the_top_probability():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    p = probabilities(probs.log(), SamplingParams(temperature=1.0, min_p=0.2))  # keeps p >= 0.1
    torch.testing.assert_close(p, torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)


def test_settings_refuse_values_out_of_range_and_penalties_need_the_tokens_so_far():
    for bad in ({"min_p": 1.5}, {"presence_penalty": 2.5}, {"frequency_penalty": -3}, {"repetition_penalty": 0},
                {"logit_bias": ((5, 101.0),)}, {"logit_bias": ((-1, 1.0),)}):
        with pytest.raises(SettingsError):
            SamplingParams(**bad)
    with pytest.raises(ValueError, match="pass ids"):
        probabilities(torch.zeros(1, 4), SamplingParams(temperature=1.0, presence_penalty=1.0))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        shape_logits(torch.zeros(1, 4), SamplingParams(logit_bias=((9, 1.0),)), [0])


# -- tier 2: greedy, exact ----------------------------------------------------------------------
def hf_generate(model, prompt, n, **kwargs):
    cfg = GenerationConfig(do_sample=False, max_new_tokens=n, eos_token_id=eos_of(model), pad_token_id=0, **kwargs)
    return model.generate(torch.tensor([prompt]), generation_config=cfg)[0, len(prompt):].tolist()


@torch.inference_mode()
def reference_greedy(model, prompt, n, params, eos):
    """A plain loop: the whole sequence through the model for every token, the penalties counted
    from scratch in Python (no code shared with penalties.py)."""
    ids = list(prompt)
    for _ in range(n):
        row = model(torch.tensor([ids])).logits[0, -1].float().tolist()
        answer = ids[len(prompt):]
        for t, b in params.logit_bias:
            row[t] += b
        for t in set(ids):
            if params.repetition_penalty != 1:
                row[t] = row[t] * params.repetition_penalty if row[t] < 0 else row[t] / params.repetition_penalty
        for t in set(answer):
            row[t] -= params.frequency_penalty * answer.count(t) + params.presence_penalty
        ids.append(max(range(len(row)), key=lambda t: (row[t], -t)))
        if ids[-1] in eos:
            break
    return ids[len(prompt):]


GREEDY = {
    "presence": SamplingParams(presence_penalty=1.5),
    "frequency": SamplingParams(frequency_penalty=1.2),
    "repetition": SamplingParams(repetition_penalty=1.8),
    "bias": SamplingParams(logit_bias=((9, 4.0), (10, 3.0), (2, -100.0))),
    "all": SamplingParams(presence_penalty=0.5, frequency_penalty=0.7, repetition_penalty=1.3,
                          logit_bias=((8, 2.0),), min_p=0.3),
}


@pytest.mark.parametrize("name", list(GREEDY))
@pytest.mark.parametrize("proposer", ["draft", "lookup"])
def test_greedy_speculative_equals_standard_and_the_reference(tiny, name, proposer):
    params = GREEDY[name]
    dec = Decoder(tiny.target, tiny.tokenizer)
    accepted = 0
    for prompt in (PROMPTS[0], PROMPTS[4]):
        prop = DraftModelProposer(tiny.near_draft, tiny.vocab) if proposer == "draft" else PromptLookupProposer()
        s = DecodeSettings(max_new_tokens=20, sampling=params, draft_tokens=3)
        spec = dec.generate(prompt, s, prop).run()
        std = dec.generate(prompt, s.replace(mode="standard")).run()
        want = reference_greedy(tiny.target, prompt, 20, params, set(eos_of(tiny.target)))
        assert spec.token_ids == std.token_ids == want
        accepted += spec.stats.accepted_tokens
    # the draft's proposals were verified and kept under every setting (a penalty discourages
    # the repeats prompt lookup copies: it may find none to propose)
    assert accepted > 0 or proposer == "lookup"
    plain = dec.generate(PROMPTS[4], DecodeSettings(max_new_tokens=20, mode="standard")).run().token_ids
    assert plain != want or name == "all"  # the setting changed the answer (the test can fail)


def test_repetition_penalty_and_bias_equal_transformers_generate(tiny):
    dec = Decoder(tiny.target, tiny.tokenizer)
    prop = DraftModelProposer(tiny.near_draft, tiny.vocab)
    for prompt in PROMPTS[:2] + PROMPTS[4:]:
        s = DecodeSettings(max_new_tokens=16, sampling=SamplingParams(repetition_penalty=1.6), draft_tokens=4)
        assert dec.generate(prompt, s, prop).run().token_ids == hf_generate(tiny.target, prompt, 16,
                                                                             repetition_penalty=1.6)
        bias = SamplingParams(logit_bias=((9, 3.0), (12, -2.5)))
        got = dec.generate(prompt, s.replace(sampling=bias), prop).run().token_ids
        assert got == hf_generate(tiny.target, prompt, 16, sequence_bias={(9,): 3.0, (12,): -2.5})


def test_a_decoder_that_forgets_the_proposals_before_a_row_is_caught(tiny, monkeypatch):
    """The power of the equality above: shape row i as if it followed the committed tokens alone,
    and greedy speculative decoding under a frequency penalty parts from the reference."""
    params = SamplingParams(frequency_penalty=2.0)
    want = reference_greedy(tiny.target, PROMPTS[0], 20, params, set(eos_of(tiny.target)))
    real = sampling_module.shaped_logits
    monkeypatch.setattr("specdec_core.step.shaped_logits",
                        lambda logits, p, ids, proposals=(): _rows_alike(real, logits, p, ids))
    got = Decoder(tiny.target, tiny.tokenizer).generate(
        PROMPTS[0], DecodeSettings(max_new_tokens=20, sampling=params, draft_tokens=3),
        DraftModelProposer(tiny.near_draft, tiny.vocab)).run()
    assert got.stats.accepted_tokens > 0 and got.token_ids != want


def _rows_alike(real, logits, params, ids):
    """Every row shaped with the committed tokens only (the bug the test above must catch)."""
    return torch.cat([real(logits[i: i + 1], params, ids) for i in range(logits.shape[0])])


# -- tier 3: seeded statistics ------------------------------------------------------------------
PROMPT = [1, 5, 29, 7, 9, 11]
N = 1000
P_MIN = 1e-3


@pytest.fixture(scope="module")
def soft(tiny):
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny passes: a second thread only synchronises
    yield soften(copy.deepcopy(tiny.target), 2.0), soften(copy.deepcopy(tiny.draft), 2.0)
    torch.set_num_threads(before)


@torch.inference_mode()
def exact_marginals(model, params):
    """p(t1), p(t2), p(t3) and p(t2, t3) (flattened, t2 * V + t3): each position's distribution
    shaped by the tokens before it in the answer (what the penalties count there), summed over
    those tokens. The pair tells a repeat from its absence, which the penalties are about."""
    start = dataclasses.replace(params, answer_start=len(PROMPT))
    p1 = probabilities(model(torch.tensor([PROMPT])).logits[0, -1:], start, PROMPT)[0].double()
    v = p1.shape[0]

    def following(prefixes):  # [len(prefixes), V]: the shaped distribution after each prefix
        rows = model(torch.tensor([PROMPT + list(x) for x in prefixes])).logits[:, -1]
        return torch.stack([probabilities(rows[j: j + 1], start, PROMPT + list(x))[0]
                            for j, x in enumerate(prefixes)]).double()

    p2_given = following([(a,) for a in range(v)])
    joint2 = p1[:, None] * p2_given  # p(t1, t2)
    p3_given = following([(a, b) for a in range(v) for b in range(v)])
    joint3 = joint2.reshape(-1)[:, None] * p3_given  # [(t1, t2), t3]
    pair = joint3.reshape(v, v, v).sum(0).reshape(-1)
    return p1, joint2.sum(0), joint3.sum(0), pair


# Three tokens made likely by a bias, so that the answer repeats them often and the penalties
# have much to do (on the softened model alone a repeat is rare and they hardly show)
LIKELY = ((5, 5.0), (29, 5.0), (9, 5.0))
# each setting, and the same without it (the power check's other distribution)
SAMPLED = {
    "presence+frequency": (SamplingParams(temperature=1.0, presence_penalty=1.5, frequency_penalty=1.0,
                                          logit_bias=LIKELY), SamplingParams(temperature=1.0, logit_bias=LIKELY)),
    "repetition": (SamplingParams(temperature=0.8, repetition_penalty=2.5, logit_bias=LIKELY),
                   SamplingParams(temperature=0.8, logit_bias=LIKELY)),  # the three are in the prompt
    "min_p": (SamplingParams(temperature=1.2, min_p=0.15), SamplingParams(temperature=1.2)),
    "bias": (SamplingParams(temperature=1.0, logit_bias=((5, 2.0), (29, 1.5), (9, -3.0))),
             SamplingParams(temperature=1.0)),
}


def draw(decoder, params, proposer, n=N, seed=11):
    """The first three tokens of n answers, and the pair (t2, t3) as t2 * V + t3. 4 tokens with k = 2: the prefill gives the first, the
    first speculative step proposes 2 -- its row 1, which tests the second proposal, follows the
    first one -- so the second and third tokens cover accepted, corrected and bonus paths."""
    out = []
    for i in range(n):
        s = DecodeSettings(max_new_tokens=4, sampling=params, draft_tokens=2, seed=sample_seed(seed, i))
        out.append(decoder.generate(PROMPT, s, proposer).run().token_ids[:3])
    v = proposer.lm.vocab_size
    return [[t[j] for t in out] for j in range(3)] + [[t[1] * v + t[2] for t in out]]


def repeat_pvalue(pairs, pair_probs) -> float:
    """How likely the count of t3 == t2 is under the exact probability of a repeat (binomial,
    two-sided): the pair's distribution is spread over V * V cells, too thin for chi-square,
    but a repeat is the one event a penalty is about."""
    v = int(round(len(pair_probs) ** 0.5))
    repeats = sum(x // v == x % v for x in pairs)
    p = float(sum(pair_probs[t * v + t] for t in range(v)))
    return binomtest(repeats, len(pairs), p).pvalue


def follows(samples, marginals) -> bool:
    return all(gof_pvalue(s, p) > P_MIN for s, p in zip(samples[:3], marginals[:3])) and \
        repeat_pvalue(samples[3], marginals[3]) > P_MIN


@pytest.mark.parametrize("name", list(SAMPLED))
def test_speculative_samples_follow_the_shaped_distribution(soft, name):
    target, draft = soft
    params, without = SAMPLED[name]
    dec = Decoder(target, None, eos_token_ids=[])
    want = exact_marginals(target, params)
    samples = draw(dec, params, DraftModelProposer(draft, want[0].shape[0]))
    assert follows(samples, want)
    # power: without the setting the distribution is another one, and the test sees it
    plain = exact_marginals(target, without)
    assert min(gof_pvalue(s, p) for s, p in zip(samples[:3], plain[:3])) < 1e-6


def test_forgetting_the_proposals_before_a_row_breaks_the_distribution(soft, monkeypatch):
    """Warp every row of a verification pass as if it followed the committed tokens alone: the
    third token (row 1 of the first speculative step) comes out wrong, and the same test says so."""
    target, draft = soft
    params = SamplingParams(temperature=1.0, presence_penalty=2.0, frequency_penalty=2.0, logit_bias=LIKELY)
    real = sampling_module.probabilities
    monkeypatch.setattr("specdec_core.step.probabilities", lambda logits, p, ids, proposals=(): torch.cat(
        [real(logits[i: i + 1], p, ids) for i in range(logits.shape[0])]))
    dec = Decoder(target, None, eos_token_ids=[])
    want = exact_marginals(target, params)
    samples = draw(dec, params, DraftModelProposer(draft, want[0].shape[0]), n=600)
    assert gof_pvalue(samples[0], want[0]) > P_MIN  # the prefill's token has no proposals before it
    assert repeat_pvalue(samples[3], want[3]) < 1e-6  # the second token repeated where the penalty forbids it
