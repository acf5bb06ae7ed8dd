"""`specdec` command line: generate, models, bench, race, serve.

dispatch.py is the one dispatcher; each command is one module (generate.py, models.py,
bench.py, race.py, serve.py: its flags and its run); args.py (flags in, settings and an engine out) and
terminal.py (progress, what was opened, a generation's line) hold what they share. Printing
lives here; the engine only yields events and returns stats. Bad input exits 2 with one line
on stderr (what is wrong and how to fix it), never a traceback.
"""

from .dispatch import build_parser, main

__all__ = ["build_parser", "main"]
