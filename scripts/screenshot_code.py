#!/usr/bin/env python
"""Pictures of code blocks in answers (issue 30), in a real window on a 1366x768 screen:

    xvfb-run -a -s "-screen 0 1366x768x24" python scripts/screenshot_code.py OUT_DIR

writes, into OUT_DIR, in the light and the dark theme:
  code-highlighting[-dark].png  a finished answer with a Python and a shell block: syntax in the
                                foreground, the kinds behind, the language and Copy on each block
  code-streaming[-dark].png     the same answer while its Python block is still open

The window runs on the tiny test models; the answer's tokens are laid into the chat view as the
worker's events would be, their kinds drawn as a speculative decoder emits them (k = 4 proposals
per step, each kept with probability 0.75 until one is rejected: accepted..., then corrected, or
bonus after all four), seeded, so the pictures are the same on every run.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

ANSWER = '''Here is a function that parses a price, and a shell line to try it:

```python
from decimal import Decimal, InvalidOperation


def parse_price(text: str) -> Decimal:
    """'$1,234.50' -> Decimal('1234.50'); ValueError when it is no price."""
    cleaned = text.strip().replace("$", "").replace(",", "")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        raise ValueError(f"not a price: {text!r}") from None
    if value < 0:  # refunds are booked elsewhere
        raise ValueError("negative price")
    return value.quantize(Decimal("0.01"))
```

Run it from the command line:

```bash
python -c 'from prices import parse_price; print(parse_price("$1,234.5"))'
```

It prints `1234.50`.'''


def speculative_tokens(text: str, seed: int = 7):
    """`text` cut into tokens of 1 to 5 characters with the kinds a speculative decoder gives."""
    from specdec_core.events import TokenEvent, TokenKind

    rng = random.Random(seed)
    pieces, i = [], 0
    while i < len(text):
        n = rng.choice((1, 2, 3, 3, 4, 4, 5))
        pieces.append(text[i : i + n])
        i += n
    events, step, pos = [], 0, 0
    while pos < len(pieces):
        kept = 0
        while kept < 4 and rng.random() < 0.75:
            kept += 1
        kinds = [TokenKind.ACCEPTED] * kept + [TokenKind.BONUS if kept == 4 else TokenKind.CORRECTED]
        for d, kind in enumerate(kinds):
            if pos < len(pieces):
                events.append(TokenEvent(pos, pieces[pos], kind, step, d, 0.02 * pos, draft_length=4, source="draft"))
                pos += 1
        step += 1
    return events


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    args.target = None
    args.max_new_tokens = 16
    import tempfile

    from screenshot_features import Driver

    events = speculative_tokens(ANSWER)
    open_at = next(i for i, e in enumerate(events) if "".join(x.text for x in events[: i + 1]).count("Decimal(c") == 1)
    for theme in ("light", "dark"):
        suffix = "" if theme == "light" else "-dark"
        with tempfile.TemporaryDirectory() as tmp:
            d = Driver(args, Path(tmp), theme)
            d.load()
            view = d.win.page.chat_view
            view.add_message("user").set_text("Write a Python function that parses a price like \"$1,234.50\" "
                                              "into a Decimal, and show how to call it from a shell.")
            w = view.add_message("assistant")
            w.set_meta("speculative · k = 4 · drawn kinds (see scripts/screenshot_code.py)")
            w.set_streaming(True)
            w.append_events(events[: open_at + 1])
            d.settle(0.5)
            d.shot(args.out / f"code-streaming{suffix}.png")
            w.append_events(events[open_at + 1 :])
            w.set_streaming(False)
            view.verticalScrollBar().setValue(0)
            d.settle(0.3)
            view.scroll_to(w)
            d.shot(args.out / f"code-highlighting{suffix}.png")
            d.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
