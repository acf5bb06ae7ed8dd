"""The one dispatcher: `specdec COMMAND ...` -> that command's module (add_parser, run), and
the one place that turns a user's mistake into one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import sys

from .. import __version__
from . import bench, generate, models, race, serve
from .args import ArgParser, UsageError

EXIT_BAD_INPUT = 2
COMMANDS = {"generate": generate, "models": models, "bench": bench, "race": race, "serve": serve}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgParser(prog="specdec", description="Exact speculative decoding: generate, benchmark, compare, serve.")
    parser.add_argument("--version", action="version", version=f"specdec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgParser)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command].run(args)
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 -- the one place that turns errors into a line
        if _is_user_error(exc):
            print(f"specdec: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise


def _is_user_error(exc: Exception) -> bool:
    from ..contract import EngineError
    from ..models.errors import ModelError
    from ..settings import SettingsError

    return isinstance(exc, (UsageError, SettingsError, EngineError, ModelError))
