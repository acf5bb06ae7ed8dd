"""Grammar-constrained decoding (specdec_core/grammar, proposers/grammar.py), in the three tiers:
hand-built masks and proposals on a tiny tokenizer with JSON's characters; greedy speculative
output identical to greedy constrained standard decoding (every proposer, fixed and adaptive k),
each answer valid for its schema; and seeded statistics: sampled tokens follow the masked
distribution, with a draft that disagrees, and the same test rejects the unmasked one."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from conftest import soften
from specdec_core.decoder import Decoder
from specdec_core.grammar import GrammarSpec
from specdec_core.grammar.constraint import GrammarError
from specdec_core.proposers import DraftModelProposer, DraftPlan, LookupDraftProposer, PromptLookupProposer
from specdec_core.proposers.grammar import GrammarProposer
from specdec_core.sampling import SamplingParams, probabilities
from specdec_core.settings import DecodeSettings, sample_seed
from test_distribution import gof_pvalue
from tiny_models import make_model, make_tokenizer

# the tiny tokenizer's words plus JSON's characters (each becomes a token of its own, and " x" words)
JSON_WORDS = ["the", "cat", "sat", "on", "mat", "a", "hat", "is", "name", "age", "tags", "ok", "{", "}", '"', ":", ",",
              "0123456789", "[", "]", "true", "false", "null"]
SCHEMA = {"type": "object",
          "properties": {"name": {"enum": ["cat", "hat", "the mat"]}, "age": {"type": "integer", "minimum": 0,
                                                                                "maximum": 99},
                         "tags": {"type": "array", "items": {"enum": ["on", "is"]}, "maxItems": 3},
                         "ok": {"type": "boolean"}},
          "required": ["name", "age", "tags", "ok"], "additionalProperties": False}


@pytest.fixture(scope="module")
def json_pair():
    tok = make_tokenizer(JSON_WORDS)
    target = make_model(len(tok), seed=0)
    draft = make_model(len(tok), seed=1, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32)
    return tok, target, draft


def chat(tok, text: str) -> list[int]:
    enc = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
    return list(enc["input_ids"] if hasattr(enc, "keys") else enc)


def ids_of(tok, *pieces: str) -> set[int]:
    return {tok.convert_tokens_to_ids(p) for p in pieces}


def valid(answer: dict) -> bool:
    return (set(answer) == {"name", "age", "tags", "ok"} and answer["name"] in ("cat", "hat", "the mat")
            and isinstance(answer["age"], int) and 0 <= answer["age"] <= 99 and isinstance(answer["ok"], bool)
            and len(answer["tags"]) <= 3 and all(t in ("on", "is") for t in answer["tags"]))


# -- tier 1: hand-built ---------------------------------------------------------------------------
def test_masks_follow_the_grammar_state_along_a_proposal(json_pair):
    tok, target, _ = json_pair
    dec = Decoder(target, tok)
    c = dec.constraint(GrammarSpec.regex("([acdeh][imnorst])+"))
    first, second = ids_of(tok, *"acdeh"), ids_of(tok, *"imnorst")
    allowed = lambda ahead: set(torch.nonzero(c.allowed(ahead)).flatten().tolist())  # noqa: E731
    a, i, t = (tok.convert_tokens_to_ids(x) for x in "ait")
    assert allowed([]) == first
    assert allowed([a]) == second
    assert allowed([a, i]) == first | dec.eos  # complete after a pair: it may end (either end token)
    assert c.allowed([a, a]) is None  # a state the grammar cannot reach
    # the rows of a verification: row j at the state after the proposal's first j tokens; a row
    # after a forbidden proposal is left unmasked (never read: that proposal is rejected for sure)
    logits = torch.zeros(4, len(tok))
    rows = c.mask(logits, [a, a, t])
    assert set(torch.nonzero(rows[0] == 0).flatten().tolist()) == first
    assert set(torch.nonzero(rows[1] == 0).flatten().tolist()) == second
    assert bool((rows[2:] == 0).all())
    assert c.valid_prefix([a, i, a, a]) == 3
    # asking about proposals moved nothing: the committed state is still the start
    c.commit([a])
    assert allowed([]) == second and c.forced(5) == []
    with pytest.raises(GrammarError):
        c.commit([a])


def test_forced_runs_are_proposed_by_the_grammar_without_a_model(json_pair):
    tok, target, _ = json_pair
    c = Decoder(target, tok).constraint(GrammarSpec.json_schema(SCHEMA))
    forced = c.forced(64)
    assert tok.decode(forced) == '{"name": "'  # the key and its quotes: nothing else can come first
    prop = GrammarProposer(None, c)
    got = prop.propose([1], DraftPlan(grammar=3), SamplingParams(), torch.Generator())
    assert got.tokens == forced[:3] and got.source == "grammar" and got.q_draft is None
    c.commit(forced)
    # inside the enum's string, "cat" and "hat" share nothing forced: the wrapped proposer's turn
    assert prop.propose([1], DraftPlan(grammar=3), SamplingParams(), torch.Generator()).tokens == []


def test_lookup_stops_before_a_token_the_grammar_forbids(json_pair):
    tok, target, _ = json_pair
    c = Decoder(target, tok).constraint(GrammarSpec.regex("([acdeh][imnorst])+"))
    a, i, c_, h = (tok.convert_tokens_to_ids(x) for x in "aich")
    # the sequence ends with "a"; earlier "a" was followed by "i c c h": a second "c" breaks the grammar
    ids = [a, i, c_, c_, h, a]
    c.commit([a])
    plan = DraftPlan(lookup=(0,) + (4,) * 8)
    got = PromptLookupProposer().propose(ids, plan, SamplingParams(), torch.Generator(), constraint=c)
    assert got.tokens == [i, c_]
    assert PromptLookupProposer().propose(ids, plan, SamplingParams(), torch.Generator()).tokens == [i, c_, c_, h]


class NothingAllowed:
    """A grammar state under which the draft can spell no allowed token (all its logits masked)."""

    def mask(self, logits, draft, first=0):
        return torch.full_like(logits, float("-inf"))


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=1.0)], ids=["greedy", "T1"])
def test_a_draft_with_no_allowed_token_stops_instead_of_proposing_one(json_pair, params):
    tok, _, draft = json_pair
    prop = DraftModelProposer(draft, len(tok))
    got = prop.propose(chat(tok, "the cat"), DraftPlan(draft=4), params, torch.Generator(), constraint=NothingAllowed())
    assert got.tokens == [] and got.q_draft is None


def test_a_schema_the_library_refuses_names_the_problem(json_pair):
    tok, target, _ = json_pair
    with pytest.raises(GrammarError, match="nonsense"):
        Decoder(target, tok).constraint(GrammarSpec.json_schema({"type": "nonsense"}))


# -- tier 2: greedy speculative == greedy constrained standard ------------------------------------
@pytest.mark.parametrize("proposer", ["draft", "lookup+draft", "prompt-lookup"])
@pytest.mark.parametrize("k", [3, "adaptive"])
def test_greedy_speculative_equals_constrained_standard(json_pair, proposer, k):
    tok, target, draft = json_pair
    dec = Decoder(target, tok)
    spec = GrammarSpec.json_schema(SCHEMA)
    for text in ("the cat", "a hat is on the mat"):
        prompt = chat(tok, text)
        ref = dec.generate(prompt, DecodeSettings(max_new_tokens=80, grammar=spec, mode="standard")).run()
        assert ref.stats.stop_reason == "eos", ref.text
        assert valid(json.loads(tok.decode(ref.token_ids[:-1]))), ref.text
        prop = {"draft": lambda: DraftModelProposer(draft, len(tok)),
                "lookup+draft": lambda: LookupDraftProposer(DraftModelProposer(draft, len(tok))),
                "prompt-lookup": PromptLookupProposer}[proposer]()
        got = dec.generate(prompt, DecodeSettings(max_new_tokens=80, grammar=spec, draft_tokens=k), prop).run()
        assert got.token_ids == ref.token_ids
        assert got.stats.steps_by_source.get("grammar", 0) >= 2  # the keys came from the grammar
        assert got.stats.target_forward_passes < ref.stats.target_forward_passes


def test_unconstrained_decoding_is_unchanged_by_the_grammar_machinery(json_pair):
    tok, target, draft = json_pair
    dec = Decoder(target, tok)
    prompt = chat(tok, "the cat")
    ref = dec.generate(prompt, DecodeSettings(max_new_tokens=30, mode="standard")).run()
    got = dec.generate(prompt, DecodeSettings(max_new_tokens=30, draft_tokens=3),
                       DraftModelProposer(draft, len(tok))).run()
    assert got.token_ids == ref.token_ids and "grammar" not in got.sources


# -- tier 3: seeded statistics ---------------------------------------------------------------------
REGEX = "([acdeh][imnorst])+"  # the allowed set alternates: the second token's mask depends on the first
N = 1000
P_MIN = 1e-3


@torch.inference_mode()
def masked_marginals(model, constraint, prompt, params):
    """p(t1) and p(t2) = sum_t1 p(t1) p(t2 | t1), each step's logits masked at its grammar state."""
    def dist(rows, aheads):
        logits = torch.stack([constraint.mask(r[None], list(a), first=len(a))[0] for r, a in zip(rows, aheads)])
        return probabilities(logits, params).double()

    v = model.config.vocab_size
    p1 = dist(model(torch.tensor([prompt])).logits[0, -1:], [()])[0]
    firsts = [t for t in range(v) if p1[t] > 0]
    p2_given = dist(model(torch.tensor([prompt + [t] for t in firsts])).logits[:, -1], [(t,) for t in firsts])
    p2 = (p1[firsts][:, None] * p2_given).sum(0)
    return p1, p2


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.8, top_k=4)],
                         ids=["T1", "T0.8-topk4"])
def test_sampled_tokens_follow_the_masked_distribution(json_pair, params):
    tok, target, draft = json_pair
    target = soften(copy.deepcopy(target), 4.0)
    draft = soften(copy.deepcopy(draft), 4.0)
    torch.set_num_threads(1)
    dec = Decoder(target, tok)
    prompt = chat(tok, "the cat")
    spec = GrammarSpec.regex(REGEX)
    p1, p2 = masked_marginals(target, dec.constraint(spec), prompt, params)
    prop = DraftModelProposer(draft, len(tok))
    firsts, seconds, accepted = [], [], 0
    for i in range(N):
        s = DecodeSettings(max_new_tokens=3, sampling=params, draft_tokens=2, seed=sample_seed(5, i), grammar=spec)
        g = dec.generate(prompt, s, prop).run()
        firsts.append(g.token_ids[0])
        seconds.append(g.token_ids[1])
        accepted += g.stats.accepted_tokens
    assert gof_pvalue(firsts, p1) > P_MIN and gof_pvalue(seconds, p2) > P_MIN
    assert 0.1 * N < accepted < 1.9 * N  # the draft is kept sometimes and rejected sometimes
    # power: the unmasked target's distribution is another one, and the test sees it
    with torch.inference_mode():
        free = probabilities(target(torch.tensor([prompt])).logits[0, -1:], params)[0].double()
    assert gof_pvalue(firsts, free) < 1e-6
    # and the draft's own masked distribution too (it disagrees with the target)
    q1, q2 = masked_marginals(draft, dec.constraint(spec), prompt, params)
    assert gof_pvalue(seconds, q2) < 1e-6 or gof_pvalue(firsts, q1) < 1e-6


def test_standard_sampling_follows_the_masked_distribution(json_pair):
    tok, target, _ = json_pair
    target = soften(copy.deepcopy(target), 4.0)
    dec = Decoder(target, tok)
    prompt = chat(tok, "the cat")
    spec, params = GrammarSpec.regex(REGEX), SamplingParams(temperature=1.0)
    p1, p2 = masked_marginals(target, dec.constraint(spec), prompt, params)
    firsts, seconds = [], []
    for i in range(N):
        s = DecodeSettings(max_new_tokens=2, sampling=params, seed=sample_seed(9, i), grammar=spec, mode="standard")
        ids = dec.generate(prompt, s).run().token_ids
        firsts.append(ids[0])
        seconds.append(ids[1])
    assert gof_pvalue(firsts, p1) > P_MIN and gof_pvalue(seconds, p2) > P_MIN
    assert np.isin(seconds, list(torch.nonzero(p2).flatten().tolist())).all()
