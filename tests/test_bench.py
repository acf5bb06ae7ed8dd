"""`specdec bench` end to end on tiny models: report schema, figures, identical text at T=0,
the transformers baselines' clean settings, aggregation arithmetic, one-line input errors."""

import copy
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import specdec_core
from specdec_core.cli import main
from tiny_models import save_pair

PROMPTS = [
    {"id": "p-short", "category": "short-answer", "prompt": "the cat sat on the mat"},
    {"id": "p-chat", "category": "chat", "messages": [
        {"role": "user", "content": "is the cat on the mat"},
        {"role": "assistant", "content": "yes it is"},
        {"role": "user", "content": "and the hat"}]},
]
ROW_KEYS = {"category", "prompt_id", "mode", "draft_tokens", "tokens_per_second", "decode_tokens_per_second",
            "latency_s", "ttft_s", "acceptance_rate", "tokens_per_speculative_step", "plain_step_share",
            "peak_memory_bytes", "identical_to_standard",
            "per_position_acceptance", "target_forward_passes", "draft_forward_passes", "repeats", "stats"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models gain nothing from a second thread, and on a busy machine a two-thread op
    waits for its slower half: one thread keeps these tests at a few seconds."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_pair(tmp_path_factory.mktemp("pair"))


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in PROMPTS) + "\n")
    return path


def bench(pair, prompt_file, out, *extra):
    t, d = pair
    return main(["bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompt_file),
                 "--max-new-tokens", "12", "--repeats", "1", "--warmup-tokens", "4", "--no-progress",
                 "--out", str(out), *extra])


@pytest.fixture(scope="module")
def greedy_report(pair, prompt_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    rc = bench(pair, prompt_file, out, "--draft-tokens", "1,3,adaptive", "--lookup-tokens", "3", "--baseline", "hf")
    assert rc == 0
    return out, json.loads((out / "report.json").read_text())


def test_report_schema(greedy_report):
    out, rep = greedy_report
    for key in ("machine", "models", "command", "settings", "modes", "rows", "summary", "warmup"):
        assert key in rep, key
    # schema 2: tau is tokens_per_speculative_step wherever it stands (schema 1: mean_accepted_per_step)
    assert rep["schema"] == 2 and "mean_accepted_per_step" not in json.dumps(rep)
    m = rep["machine"]
    for key in ("cpu_model", "cores_logical", "gpu", "torch", "transformers", "python"):
        assert key in m, key
    for role in ("target", "draft"):
        assert {"name", "source", "dtype", "quantization", "device", "memory_bytes"} <= set(rep["models"][role])
    assert rep["command"].startswith("specdec bench ") and "--baseline hf" in rep["command"]
    # which code ran: the package's folder, its commit where it is a checkout, the kernel library
    code = rep["settings"]["code"]
    assert Path(code["specdec_core"]) == Path(specdec_core.__file__).resolve().parent
    from specdec_core.cpu import build

    lib = build.loaded()  # (loaded by then if the report names one; the pair may not need it)
    if code["cpu_kernel_library"] is not None:
        assert lib is not None and code["cpu_kernel_library"] == lib.path.name
    assert code["git"] is None or re.fullmatch(r"[0-9a-f]{4,40}(\+changes)?", code["git"]), code["git"]
    names = [m["name"] for m in rep["modes"]]
    assert names == ["standard", "default", "speculative k=1", "speculative k=3", "speculative adaptive",
                     "prompt-lookup k=3", "hf-generate", "hf-assisted"]
    assert len(rep["rows"]) == len(PROMPTS) * len(names)
    for row in rep["rows"]:
        assert ROW_KEYS <= set(row), ROW_KEYS - set(row)
        assert row["error"] is None, row["error"]
        assert len(row["repeats"]) == 1
        st = row["stats"]["tokens_per_second"]
        assert st["min"] <= st["median"] == row["tokens_per_second"] <= st["max"]
        assert row["tokens_per_second"] > 0 and row["latency_s"] > 0 and 0 < row["ttft_s"] <= row["latency_s"]
        assert row["peak_memory_bytes"] > 0 and 0 < row["new_tokens"] <= 12
        assert row["target_forward_passes"] >= 1
        if row["kind"] in ("speculative", "prompt-lookup", "default"):
            if row["draft_tokens"] == "adaptive" and not row["repeats"][0]["kinds"]["accepted"] \
                    and row["acceptance_rate"] is None:
                pass  # the controller started plain and never found it worth proposing: no alpha, not 0
            else:
                assert 0 <= row["acceptance_rate"] <= 1
            assert all(v is None or 0 <= v <= 1 for v in row["per_position_acceptance"])
        if row["kind"] == "hf-assisted" or (row["kind"] == "speculative" and row["draft_tokens"] != "adaptive"):
            assert row["draft_forward_passes"] > 0
        if row["kind"] == "standard":
            assert row["acceptance_rate"] is None and row["draft_forward_passes"] == 0
            assert row["tokens_per_speculative_step"] is None and row["plain_step_share"] is None  # nothing proposed
        assert row["decode_tokens_per_second"] > 0
        if row["kind"] in ("standard", "default", "speculative", "prompt-lookup"):  # ours: the engine's Stats
            kinds = row["repeats"][0]["kinds"]
            assert sum(kinds.values()) == row["new_tokens"]
            assert kinds["bonus"] <= kinds["accepted"]  # a bonus needs all of its step's k >= 1 kept
            if row["kind"] == "standard":
                assert kinds["standard"] == row["new_tokens"]
            else:
                assert kinds["standard"] >= 1 and 0 < row["plain_step_share"] <= 1  # the prefill at least
    # the warm-up ran every mode once and stays out of the rows
    assert [w["mode"] for w in rep["warmup"]] == names
    assert all(r["repeats"][0]["repeat"] == 0 for r in rep["rows"])
    overall = rep["summary"]["overall"]
    assert overall["standard"]["speedup_vs_standard"] == pytest.approx(1.0)
    assert overall["hf-assisted"]["speedup_vs_hf-assisted"] == pytest.approx(1.0)
    assert set(rep["summary"]["by_category"]) == {"short-answer", "chat"}


def test_identical_to_standard_at_temperature_zero(greedy_report):
    _, rep = greedy_report
    for row in rep["rows"]:
        if row["kind"] in ("standard", "default", "speculative", "prompt-lookup"):
            assert row["identical_to_standard"] is True, (row["prompt_id"], row["mode"], row["divergence"])
        else:  # transformers' generate, clean config, float32: greedy is greedy, token for token
            assert row["identical_to_standard"] is True, (row["prompt_id"], row["mode"], row["divergence"])
    texts = {(r["prompt_id"], r["mode"]): r["text"] for r in rep["rows"]}
    for p in PROMPTS:
        assert texts[(p["id"], "speculative k=3")] == texts[(p["id"], "standard")]


def test_figures_and_markdown(greedy_report):
    out, rep = greedy_report
    import matplotlib.image

    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(rep["plots"]) == ["acceptance_by_position.png", "speedup_vs_draft_length.png",
                                             "tokens_per_second_by_category.png"]
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC)
        img = matplotlib.image.imread(out / name)
        assert img.shape[0] > 100 and img.shape[1] > 100
    md = (out / "report.md").read_text()
    assert "× standard" in md and "× hf assisted" in md and "× hf generate" in md
    assert rep["command"] in md
    assert f"specdec_core from `{rep['settings']['code']['specdec_core']}`" in md
    for name in pngs:
        assert f"]({name})" in md
    assert "interleaved" in md.lower()


def test_sampled_run_with_repeats(pair, prompt_file, tmp_path):
    rc = bench(pair, prompt_file, tmp_path, "--draft-tokens", "2", "--lookup-tokens", "none", "--temperature", "0.9",
               "--top-k", "20", "--repeats", "2", "--warmup-tokens", "0", "--categories", "chat")
    assert rc == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    # the default (lookup, then the draft, adaptive) comes with any draft-model mode
    assert [r["mode"] for r in rep["rows"]] == ["standard", "default", "speculative k=2"]
    assert rep["warmup"] == []
    for row in rep["rows"]:
        assert row["identical_to_standard"] is None  # sampled text differs by design
        assert [r["repeat"] for r in row["repeats"]] == [0, 1]
    # the interleaving rotates: each repeat starts one mode later
    spec = rep["rows"][2]
    assert [r["order"] for r in spec["repeats"]] == [2, 1]
    md = (tmp_path / "report.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| mode | tok/s"))
    assert "identical" not in header and "## Identical to standard" not in md


def test_short_answers_run_more_repeats_until_standard_took_min_seconds(pair, prompt_file, tmp_path):
    # a 12-token answer of the tiny pair takes milliseconds: 1000 s is never reached, so every
    # prompt runs --max-repeats groups (each mode, the order rotating); a bound already reached
    # after --repeats adds none
    rc = bench(pair, prompt_file, tmp_path / "long", "--draft-tokens", "default", "--lookup-tokens", "none",
               "--min-seconds", "1000", "--max-repeats", "3", "--warmup-tokens", "0")
    assert rc == 0
    rep = json.loads((tmp_path / "long" / "report.json").read_text())
    assert rep["settings"]["min_seconds"] == 1000 and rep["settings"]["max_repeats"] == 3
    assert len(rep["rows"]) == 4
    for row in rep["rows"]:
        assert [r["repeat"] for r in row["repeats"]] == [0, 1, 2]
        assert [r["order"] for r in row["repeats"]] in ([0, 1, 0], [1, 0, 1])  # still rotating
    assert "--min-seconds 1000 --max-repeats 3" in rep["command"]
    assert "until standard's answers to a prompt took 1000 s" in (tmp_path / "long" / "report.md").read_text()
    rc = bench(pair, prompt_file, tmp_path / "short", "--draft-tokens", "default", "--lookup-tokens", "none",
               "--min-seconds", "1e-9", "--max-repeats", "3", "--warmup-tokens", "0")
    assert rc == 0
    rep = json.loads((tmp_path / "short" / "report.json").read_text())
    assert all([r["repeat"] for r in row["repeats"]] == [0] for row in rep["rows"])


def test_speedups_are_per_prompt_ratios():
    from specdec_core.bench.modes import build_modes
    from specdec_core.bench.report import build_rows, summarize

    modes = build_modes([2], None, False)
    prompts = [SimpleNamespace(id="a", category="code"), SimpleNamespace(id="b", category="code")]
    tps = {("a", "standard"): [10, 12, 11], ("a", "speculative k=2"): [20, 25, 22],
           ("b", "standard"): [20], ("b", "speculative k=2"): [30]}
    runs = [{"prompt_id": p, "category": "code", "mode": m, "repeat": i, "tokens_per_second": v,
             "identical_to_standard": True, "per_position_proposed": [4, 2] if "spec" in m else [],
             "per_position_accepted": [3, 1] if "spec" in m else []}
            for (p, m), vs in tps.items() for i, v in enumerate(vs)]
    rows = build_rows(runs, prompts, modes)
    a_spec = next(r for r in rows if r["prompt_id"] == "a" and r["mode"] == "speculative k=2")
    assert a_spec["tokens_per_second"] == 22 and a_spec["stats"]["tokens_per_second"] == {
        "median": 22, "min": 20, "max": 25}
    assert a_spec["per_position_acceptance"] == [9 / 12, 3 / 6]
    f = summarize(rows, modes)["overall"]["speculative k=2"]
    assert f["speedup_vs_standard"] == pytest.approx((22 / 11 + 30 / 20) / 2)
    assert (f["speedup_vs_standard_min"], f["speedup_vs_standard_max"]) == (pytest.approx(1.5), pytest.approx(2.0))
    assert f["identical"] == f["compared"] == 2


def test_the_report_counts_and_names_the_prompts_below_the_floor():
    """Issue 28's "never a loss" is per prompt: the summary keeps which prompts fell below 0.97x
    of standard, lowest first (a ratio exactly at the floor is not a loss), and the geometric
    mean; the headline says how many and names them."""
    from specdec_core.bench.modes import build_modes
    from specdec_core.bench.report import FLOOR, _floor_line, build_rows, summarize

    modes = build_modes([2], None, False)
    spec = "speculative k=2"
    ratios = {"a": 1.5, "b": 0.96, "c": FLOOR, "d": 0.5}
    prompts = [SimpleNamespace(id=p, category="chat") for p in ratios]
    runs = [{"prompt_id": p, "category": "chat", "mode": m, "repeat": 0, "tokens_per_second": 100 * (r if m == spec else 1),
             "identical_to_standard": True, "per_position_proposed": [], "per_position_accepted": []}
            for p, r in ratios.items() for m in ("standard", spec)]
    f = summarize(build_rows(runs, prompts, modes), modes)["overall"][spec]
    assert [p for p, _ in f["below_floor"]] == ["d", "b"]
    assert f["below_floor"][0][1] == pytest.approx(0.5) and f["speedup_vs_standard_compared"] == 4
    assert f["speedup_vs_standard_geomean"] == pytest.approx((1.5 * 0.96 * FLOOR * 0.5) ** 0.25)
    line = _floor_line(f, spec)
    assert len(line) == 1 and "2 of 4 prompts below 0.97×" in line[0] and "d 0.50×, b 0.96×" in line[0]
    assert _floor_line({k: v for k, v in f.items() if k != "below_floor"}, spec) == []  # an older report


def test_hf_baseline_ignores_the_models_generation_config(tiny):
    """A repetition penalty in generation_config.json must not reach the baseline: greedy
    transformers generate() then equals our standard decoding token for token."""
    from specdec_core.bench.hf import HFBaseline
    from specdec_core.decoder import Decoder
    from specdec_core.settings import DecodeSettings

    target, draft = copy.deepcopy(tiny.target), copy.deepcopy(tiny.draft)
    for m in (target, draft):
        m.generation_config.repetition_penalty = 20.0
        m.generation_config.do_sample = True
        m.generation_config.temperature = 0.3
    polluted = target.generation_config
    eos = [2, 0]
    prompt = tiny.tokenizer("the cat sat on the mat and")["input_ids"]
    ours = Decoder(target, tiny.tokenizer, eos).generate(prompt, DecodeSettings(16)).run().token_ids
    hf = HFBaseline(SimpleNamespace(model=target, tokenizer=tiny.tokenizer, eos_token_ids=eos),
                    SimpleNamespace(model=draft, tokenizer=tiny.tokenizer, eos_token_ids=eos))
    plain = hf.generate(prompt, 16, 0.0, 0, 1.0, seed=0, assisted=False)
    assisted = hf.generate(prompt, 16, 0.0, 0, 1.0, seed=0, assisted=True)
    assert plain.token_ids == ours
    assert assisted.token_ids == ours
    assert plain.target_forward_passes == len(ours) and plain.draft_forward_passes == 0
    assert assisted.draft_forward_passes > 0
    assert target.generation_config is polluted  # restored after the call


def _write(tmp_path, text):
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    return str(p)


BAD = [
    (lambda tp: ["--prompts", str(tp / "missing.jsonl")], "no such file"),
    (lambda tp: ["--prompts", _write(tp, "{not json\n")], "line 1: not valid JSON"),
    (lambda tp: ["--prompts", _write(tp, '{"prompt": "hi"}\n')], "category"),
    (lambda tp: ["--prompts", _write(tp, '{"category": "x", "prompt": "a", "messages": []}\n')], "exactly one"),
    (lambda tp: ["--prompts", _write(tp, '{"category": "x", "messages": [{"role": "assistant", "content": "a"}]}\n')],
     "last message"),
    (lambda tp: ["--prompts", _write(tp, "\n")], "no prompts"),
    (lambda tp: ["--categories", "poetry"], "'poetry' is not in"),
    (lambda tp: ["--draft-tokens", "0"], "must be >= 1"),
    (lambda tp: ["--draft-tokens", "2,four"], "--draft-tokens"),
    (lambda tp: ["--lookup-tokens", "-1"], "--lookup-tokens"),
    (lambda tp: ["--repeats", "0"], "--repeats must be >= 1"),
    (lambda tp: ["--min-seconds", "-1"], "--min-seconds takes seconds >= 0"),
    (lambda tp: ["--min-seconds", "nan"], "--min-seconds takes seconds >= 0"),
    (lambda tp: ["--max-repeats", "0"], "--max-repeats must be >= 1"),
    (lambda tp: ["--temperature", "-1"], "temperature"),
    (lambda tp: ["--top-p", "0"], "top-p"),
    (lambda tp: ["--baseline", "vllm"], "--baseline takes a comma-separated list of hf, llama.cpp, none"),
]


@pytest.mark.parametrize("make_args,needle", BAD)
def test_bad_input_is_one_line_exit_2(pair, tmp_path, capsys, make_args, needle):
    t, d = pair
    argv = ["bench", "--target", str(t), "--draft", str(d), "--out", str(tmp_path / "out"), *make_args(tmp_path)]
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("specdec: error:"), err
    assert needle in err, err


def test_out_must_be_a_folder_and_is_required(pair, tmp_path, capsys):
    t, d = pair
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["bench", "--target", str(t), "--draft", str(d), "--out", str(f)]) == 2
    assert "is a file" in capsys.readouterr().err
    assert main(["bench", "--target", str(t)]) == 2
    assert "--out" in capsys.readouterr().err


def test_classic_prompt_set_covers_the_categories():
    from specdec_core.bench.prompts import load_prompts

    prompts = load_prompts("classic")
    cats = list(dict.fromkeys(p.category for p in prompts))  # the reports' order
    assert cats == ["short-answer", "long-explanation", "code", "edit", "summarization", "structured-output", "chat"]
    for c in cats:
        assert 2 <= sum(p.category == c for p in prompts) <= (4 if c == "edit" else 3)
    assert all(p.turns >= 2 for p in prompts if p.category == "chat")
    # edit: a given code or text to rewrite, fix or refactor (the answer repeats much of the
    # prompt), and a follow-up turn that revises the previous answer
    edits = [p for p in prompts if p.category == "edit"]
    assert len(edits) >= 3 and any(p.turns >= 2 and p.messages[-2]["role"] == "assistant" for p in edits)
    assert all("```" in p.messages[0]["content"] or len(p.messages[0]["content"]) > 300 for p in edits)
    assert [p.id for p in load_prompts("classic", categories=["code", "chat"], limit=1)] == [
        "code-fizzbuzz", "chat-refactor"]


def test_the_corpus_is_split_once_into_halves_over_every_kind_of_text():
    # issue 28: >= 150 prompts over >= 10 kinds of text, conversations of 3-5 turns and long
    # contexts among them, each kind split into a tuning and a hold-out half
    from specdec_core.bench.prompts import load_prompts

    prompts = load_prompts()
    cats = {p.category for p in prompts}
    assert len(prompts) >= 150 and len(cats) >= 10 and {"conversation", "long-context"} <= cats
    assert len({p.id for p in prompts}) == len(prompts)
    for c in cats:
        halves = [sum(p.category == c and p.split == s for p in prompts) for s in ("tuning", "holdout")]
        assert halves[0] + halves[1] == sum(p.category == c for p in prompts) and abs(halves[0] - halves[1]) <= 1
    convs = [p for p in prompts if p.category == "conversation"]
    assert convs and all(3 <= p.turns <= 5 and p.messages[0]["content"] == p.conversation[0] for p in convs)
    holdout = load_prompts(split="holdout")
    assert holdout and all(p.split == "holdout" for p in holdout) and len(holdout) < len(prompts)
    assert not {p.id for p in holdout} & {p.id for p in load_prompts(split="tuning")}


def test_a_conversation_line_is_checked():
    from specdec_core.bench import BenchError
    from specdec_core.bench.prompts import parse_prompts

    (p,) = parse_prompts('{"category": "conversation", "split": "holdout", "turns": ["a", "b", "c"]}')
    assert p.conversation == ("a", "b", "c") and p.turns == 3 and p.split == "holdout"
    for bad, says in (('{"category": "c", "turns": ["only one"]}', "at least two"),
                      ('{"category": "c", "turns": ["a", "b"], "prompt": "x"}', "exactly one"),
                      ('{"category": "c", "prompt": "x", "split": "train"}', "split")):
        with pytest.raises(BenchError, match=says):
            parse_prompts(bad)


def test_a_prompt_that_does_not_fit_the_context_is_skipped_before_anything_runs(pair, tmp_path, capsys):
    """The tiny target holds 512 positions: the over-long prompt is found before any run and
    reported as skipped, with the reason; the others run (before, the bench stopped midway)."""
    prompts = tmp_path / "prompts.jsonl"
    rows = PROMPTS + [{"id": "p-long", "category": "short-answer", "prompt": "the cat sat on the mat " * 120}]
    prompts.write_text("\n".join(json.dumps(p) for p in rows) + "\n")
    out = tmp_path / "out"
    assert bench(pair, prompts, out, "--draft-tokens", "2", "--lookup-tokens", "none", "--limit", "2") == 0
    err = capsys.readouterr().err
    assert "skipping p-long" in err and "512" in err
    rep = json.loads((out / "report.json").read_text())
    assert [s["prompt_id"] for s in rep["skipped"]] == ["p-long"] and "context" in rep["skipped"][0]["reason"]
    assert {r["prompt_id"] for r in rep["rows"]} == {"p-short", "p-chat"} and rep["settings"]["prompts"] == 2
    assert "Skipped 1 prompt(s)" in (out / "report.md").read_text() and "p-long (short-answer)" in (
        out / "report.md").read_text()
    only_long = tmp_path / "long.jsonl"
    only_long.write_text(json.dumps(rows[-1]) + "\n")
    assert bench(pair, only_long, tmp_path / "out2", "--draft-tokens", "2") == 2
    assert "no prompt fits the target's context (512 tokens)" in capsys.readouterr().err


def test_a_run_that_proposed_nothing_has_no_alpha_or_tau():
    """Prompt lookup on a prompt with nothing to look up proposes nothing: every step is plain.
    Its row must say 'no alpha, no tau', not 0% and 0 tokens per step (a median over prompts
    would mix those zeros with real figures)."""
    from specdec_core.bench.modes import PROMPT_LOOKUP, Mode
    from specdec_core.bench.prompts import BenchPrompt
    from specdec_core.bench.runner import run_one
    from specdec_core.settings import DecodeSettings
    from app_fixtures import tiny_factory

    engine = tiny_factory(report=False)(lambda *_a: None)
    memory = SimpleNamespace(start=lambda: None, stop=lambda: 0)
    prompt = BenchPrompt("p", "chat", ({"role": "user", "content": "hello"},))
    rec = run_one(engine, prompt, Mode("prompt-lookup k=4", PROMPT_LOOKUP, 4), DecodeSettings(3), memory)
    assert rec["kinds"]["standard"] == rec["new_tokens"] == 3  # no match anywhere: every step plain
    assert rec["acceptance_rate"] is None and rec["tokens_per_speculative_step"] is None
    assert rec["plain_step_share"] == 1.0


def test_a_conversation_is_measured_turn_by_turn_on_the_cache_the_last_turn_left(pair, tmp_path):
    # issue 28: each mode answers every turn itself, its answer kept in the chat; later turns
    # reuse the cache (our modes) and each turn is a row of its own, in the turn's category;
    # greedy, every turn of every mode is standard's text
    prompts = tmp_path / "conv.jsonl"
    prompts.write_text(json.dumps({"id": "c", "category": "conversation", "split": "holdout",
                                   "turns": ["the cat sat", "and the hat", "on the mat"]}) + "\n"
                       + json.dumps({"id": "x", "category": "chat", "split": "tuning", "prompt": "hello"}) + "\n")
    out = tmp_path / "out"
    assert bench(pair, prompts, out, "--draft-tokens", "2,adaptive", "--lookup-tokens", "none",
                 "--split", "holdout", "--baseline", "hf") == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["settings"]["split"] == "holdout" and "--split holdout" in rep["command"]
    head = int(re.fullmatch(r"template head cached \((\d+) tokens\)", rep["settings"]["first_turns"]).group(1))
    assert head > 0
    ids = list(dict.fromkeys(r["prompt_id"] for r in rep["rows"]))
    assert ids == ["c#1", "c#2", "c#3"]  # the tuning half's prompt is not run
    cats = {r["prompt_id"]: r["category"] for r in rep["rows"]}
    assert cats["c#1"] == "conversation" and {cats["c#2"], cats["c#3"]} <= {"conversation-prose",
                                                                          "conversation-code"}
    for r in rep["rows"]:
        rec = r["repeats"][0]
        assert rec["turn"] == int(r["prompt_id"][-1])
        if r["mode"].startswith("hf-"):
            continue  # a peer pays every turn's prefill
        assert r["identical_to_standard"] is True, r
        # the first turn starts from the template's head alone (as a new chat in the app), even
        # where the run before it had the same prompt; a later turn from the chat so far
        assert (rec["reused_prompt_tokens"] > head) == (rec["turn"] > 1)
        assert rec["turn"] > 1 or rec["reused_prompt_tokens"] == head
        assert rec["mean_plain_step_seconds"] is None or rec["mean_plain_step_seconds"] > 0
    assert "## Steps: a plain step against a standard step" in (out / "report.md").read_text()
    # between the turns our modes' draft read what it skipped, outside the turns' time
    assert rep["settings"]["between_turns"] == "the draft reads what it skipped (not in the turns' time)"
    ours = [r["repeats"][0] for r in rep["rows"] if not r["mode"].startswith("hf-")]
    assert all(rec["idle_read_tokens"] == 0 for rec in ours if rec["turn"] == 1)  # nothing before a first turn
    # without it, no turn says it had one
    out2 = tmp_path / "out2"
    assert bench(pair, prompts, out2, "--draft-tokens", "2", "--lookup-tokens", "none", "--split", "holdout",
                 "--no-read-ahead") == 0
    rep2 = json.loads((out2 / "report.json").read_text())
    assert rep2["settings"]["between_turns"] == "no read" and "--no-read-ahead" in rep2["command"]
    assert all(r["repeats"][0]["idle_read_tokens"] == 0 for r in rep2["rows"])


def test_cold_start_pays_every_first_turn_whole(pair, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "x", "category": "chat", "prompt": "hello there"}) + "\n")
    out = tmp_path / "out"
    assert bench(pair, prompts, out, "--draft-tokens", "default", "--lookup-tokens", "none", "--repeats", "2",
                 "--cold-start") == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["settings"]["first_turns"] == "cold" and "--cold-start" in rep["command"]
    assert {rec["reused_prompt_tokens"] for r in rep["rows"] for rec in r["repeats"]} == {0}
    assert all(r["identical_to_standard"] is True for r in rep["rows"])


def test_read_while_writing_reads_a_message_up_to_its_question_before_the_send(pair, tmp_path):
    """--read-while-writing: our modes' target reads the message but its last paragraph before the
    send (Engine.read_prompt, as the app reads an attachment while the question is written), from
    the template's head alone -- even where the run before had the same prompt -- and the record
    says how much; the answer is standard's, and a one-paragraph message is read at its send."""
    prompts = tmp_path / "p.jsonl"
    doc = "the cat sat on the mat and the dog was in the hat . " * 12
    lines = [{"id": "doc", "category": "long-context", "prompt": doc + "\n\nis the cat on the mat ?"},
             {"id": "short", "category": "chat", "prompt": "hello there"}]
    prompts.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out"
    assert bench(pair, prompts, out, "--draft-tokens", "default", "--lookup-tokens", "none", "--repeats", "2",
                 "--read-while-writing") == 0
    rep = json.loads((out / "report.json").read_text())
    assert "--read-while-writing" in rep["command"] and rep["settings"]["before_the_send"].startswith("the target and the draft read")
    head = int(re.fullmatch(r"template head cached \((\d+) tokens\)", rep["settings"]["first_turns"]).group(1))
    for r in rep["rows"]:
        assert r["identical_to_standard"] is True
        for rec in r["repeats"]:
            if r["prompt_id"] == "short":
                assert rec["prompt_read_ahead_tokens"] == 0 and rec["reused_prompt_tokens"] == head
            else:  # all the document, none of the question but its first word: the same in every repeat
                assert rec["prompt_read_ahead_tokens"] > 100
                assert rec["reused_prompt_tokens"] == head + rec["prompt_read_ahead_tokens"] < rec["prompt_tokens"] - 5
    reads = {(r["prompt_id"], rec["prompt_read_ahead_tokens"]) for r in rep["rows"] for rec in r["repeats"]}
    assert len(reads) == 2


def test_draft_tokens_default_measures_the_default_beside_standard():
    from specdec_core.bench.modes import build_modes, parse_draft_lengths

    assert [m.name for m in build_modes(parse_draft_lengths("default"), None, False)] == ["standard", "default"]


def test_a_structured_prompt_is_decoded_under_its_json_schema(tmp_path):
    # issue 29: the bench's structured category decodes each of our modes under the prompt's
    # schema (as response_format json_schema does); the peers are not given it, and say so
    from structured_models import save_structured_pair

    from specdec_core.bench import BenchError
    from specdec_core.bench.modes import HF_ASSISTED, STANDARD, Mode
    from specdec_core.bench.prompts import parse_prompts
    from specdec_core.bench.runner import run_one
    from specdec_core.open_engine import open_engine
    from specdec_core.settings import DecodeSettings

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 4},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["name", "age"], "additionalProperties": False}
    line = {"id": "s", "category": "structured", "prompt": "the cat is a name", "schema": schema}
    (prompt,) = parse_prompts(json.dumps(line))
    assert prompt.to_dict()["schema"] == schema
    engine = open_engine(*(str(p) for p in save_structured_pair(tmp_path)))
    memory = SimpleNamespace(start=lambda: None, stop=lambda: 0)
    texts = []
    for mode in (Mode("standard", STANDARD), Mode("speculative k=3", "speculative", 3)):
        rec = run_one(engine, prompt, mode, DecodeSettings(60), memory)
        assert rec["error"] is None and rec["stop_reason"] == "eos"
        answer = json.loads(rec["text"])
        assert set(answer) == {"name", "age"} and isinstance(answer["age"], int)
        texts.append(rec["text"])
    assert texts[0] == texts[1]  # greedy: the constrained speculative answer is the constrained standard one
    peer = run_one(engine, prompt, Mode("hf assisted", HF_ASSISTED, 3), DecodeSettings(60), memory)
    assert peer["tokens_per_second"] is None and "schema" in peer["error"]
    with pytest.raises(BenchError):
        parse_prompts(json.dumps({**line, "schema": "not an object"}))
