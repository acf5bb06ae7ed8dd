"""The controller replay (scripts/controller_replay.py) on hand-built recordings: the tool the
speed notes' predictions come from must tell a draft that agrees from one that never does."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "controller_replay", Path(__file__).resolve().parents[1] / "scripts" / "controller_replay.py")
replay = importlib.util.module_from_spec(spec)
spec.loader.exec_module(replay)


def recording(n, agrees, conf=0.95):
    answer = [1000 + i for i in range(n)]  # no repeats: prompt lookup finds nothing to copy
    return dict(prompt=list(range(60)), answer=answer, pieces=["w "] * n, margins=[5.0] * n,
                draft_pick=[None] + [t if agrees else 1 for t in answer[1:]],
                draft_conf=[None] + [conf] * (n - 1))


def test_a_draft_that_agrees_is_replayed_faster_than_standard():
    r = replay.replay_one(recording(128, agrees=True), replay.COSTS["vnni"], {})
    assert r["standard"] / r["speculative"] > 1.5
    assert r["used"]["draft"][1] > 100 and 60 <= r["catch"] <= 64  # the prompt, once


def test_a_draft_that_never_agrees_costs_little_and_keeps_nothing():
    r = replay.replay_one(recording(128, agrees=False), replay.COSTS["vnni"], {})
    assert r["used"]["draft"][1] == 0
    assert 0.9 < r["standard"] / r["speculative"] <= 1.0


def test_the_expected_first_answer_is_a_controller_field_the_replay_can_set():
    rec = recording(128, agrees=True)
    late = replay.replay_one(rec, replay.COSTS["vnni"], {"first_answer_prior": 0})
    early = replay.replay_one(rec, replay.COSTS["vnni"], {})
    assert early["speculative"] < late["speculative"]


def test_the_ceiling_is_never_slower_than_the_controller():
    for agrees in (True, False):
        rec = recording(128, agrees=agrees)
        for costs in ("vnni", "vnni-rows", "avx2-rows"):
            ceiling = replay.oracle_one(rec, replay.COSTS[costs])
            got = replay.replay_one(rec, replay.COSTS[costs], {})
            assert ceiling["standard"] == got["standard"]
            assert ceiling["ceiling"] <= got["speculative"] + 1e-9, (agrees, costs)


def test_with_nothing_to_copy_and_a_draft_that_never_agrees_the_ceiling_is_standard():
    o = replay.oracle_one(recording(128, agrees=False), replay.COSTS["vnni-rows"])
    assert abs(o["ceiling"] - o["standard"]) < 1e-9 * o["standard"]


def test_an_answer_that_copies_its_prompt_has_a_ceiling_from_lookup_alone():
    text = [2000 + i for i in range(120)]
    rec = dict(prompt=list(range(10)) + text, answer=text[:100], pieces=["w "] * 100, margins=[5.0] * 100,
               draft_pick=[None] + [1] * 99, draft_conf=[None] + [0.5] * 99)
    o = replay.oracle_one(rec, replay.COSTS["vnni-rows"])
    decode_std, decode_ceiling = o["standard"] - o["prefill"], o["ceiling"] - o["prefill"]
    # 16 copied tokens a pass of 17 rows (2.71 one-row steps): ~6x the decoding's speed
    assert 5.0 < decode_std / decode_ceiling < 7.0


def test_lookups_guess_for_the_drafts_chain_comes_from_the_committed_text():
    from specdec_core.proposers.prompt_lookup import NgramIndex

    index = NgramIndex(8, 1)
    index.sync([1, 2, 3, 4, 5, 9, 1, 2])
    assert replay._guess(index, [1, 2, 3, 4, 5, 9, 1, 2], 3, 2) == [3, 4, 5]
    assert replay._guess(index, [1, 2, 3, 4, 5, 9, 1, 2], 3, 3) == []  # [9, 1, 2] occurred only at the end
    assert replay._guess(index, [1, 2, 3, 4, 5, 9, 1, 2, 3, 4], 2, 2) == [5, 9]  # the chain's tail, past the index
