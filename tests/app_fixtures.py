"""Helpers for the app tests: an Engine on tiny models, built inside the worker thread.

`tiny_factory(...)` returns a LoadRequest factory: called in the worker thread as
factory(progress), it imports torch there (never on the GUI thread) and returns an Engine over
tiny Qwen2 models: a target and a draft that is the target plus a little noise, so speculative
decoding shows accepted, corrected and bonus tokens. eos ids are empty by default so a message
runs to max_new_tokens (deterministic length).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class _Info:
    name: str
    source: str = "tests"
    dtype: str = "float32"
    quantization: str = "none"
    device: str = "cpu"
    memory_bytes: int = 0
    load_seconds: float = 0.0
    notes: list = field(default_factory=list)


@dataclass
class _Loaded:
    model: object
    tokenizer: object
    info: object
    eos_token_ids: list


def _loaded(model, tokenizer, name, eos):
    info_kw = dict(name=name, source="tests", dtype="float32", quantization="none", device="cpu",
                   memory_bytes=sum(p.numel() * p.element_size() for p in model.parameters()), load_seconds=0.01)
    try:
        from specdec_core.models import LoadedModel, ModelInfo

        return LoadedModel(model, tokenizer, ModelInfo(**info_kw), list(eos))
    except Exception:  # the models package is not there (yet) or differs: same attributes
        return _Loaded(model, tokenizer, _Info(**info_kw), list(eos))


class _SlowGeneration:
    """Wraps a Generation: sleeps before each event (to stop mid-stream reliably)."""

    def __init__(self, gen, delay):
        self._gen, self._delay = gen, delay

    def __iter__(self):
        for ev in self._gen:
            time.sleep(self._delay)
            yield ev

    def __getattr__(self, name):
        return getattr(self._gen, name)


def tiny_factory(delay: float = 0.0, eos: tuple = (), with_draft: bool = True, noise: float = 0.05,
                 report: bool = True, max_positions: int = 512):
    """report=False: no progress of its own (the worker's two progress signals only);
    max_positions: the target's context (a small one fills up fast)."""

    def factory(progress):
        import copy

        import torch

        from specdec_core.engine import Engine
        from tiny_models import make_model, make_tokenizer

        if not report:
            progress = lambda *_a: None  # noqa: E731
        torch.set_num_threads(1)  # tiny models: threads only cost (and the CPUs are shared)
        progress("Building tiny target", 0.2)
        tok = make_tokenizer()
        target = make_model(len(tok), seed=0, hidden=32, layers=2, max_positions=max_positions)
        draft = None
        if with_draft:
            progress("Building tiny draft", 0.6)
            draft = copy.deepcopy(target)
            g = torch.Generator().manual_seed(7)
            with torch.no_grad():
                for p in draft.parameters():
                    p.add_(torch.randn(p.shape, generator=g) * noise * p.abs().mean())
        engine = Engine(_loaded(target, tok, "tiny-target", eos),
                        _loaded(draft, tok, "tiny-draft", eos) if draft is not None else None)
        if delay:
            inner = engine.generate

            def slow_generate(*a, **kw):
                return _SlowGeneration(inner(*a, **kw), delay)

            engine.generate = slow_generate
        return engine

    return factory


def relay(worker):
    """A GUI-thread mirror of the worker's signals.

    A plain Python callable connected to a signal emitted in the worker thread runs in the
    worker thread (direct connection), and so would pytest-qt's waitSignals bookkeeping (its
    timer cannot be stopped from another thread). Signal-to-signal connections to a QObject
    living in the GUI thread are queued, so the mirror re-emits in the GUI thread, in order."""
    from PySide6.QtCore import QObject, Signal

    class Relay(QObject):
        progress = Signal(str, float)
        loaded = Signal(object)
        load_failed = Signal(str)
        started = Signal(int)
        tokens = Signal(int, object, object)
        finished = Signal(int, object)
        failed = Signal(int, str)
        too_long = Signal(int, object)
        prompt_read = Signal(int, float)

    r = Relay()
    for name in ("progress", "loaded", "load_failed", "started", "tokens", "finished", "failed", "too_long",
                 "prompt_read"):
        getattr(worker, name).connect(getattr(r, name))
    return r


def heavy_imports(modules: list[str]) -> subprocess.CompletedProcess:
    """Imports `modules` in a fresh interpreter; exits 1 and prints which of torch and
    transformers came with them (the GUI thread must never import either)."""
    code = (f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; "
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    return subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
