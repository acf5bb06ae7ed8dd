"""The race view on tiny models: both lanes finish by their own clocks, greedy texts identical,
proposer chosen in the view, cancel stops both lanes, presets, export, the Race tab. Offscreen."""

from __future__ import annotations

import html
import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from PySide6.QtGui import QImage  # noqa: E402

from app.race_view import RaceView, load_presets, summary_html  # noqa: E402
from app.race_worker import start_race_worker, stop_race_worker  # noqa: E402
from app.theme import Theme  # noqa: E402
from app.worker import LoadRequest  # noqa: E402
from specdec_core.settings import DEFAULT_PROPOSER  # noqa: E402
from app_fixtures import tiny_factory  # noqa: E402

TIMEOUT = 60_000
INFO = {"target": {"name": "tiny-target"}, "draft": {"name": "tiny-draft"}}
PROMPT = "hello the cat sat on the mat and the cat sat on the mat"


def lazy_engine():
    """An engine provider that builds the tiny engine on first call, in the worker's thread."""
    box = {}

    def provider():
        if "e" not in box:
            box["e"] = tiny_factory(report=False)(lambda *_a: None)
        return box["e"]

    return provider


@pytest.fixture
def view(qtbot):
    worker, thread = start_race_worker(lazy_engine())
    v = RaceView(Theme(False))
    qtbot.addWidget(v)
    v.attach(worker)
    v.set_models(INFO)
    v.resize(1100, 700)
    yield v
    v.shutdown()
    assert stop_race_worker(worker, thread)


def race(qtbot, v, text=PROMPT, **settings):
    for key, value in settings.items():
        {"max_new_tokens": v.max_tokens.setValue, "temperature": v.temperature.setValue,
         "seed": v.seed.setValue}[key](value)
    with qtbot.waitSignal(v.race_done, timeout=TIMEOUT) as blocker:
        assert v.start(text)
    return blocker.args[0]


def test_both_lanes_finish_by_their_own_clocks_and_greedy_texts_match(qtbot, view, tmp_path):
    result = race(qtbot, view, max_new_tokens=14)
    std, spec = view.lanes["standard"], view.lanes["speculative"]
    assert std.tokens == spec.tokens == 14  # tiny engine: no eos, runs to the budget
    assert result["identical"] and result["divergence"] is None
    assert [e.token_id for e in std.events] == result["standard"]["token_ids"] == result["speculative"]["token_ids"]
    assert {e.kind.value for e in std.events} == {"standard"}
    spec_kinds = [e.kind.value for e in spec.events]
    assert spec_kinds[0] == "standard" and set(spec_kinds) <= {"accepted", "corrected", "bonus", "standard"}
    assert spec_kinds.count("bonus") <= spec_kinds.count("accepted")
    # each lane's shown clock is its own clock (the result's seconds), not the wall time of the race
    assert std.clock == pytest.approx(result["standard"]["seconds"]) and std.clock > 0
    assert spec.clock == pytest.approx(result["speculative"]["seconds"]) and spec.clock > 0
    assert std.message.text == result["standard"]["text"]
    # each lane shows its engine Stats' rates, labelled, timed by its own clock
    for name, lane in view.lanes.items():
        stats = result[name]["stats"]
        assert lane.rate_label.text() == f"{stats['tokens_per_second']:.1f} tok/s end-to-end"
        assert lane.decode_label.text() == f"{stats['decode_tokens_per_second']:.1f} tok/s decode"
    summary = view.summary.text()
    sp = result["speedup"]
    assert (f"{sp:.2f}× faster" if sp >= 1 else f"slower here: {sp:.2f}×") in summary
    assert result["verdict"] in html.unescape(summary) and "✓" in summary
    assert "own compute time" in view.note.text()
    assert result["proposer"] == DEFAULT_PROPOSER  # the race starts from the app's defaults
    # export: a PNG of the view and a JSON of the timings
    png = view.export_png(tmp_path / "race.png")
    img = QImage(str(png))
    assert not img.isNull() and img.width() >= 1000
    data = json.loads(view.export_json(tmp_path / "race.json").read_text())
    for lane in ("standard", "speculative"):
        assert {"token_ids", "kinds", "seconds", "tokens_per_second"} <= set(data[lane])
    assert data["prompt"] == PROMPT and "speedup" in data and data["identical"] is True


def test_prompt_lookup_is_chosen_in_the_view(qtbot, view):
    view.proposer_box.setCurrentIndex(view.proposer_box.findData("prompt-lookup"))
    result = race(qtbot, view, max_new_tokens=10)
    assert result["proposer"] == "prompt-lookup" and result["identical"]
    assert "prompt lookup" in view.lanes["speculative"].title.text()


def test_without_a_draft_the_view_races_prompt_lookup(qtbot, view):
    view.set_models({"target": {"name": "t"}, "draft": None})
    assert view.proposer_box.currentData() == "prompt-lookup"
    assert not view.proposer_box.model().item(0).isEnabled()


def test_cancel_mid_race_stops_both_lanes(qtbot, view):
    view.max_tokens.setValue(300)
    with qtbot.waitSignal(view.race_done, timeout=TIMEOUT) as blocker:
        assert view.start(PROMPT)
        qtbot.waitUntil(lambda: view.lanes["standard"].tokens >= 3 and view.lanes["speculative"].tokens >= 3,
                        timeout=TIMEOUT)
        view.stop()
    result = blocker.args[0]
    assert result["cancelled"]
    assert view.lanes["standard"].tokens < 300 and view.lanes["speculative"].tokens < 300
    assert result["standard"]["stats"]["stop_reason"] == result["speculative"]["stats"]["stop_reason"] == "cancelled"
    assert "stopped" in view.summary.text()
    # the thread is free again: a new race runs to the end
    assert race(qtbot, view, max_new_tokens=5)["identical"]


def test_presets_cover_the_prompt_types_and_fill_the_prompt(qtbot, view):
    presets = load_presets()
    assert {p["type"] for p in presets} >= {"short answer", "long explanation", "code", "summarization",
                                            "structured output", "edit"}
    # the answers speculation is for lead; the one-sentence answer is last, the honest counter-example
    assert presets[0]["type"] == "code" and {"edit", "code edit"} <= {p["type"] for p in presets[:3]}
    assert presets[-1]["type"] == "short answer"
    assert view.preset_box.count() == len(presets) + 1
    view.preset_box.setCurrentIndex(4)
    assert view.prompt.toPlainText() == presets[3]["prompt"]
    assert view.max_tokens.value() == presets[3]["max_new_tokens"]


def test_before_any_race_the_view_starts_from_the_apps_defaults_and_says_what_to_do(qtbot):
    from app.worker import GenerateRequest
    from specdec_core.settings import DEFAULT_DRAFT_TOKENS

    v = RaceView(Theme(False))
    qtbot.addWidget(v)
    # the chat's draft length (adaptive), and the first preset ready to race
    assert v.k_box.currentData() == DEFAULT_DRAFT_TOKENS == GenerateRequest(0, []).settings.draft_tokens == "adaptive"
    assert v.settings().draft_tokens == "adaptive"
    assert v.prompt.toPlainText() == load_presets()[0]["prompt"]
    for lane in v.lanes.values():
        shown = lane.message.view.document().toPlainText()
        assert "no text" not in shown and shown == lane.message.empty_hint
    assert "Start race" in v.lanes["standard"].message.view.document().toPlainText()


def test_not_ready_means_no_race(qtbot):
    v = RaceView(Theme(False))
    qtbot.addWidget(v)
    assert not v.start("hello") and not v.start_button.isEnabled()


def _result(**kw):
    lane = {"seconds": 1.0, "tokens_per_second": 10.0, "new_tokens": 10,
            "stats": {"target_forward_passes": 10, "mode": "standard"}}
    # the counts the figures follow from: α = 6 / 8, τ = 9 / 3, plain steps (4 - 3) / 4
    spec_stats = {"target_forward_passes": 4, "mode": "speculative", "proposed_tokens": 8, "accepted_tokens": 6,
                  "speculative_steps": 3, "speculative_step_tokens": 9}
    base = {"standard": lane, "speculative": dict(lane, seconds=0.5, tokens_per_second=20.0, stats=spec_stats),
            "speedup": 2.0, "identical": True, "divergence": None, "proposer": "draft",
            "verdict": "Texts identical: at temperature 0 speculative decoding is exact.",
            "settings": {"temperature": 0.0}}
    base.update(kw)
    return base


def test_summary_shows_the_engines_figures_and_the_races_one_verdict():
    s = summary_html(_result())
    assert "2.00× faster" in s and "20.0 tok/s end-to-end" in s
    assert "α 0.75" in s and "τ 3.00 tokens per speculative step" in s and "plain steps 25%" in s
    assert "✓ Texts identical: at temperature 0 speculative decoding is exact." in s
    # the sentence is the race's own (RaceResult.verdict, the CLI's too), shown as it is
    odd = summary_html(_result(identical=False, verdict="Texts differ from token 3 <b>"))
    assert "≠ Texts differ from token 3 &lt;b&gt;" in odd
    assert "slower here: 0.50×" in summary_html(_result(speedup=0.5))
    assert "Race stopped" in summary_html({"cancelled": True})


def test_main_window_has_a_race_tab_sharing_the_engine(qtbot, tmp_path):
    from app.main_window import MainWindow

    win = MainWindow(tmp_path / "data", Theme(False), LoadRequest(factory=tiny_factory()))
    qtbot.addWidget(win)
    try:
        assert win.tabs.count() == 2 and win.tabs.tabText(1) == "Race"
        assert not win.race_view.start_button.isEnabled()
        with qtbot.waitSignal(win.models_ready, timeout=TIMEOUT):
            win.models.start_loading()
        qtbot.waitUntil(lambda: win.race_view.ready, timeout=TIMEOUT)
        win.tabs.setCurrentIndex(1)
        result = race(qtbot, win.race_view, max_new_tokens=6)
        assert result["identical"] and result["models"]["target"]["name"] == "tiny-target"
    finally:
        assert win.shutdown()
