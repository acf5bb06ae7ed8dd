"""`specdec generate`: the contract other tools depend on, and its one-line errors."""

import json
import subprocess
import sys

import pytest

from specdec_core.cli import main
from tiny_models import make_model, make_tokenizer, save_model, save_pair


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_pair(tmp_path_factory.mktemp("pair"))


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def gen(pair, *extra):
    t, d = pair
    return ["generate", "--target", str(t), "--draft", str(d), "--json", *extra]


def test_json_lines_per_sample(pair, capsys):
    rc, out, _ = run(capsys, *gen(pair, "--prompt-ids", "1,5,29,7", "--max-new-tokens", "10",
                                   "--temperature", "1", "--seed", "4", "--samples", "3"))
    assert rc == 0
    lines = [json.loads(x) for x in out.splitlines()]
    assert len(lines) == 3
    for obj in lines:
        assert len(obj["token_ids"]) == len(obj["kinds"]) <= 10
        kinds = obj["kinds"]
        # the first token is the target's prefill alone; a bonus needs all of a step's k >= 1 kept
        assert kinds[0] == "standard" and set(kinds) <= {"accepted", "corrected", "bonus", "standard"}
        assert kinds.count("bonus") <= kinds.count("accepted")
        for key in ("new_tokens", "seconds", "tokens_per_second", "decode_tokens_per_second", "proposed_tokens",
                    "accepted_tokens", "acceptance_rate", "tokens_per_speculative_step", "plain_steps",
                    "plain_step_share", "target_forward_passes", "draft_forward_passes", "per_position_accepted"):
            assert key in obj["stats"], key
        assert obj["stats"]["plain_steps"] == kinds.count("standard")
        # each token's source: none for a plain step's, the step's proposer's otherwise
        assert len(obj["sources"]) == len(kinds)
        assert all((s == "") == (k == "standard") and s in ("", "draft", "lookup") for s, k in zip(obj["sources"], kinds))
        assert isinstance(obj["text"], str)


def test_first_samples_do_not_depend_on_sample_count(pair, capsys):
    # a fixed k: adaptive k follows measured speed, so its seeded samples may differ run to run
    args = gen(pair, "--prompt-ids", "1,5,29,7", "--max-new-tokens", "12", "--temperature", "1.2",
               "--top-k", "20", "--seed", "9", "--draft-tokens", "3")
    _, two, _ = run(capsys, *args, "--samples", "2")
    _, five, _ = run(capsys, *args, "--samples", "5")
    two_ids = [json.loads(x)["token_ids"] for x in two.splitlines()]
    five_ids = [json.loads(x)["token_ids"] for x in five.splitlines()]
    assert five_ids[:2] == two_ids
    assert len({tuple(x) for x in five_ids}) > 1


@pytest.mark.parametrize("proposer", ["draft", "prompt-lookup"])
def test_greedy_speculative_equals_standard(pair, capsys, proposer):
    common = gen(pair, "--prompt", "hello the cat sat on the mat", "--max-new-tokens", "16")
    _, std, _ = run(capsys, *common, "--mode", "standard")
    _, spec, _ = run(capsys, *common, "--mode", "speculative", "--proposer", proposer, "--draft-tokens", "3")
    s, p = json.loads(std), json.loads(spec)
    assert s["token_ids"] == p["token_ids"] and s["text"] == p["text"]
    assert set(s["kinds"]) == {"standard"}


def test_the_shaping_flags_are_the_settings_and_change_the_answer(pair, capsys):
    """--min-p, the penalties and --logit-bias reach the engine: speculative still equals standard
    under them, and the answer is not the one without them."""
    common = gen(pair, "--prompt", "hello the cat sat on the mat", "--max-new-tokens", "16")
    shaping = ["--frequency-penalty", "1.5", "--presence-penalty", "0.5", "--repetition-penalty", "1.3",
               "--min-p", "0.1", "--logit-bias", "9=4", "--logit-bias", "12=-100"]
    _, plain, _ = run(capsys, *common, "--mode", "standard")
    _, std, _ = run(capsys, *common, *shaping, "--mode", "standard")
    _, spec, _ = run(capsys, *common, *shaping, "--draft-tokens", "3")
    ids = [json.loads(x)["token_ids"] for x in (plain, std, spec)]
    assert ids[1] == ids[2] != ids[0] and 12 not in ids[1]


def test_plain_text_output_and_stats_line(pair, capsys):
    rc, out, err = run(capsys, "generate", "--target", str(pair[0]), "--draft", str(pair[1]),
                       "--prompt", "hello", "--max-new-tokens", "5", "--draft-tokens", "adaptive")
    assert rc == 0 and out.strip()
    assert "[speculative]" in err and "tok/s decode" in err and "tok/s end-to-end" in err and "target:" in err
    assert "plain steps" in err


def test_a_prompt_longer_than_the_context_is_refused_before_any_computing(pair, capsys, monkeypatch):
    """The tiny target's context is 512 tokens (the real pair's 32,768): 600 prompt ids, or a
    prompt that fits only without its answer budget, get one line and exit 2 -- and the decoding
    loop never starts (it would be minutes of prefill on a real model)."""
    from specdec_core.decoder import Decoder

    def never(*_a, **_k):
        raise AssertionError("the decoder ran on a prompt that does not fit")

    monkeypatch.setattr(Decoder, "_loop", never)
    rc, out, err = run(capsys, *gen(pair, "--prompt-ids", ",".join(["5"] * 600)))
    lines = [x for x in err.splitlines() if not x.startswith(("target:", "draft:", "  - "))]
    assert rc == 2 and not out and len(lines) == 1 and "Traceback" not in err
    assert "600 tokens" in lines[0] and "context holds 512" in lines[0]
    rc, _, err = run(capsys, *gen(pair, "--prompt-ids", ",".join(["5"] * 500), "--max-new-tokens", "20"))
    lines = [x for x in err.splitlines() if not x.startswith(("target:", "draft:", "  - "))]
    assert rc == 2 and len(lines) == 1 and "lower max-new-tokens to 12" in lines[0]


def test_stats_line_labels_every_figure():
    from specdec_core.cli.terminal import stats_line
    from specdec_core.events import Stats

    s = Stats(new_tokens=11, seconds=3.0, prefill_seconds=1.0, target_forward_passes=5, speculative_steps=3,
              speculative_step_tokens=10, proposed_tokens=12, accepted_tokens=7, mode="speculative",
              stop_reason="eos")
    assert stats_line(s) == ("[speculative] 11 tokens in 3.00s (5.0 tok/s decode, 3.7 tok/s end-to-end), "
                             "acceptance 58%, 3.33 tokens per speculative step, 40% plain steps, "
                             "5 target passes, stop: eos")
    plain = Stats(new_tokens=3, seconds=1.0, target_forward_passes=3, mode="speculative", stop_reason="eos")
    assert "acceptance -, - tokens per speculative step, 100% plain steps" in stats_line(plain)


@pytest.fixture(scope="module")
def other_vocab(tmp_path_factory):
    words = ["zebra", "yak", "xylophone"] + [f"w{i}" for i in range(49)]
    tok = make_tokenizer(words)
    return save_model(tmp_path_factory.mktemp("other"), make_model(len(tok), seed=3), tok)


BAD = [
    # (argv tail, words the one-line message must contain)
    (["--prompt-ids", "1,2", "--draft-tokens", "0"], "--draft-tokens"),
    (["--prompt-ids", "1,2", "--temperature", "-0.5"], "temperature"),
    (["--prompt-ids", "1,2", "--top-p", "1.5"], "top-p"),
    (["--prompt-ids", "1,2", "--top-p", "0"], "top-p"),
    (["--prompt-ids", "1,a"], "--prompt-ids"),
    (["--prompt-ids", "1,2", "--min-p", "1.5"], "min-p"),
    (["--prompt-ids", "1,2", "--min-p", "lots"], "--min-p"),
    (["--prompt-ids", "1,2", "--presence-penalty", "3"], "presence-penalty"),
    (["--prompt-ids", "1,2", "--frequency-penalty", "-2.5"], "frequency-penalty"),
    (["--prompt-ids", "1,2", "--repetition-penalty", "0"], "repetition-penalty"),
    (["--prompt-ids", "1,2", "--logit-bias", "7"], "--logit-bias"),
    (["--prompt-ids", "1,2", "--logit-bias", "7=-101"], "logit bias"),
    (["--prompt-ids", "1,2", "--logit-bias", "99999=5"], "--logit-bias"),
    (["--prompt-ids", "1,99999"], "vocabulary"),
    (["--max-new-tokens", "5"], "--prompt"),
]


@pytest.mark.parametrize("tail,words", BAD)
def test_bad_input_is_one_line_exit_2(pair, capsys, tail, words):
    rc, out, err = run(capsys, *gen(pair, *tail))
    assert rc == 2
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith(("target:", "draft:", "  - "))]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in err


def test_missing_path_and_incompatible_pair(pair, capsys, other_vocab, tmp_path):
    rc, _, err = run(capsys, "generate", "--target", str(tmp_path / "nope"), "--prompt-ids", "1")
    assert rc == 2 and "not found" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run(capsys, "generate", "--target", str(pair[0]), "--draft", str(other_vocab), "--prompt-ids", "1")
    assert rc == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "incompatible" in err and "token id" in err


def test_console_script_reports_errors_without_traceback(tmp_path):
    exe = [sys.executable, "-m", "specdec_core.cli"]
    p = subprocess.run(exe + ["generate", "--target", str(tmp_path / "missing"), "--prompt", "hi"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1
    v = subprocess.run(exe + ["--version"], capture_output=True, text=True, timeout=120)
    assert v.returncode == 0 and v.stdout.startswith("specdec ")
