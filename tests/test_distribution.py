"""Tier 3: seeded statistics. Sampled tokens must follow the target's exact warped
distribution -- standard and speculative, first and second token, with and without
temperature / top-k / top-p -- with a draft that disagrees often (acceptance ~ 0.5).

Seeded, so each run is the same run: a pass is not luck that can turn into a flake. The
negative controls show the same test rejects a wrong sampler (it has power).
"""

import copy

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from conftest import soften
from specdec_core.acceptance import speculative_verify
from specdec_core.decoder import Decoder
from specdec_core.settings import DecodeSettings, sample_seed
from specdec_core.proposers import DraftModelProposer, PromptLookupProposer
from specdec_core.sampling import SamplingParams, probabilities

PROMPT = [1, 5, 29, 7, 9, 11]
N = 1000
P_MIN = 1e-3  # seeded; a correct sampler sits well above this, a wrong one far below


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Thousands of tiny-model passes: a second thread only adds synchronisation (10x slower on
    the shared 2-core CI machine), as in the app tests' tiny engine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def soft(tiny):
    target = soften(copy.deepcopy(tiny.target), 2.0)
    draft = soften(copy.deepcopy(tiny.draft), 2.0)
    return target, draft


@torch.inference_mode()
def exact_marginals(model, params):
    """p(t1) and p(t2) = sum_t1 p(t1) p(t2 | t1), from the warped distributions."""
    p1 = probabilities(model(torch.tensor([PROMPT])).logits[0, -1:], params)[0]
    v = p1.shape[0]
    batch = torch.tensor([PROMPT + [t] for t in range(v)])
    p2_given = probabilities(model(batch).logits[:, -1], params)  # [V, V]
    return p1.double(), (p1.double()[:, None] * p2_given.double()).sum(0)


def gof_pvalue(samples, probs):
    """Chi-square goodness of fit; cells expected < 5 pooled into one."""
    n = len(samples)
    counts = np.bincount(samples, minlength=len(probs)).astype(float)
    exp = probs.numpy() * n
    big = exp >= 5
    obs_c = np.append(counts[big], counts[~big].sum())
    exp_c = np.append(exp[big], exp[~big].sum())
    if exp_c[-1] == 0:
        if obs_c[-1] > 0:
            return 0.0  # sampled a token of zero probability: as wrong as it gets
        obs_c, exp_c = obs_c[:-1], exp_c[:-1]
    exp_c *= obs_c.sum() / exp_c.sum()
    return chisquare(obs_c, exp_c).pvalue


CONFIGS = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.7, top_k=8),
    SamplingParams(temperature=1.3, top_p=0.8),
]


def draw(decoder, params, proposer, n=N, base_seed=11):
    firsts, seconds = [], []
    for i in range(n):
        # 3 tokens with k = 2: the first step proposes 2, so the first two tokens cover
        # accepted, corrected-at-1, corrected-at-2 and (via the third) the bonus path
        s = DecodeSettings(max_new_tokens=3, sampling=params, draft_tokens=2, seed=sample_seed(base_seed, i))
        ids = decoder.generate(PROMPT, s, proposer).run().token_ids
        firsts.append(ids[0])
        seconds.append(ids[1])
    return firsts, seconds


@pytest.mark.parametrize("params", CONFIGS, ids=["T1", "T0.7-topk8", "T1.3-topp0.8"])
def test_speculative_samples_follow_target(soft, params):
    target, draft = soft
    dec = Decoder(target, None, eos_token_ids=[])
    p1, p2 = exact_marginals(target, params)
    firsts, seconds = draw(dec, params, DraftModelProposer(draft, p1.shape[0]))
    assert gof_pvalue(firsts, p1) > P_MIN
    assert gof_pvalue(seconds, p2) > P_MIN
    # power: the draft's own distribution is clearly different, and the test sees it
    q1, _ = exact_marginals(draft, params)
    assert gof_pvalue(firsts, q1) < 1e-6


def test_standard_samples_follow_target(soft):
    target, _ = soft
    params = CONFIGS[1]
    dec = Decoder(target, None, eos_token_ids=[])
    p1, p2 = exact_marginals(target, params)
    firsts, seconds = draw(dec, params, None)
    assert gof_pvalue(firsts, p1) > P_MIN and gof_pvalue(seconds, p2) > P_MIN


def test_prompt_lookup_samples_follow_target(soft):
    # a deterministic proposer (one-hot q) must keep the distribution too
    target, _ = soft
    params = CONFIGS[0]
    dec = Decoder(target, None, eos_token_ids=[])
    p1, p2 = exact_marginals(target, params)
    firsts, seconds = draw(dec, params, PromptLookupProposer(max_ngram=2), n=1000)
    assert gof_pvalue(firsts, p1) > P_MIN and gof_pvalue(seconds, p2) > P_MIN


@torch.inference_mode()
def exact_third(model, params):
    """p(t3) = sum_{t1, t2} p(t1) p(t2 | t1) p(t3 | t1, t2), from the warped distributions."""
    p1 = probabilities(model(torch.tensor([PROMPT])).logits[0, -1:], params)[0].double()
    v = p1.shape[0]
    p2_given = probabilities(model(torch.tensor([PROMPT + [t] for t in range(v)])).logits[:, -1], params).double()
    pairs = torch.tensor([PROMPT + [a, b] for a in range(v) for b in range(v)])
    p3_given = probabilities(model(pairs).logits[:, -1], params).double()  # [V*V, V]
    joint = (p1[:, None] * p2_given).reshape(-1)  # p(t1, t2), in the order of `pairs`
    return (joint[:, None] * p3_given).sum(0)


def test_adaptive_draft_length_keeps_the_target_distribution(tiny, monkeypatch):
    """Adaptive k is the default, and its confidence stop makes k depend on the draft's own
    values: the draft keeps proposing while the product of its probabilities of its picks stays
    above a threshold. That is exact only because the stop looks at the draft alone. Seeded:
    the first three tokens -- the prefill's, then the first two a draft proposes, where k varies --
    follow the target's warped distribution, and the same test rejects the draft's own.

    The target is softened (many tokens in play), the draft is a sharp copy of the target plus
    noise, so it is confident often enough that the first speculative step proposes 1 to 4. The
    controller's plan is the adaptive one before it has measured anything (16 tokens, the starting
    threshold), from the first step on: the controller itself would start plain, and decides
    from timings, never from the values of the step it plans."""
    import specdec_core.decoder as decoder_module
    from specdec_core.adaptive import AdaptiveDraftLength, FixedDraftLength
    from specdec_core.proposers import DraftPlan

    class FirstPlan(FixedDraftLength):
        def plan(self, backlog=0, remaining=None, kind="prose"):
            return DraftPlan(draft=16, min_confidence=AdaptiveDraftLength.threshold_start)

    monkeypatch.setattr(decoder_module, "make_policy", lambda k, sources, prior=0: FirstPlan(16, sources))
    target = soften(copy.deepcopy(tiny.target), 2.0)
    draft = tiny.near_draft
    params = SamplingParams(temperature=0.5)
    dec = Decoder(target, None, eos_token_ids=[])
    prop = DraftModelProposer(draft, tiny.vocab)
    tokens, first_k = [], []
    for i in range(N):
        # a budget of 6 leaves the first speculative step room for up to 5 proposals; no step
        # before the third measures a cost, so the stop here depends on the draft's values only
        s = DecodeSettings(max_new_tokens=6, sampling=params, draft_tokens="adaptive", seed=sample_seed(23, i))
        g = dec.generate(PROMPT, s, prop).run()
        tokens.append(g.token_ids[:3])
        first_k.append(g.stats.draft_lengths[0])
    counts = np.bincount(first_k)
    assert np.count_nonzero(counts >= N // 20) >= 3, counts  # k really varied: 1, 2 and 3+ all common
    p1, p2 = exact_marginals(target, params)
    p3 = exact_third(target, params)
    t1, t2, t3 = ([t[j] for t in tokens] for j in range(3))
    assert gof_pvalue(t1, p1) > P_MIN and gof_pvalue(t2, p2) > P_MIN and gof_pvalue(t3, p3) > P_MIN
    # power: the draft's distribution is another one, and the test sees it
    q2 = exact_marginals(draft, params)[1]
    assert gof_pvalue(t2, q2) < 1e-6 and gof_pvalue(t3, exact_third(draft, params)) < 1e-6


# --- the pure acceptance function: convergence as the sample count grows (vLLM style) -------
def _first_token(p, q, gen):
    """One speculative step over fixed distributions p [2, V], q [1, V]; the first token."""
    x = int(torch.multinomial(q[0], 1, generator=gen))
    u = torch.rand(1, generator=gen)
    u_next = float(torch.rand((), generator=gen))
    v = speculative_verify(torch.tensor([x]), q, p, u, u_next)
    return x if v.n_accepted == 1 else v.next_token


def _argmax_rule_first_token(p, q, gen):
    """NOT speculative sampling: keep the draft token when it is the target's argmax, else
    sample the target. Its output distribution is biased towards the argmax."""
    x = int(torch.multinomial(q[0], 1, generator=gen))
    if x == int(torch.argmax(p[0])):
        return x
    return int(torch.multinomial(p[0], 1, generator=gen))


def _dists(v=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(2, v, generator=g) * 1.5, -1)
    q = torch.softmax(torch.randn(1, v, generator=g) * 1.5, -1)
    return p, q


def _tv(samples, probs):
    emp = np.bincount(samples, minlength=len(probs)) / len(samples)
    return 0.5 * np.abs(emp - probs.numpy()).sum()


def test_acceptance_converges_to_target_as_samples_grow():
    p, q = _dists()
    gen = torch.Generator().manual_seed(1)
    samples = [_first_token(p, q, gen) for _ in range(40_000)]
    tvs = [_tv(samples[:n], p[0].double()) for n in (400, 4_000, 40_000)]
    assert tvs[0] > tvs[1] > tvs[2]
    assert tvs[2] < 0.015  # ~ sqrt(V / N) scale
    assert gof_pvalue(samples, p[0].double()) > P_MIN


def test_argmax_rule_is_rejected_by_the_same_test():
    p, q = _dists()
    gen = torch.Generator().manual_seed(1)
    samples = [_argmax_rule_first_token(p, q, gen) for _ in range(8_000)]
    assert gof_pvalue(samples, p[0].double()) < 1e-6
    assert _tv(samples, p[0].double()) > 0.03
