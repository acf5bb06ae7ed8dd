"""Shared fixtures: tiny random Qwen2 models of the real architecture (no downloads)."""

from types import SimpleNamespace

import pytest
import torch

from tiny_models import make_model, make_tokenizer


def soften(model, factor: float):
    """Divide every weight matrix by `factor`: tiny_models scales them up for clear-cut greedy
    choices; the statistical tests want distributions with many tokens in play."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.div_(factor)
    return model


@pytest.fixture(scope="session", autouse=True)
def _float32_on_any_cpu():
    """'auto' loads a model as bfloat16 on a CPU with native bf16 (Intel's AVX512-BF16 / AMX, as
    on some of the project's machines) and as float32 elsewhere; the tests' references are
    float32 on a CPU, so the whole session -- module-scoped engines and the commands the tests
    start included -- sees a CPU without it ($SPECDEC_CPU_BF16=0) and passes whichever machine
    runs it. The rule itself is tested with both answers (test_models.py)."""
    from specdec_core.models import device

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECDEC_CPU_BF16", "0")
        device.cpu_has_fast_bf16.cache_clear()
        yield
    device.cpu_has_fast_bf16.cache_clear()


@pytest.fixture(autouse=True)
def _own_data_dir(tmp_path, monkeypatch):
    """Recent models (specdec_core/models/recent.py) are written to the test's own folder, never
    to the user's data folder."""
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path / "user-data"))


@pytest.fixture(autouse=True)
def _gc_in_gui_thread(request):
    """Qt tests collect cycles in the GUI thread only, as the app does (app/gui_gc.py): a worker
    thread that ran the collector could destroy an earlier test's widgets off the GUI thread,
    which crashed CI once. Teardown runs after qtbot's (autouse fixtures are set up first), so
    the closed widgets of this test are collected here, in the GUI thread."""
    if "qtbot" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("qapp")
    from app.gui_gc import GuiThreadCollector

    collector = GuiThreadCollector()
    yield
    collector.stop()


@pytest.fixture(autouse=True, scope="session")
def _last_load_record_in_tmp(tmp_path_factory):
    """The CLI and the app record each load's report for `specdec models`; a test's tiny
    models must not overwrite the user's record of their own last load. Session-wide, so that
    module fixtures that load (the bench's report) are covered too."""
    from specdec_core.models import last_load

    path = tmp_path_factory.mktemp("last-load") / last_load.FILE_NAME
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(last_load, "record_path", lambda: path)
        yield path


@pytest.fixture(autouse=True)
def _no_last_load_yet(_last_load_record_in_tmp):
    """Each test starts without a recorded load (one test's record is not another's)."""
    _last_load_record_in_tmp.unlink(missing_ok=True)


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    """Tokenizers and kernel builds of the tiny GGUFs go to a cache of their own."""
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def no_kernel(monkeypatch):
    """The app as on a machine where the CPU kernel cannot be built (no C compiler)."""
    from specdec_core.cpu import build

    monkeypatch.setattr(build, "_chosen", None)
    monkeypatch.setattr(build, "_why_not", "off for this test")


@pytest.fixture(scope="session")
def tiny():
    tok = make_tokenizer()
    v = len(tok)
    target = make_model(v, seed=0, hidden=32, layers=2)
    return SimpleNamespace(
        tokenizer=tok,
        vocab=v,
        target=target,
        # a weak draft that disagrees often (different weights entirely)
        draft=make_model(v, seed=1, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32),
        # a draft close to the target: the target plus a little noise
        near_draft=_perturbed(target, seed=7, scale=0.05),
    )


def _perturbed(model, seed, scale):
    import copy

    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.abs().mean())
    return m


@pytest.fixture
def local_hub(tmp_path, monkeypatch):
    """start(repos, rate=None) -> a running HubServer (tests/hub_server.py) that huggingface_hub
    reaches through HF_ENDPOINT, with the HF cache and the app cache in tmp_path: real downloads
    over HTTP from 127.0.0.1, never the internet."""
    import huggingface_hub.constants as hf_constants

    from hub_server import HubServer

    servers = []
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    # huggingface_hub reads these at import time; the functions read the constants at call time
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)

    def start(repos, rate=None):
        server = HubServer(repos, rate).__enter__()
        servers.append(server)
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        return server

    yield start
    for server in servers:
        server.__exit__()


@pytest.fixture
def worker(qtbot):
    """A Worker in its own thread (app/worker.py), stopped after the test."""
    from app.worker import start_worker, stop_worker

    w, thread = start_worker()
    yield w
    assert stop_worker(w, thread)


@pytest.fixture
def sig(worker):
    """The worker's signals, re-emitted in the GUI thread (see app_fixtures.relay)."""
    from app_fixtures import relay

    return relay(worker)


@pytest.fixture
def make_window(qtbot, tmp_path):
    """make(...) -> a MainWindow on the test's own data folder, loaded (unless load=False) with
    `request` -- by default tiny models built in the worker thread (app_fixtures.tiny_factory) --
    and `win.sig`, its worker's signals relayed into the GUI thread. Shut down after the test."""
    from app.main_window import MainWindow
    from app.theme import Theme, apply_theme
    from app.worker import LoadRequest
    from app_fixtures import relay, tiny_factory
    from PySide6.QtWidgets import QApplication

    made = []

    def make(data_dir=None, request=None, load=True, max_new=12):
        # the app's own look (style, palette, stylesheet) as `specdec-chat` sets it before its window:
        # sizes under it are what users see, and a test that switched the theme leaves no other
        apply_theme(QApplication.instance(), "light")
        win = MainWindow(data_dir or tmp_path / "data", Theme(False), request or LoadRequest(factory=tiny_factory()))
        qtbot.addWidget(win)
        win.sig = relay(win.worker)
        made.append(win)
        win.side_panel.max_new.setValue(max_new)
        if load:
            with qtbot.waitSignal(win.models_ready, timeout=60_000):
                win.models.start_loading()
        return win

    yield make
    for win in made:
        assert win.shutdown()


# `specdec serve` in this process on the test module's own `engine` fixture (each serve test file
# loads the pair it needs), and the official openai client on it
@pytest.fixture(scope="module")
def server(engine):
    from specdec_serve import in_process

    yield from in_process(engine)


@pytest.fixture
def served(server):
    """The server's own engine, taking its turn in the server's line: a reference decoded on the
    module's `engine` directly would race the read the server starts between requests
    (QueuedEngine.read_between), which moves the draft's cache under it."""
    return server.service.engine


@pytest.fixture
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture
def scripted():
    """scripted(script, tls=None) -> a running ScriptedServer (tests/scripted_server.py: a real
    local TCP server whose answers the test writes byte by byte), closed after the test."""
    from scripted_server import ScriptedServer

    servers = []

    def start(script, tls=None):
        servers.append(ScriptedServer(script, tls))
        return servers[-1]

    yield start
    for s in servers:
        s.close()
