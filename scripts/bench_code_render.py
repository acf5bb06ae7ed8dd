#!/usr/bin/env python
"""What one streaming update of an answer's bubble costs, on an answer that is a 200-line Python
code block (the block still open, as while it streams), offscreen:

    python scripts/bench_code_render.py [--lines 200] [--updates 30]

Tokens are 4 characters each (about what a BPE tokenizer gives for code) and cycle through the
kinds; each update appends 12 tokens (the worker's ~30 ms batch at ~400 tok/s) and renders, then
lets Qt paint. Prints the median and worst milliseconds per update near the end of the block,
and the final render (the block closed): CPU time of the GUI thread, so a busy machine does not
inflate it. Runs against the `app` of the repository it sits in.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def code_answer(lines: int) -> str:
    body = []
    for i in range(lines // 5):
        body += [f"def step_{i}(values, scale={i}.5):",
                 f"    \"\"\"Scale the values; step {i} of the pipeline.\"\"\"",
                 f"    out = [v * scale + {i} for v in values if v is not None]  # keep the order",
                 f"    return sorted(out, key=lambda v: (v % 7, str(v)))[:{i + 3}]",
                 ""]
    return "Here is the module:\n\n```python\n" + "\n".join(body[:lines]) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--updates", type=int, default=30)
    args = ap.parse_args()
    from PySide6.QtWidgets import QApplication

    from app.chat_view import MessageWidget
    from app.theme import Theme
    from specdec_core.events import TokenEvent, TokenKind

    app = QApplication.instance() or QApplication([])
    text = code_answer(args.lines)
    pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
    kinds = [TokenKind(k) for k in ("accepted", "accepted", "corrected", "bonus", "standard")]
    events = [TokenEvent(i, p, kinds[i % 5], i, 0, 0.0) for i, p in enumerate(pieces)]
    w = MessageWidget("assistant", Theme(False))
    w.resize(900, 600)
    w.show()
    w.set_streaming(True)
    batch = 12
    head = len(events) - args.updates * batch
    w.append_events(events[:head])
    w._timer.stop()  # the updates below are timed one by one instead
    w.render()
    times = []
    for u in range(args.updates):
        w.append_events(events[head + u * batch : head + (u + 1) * batch])
        w._timer.stop()
        t0 = time.thread_time()
        w.render()
        app.processEvents()
        times.append((time.thread_time() - t0) * 1000)
    w.append_events([TokenEvent(len(events), "```\n", kinds[0], len(events), 0, 0.0)])
    w._timer.stop()
    t0 = time.thread_time()
    w.set_streaming(False)
    app.processEvents()
    final = (time.thread_time() - t0) * 1000
    print(f"{args.lines}-line code answer, {len(w.text)} characters, {len(w.tokens)} tokens: "
          f"per streaming update median {statistics.median(times):.1f} ms, worst {max(times):.1f} ms "
          f"(over the last {args.updates} updates); final render {final:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
