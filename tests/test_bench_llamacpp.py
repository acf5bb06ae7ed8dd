"""The llama.cpp baseline's plumbing (specdec_core/bench/llamacpp.py): what its tools print,
parsed as they print it. The outputs under tests/data/ were captured from the tools that
../shared/tools/build-llamacpp.sh builds, run on the embedded pair."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec_core.bench import BenchError
from specdec_core.bench.llamacpp import find_tools, first_difference, parse_plain, parse_spec
from specdec_core.bench.modes import LLAMACPP, LLAMACPP_SPEC, build_modes, parse_baselines

DATA = Path(__file__).with_name("data")
PROMPT = ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
          "<|im_start|>user\nWrite a Python function that checks whether a string is a palindrome.<|im_end|>\n"
          "<|im_start|>assistant\n")


def test_llama_completion_timings_count_the_prefill():
    r = parse_plain("```python\ndef f():", (DATA / "llama-completion.stderr.txt").read_text())
    assert (r.prompt_tokens, r.new_tokens) == (42, 24)  # 23 decode runs + the token from the prompt's pass
    assert r.prefill_s == pytest.approx(3.19636) and r.decode_s == pytest.approx(4.15119)
    assert r.tokens_per_second == pytest.approx(24 / (3.19636 + 4.15119))
    assert r.drafted is None


def test_llama_speculative_simple_figures_and_text_after_the_prompt():
    out = (DATA / "llama-speculative-simple.stdout.txt").read_text()
    r = parse_spec(out, (DATA / "llama-speculative-simple.stderr.txt").read_text(), PROMPT)
    assert (r.prompt_tokens, r.new_tokens, r.drafted, r.accepted) == (42, 28, 23, 20)
    assert r.prefill_s == pytest.approx(5.266) and r.decode_s == pytest.approx(13.783)
    assert r.text.startswith("```python\ndef is_palindrome(s):") and "<|im_start|>" not in r.text


def test_missing_figures_are_a_clear_error():
    with pytest.raises(RuntimeError, match="printed no prompt eval time"):
        parse_plain("", "nothing useful")


def test_texts_compared_up_to_the_shorter():
    assert first_difference("abc", "abcdef") is None
    assert first_difference("abXdef", "abc") == 2


def test_tools_folder_is_checked_before_any_model_loads(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECDEC_LLAMA_CPP", raising=False)
    with pytest.raises(BenchError, match="needs --llama-cpp DIR"):
        find_tools(None)
    (tmp_path / "llama-completion").write_text("")
    with pytest.raises(BenchError, match="no llama-speculative-simple there"):
        find_tools(tmp_path)
    (tmp_path / "llama-speculative-simple").write_text("")
    assert find_tools(tmp_path) == tmp_path


def test_baseline_modes():
    assert parse_baselines("hf,llama.cpp") == {"hf", "llama.cpp"} and parse_baselines("none") == set()
    with pytest.raises(BenchError):
        parse_baselines("vllm")
    modes = build_modes(["adaptive"], None, False, llamacpp_baseline=True)
    peers = [(m.kind, m.draft_tokens, m.p_min) for m in modes if m.is_llamacpp]
    assert peers == [(LLAMACPP, None, None), (LLAMACPP_SPEC, 3, None), (LLAMACPP_SPEC, 16, 0.75)]
    assert not any(m.is_llamacpp for m in build_modes([], None, False, True) if m.kind == LLAMACPP_SPEC)
