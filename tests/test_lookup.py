"""Prompt lookup and lookup-then-draft: tier 1 (hand-built sequences), tier 2 (the incremental
n-gram index equals a brute-force scan of the sequence)."""

import random

import torch

from specdec_core.proposers import DRAFT, LOOKUP, MATCH_MAX, DraftModelProposer, DraftPlan, LookupDraftProposer
from specdec_core.proposers.prompt_lookup import NgramIndex, PromptLookupProposer
from specdec_core.settings import SamplingParams

EVERY = (0,) + (4,) * MATCH_MAX


def scan(ids, k, max_ngram, min_ngram=1):
    """The reference: longest n first; among its earlier occurrences, right to left, the first
    with a full k-token continuation, else the longest continuation seen."""
    for n in range(min(max_ngram, len(ids) - 1), min_ngram - 1, -1):
        tail, best = ids[len(ids) - n :], []
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start : start + n] == tail:
                cont = ids[start + n : start + n + k]
                if len(cont) == k:
                    return cont, n
                best = cont if len(cont) > len(best) else best
        if best:
            return best, n
    return [], 0


def test_the_index_finds_what_a_scan_finds_as_the_sequence_grows():
    rng = random.Random(7)
    for _ in range(20):
        ids = [rng.randrange(6) for _ in range(rng.randrange(2, 12))]
        index = NgramIndex(MATCH_MAX, 1)
        for _ in range(60):  # grown a token at a time, as a generation grows it
            index.sync(ids)
            for k in (1, 3, 8):
                assert index.continuation(k) == scan(ids, k, MATCH_MAX), (ids, k)
            ids = ids + [rng.randrange(6)]


def test_a_new_sequence_starts_the_index_over():
    index = NgramIndex(3, 1)
    index.sync([1, 2, 3, 1, 2])
    assert index.continuation(2) == ([3, 1], 2)
    index.sync([7, 8, 7])  # not an extension of the indexed sequence
    assert index.ids == [7, 8, 7] and index.continuation(2) == ([8, 7], 1)


def test_lookup_proposes_only_for_the_match_lengths_the_plan_allows():
    prop = PromptLookupProposer()
    ids = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7]  # the tail 5 6 7 matched 3 tokens long
    args = (SamplingParams(), torch.Generator())
    got = prop.propose(ids, DraftPlan(lookup=EVERY), *args)
    assert got.tokens == [8, 9, 1, 2] and got.source == LOOKUP and got.match == 3
    only_long = (0,) * 4 + (4,) * (MATCH_MAX - 3)  # matches of 4 tokens or more
    assert prop.propose(ids, DraftPlan(lookup=only_long), *args).tokens == []
    assert prop.propose(ids, DraftPlan(draft=4), *args).tokens == []  # no lookup planned
    assert prop.propose([1, 2, 3], DraftPlan(lookup=EVERY), *args).tokens == []  # nothing repeats


def test_lookup_then_draft_takes_lookup_where_it_matches_and_the_draft_elsewhere(tiny):
    prop = LookupDraftProposer(DraftModelProposer(tiny.draft, tiny.vocab))
    args = (SamplingParams(), torch.Generator())
    repeats = [5, 6, 7, 8, 9, 5, 6, 7]
    got = prop.propose(repeats, DraftPlan(draft=3, lookup=EVERY), *args)
    assert got.source == LOOKUP and got.tokens == [8, 9, 5, 6]
    prop.reset()
    fresh = [11, 12, 13, 14]
    got = prop.propose(fresh, DraftPlan(draft=3, lookup=EVERY), *args)
    assert got.source == DRAFT and len(got.tokens) == 3
    prop.observe(fresh + [9], 0)  # all rejected: the target wrote 9
    assert prop.unread(fresh + [9]) == 0
    assert prop.unread(fresh + [9, 1, 2, 3]) == 3  # steps lookup proposed leave the draft behind
