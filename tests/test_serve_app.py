"""`specdec serve` as a command, and the app on both of its sides: the app's server target on a
`specdec serve` started here (every token's colour exactly the engine's, the toggle and the race
working), and View ▸ Local server serving the window's own models while the chat keeps working
beside it. Offscreen."""

from __future__ import annotations

import json
import os
import socket
import threading

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import httpx  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from specdec_core.cli import main  # noqa: E402
from specdec_serve import SpecdecServe, serve  # noqa: E402
from tiny_models import save_pair  # noqa: E402

TIMEOUT = 60_000
SPEC_KINDS = {"standard", "accepted", "corrected", "bonus"}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_pair(tmp_path_factory.mktemp("serve-app-pair"))


@pytest.fixture(scope="module")
def served(pair):
    """The real command, in a process of its own, on the tiny pair."""
    yield from serve("--target", str(pair[0]), "--draft", str(pair[1]))


@pytest.fixture(scope="module")
def local(pair):
    """The same pair loaded here: what the served answers must equal."""
    from specdec_core.open_engine import open_engine

    return open_engine(str(pair[0]), str(pair[1]))


# -- the command --------------------------------------------------------------------------------
def test_the_command_serves_and_a_server_target_on_it_is_the_local_engine(served, pair, capsys):
    assert "specdec serve: target at http://127.0.0.1:" in served.output and "no API key" in served.output
    assert "warning" not in served.output  # loopback: nothing to warn about
    assert httpx.get(served.url + "/health").json()["status"] == "ok"
    # `specdec generate` against it: the events and figures of the local engine, exactly
    args = ["--prompt", "the cat sat", "--max-new-tokens", "20", "--draft-tokens", "3", "--json"]
    assert main(["generate", "--target", str(pair[0]), "--draft", str(pair[1]), *args]) == 0
    here = json.loads(capsys.readouterr().out)
    assert main(["generate", "--target", served.url, *args]) == 0
    there = json.loads(capsys.readouterr().out)
    assert there["token_ids"] == here["token_ids"] and there["kinds"] == here["kinds"] and there["text"] == here["text"]
    for key in ("proposed_tokens", "accepted_tokens", "speculative_steps", "plain_steps", "per_position_accepted"):
        assert there["stats"][key] == here["stats"][key], key
    assert there["stats"]["server"]["engine"] == "specdec serve"


def test_the_servers_first_chat_finds_the_template_head_read(pair):
    # every request reuses the prefix it shares with the cache, so every chat after the first
    # finds the chat template's head there; the command reads it at start for the first one too
    s = SpecdecServe("--target", str(pair[0]), "--draft", str(pair[1]))
    try:
        body = {"messages": [{"role": "user", "content": "the cat sat"}], "max_tokens": 3}
        usage = httpx.post(s.url + "/v1/chat/completions", json=body, timeout=60).json()["usage"]
        assert 0 < usage["prompt_tokens_details"]["cached_tokens"] < usage["prompt_tokens"]
    finally:
        assert s.stop() == 0


def test_the_command_warns_when_it_listens_beyond_this_machine_without_a_key(pair):
    s = SpecdecServe("--target", str(pair[0]), "--draft", "none", "--host", "0.0.0.0")
    try:
        assert "warning: listening on 0.0.0.0 without an API key" in s.output
        card = httpx.get(s.url.replace("0.0.0.0", "127.0.0.1") + "/v1/models").json()["data"][0]["specdec"]
        assert card["draft"] is None and card["proposers"] == ["prompt-lookup"]  # --draft none
    finally:
        assert s.stop() == 0  # Ctrl+C: a clean end


def test_the_commands_mistakes_are_one_line(pair, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        rc = main(["serve", "--target", str(pair[0]), "--draft", "none", "--port", str(port)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "port is in use" in err[-1] and err[-1].startswith("specdec: error:")
    assert main(["serve", "--target", "http://127.0.0.1:9"]) == 2
    assert "not another server" in capsys.readouterr().err
    assert main(["serve", "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err


# -- the app with a `specdec serve` as its target ------------------------------------------------------
def test_the_app_colours_a_specdec_serve_answer_exactly(qtbot, make_window, served, local):
    from app.worker import LoadRequest
    from specdec_core.settings import DecodeSettings

    win = make_window(request=LoadRequest(served.url, None), max_new=20)
    panel = win.side_panel
    server = win.models.model_info["server"]
    assert server.engine == "specdec serve" and server.can_race and server.can_toggle and server.colours == "exact"
    # every setting travels with the request: the toggle, the proposer and k are the user's
    assert panel.mode_button.isEnabled() and panel.k_spin.isVisibleTo(panel) and panel.proposer.isVisibleTo(panel)
    assert "specdec serve server at " + served.url in panel.target_label.text()
    assert "as the server's engine decided it" in panel.target_label.text()
    assert win.page.legend.swatches["server"].isHidden()  # no token without its kind
    panel.adaptive.setChecked(False)
    panel.k_spin.setValue(3)
    settings = panel.settings()
    assert isinstance(settings, DecodeSettings) and settings.draft_tokens == 3

    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        assert win.generation.send("the cat sat on the mat")
    msg = win.chats.messages[-1]
    want = local.generate(local.encode_prompt("the cat sat on the mat"), settings).run()
    assert [t.kind for t in msg.tokens] == want.kinds and msg.content == want.text  # the engine's colours
    assert msg.figures.stats.accepted_tokens == want.stats.accepted_tokens
    assert msg.figures.server["figures"] == "the serving engine's own Stats"
    assert panel.m_alpha.value.text() != "—"

    panel.set_mode("standard")  # the toggle: the next message standard, on the same server
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        assert win.generation.send("is it done")
    std = win.chats.messages[-1]
    assert {t.kind for t in std.tokens} == {"standard"} and std.figures.stats.mode == "standard"


def test_the_race_runs_against_a_specdec_serve(qtbot, make_window, served):
    from app.worker import LoadRequest

    win = make_window(request=LoadRequest(served.url, None))
    view = win.race_view
    qtbot.waitUntil(lambda: view.ready, timeout=TIMEOUT)
    assert "cannot be raced" not in view.status.text()
    view.max_tokens.setValue(16)
    view.temperature.setValue(0)
    with qtbot.waitSignal(view.race_done, timeout=TIMEOUT) as done:
        assert view.start("the cat sat on the mat")
    result = done.args[0]
    assert result["identical"] and not result["cancelled"]
    std, spec = view.lanes["standard"], view.lanes["speculative"]
    assert {e.kind.value for e in std.events} == {"standard"}
    assert {e.kind.value for e in spec.events} <= SPEC_KINDS and len(spec.events) == 16
    # each lane by the serving engine's clock (its events' t): its own compute, not its wait for the
    # other lane's turn on the server (tests/test_race.py checks the rule itself)
    for name, lane in view.lanes.items():
        assert 0 < result[name]["seconds"] == pytest.approx(lane.events[-1].t)


# -- View ▸ Local server -----------------------------------------------------------------------------
def test_view_local_server_serves_the_windows_models_beside_the_chat(qtbot, make_window):
    from app.local_server import LocalServerDialog
    from specdec_core.serve.queue import QueuedEngine

    win = make_window(max_new=40)
    controller = win.local_server
    assert [a.text() for a in win.view_menu.actions()][-1] == "&Local server…"
    controller.open_dialog()
    dialog = controller.dialog
    assert isinstance(dialog, LocalServerDialog) and dialog.isVisible() and dialog.start_button.text() == "Start"
    dialog.port.setValue(0)
    dialog.host.setText("0.0.0.0")
    assert "without an API key" in dialog.warning.text()  # said before it starts
    dialog.host.setText("127.0.0.1")
    assert dialog.warning.isHidden()
    dialog.start_button.click()
    assert controller.running and dialog.start_button.text() == "Stop"
    url = controller.url
    assert url.startswith("http://127.0.0.1:") and url in dialog.address.text()
    assert dialog.port.value() == controller.server.port != 0  # the free port it got
    assert win.local_server.status_label.isVisibleTo(win) and url in win.local_server.status_label.text()
    assert url in dialog.example.text()
    qtbot.waitUntil(lambda: isinstance(win.worker.engine, QueuedEngine), timeout=TIMEOUT)

    # a server request and a chat message at once: they take turns on the one engine, both answered
    answers = {}

    def ask():
        answers["server"] = httpx.post(url + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "the hat"}], "max_tokens": 40, "temperature": 0}).json()

    asker = threading.Thread(target=ask)
    asker.start()
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as done:
        assert win.generation.send("the cat sat")
    asker.join(60)
    assert done.args[0] == "max_new_tokens" and len(win.chats.messages[-1].tokens) == 40
    body = answers["server"]
    assert len(body["specdec"]["tokens"]) == 40 and {t["kind"] for t in body["specdec"]["tokens"]} <= SPEC_KINDS
    assert controller.server.queue.turns == 2  # the chat's turn and the server's

    dialog.start_button.click()  # stop: the chat's engine leaves the line
    assert not controller.running and not win.local_server.status_label.isVisibleTo(win)
    qtbot.waitUntil(lambda: not isinstance(win.worker.engine, QueuedEngine), timeout=TIMEOUT)
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health")


def test_a_new_load_moves_the_local_server_to_the_new_models(qtbot, make_window):
    from app.local_server import ServeConfig
    from app.worker import LoadRequest
    from app_fixtures import tiny_factory

    win = make_window()
    controller = win.local_server
    assert controller.start(ServeConfig(port=0)) == ""
    port = controller.server.port
    with qtbot.waitSignal(win.models_ready, timeout=TIMEOUT):
        win.models.start_loading(LoadRequest(factory=tiny_factory(with_draft=False)))
    qtbot.waitUntil(lambda: controller.running, timeout=TIMEOUT)
    card = httpx.get(controller.url + "/v1/models").json()["data"][0]
    assert card["specdec"]["draft"] is None and controller.server.port == port  # the new models, same address
    controller.stop()


def test_the_local_server_serves_models_loaded_here_only(qtbot, make_window, served):
    from app.local_server import ServeConfig
    from app.worker import LoadRequest

    win = make_window(request=LoadRequest(served.url, None))
    why = win.local_server.start(ServeConfig(port=0))
    assert "serves models loaded here" in why and not win.local_server.running
