"""`specdec bench` flags and entry point."""

from __future__ import annotations


def add_bench_parser(sub) -> None:
    b = sub.add_parser("bench", help="benchmark standard vs speculative decoding, write a report")
    b.add_argument("--out", required=True, metavar="DIR")


def run_bench(args) -> int:
    from ..cli import UsageError

    raise UsageError("the benchmark is not built yet")
