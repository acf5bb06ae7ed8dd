"""What a grammar's token mask costs per token on this CPU, for llguidance and xgrammar, with the
embedded pair's tokenizer (Qwen2.5, ~151k tokens) and a JSON-schema extraction: the numbers
behind the choice of library (docs/speed-notes.md).

    PYTHONPATH=. nice -n 19 .venv/bin/python scripts/grammar_mask_bench.py [TOKENIZER_DIR]

For each library: building its view of the tokenizer (once per model), compiling the schema (once
per request), and per token of a valid answer, the mask of the next token (as the int32 bitmask
both write, then as the bool row the decoder masks logits with) and consuming the token.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string"},
        "role": {"enum": ["engineer", "manager", "designer"]},
        "skills": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city", "zip"], "additionalProperties": False},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "role", "skills", "address", "active"],
    "additionalProperties": False,
}
ANSWER = {"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "role": "engineer",
          "skills": ["mathematics", "analytical engines", "poetry"],
          "address": {"city": "London", "zip": "W1 3AB"}, "active": True}


def tokenizer_dir() -> Path:
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    return next((Path.home() / ".cache/specdec-chat/tokenizers").glob("*/tokenizer.json")).parent


def summary(name: str, times: list[float]) -> str:
    ms = sorted(t * 1e3 for t in times)
    return (f"{name}: mean {statistics.mean(ms):.3f} ms, median {statistics.median(ms):.3f} ms, "
            f"p90 {ms[int(0.9 * len(ms))]:.3f} ms, max {ms[-1]:.3f} ms")


def bench_llguidance(tok, ids: list[int]) -> None:
    import llguidance
    import llguidance.hf
    import numpy as np
    import torch

    t = time.perf_counter()
    lt = llguidance.hf.from_tokenizer(tok)
    print(f"llguidance {version('llguidance')}: tokenizer "
          f"{time.perf_counter() - t:.2f} s")
    opts = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}
    t = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA, overrides=opts)
    m = llguidance.LLMatcher(lt, grammar)
    print(f"  compile {1e3 * (time.perf_counter() - t):.1f} ms; error: {m.get_error() or 'none'}")
    words = (lt.vocab_size + 31) // 32
    masks, rows, ff = [], [], 0
    buf = torch.zeros(words, dtype=torch.int32)
    for tok_id in ids:
        t0 = time.perf_counter()
        m.unsafe_compute_mask_ptr(buf.data_ptr(), words * 4)
        t1 = time.perf_counter()
        row = np.unpackbits(buf.numpy().view(np.uint8), bitorder="little")[: lt.vocab_size].astype(bool)
        t2 = time.perf_counter()
        assert row[tok_id], f"token {tok_id} not allowed"
        ff += len(m.compute_ff_tokens()) > 1
        assert m.consume_token(tok_id), m.get_error()
        masks.append(t1 - t0)
        rows.append(t2 - t0)
    print("  " + summary("mask", masks))
    print("  " + summary("mask as a bool row", rows))
    print(f"  accepting at the end: {m.is_accepting()}; tokens with a forced run of 2+ ahead: {ff} of {len(ids)}")
    t = time.perf_counter()
    m.rollback(len(ids))
    print(f"  rollback of {len(ids)} tokens: {1e3 * (time.perf_counter() - t):.3f} ms")


def bench_xgrammar(tok, ids: list[int]) -> None:
    import xgrammar as xgr

    t = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    compiler = xgr.GrammarCompiler(info, max_threads=2)
    print(f"xgrammar {version('xgrammar')}: tokenizer {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(SCHEMA), any_whitespace=False, separators=(", ", ": "))
    m = xgr.GrammarMatcher(compiled)
    print(f"  compile {1e3 * (time.perf_counter() - t):.1f} ms")
    bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
    masks = []
    for tok_id in ids:
        t0 = time.perf_counter()
        m.fill_next_token_bitmask(bitmask)
        masks.append(time.perf_counter() - t0)
        assert m.accept_token(tok_id), f"token {tok_id} refused"
    print("  " + summary("mask", masks))
    print(f"  completed-or-accepting at the end: {m.is_completed() if hasattr(m, 'is_completed') else '?'}")


def main() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir()))
    text = json.dumps(ANSWER)
    ids = tok(text)["input_ids"]
    print(f"tokenizer: {len(tok)} tokens; the answer: {len(ids)} tokens: {text}")
    bench_llguidance(tok, ids)
    try:
        bench_xgrammar(tok, ids)
    except ImportError:
        print("xgrammar: not installed (pip install xgrammar to compare)")


if __name__ == "__main__":
    main()
