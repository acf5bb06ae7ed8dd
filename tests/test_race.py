"""Race runner and `specdec race`: fair per-lane clocks, both lanes finish, greedy equality,
cancel, the JSON contract and one-line errors. Tiny models only."""

import json
import threading
import time

import pytest

from app_fixtures import tiny_factory
from specdec_core.cli import main
from specdec_core.settings import DecodeSettings
from specdec_core.events import EventStream, Stats, TokenEvent, TokenKind
from specdec_core.proposers import PromptLookupProposer
from specdec_core.race import Race, start_race
from specdec_core.sampling import SamplingParams
from tiny_models import save_pair

PROMPT = "hello the cat sat on the mat and the cat sat on the mat"


@pytest.fixture(scope="module")
def engine():
    return tiny_factory(report=False)(lambda *_a: None)


@pytest.fixture(scope="module")
def prompt_ids(engine):
    return engine.encode_prompt(PROMPT)


def _settings(n=16, temperature=0.0, k=3, seed=0, proposer="draft"):
    return DecodeSettings(n, SamplingParams(temperature), k, seed, proposer=proposer)


@pytest.mark.parametrize("proposer", ["draft", "prompt-lookup"])
def test_both_lanes_finish_and_greedy_texts_are_identical(engine, prompt_ids, proposer):
    race = start_race(engine, prompt_ids, _settings(20, proposer=proposer))
    seen = {"standard": [], "speculative": []}
    for rev in race:
        seen[rev.lane].append(rev)
    r = race.result
    assert len(r.standard.events) == len(r.speculative.events) == 20
    assert r.standard.stats.stop_reason == r.speculative.stats.stop_reason == "max_new_tokens"
    assert r.identical and r.divergence is None
    assert r.standard.token_ids == [e.event.token_id for e in seen["standard"]]
    assert set(r.standard.kinds) == {"standard"}
    kinds = r.speculative.kinds
    assert kinds[0] == "standard" and set(kinds) <= {"accepted", "corrected", "bonus", "standard"}
    assert kinds.count("bonus") <= kinds.count("accepted")
    for lane in seen.values():  # events carry their lane's own clock, never going back
        clocks = [e.clock for e in lane]
        assert clocks == sorted(clocks) and all(e.event.t == e.clock for e in lane)
    assert r.speedup > 0
    d = r.to_dict()
    assert d["standard"]["seconds"] == r.standard.seconds == r.standard.stats.seconds
    # the lanes' figures are their Stats', timed by their own clocks
    for name, lane in (("standard", r.standard), ("speculative", r.speculative)):
        assert d[name]["tokens_per_second"] == lane.stats.tokens_per_second == pytest.approx(20 / lane.seconds)
        assert d[name]["decode_tokens_per_second"] == lane.stats.decode_tokens_per_second > 0
    assert d["plain_step_share"] == r.speculative.stats.plain_step_share
    assert d["verdict"] == r.verdict and "identical" in d["verdict"] and "exact" in d["verdict"]


def test_running_lane_stats_follow_each_lanes_clock(engine, prompt_ids):
    """What the race view shows live: each lane's engine Stats, its seconds being that lane's
    own clock and its tokens the ones handed out so far."""
    race = start_race(engine, prompt_ids, _settings(12))
    for rev in race:
        s = race.lane_stats(rev.lane)
        assert s.seconds == race.clocks[rev.lane] == rev.clock
        assert s.new_tokens == race.shown[rev.lane]
        assert s.tokens_per_second == pytest.approx(race.shown[rev.lane] / rev.clock)
    final = race.result.speculative.stats
    assert race.lane_stats("speculative").to_dict() == final.to_dict()


class SlowProposer(PromptLookupProposer):
    """Prompt lookup that sleeps in every proposal: time only the speculative lane spends."""

    name = "slow-lookup"

    def __init__(self, delay):
        super().__init__()
        self.delay = delay
        self.calls = 0

    def propose(self, ids, plan, params, rng):
        self.calls += 1
        time.sleep(self.delay)
        return super().propose(ids, plan, params, rng)


def test_each_lane_clock_counts_only_its_own_steps(engine, prompt_ids, monkeypatch):
    from specdec_core.engine import PROPOSER_BUILDERS

    delay = 0.03
    prop = SlowProposer(delay)
    monkeypatch.setitem(PROPOSER_BUILDERS, "prompt-lookup", lambda _engine: prop)  # the speculative lane's
    race = start_race(engine, prompt_ids, _settings(16, k=2, proposer="prompt-lookup"), warmup=False)
    wall0 = time.perf_counter()
    r = race.run()
    wall = time.perf_counter() - wall0
    slept = prop.calls * delay
    assert prop.calls >= 5
    assert r.speculative.seconds >= slept  # its own sleeps are its compute
    # the standard lane ran while the speculative lane slept, but none of that is on its clock
    assert r.standard.seconds < 0.5 * slept
    assert r.standard.seconds + r.speculative.seconds <= wall + 1e-3
    assert r.speedup < 1


class Lane(EventStream):
    """A scripted lane: a generator of events whose return value is its Stats."""

    def __init__(self, gen):
        self._gen, self.events, self.stats = gen, [], None

    def __iter__(self):
        while True:
            try:
                ev = next(self._gen)
            except StopIteration as stop:
                self.stats = stop.value
                return
            self.events.append(ev)
            yield ev

    def snapshot(self):
        return self.stats or Stats(new_tokens=len(self.events))


def _fake_lane(step_seconds, n, base_id=0, margins=None):
    def gen():
        for i in range(n):
            time.sleep(step_seconds)
            m = None if margins is None else margins[i]
            yield TokenEvent(base_id + i, "x", TokenKind.STANDARD, i, None, 123.0, m)
        return Stats(new_tokens=n, seconds=999.0, stop_reason="max_new_tokens")

    return Lane(gen())


def test_the_lane_behind_always_advances():
    n = {"standard": 5, "speculative": 12}
    race = Race({"standard": _fake_lane(0.02, n["standard"]), "speculative": _fake_lane(0.005, n["speculative"])},
                threading.Event(), "fake", _settings(12))
    before = dict(race.clocks)
    done = {"standard": 0, "speculative": 0}
    for rev in race:
        other = "speculative" if rev.lane == "standard" else "standard"
        if done[other] < n[other]:  # both running: the lane that moved was the one behind
            assert before[rev.lane] <= before[other]
        done[rev.lane] += 1
        before = dict(race.clocks)
    r = race.result
    assert 0.1 <= r.standard.seconds < 0.2 and 0.06 <= r.speculative.seconds < 0.15
    assert r.standard.stats.seconds == r.standard.seconds  # the decoder's wall clock is replaced


def test_divergence_is_reported_with_position_and_margin():
    margins = [5.0, 4.0, 0.003, 2.0]
    a = _fake_lane(0, 4, margins=margins)

    def b_gen():
        for i, tok in enumerate([0, 1, 9, 3]):
            yield TokenEvent(tok, "x", TokenKind.ACCEPTED, i, 0, 0.0, margins[i])
        return Stats(new_tokens=4)

    r = Race({"standard": a, "speculative": Lane(b_gen())}, threading.Event(), "fake", _settings(4)).run()
    assert not r.identical
    d = r.to_dict()["divergence"]
    assert d["position"] == 2 and d["margin"] == pytest.approx(0.003) and d["near_tie"]
    assert "token 2" in r.verdict and "a near-tie" in r.verdict and "not a near-tie" not in r.verdict
    # the same divergence with a clear margin is called what it is
    far = Race({"standard": _fake_lane(0, 4, margins=[5.0, 4.0, 3.0, 2.0]), "speculative": _b_lane([0, 1, 9, 3])},
               threading.Event(), "fake", _settings(4)).run()
    assert "token 2" in far.verdict and "not a near-tie" in far.verdict and "report" in far.verdict
    # sampled: different texts are expected, and said so; no divergence is claimed
    sampled = Race({"standard": _fake_lane(0, 4), "speculative": _b_lane([0, 1, 9, 3])},
                   threading.Event(), "fake", _settings(4, temperature=1.0)).run()
    assert sampled.divergence is None and "same distribution" in sampled.verdict
    same = Race({"standard": _fake_lane(0, 4), "speculative": _b_lane([0, 1, 2, 3])},
                threading.Event(), "fake", _settings(4, temperature=1.0)).run()
    assert same.identical and "equal by chance" in same.verdict


def _b_lane(tokens):
    def gen():
        for i, tok in enumerate(tokens):
            yield TokenEvent(tok, "x", TokenKind.ACCEPTED, i, 0, 0.0, 1.0)
        return Stats(new_tokens=len(tokens))

    return Lane(gen())


def test_cancel_mid_race_stops_both_lanes(engine, prompt_ids):
    cancel = threading.Event()
    race = start_race(engine, prompt_ids, _settings(200, k=2), cancel)
    got = []
    for rev in race:
        got.append(rev)
        if len(got) == 6:
            cancel.set()
    r = race.result
    assert len(got) == 6  # nothing more comes out once cancelled
    assert r.cancelled
    assert len(r.standard.events) + len(r.speculative.events) == 6
    for lane in (r.standard, r.speculative):
        assert lane.stats is not None and lane.stats.stop_reason == "cancelled"
    assert r.divergence is None


def test_sampled_race_runs_and_does_not_claim_a_divergence(engine, prompt_ids):
    r = start_race(engine, prompt_ids, _settings(12, temperature=1.0, seed=5)).run()
    assert len(r.standard.events) == len(r.speculative.events) == 12
    assert r.divergence is None and not r.greedy
    # the weak tiny draft is rejected often: the two samples part, and the verdict says why
    assert not r.identical and "same distribution" in r.verdict and "report" not in r.verdict


# -- the CLI ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_pair(tmp_path_factory.mktemp("racepair"))


def _race(pair, *extra):
    t, d = pair
    return ["race", "--target", str(t), "--draft", str(d), *extra]


def test_race_json_schema(pair, capsys):
    rc = main(_race(pair, "--prompt", PROMPT, "--max-new-tokens", "12", "--draft-tokens", "3", "--json"))
    out, err = capsys.readouterr()
    assert rc == 0
    obj = json.loads(out)
    for lane in ("standard", "speculative"):
        for key in ("token_ids", "kinds", "seconds", "tokens_per_second"):
            assert key in obj[lane], (lane, key)
        assert 1 <= len(obj[lane]["token_ids"]) == len(obj[lane]["kinds"]) <= 12  # the pair has an EOS
        assert obj[lane]["seconds"] > 0
    assert isinstance(obj["speedup"], float) and obj["identical"] is True
    assert obj["verdict"].startswith("Texts identical") and 0 <= obj["plain_step_share"] <= 1
    assert obj["standard"]["token_ids"] == obj["speculative"]["token_ids"]
    assert set(obj["standard"]["kinds"]) == {"standard"}


def test_race_plain_summary(pair, capsys):
    rc = main(_race(pair, "--prompt", PROMPT, "--max-new-tokens", "8", "--proposer", "prompt-lookup"))
    out, _ = capsys.readouterr()
    assert rc == 0
    assert "speedup" in out and "tok/s" in out and "own compute time" in out and "identical" in out


@pytest.mark.parametrize("tail,words", [
    (["--prompt", "hi", "--draft-tokens", "0"], "--draft-tokens"),
    (["--prompt", "hi", "--temperature", "-1"], "temperature"),
    (["--prompt", "hi", "--proposer", "tree"], "--proposer"),
    (["--prompt", "  "], "--prompt"),
    (["--max-new-tokens", "4"], "--prompt"),
])
def test_race_bad_input_is_one_line_exit_2(pair, capsys, tail, words):
    rc = main(_race(pair, *tail))
    _, err = capsys.readouterr()
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith(("target:", "draft:", "  - "))]
    assert rc == 2 and len(lines) == 1 and words in lines[0] and "Traceback" not in err


class RemoteLane(EventStream):
    """A lane decoded elsewhere (a `specdec serve`): its events' `t` are its engine's own clock,
    and each event takes `wait` seconds to arrive (the network, the other lane's turn there)."""

    own_clock = True

    def __init__(self, times: list[float], wait: float):
        self.times, self.wait = times, wait
        self.events: list[TokenEvent] = []
        self.stats = None

    def __iter__(self):
        for i, t in enumerate(self.times):
            time.sleep(self.wait)
            ev = TokenEvent(i, "x", TokenKind.STANDARD, i, None, t)
            self.events.append(ev)
            yield ev
        self.stats = Stats(new_tokens=len(self.times), seconds=self.times[-1], mode="standard")

    def snapshot(self):
        return self.stats or Stats(new_tokens=len(self.events), mode="standard")


def test_a_lane_with_its_own_clock_is_timed_by_its_engine_not_by_its_wait():
    lanes = {"standard": RemoteLane([0.01, 0.02, 0.03], 0.05), "speculative": RemoteLane([0.005, 0.01], 0.1)}
    result = Race(lanes, threading.Event(), "draft", DecodeSettings(3)).run()
    # 0.15 s and 0.2 s of waiting are nobody's compute: the lanes' clocks are their engines'
    assert result.standard.seconds == pytest.approx(0.03) and result.speculative.seconds == pytest.approx(0.01)
    assert [e.t for e in result.standard.events] == [0.01, 0.02, 0.03]
    assert result.standard.stats.seconds == pytest.approx(0.03) and result.speedup == pytest.approx(2.0)
