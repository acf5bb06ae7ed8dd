"""The product's main path on the real embedded pair: greedy speculative == standard.

Slow (loads 1.5B + 0.5B on CPU) but it runs in CI: it is what a user runs first.
"""

import pytest

from specdec_core.decoder import DecodeSettings
from specdec_core.engine import Engine
from specdec_core.events import first_divergence

pytestmark = pytest.mark.slow

PROMPTS = [
    "Write a Python function that checks whether a number is prime.",
    "What is the capital of France? Answer in one sentence.",
]


@pytest.fixture(scope="module")
def engine():
    from specdec_core.models import load_default_pair

    target, draft = load_default_pair(device="cpu")
    return Engine(target, draft)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_speculative_equals_standard(engine, prompt):
    ids = engine.encode_prompt(prompt)
    settings = DecodeSettings(max_new_tokens=20, draft_tokens=4)
    std = engine.generate(ids, settings, mode="standard").run()
    spec = engine.generate(ids, settings, mode="speculative").run()
    assert spec.token_ids == std.token_ids, first_divergence(std.events, spec.events)
    assert std.text.strip() and set(std.kinds) == {"standard"}
    assert spec.stats.accepted_draft_tokens > 0  # the coder pair agrees on easy text
    assert spec.stats.target_forward_passes < std.stats.target_forward_passes
