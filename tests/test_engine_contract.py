"""The one engine boundary (specdec_core.contract.EngineLike): both engines implement it, the
settings value carries every choice to them, and the app's worker is driven by a hand-written
fake engine -- no torch, no model -- so what it does is only adapting an engine to Qt signals."""

from __future__ import annotations

import inspect
import os
import threading

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from specdec_core.context import Fit, answer_budget, fit_chat  # noqa: E402
from specdec_core.contract import (  # noqa: E402
    ChatPrompt,
    EngineError,
    EngineLike,
    GenerationLike,
    ServerInfo,
    prompt_tokens,
)
from specdec_core.events import EventStream, Stats, TokenEvent, TokenKind  # noqa: E402
from specdec_core.models.errors import ModelError  # noqa: E402
from specdec_core.models.types import ModelInfo  # noqa: E402
from specdec_core.settings import (  # noqa: E402
    PROPOSER_KINDS,
    PROPOSERS,
    DecodeSettings,
    SamplingParams,
    SettingsError,
    sample_seed,
    usable_proposer,
)

TIMEOUT = 30_000


def contract_members() -> dict[str, object]:
    """What EngineLike declares: its methods and properties, by name."""
    return {name: value for name, value in vars(EngineLike).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))}


def parameters(fn) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def check_implements(engine) -> None:
    """Every member of the contract, its methods with the contract's parameters (names and
    kinds), its properties as properties or plain attributes."""
    cls = type(engine)
    for name, declared in contract_members().items():
        assert hasattr(engine, name), f"{cls.__name__} lacks {name}"
        if not isinstance(declared, property):
            assert parameters(getattr(cls, name)) == parameters(declared), (cls.__name__, name)


# -- a fake engine: the contract by hand --------------------------------------------------
class FakeGeneration(EventStream):
    """Scripted steps of events; `fail_after`: raise a broken stream after that many events."""

    def __init__(self, events: list[TokenEvent], fail_after: int | None = None):
        self._script = events
        self._fail_after = fail_after
        self.events: list[TokenEvent] = []
        self.stats: Stats | None = None

    def __iter__(self):
        for ev in self._script:
            if self._fail_after is not None and len(self.events) == self._fail_after:
                self.stats = self.snapshot()
                self.stats.stop_reason = "error"
                raise ModelError("the server closed the stream")
            self.events.append(ev)
            yield ev
        self.stats = self.snapshot()
        self.stats.stop_reason = "max_new_tokens"

    def snapshot(self) -> Stats:
        if self.stats is not None:
            return self.stats
        return Stats(new_tokens=len(self.events), seconds=0.01 * len(self.events), mode="speculative",
                     target_forward_passes=len({e.step for e in self.events}))

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events)


class FakeEngine:
    """A word is a token; a step is two proposed words the target kept and its bonus word."""

    def __init__(self, context: int | None = 64, fail_after: int | None = None, server: ServerInfo | None = None):
        self._context = context
        self.fail_after = fail_after
        self._server = server
        self.generated: list[tuple[object, DecodeSettings, bool]] = []

    target_info = ModelInfo("fake-target", "tests", "float32", "none", "cpu", 0, 0.0)
    draft_info = None
    vocab_size = 100

    @property
    def context_length(self) -> int | None:
        return self._context

    def server_info(self) -> ServerInfo | None:
        return self._server

    def encode_chat(self, messages, *, continue_final=False, answer_ids=None):
        return [len(w) for m in messages for w in m["content"].split()]

    def encode_tool_chat(self, messages, tools, *, continue_final=False):
        return self.encode_chat(messages) + [len(t["function"]["name"]) for t in tools or []]

    def token_id(self, text):
        return len(text) if text.startswith("w") else None

    end_token_ids = frozenset({0})

    def encode_prompt(self, text):
        return self.encode_chat([{"role": "user", "content": text}])

    def encode_text(self, text):
        return [len(w) for w in text.split()]

    def encode_infill(self, infill):
        return self.encode_text(infill.prefix) + [0] + self.encode_text(infill.suffix)

    def count_tokens(self, messages):
        return len(self.encode_chat(messages))

    def fit(self, messages, max_new_tokens, dropped=0, *, continue_final=False, answer_ids=None):
        return fit_chat(messages, max_new_tokens, self._context, self.encode_chat, len, dropped)

    def generate(self, prompt, settings, *, cancel=None, reuse_cache=False, answer_prefix=0, reuse_at_most=None):
        self.generated.append((prompt, settings, reuse_cache))
        events = []
        for i in range(answer_budget(settings.max_new_tokens, len(prompt), self._context)):
            step, pos = divmod(i, 3)
            kind = TokenKind.BONUS if pos == 2 else TokenKind.ACCEPTED
            events.append(TokenEvent(i, f" w{i}", kind, step, pos, 0.01 * i, None, 2))
        return FakeGeneration(events, self.fail_after)

    def fork(self):
        return FakeEngine(self._context)


# -- both engines implement it --------------------------------------------------------------
def test_the_contract_is_what_the_front_ends_use():
    members = set(contract_members())
    assert {"encode_chat", "fit", "generate", "context_length", "target_info", "draft_info",
            "server_info", "count_tokens", "fork"} <= members


def test_the_local_engine_implements_the_contract():
    from app_fixtures import tiny_factory

    engine = tiny_factory(report=False)(lambda *_a: None)
    check_implements(engine)
    assert isinstance(engine, EngineLike) and engine.server_info() is None
    assert engine.target_info.name == "tiny-target" and engine.draft_info.name == "tiny-draft"
    assert engine.context_length == 512 and engine.vocab_size == engine.target.model.config.vocab_size
    messages = [{"role": "user", "content": "the cat sat"}]
    assert engine.count_tokens(messages) == len(engine.encode_chat(messages))
    # raw text: the tokenizer alone, no chat template around it (an OpenAI completions prompt)
    raw = engine.encode_text("the cat sat")
    assert raw == engine.tokenizer("the cat sat")["input_ids"] and len(raw) < len(engine.encode_prompt("the cat sat"))
    gen = engine.generate(engine.encode_chat(messages), DecodeSettings(5, draft_tokens=2))
    assert isinstance(gen, GenerationLike) and len(gen.run().events) == 5 and gen.snapshot() == gen.stats
    # a prefill: the chat template's continue_final_message rendering, the assistant's turn left open
    prefill = [*messages, {"role": "assistant", "content": "the cat"}]
    want = engine.tokenizer.apply_chat_template(prefill, continue_final_message=True, add_generation_prompt=False,
                                                tokenize=True)["input_ids"]
    assert engine.encode_chat(prefill, continue_final=True) == list(want)
    closed = engine.encode_chat(prefill)  # without: the message closed (<|im_end|>), then a new turn
    im_end = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert closed[:len(want)] == list(want) and closed[len(want)] == im_end
    with pytest.raises(EngineError, match="not the assistant's"):
        engine.encode_chat(messages, continue_final=True)
    fork = engine.fork()
    assert fork.target is engine.target and fork.decoder is not engine.decoder


def test_the_server_engine_implements_the_contract():
    from specdec_core.remote.engine import OPENAI, ServerEngine
    from specdec_core.remote.http import Endpoint

    engine = ServerEngine(Endpoint("http://127.0.0.1:9"), OPENAI, "org/some-model", None, "")
    check_implements(engine)
    assert isinstance(engine, EngineLike)
    info = engine.server_info()
    assert isinstance(info, ServerInfo) and info.url == "http://127.0.0.1:9" and not info.can_race
    assert info.to_dict()["race_note"] == engine.race_refusal and engine.target_info.name == "some-model"
    # an OpenAI-compatible server tokenizes the chat itself: the messages go as they are, unmeasured
    chat = [{"role": "user", "content": "hello " * 5000}]
    fit = engine.fit(chat, 100)
    assert fit.fits and fit.prompt == ChatPrompt(tuple(chat)) and fit.prompt_tokens is None
    assert engine.count_tokens(chat) is None and prompt_tokens(fit.prompt) is None
    with pytest.raises(Exception, match="cannot be raced"):
        engine.fork()
    with pytest.raises(EngineError, match="does not tokenize text"):  # said before any request is sent
        engine.encode_text("hello")
    # its chat endpoint would open a new turn after a last assistant message: a prefill is refused
    prefill = [{"role": "user", "content": "count"}, {"role": "assistant", "content": "1, 2,"}]
    assert engine.encode_chat(prefill) == ChatPrompt(tuple(prefill))
    with pytest.raises(EngineError, match="cannot be asked to continue"):
        engine.encode_chat(prefill, continue_final=True)


def test_an_engine_in_a_line_implements_the_contract():
    """specdec_core.serve.queue.QueuedEngine: any engine, its generations taking turns."""
    from specdec_core.serve.queue import DecodeQueue, QueuedEngine

    inner = FakeEngine()
    engine = QueuedEngine(inner, DecodeQueue(2))
    check_implements(engine)
    assert isinstance(engine, EngineLike) and engine.encode_text("a bb") == [1, 2]
    gen = engine.generate([1], DecodeSettings(3))
    assert isinstance(gen, GenerationLike) and [e.token_id for e in gen.run().events] == [0, 1, 2]
    assert gen.stats.stop_reason == "max_new_tokens" and engine.fork().queue is engine.queue


def test_the_fake_engine_implements_the_contract():
    check_implements(FakeEngine())
    assert isinstance(FakeEngine(), EngineLike) and isinstance(FakeEngine().generate([1], DecodeSettings(2)),
                                                                GenerationLike)


# -- one rule for fitting a chat ------------------------------------------------------------
def chat(*turns):
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": " ".join(["w"] * n)}
            for i, n in enumerate(turns)]


def test_fit_measures_the_chat_and_says_what_to_drop():
    engine = FakeEngine(context=50)
    ok = engine.fit(chat(10, 10, 10), 20)
    assert ok == Fit(True, [1] * 30, 30, 20, 50)
    too_long = engine.fit(chat(10, 20, 10, 20, 10), 15)  # 70 + 15 > 50; without two turns 10 + 15 fits
    assert not too_long.fits and too_long.prompt is None and too_long.drop == 4 and too_long.prompt_tokens == 70
    again = engine.fit(chat(10, 20, 10, 20, 10), 15, dropped=4)  # the user agreed: the prompt leaves them out
    assert again.fits and again.prompt == [1] * 10 and again.dropped == 4
    nothing = engine.fit(chat(60), 1)
    assert not nothing.fits and nothing.drop is None and "shorten it" in str(nothing.error())
    assert FakeEngine(context=None).fit(chat(10_000), 10).fits  # an unknown context refuses nothing


def test_the_local_engine_fits_by_the_same_rule(tmp_path):
    from app_fixtures import tiny_factory

    engine = tiny_factory(report=False)(lambda *_a: None)
    long_chat = [{"role": "user", "content": "the cat sat on the mat " * 30},
                 {"role": "assistant", "content": "the cat " * 10},
                 {"role": "user", "content": "the hat is on the cat " * 30}]
    fit = engine.fit(long_chat, 200)  # the tiny target holds 512 positions
    assert not fit.fits and fit.context == 512 and fit.drop == 2
    assert fit.prompt_tokens == len(engine.encode_chat(long_chat))
    kept = engine.fit(long_chat, 200, dropped=2)
    assert kept.fits and kept.prompt == engine.encode_chat(long_chat[2:])


# -- one settings value ----------------------------------------------------------------------
def test_the_settings_value_is_checked_when_made():
    for bad, words in (({"mode": "fast"}, "unknown mode"), ({"proposer": "tree"}, "unknown proposer"),
                       ({"draft_tokens": 0}, "draft length"), ({"max_new_tokens": 0}, "max-new-tokens")):
        with pytest.raises(SettingsError, match=words):
            DecodeSettings(**bad)
    with pytest.raises(SettingsError, match="top-p"):
        SamplingParams(top_p=0)
    s = DecodeSettings(8, SamplingParams(0.7), "adaptive", 3, "standard", "prompt-lookup")
    assert not s.needs_draft and DecodeSettings().needs_draft and not s.replace(mode="speculative").needs_draft
    assert s.for_sample(2).seed == sample_seed(3, 2) and s.for_sample(2).mode == "standard"
    assert s.to_dict() == {"max_new_tokens": 8, "temperature": 0.7, "top_k": 0, "top_p": 1.0,
                           "draft_tokens": "adaptive", "seed": 3}


def test_every_front_end_offers_the_same_proposers():
    """A proposer kind added to settings.PROPOSER_KINDS reaches the CLI's --proposer and the
    app's menus without another edit (its builder lives in engine.PROPOSER_BUILDERS)."""
    from specdec_core.cli import build_parser
    from specdec_core.engine import PROPOSER_BUILDERS

    assert set(PROPOSER_BUILDERS) == set(PROPOSERS)
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for command in ("generate", "race"):
        opt = next(a for a in sub.choices[command]._actions if a.dest == "proposer")
        assert tuple(opt.choices) == PROPOSERS
    assert usable_proposer("draft", has_draft=False) == next(k.name for k in PROPOSER_KINDS if not k.needs_draft)
    assert usable_proposer("draft", has_draft=True) == "draft"


def test_the_side_panel_hands_one_settings_value(qtbot):
    from app.side_panel import SidePanel
    from app.theme import Theme

    panel = SidePanel(Theme(False))
    qtbot.addWidget(panel)
    assert [panel.proposer.itemData(i) for i in range(panel.proposer.count())] == list(PROPOSERS)
    panel.temperature.setValue(0.5)
    panel.seed.setValue(9)
    panel.set_mode("standard")
    s = panel.settings()
    assert isinstance(s, DecodeSettings) and s.mode == "standard" and s.sampling.temperature == 0.5 and s.seed == 9
    panel.set_models({"name": "t"}, None)  # no draft: a proposer that needs one is not offered
    panel.set_mode("speculative")
    assert panel.settings().proposer == "prompt-lookup" and panel.settings().speculative


# -- a fake engine drives the worker ----------------------------------------------------------
def load(qtbot, worker, sig, engine):
    from app.worker import LoadRequest

    with qtbot.waitSignal(sig.loaded, timeout=TIMEOUT) as b:
        worker.request_load(LoadRequest(factory=lambda _progress: engine))
    return b.args[0]


def ask(worker, messages, settings, dropped=0):
    from app.worker import GenerateRequest

    req = GenerateRequest(1, messages, settings, dropped)
    worker.request_generate(req)
    return req


def test_the_worker_hands_on_what_the_engine_opened(qtbot, worker, sig):
    info = load(qtbot, worker, sig, FakeEngine())
    assert info["target"]["name"] == "fake-target" and info["draft"] is None and info["server"] is None
    server = ServerInfo("http://h:1", "vLLM", "m", "server", None, "", "none", "no races")
    assert load(qtbot, worker, sig, FakeEngine(server=server))["server"] is server


def test_the_worker_turns_engine_events_into_signals(qtbot, worker, sig):
    engine = FakeEngine()
    load(qtbot, worker, sig, engine)
    batches = []
    sig.tokens.connect(lambda rid, events, running: batches.append((events, running)))
    settings = DecodeSettings(9, draft_tokens=2, proposer="prompt-lookup")
    with qtbot.waitSignal(sig.finished, timeout=TIMEOUT) as done:
        ask(worker, [{"role": "user", "content": "the cat sat"}], settings)
    # the engine got the fitted prompt and the settings value as it was made, with the chat's cache kept
    assert engine.generated == [([3, 3, 3], settings, True)]
    events = [e for evs, _ in batches for e in evs]
    assert [e.token_id for e in events] == list(range(9))
    for evs, running in batches:  # each batch ends a step, and its figures are the engine's for it
        assert evs[-1].kind is TokenKind.BONUS
        assert running.new_tokens == sum(len(b) for b, _ in batches[:batches.index((evs, running)) + 1])
    end = done.args[1]
    assert end.stats.new_tokens == 9 and end.stats.stop_reason == "max_new_tokens"
    assert end.text == "".join(f" w{i}" for i in range(9))


def test_a_chat_that_does_not_fit_comes_back_as_the_engines_fit(qtbot, worker, sig):
    engine = FakeEngine(context=50)
    load(qtbot, worker, sig, engine)
    started = []
    sig.started.connect(started.append)
    with qtbot.waitSignal(sig.too_long, timeout=TIMEOUT) as b:
        ask(worker, chat(10, 20, 10, 20, 10), DecodeSettings(15))
    fit = b.args[1]
    assert isinstance(fit, Fit) and not fit.fits and fit.drop == 4 and fit.context == 50
    with qtbot.waitSignal(sig.finished, timeout=TIMEOUT):
        ask(worker, chat(10, 20, 10, 20, 10), DecodeSettings(15), dropped=fit.drop)
    assert started == [1] and engine.generated[0][0] == [1] * 10  # nothing computed for the first ask


def test_a_stream_that_breaks_off_keeps_its_part(qtbot, worker, sig):
    load(qtbot, worker, sig, FakeEngine(fail_after=4))
    with qtbot.waitSignal(sig.finished, timeout=TIMEOUT) as b:
        ask(worker, [{"role": "user", "content": "the cat"}], DecodeSettings(9))
    end = b.args[1]
    assert end.stats.stop_reason == "error" and end.stats.new_tokens == 4
    assert end.text == " w0 w1 w2 w3" and end.error == "the server closed the stream"


def test_an_engine_error_is_one_line(qtbot, worker, sig):
    engine = FakeEngine()
    engine.fit = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("the server went away\nat line 2"))
    load(qtbot, worker, sig, engine)
    with qtbot.waitSignal(sig.failed, timeout=TIMEOUT) as b:
        ask(worker, [{"role": "user", "content": "hi"}], DecodeSettings(3))
    assert b.args == [1, "the server went away"]


def test_a_request_stopped_before_it_runs_never_reaches_the_engine(qtbot, worker, sig):
    engine = FakeEngine()
    load(qtbot, worker, sig, engine)
    from app.worker import GenerateRequest

    req = GenerateRequest(5, [{"role": "user", "content": "hi"}], DecodeSettings(3), cancel=threading.Event())
    req.cancel.set()
    with qtbot.waitSignal(sig.finished, timeout=TIMEOUT) as b:
        worker.request_generate(req)
    assert b.args[1].stats.stop_reason == "cancelled" and engine.generated == []
