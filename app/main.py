"""specdec-chat entry point (placeholder until the GUI lands)."""

import sys


def main(argv: list[str] | None = None) -> int:
    print("specdec-chat: the desktop window is not built yet; use `specdec generate`.", file=sys.stderr)
    return 0
