"""The app with a real llama-server as the target (tiny pair): the worker streams an answer with
the server's figures, the window shows what the server is and keeps a cut answer, the race
tab says why a server cannot be raced. Offscreen."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


import pytest  # noqa: E402

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QMessageBox  # noqa: E402

from app.history import History  # noqa: E402
from app.main_window import MainWindow  # noqa: E402
from app.theme import Theme  # noqa: E402
from app.worker import GenerateRequest, LoadRequest, default_settings, start_worker, stop_worker  # noqa: E402
from app_fixtures import heavy_imports, relay  # noqa: E402
from llama_server import free_port, serve, server_ggufs  # noqa: E402

TIMEOUT = 60_000
SPEC_KINDS = {"standard", "accepted", "corrected", "bonus"}


def shown(win) -> int:
    """Tokens the window itself has taken in for the running answer. (Counting the worker's signal
    from a slot of our own raced: that slot can run before the window's queued one, and a stop
    in between keeps, rightly, nothing.)"""
    return len(win.generation.active.events) if win.generation.active is not None else 0


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    return server_ggufs(tmp_path_factory.mktemp("app-server-ggufs"))


@pytest.fixture(scope="module")
def server(ggufs):
    yield from serve(ggufs["target"], ggufs["draft"], log=ggufs["folder"] / "server.log")


@pytest.fixture
def endless_server(ggufs):
    yield from serve(ggufs["endless"], ctx=16384, log=ggufs["folder"] / "endless.log")


def test_the_worker_streams_a_servers_answer_with_its_figures(qtbot, server):
    worker, thread = start_worker()
    sig = relay(worker)
    try:
        with qtbot.waitSignal(sig.loaded, timeout=TIMEOUT) as loaded:
            worker.request_load(LoadRequest(server.url, None))
        info = loaded.args[0]
        assert info["server"].engine == "llama.cpp" and info["server"].speculative is True
        assert info["target"]["name"] == "target.gguf" and "server's own draft" in info["draft"]["name"]
        batches = []
        sig.tokens.connect(lambda rid, evs: batches.append(evs))
        req = GenerateRequest(1, [{"role": "user", "content": "the cat sat on the mat"}],
                              default_settings().replace(max_new_tokens=24))
        with qtbot.waitSignal(sig.finished, timeout=TIMEOUT) as done:
            worker.request_generate(req)
        end = done.args[1]
        stats = end.stats  # the server's typed ServerStats
        events = [e for b in batches for e in b]
        assert len(events) == stats.new_tokens == 24
        assert {e.kind.value for e in events} <= SPEC_KINDS and "accepted" in {e.kind.value for e in events}
        assert stats.proposed_tokens > 0 and stats.server["figures"].startswith("llama-server timings")
        assert end.text == "".join(e.text for e in events)
    finally:
        assert stop_worker(worker, thread)


def test_the_window_with_a_server_target(qtbot, make_window, server, tmp_path):
    win = make_window(request=LoadRequest(server.url, None), max_new=16)
    panel = win.side_panel
    # the server decides: the toggle shows what it does and cannot be switched
    assert not panel.mode_button.isEnabled() and panel.mode == "speculative"
    assert "by the server" in panel.mode_button.text() and "cannot be raced" in panel.mode_button.toolTip()
    assert not panel.k_spin.isEnabled() and not panel.proposer.isEnabled()
    assert panel.proposer.isHidden() and panel.k_spin.isHidden()  # the server's own settings: rows hidden
    assert "llama.cpp server at " + server.url in panel.target_label.text()
    assert win.page.legend.swatches["server"].isHidden()  # llama-server: every token has its kind
    # the race tab says why it cannot race (its own slot of the loaded signal may come a moment later)
    qtbot.waitUntil(lambda: "cannot be raced" in win.race_view.status.text(), timeout=TIMEOUT)
    win.race_view.prompt.setPlainText("the cat")
    assert not win.race_view.start_button.isEnabled() and not win.race_view.start()

    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as done:
        assert win.generation.send("the cat sat on the mat")
    assert done.args[0] == "max_new_tokens"
    msg = win.chats.messages[-1]
    assert msg.role == "assistant" and len(msg.tokens) == 16 and {t.kind for t in msg.tokens} <= SPEC_KINDS
    assert msg.figures.server["engine"] == "llama.cpp" and msg.figures.stats.proposed_tokens > 0
    assert "tok/s by its own clock" in panel.summary.text() and "llama-server timings" in panel.summary.text()
    assert panel.m_alpha.value.text() != "—" and panel.m_k.caption.text() == "k (the server's)"
    # the server's captions fit the side panel at its default width: nothing is cut at its edge
    win.resize(1360, 860)
    win.show()
    qtbot.waitExposed(win)
    assert panel.widget().minimumSizeHint().width() <= panel.viewport().width()
    # the next turn: the conversation so far, through the server's own template
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
        assert win.generation.send("is it done")
    assert win.chats.messages[-1].figures.stats.reused_prompt_tokens > 0  # llama-server's prompt cache
    stored = History(tmp_path / "data").messages(win.chats.chat_id)
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    # back to local models: everything the server had fixed is the user's again
    from app_fixtures import tiny_factory

    with qtbot.waitSignal(win.models_ready, timeout=TIMEOUT):
        win.models.start_loading(LoadRequest(factory=tiny_factory()))
    assert panel.mode_button.isEnabled() and panel.k_spin.isVisibleTo(panel) and panel.proposer.isVisibleTo(panel)
    assert panel.mode_button.text() == "⚡ Speculative decoding" and win.page.legend.swatches["server"].isHidden()
    qtbot.waitUntil(lambda: win.race_view.ready, timeout=TIMEOUT)  # its own slot of the same signal
    win.race_view.prompt.setPlainText("the cat")
    assert win.race_view.start_button.isEnabled() and "cannot be raced" not in win.race_view.status.text()


def test_a_server_killed_mid_answer_keeps_the_part_marked_as_cut(qtbot, make_window, endless_server, tmp_path):
    win = make_window(request=LoadRequest(endless_server.url, None), max_new=8000)
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as done:
        assert win.generation.send("the cat")
        qtbot.waitUntil(lambda: shown(win) >= 5, timeout=TIMEOUT)
        endless_server.kill()
    assert done.args[0] == "error"
    msg = win.chats.messages[-1]
    assert msg.role == "assistant" and msg.tokens and msg.figures.stats.stop_reason == "error"
    assert "broke off" in msg.figures.error or "without finishing" in msg.figures.error
    box = win.last_error_dialog
    assert isinstance(box, QMessageBox) and box.isVisible() and "cut" in box.text()
    stored = History(tmp_path / "data").messages(win.chats.chat_id)[-1]
    assert stored.figures.stats.stop_reason == "error" and stored.content == msg.content and stored.content
    from app.figures import meta_line

    assert "cut off" in meta_line(stored.figures)
    box.close()
    # the app stays usable: connecting again to a live server works (here: a dead one says so)
    with qtbot.waitSignal(win.load_error, timeout=TIMEOUT) as err:
        win.models.start_loading(LoadRequest(endless_server.url, None))
    assert "nothing is listening" in err.args[0]


def test_stop_mid_answer_from_a_server(qtbot, make_window, endless_server):
    win = make_window(request=LoadRequest(endless_server.url, None), max_new=8000)
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as done:
        assert win.generation.send("the cat")
        qtbot.waitUntil(lambda: shown(win) >= 3, timeout=TIMEOUT)
        win.generation.stop()
    assert done.args[0] == "cancelled" and win.chats.messages[-1].tokens
    # the worker is free again at once: the next answer comes
    win.side_panel.max_new.setValue(4)
    with qtbot.waitSignal(win.message_done, timeout=TIMEOUT) as done:
        assert win.generation.send("no")
    assert done.args[0] == "max_new_tokens"


def test_nothing_listening_is_a_dialog(qtbot, tmp_path):
    win = MainWindow(tmp_path / "data", Theme(False), LoadRequest(f"http://127.0.0.1:{free_port()}", None))
    qtbot.addWidget(win)
    try:
        with qtbot.waitSignal(win.load_error, timeout=TIMEOUT) as err:
            win.models.start_loading()
        assert "nothing is listening" in err.args[0]
        assert win.last_error_dialog.isVisible() and not win.generation.send("hi")
    finally:
        assert win.shutdown()


def test_a_server_that_tells_nothing_per_token(qtbot, tmp_path, server):
    """The OpenAI-compatible path (what vLLM gets): tokens of kind `server`, the swatch shown."""

    def generic(progress):
        from specdec_core.remote import connect
        from specdec_core.remote.engine import OPENAI, ServerEngine

        native = connect(server.url)
        return ServerEngine(native.endpoint, OPENAI, native.model, None, "")

    win = MainWindow(tmp_path / "data", Theme(False), LoadRequest(factory=generic))
    qtbot.addWidget(win)
    try:
        win.side_panel.max_new.setValue(8)
        with qtbot.waitSignal(win.models_ready, timeout=TIMEOUT):
            win.models.start_loading()
        assert not win.page.legend.swatches["server"].isHidden()
        assert "Decoding by the server" == win.side_panel.mode_button.text()
        with qtbot.waitSignal(win.message_done, timeout=TIMEOUT):
            assert win.generation.send("the cat")
        msg = win.chats.messages[-1]
        assert {t.kind for t in msg.tokens} == {"server"} and msg.figures.server["figures"].startswith("none")
        assert win.side_panel.m_alpha.value.text() == "—"
    finally:
        assert win.shutdown()


def test_app_arguments_for_a_server(monkeypatch):
    from app.main import build_parser, load_request_from_args

    args = build_parser().parse_args(["--target", "http://10.0.0.5:8000", "--api-key", "k1"])
    req = load_request_from_args(args)
    assert req.target == "http://10.0.0.5:8000" and req.api_key == "k1" and "k1" not in repr(req)


def test_server_modules_do_not_import_torch():
    r = heavy_imports(["app.server_target", "specdec_core.remote", "specdec_core.contract", "specdec_core.open_engine"])
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_models_dialog_connects_to_a_server(qtbot, tmp_path, server, monkeypatch):
    """File ▸ Load models… ▸ Server…: the server becomes the target, as --target does."""
    from app_fixtures import tiny_factory

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))  # the dialog's scan stays small
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    win = MainWindow(tmp_path / "data", Theme(False), LoadRequest(factory=tiny_factory()))
    qtbot.addWidget(win)
    try:
        with qtbot.waitSignal(win.models_ready, timeout=TIMEOUT):
            win.models.start_loading()
        win.models.load_dialog()
        dlg = win.models.dialog
        assert dlg.server_button.isVisible()
        with qtbot.waitSignal(win.models_ready, timeout=TIMEOUT):
            dlg.use_server(server.url)
        assert win.models.model_info["server"].url == server.url and win.models.load_request.target == server.url
        assert not win.side_panel.mode_button.isEnabled()
    finally:
        assert win.shutdown()


def test_the_side_panel_learns_a_server_target_through_its_own_methods(qtbot):
    """What a loaded server changes in the panel, from the ServerInfo value alone (no server
    needed), and back for models loaded here."""
    from app.answer_figures import AnswerFigures
    from app.side_panel import SidePanel
    from specdec_core.events import Stats
    from specdec_core.contract import ServerInfo

    panel = SidePanel(Theme(False))
    qtbot.addWidget(panel)
    panel.show()
    vllm = ServerInfo("http://gpu:8000", "vLLM", "meta/Llama-70B", "server", None, "", "none",
                      "the vLLM server at http://gpu:8000 cannot be raced")
    panel.show_target(vllm)
    assert not panel.mode_button.isEnabled() and panel.mode_button.text() == "Decoding by the server"
    assert "cannot be raced" in panel.mode_button.toolTip() and panel.proposer.isHidden() and panel.k_spin.isHidden()
    assert "vLLM server at http://gpu:8000" in panel.target_label.text() and "Llama-70B" in panel.target_label.text()
    assert "does not say" in panel.draft_label.text()
    panel.show_stats(AnswerFigures(Stats(new_tokens=3, seconds=1.0)))
    panel.show_server_figures(AnswerFigures(Stats(proposed_tokens=4, accepted_tokens=3),
                                            server={"engine": "vLLM", "figures": "vLLM's per-request metrics"}))
    assert "vLLM server · proposed 4, accepted 3" in panel.summary.text()
    assert panel.m_k.caption.text() == "k (the server's)"
    panel.show_target(None)
    assert panel.mode_button.isEnabled() and panel.mode_button.text() == "⚡ Speculative decoding"
    assert panel.proposer.isVisibleTo(panel) and panel.k_spin.isVisibleTo(panel) and panel.proposer.isEnabled()
