"""The start-up and quality reports: what their renderers judge, and that the committed reports
are what the code renders from their own data; bench reports of schema 1 (tau under its older
name) render as they did."""

import json
from pathlib import Path

import pytest

from specdec_core.bench import quality, server, startup
from specdec_core.bench.report import render_markdown, save

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


@pytest.mark.parametrize("module, folder", [(startup, "cpu-startup"), (quality, "cpu-quality")])
def test_committed_reports_are_what_the_code_renders(module, folder):
    data = json.loads((DOCS / folder / "report.json").read_text(encoding="utf-8"))
    assert module.render(data) == (DOCS / folder / "report.md").read_text(encoding="utf-8")


def test_startup_goals_are_judged_from_the_measurements(tmp_path):
    data = json.loads((DOCS / "cpu-startup" / "report.json").read_text(encoding="utf-8"))
    verdicts = lambda md: [line.rsplit("|", 2)[-2].strip() for line in md.splitlines() if line.startswith("| ")][1:]
    assert verdicts(startup.render(data)) == ["yes"] * 4
    slow = dict(data, first_start_to_first_token_s=61.0, later_start_to_first_token_s=[10.5, 12.0],
                cache_bytes=int(1.06 * data["gguf_bytes"]))
    heavy = dict(slow, chat_peak_rss_bytes=int(1.3 * data["gguf_bytes"] + data["chat"]["kv_bytes"]) + 1)
    assert verdicts(startup.render(heavy)) == ["**no**"] * 4
    save(tmp_path / "out", heavy, startup.render(heavy))
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == heavy
    assert (tmp_path / "out" / "report.md").read_text() == startup.render(heavy)


# The committed bench reports of schema 1 that today's renderer reads (cpu-default-avx2,
# cpu-default-llamacpp and cpu-gguf-llamacpp predate mean_plain_step_seconds and do not).
SCHEMA_1 = ["cpu-conversation-holdout", "cpu-conversation-holdout-avx2", "cpu-conversation-holdout-t07",
            "cpu-holdout-after-restructure", "cpu-holdout-avx2-first-answer-prior", "cpu-holdout-first-answer-prior",
            "cpu-holdout-t07-sampled-margins", "cpu-structured-holdout"]


def tau_renamed(x):
    """A report as schema 2 writes it, by hand: tau's key renamed wherever it stands."""
    if isinstance(x, dict):
        return {("tokens_per_speculative_step" if k == "mean_accepted_per_step" else k): tau_renamed(v)
                for k, v in x.items()}
    return [tau_renamed(v) for v in x] if isinstance(x, list) else x


@pytest.mark.parametrize("folder", SCHEMA_1)
def test_a_schema_1_bench_report_renders_as_its_schema_2_form(folder):
    """A committed report (file untouched) renders exactly as the same report under schema 2's
    name for tau, its τ column filled from the old key."""
    old = json.loads((DOCS / folder / "report.json").read_text(encoding="utf-8"))
    assert old["schema"] == 1 and "mean_accepted_per_step" in json.dumps(old)
    md = render_markdown(old, old.get("plots", []))
    assert md == render_markdown(tau_renamed(old), old.get("plots", []))
    taus = [f["mean_accepted_per_step"] for f in old["summary"]["overall"].values() if f["mean_accepted_per_step"]]
    assert taus and all(f"{t:.2f}" in md for t in taus)


def test_a_schema_1_server_report_renders_its_tau():
    """`specdec bench --target`'s report as the previous release wrote it (its runs' counts under
    the old names, tau as mean_accepted_per_step) renders as its schema 2 form."""
    figs = {"runs": 2, "tokens_per_second": 40.0, "server_tokens_per_second": 45.0, "ttft_s": 0.2,
            "acceptance_rate": 0.5, "mean_accepted_per_step": 2.75}
    old = {"schema": 1, "command": "specdec bench --target http://h:1", "note": None,
           "server": {"engine": "llama.cpp", "url": "http://h:1"}, "models": {"target": "t", "draft": None},
           "runs": [{"figures": "llama-server timings", "draft_tokens": 8, "accepted_draft_tokens": 4}],
           "summary": {"overall": figs, "categories": {"code": figs}}}
    md = server.render_markdown(old)
    assert md == server.render_markdown(tau_renamed(old)) and md.count("| 0.50 | 2.75 |") == 2
