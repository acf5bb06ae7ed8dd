"""The product's main path on the real embedded pair, loaded as it ships: Engine.load() with
its defaults (the CPU kernels, lean forward, grouped draft path and coded-layer cache that a
user gets), greedy speculative == standard under the default adaptive draft length.

Slow (loads 1.5B + 0.5B on CPU) but it runs in CI: it is what a user runs first.
"""

import pytest

from specdec_core.context import ContextError
from specdec_core.settings import DecodeSettings
from specdec_core.engine import Engine
from specdec_core.events import first_divergence

pytestmark = pytest.mark.slow

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "What is the capital of France? Answer in one sentence.",
]


@pytest.fixture(scope="module")
def engine(monkeypatch_module):
    # the real user cache: the assembled and converted files are reused across runs
    monkeypatch_module.delenv("SPECDEC_CACHE_DIR", raising=False)
    return Engine.load()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_the_load_notes_say_what_runs(engine):
    for lm in (engine.target, engine.draft):
        assert lm.info.notes, lm.info.name  # what the side panel's Models box lists
    # the shipped ranking applies to the embedded draft's vocabulary (FR-Spec), never to the target
    assert any("65,536 most frequent tokens" in n for n in engine.draft.info.notes), engine.draft.info.notes
    assert engine.draft.lean.head_rows is not None and engine.target.lean.head_rows is None


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_speculative_equals_standard(engine, prompt):
    ids = engine.encode_prompt(prompt)
    settings = DecodeSettings(max_new_tokens=20, draft_tokens="adaptive")  # the app's and CLI's default
    std = engine.generate(ids, settings.replace(mode="standard")).run()
    spec = engine.generate(ids, settings).run()
    assert spec.token_ids == std.token_ids, first_divergence(std.events, spec.events)
    assert std.text.strip() and set(std.kinds) == {"standard"}
    kinds = spec.kinds
    assert kinds[0] == "standard" and kinds.count("bonus") <= kinds.count("accepted")
    assert spec.stats.plain_steps == kinds.count("standard")
    assert spec.stats.accepted_tokens > 0  # the coder pair agrees on easy text
    assert spec.stats.target_forward_passes < std.stats.target_forward_passes


def test_a_prompt_beyond_the_context_is_refused_at_once(engine):
    assert engine.context_length == 32768
    with pytest.raises(ContextError, match="40000 tokens"):
        engine.generate([9707] * 40_000, DecodeSettings(max_new_tokens=16))
