"""The embedded pair served by a real llama-server (Qwen2.5-Coder 1.5B target, 0.5B draft,
`--model-draft --spec-type draft-simple`): `specdec generate --target http://...` streams a
code answer whose stats carry the server's draft figures and whose tokens show what the draft
earned. Marked slow like the other test that loads the real pair (seconds on a free 2-core
CPU, once the pair is assembled)."""

from __future__ import annotations

import json

import pytest

from llama_server import need_llama_server, serve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair_server(tmp_path_factory):
    need_llama_server()
    from specdec_core.models import ModelError, default_pair

    try:
        target = default_pair.ensure_assembled(default_pair.embedded("target"))
        draft = default_pair.ensure_assembled(default_pair.embedded("draft"))
    except ModelError as exc:  # the embedded extra is not installed: nothing to serve
        pytest.skip(f"the embedded pair is not available: {exc}")
    log = tmp_path_factory.mktemp("pair-server") / "server.log"
    yield from serve(target, draft, ctx=2048, threads=2, log=log, timeout=300)


def test_generate_against_the_embedded_pair_on_llama_server(pair_server, capsys):
    from specdec_core.cli import main

    rc = main(["generate", "--target", pair_server.url, "--prompt",
               "Write a Python function that returns the sum of a list of numbers.", "--max-new-tokens", "16",
               "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    obj = json.loads(out.strip().splitlines()[-1])
    st = obj["stats"]
    assert st["new_tokens"] == len(obj["token_ids"]) == 16
    assert st["server"]["engine"] == "llama.cpp" and st["server"]["timings"]["draft_n"] == st["proposed_tokens"] > 0
    assert st["accepted_tokens"] > 0 and 0 < st["acceptance_rate"] <= 1
    assert st["tokens_per_speculative_step"] > 1 and st["mode"] == "speculative"
    assert "accepted" in obj["kinds"] and obj["kinds"][0] == "standard"
    assert "def " in obj["text"] or "```" in obj["text"]
