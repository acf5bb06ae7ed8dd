"""The start-up and quality reports: what their renderers judge, and that the committed reports
are what the code renders from their own data."""

import json
from pathlib import Path

import pytest

from specdec_core.bench import quality, startup
from specdec_core.bench.report import save

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
