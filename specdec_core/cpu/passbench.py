"""What one lean-forward pass costs, by pass size and kernel build: the speed notes' headline table.

    python -m specdec_core.cpu.passbench [--role target|draft] [--rows 1,2,5,9,17]
                                         [--kernels avx2,avx512vnni] [--repeats 15] [--threads 2]
                                         [--context 128] [--before SRC_DIR] [--narrow 5-16,3-9]

Loads an embedded model as Engine.load runs it (the draft requantized), reads `--context`
tokens into a cache, then times passes of each size at that position (a verification: every
row's logits kept), the kernels and sizes interleaved round-robin so that load from other
programs falls on all alike; prints medians and minima (ms), each size as a multiple of one
row, and the machine's load average before and after.
`--before SRC_DIR` adds the kernel built from an older checkout's kernels/ folder (e.g. `git
archive main specdec_core/cpu/kernels | tar -x -C /tmp/old`), run on the file's own row-major
blocks: before and after in one process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _embedded_path(role: str) -> Path:
    from ..models.default_pair import EMBEDDED, assembled_path

    return assembled_path(EMBEDDED[role])


def _old_library(src: Path, variant):
    """The kernel of an older checkout (every C file of its kernels/ folder), built with this
    build's flags and opened through this checkout's ABI (abi.py: sdcpu.h's one declaration of
    sd_forward and sd_model), which the older kernel must share."""
    from . import abi, build

    out = Path(tempfile.mkdtemp(prefix="sd-before-")) / f"old-{variant.name}.so"
    return abi.open_library(build.compile_library(variant, sorted(src.glob("*.c")), out))


def _wait_idle(limit: float) -> bool:
    """Until no task but this one is runnable (True), or `limit` seconds (False)."""
    end = time.perf_counter() + limit
    while True:
        try:
            running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return False
        if running <= 1:
            return True
        if time.perf_counter() > end:
            return False
        time.sleep(0.005)


def main(argv: list[str] | None = None) -> None:
    from . import abi, build, lean as lean_mod, model as cpu_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", default="target", choices=("target", "draft"))
    ap.add_argument("--rows", default="1,2,5,9,17")
    ap.add_argument("--kernels", default="avx2,avx512vnni")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--before", type=Path, default=None, help="an older kernels/ folder to compare with")
    ap.add_argument("--before-x8", action="store_true",
                    help="run the older kernel on the interleaved matrices too (an older kernel that has them)")
    ap.add_argument("--narrow", default=None, metavar="SPANS",
                    help="also time each kernel with its ymm copy of the interleaved matmuls on these pass "
                         "sizes (SPECDEC_X8_NARROW's form: 5-16 or 5-16,3-9; 'off' for none); the plain "
                         "label is then the zmm copy for every pass")
    ap.add_argument("--quiet", type=float, default=0.0, metavar="S",
                    help="before each timed pass, wait up to S seconds for no other runnable task (Linux: "
                         "/proc/loadavg), so that passes on a shared machine are taken when it is idle")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = [int(r) for r in args.rows.split(",")]

    loaded = cpu_model.load(_embedded_path(args.role), None)
    runs = []  # (label, lib, lean forward)
    if args.before is not None and not args.before_x8:
        plain = lean_mod.LeanForward(loaded.model, repack=False)
        for name in args.kernels.split(","):
            runs.append((f"before {name}", _old_library(args.before, build.BY_NAME[name]), plain))
    if args.role == "draft":
        cpu_model.requantize_for_draft(loaded.model, loaded.file)
    lean = lean_mod.LeanForward(loaded.model)
    if args.before is not None and args.before_x8:
        for name in args.kernels.split(","):
            runs.append((f"before {name}", _old_library(args.before, build.BY_NAME[name]), lean))
    narrow = {}  # label -> the ymm copy's pass sizes, set before each of its passes (one library, shared state)
    for name in args.kernels.split(","):
        k = build.load_variant(build.BY_NAME[name])
        runs.append((name, k.lib, lean))
        narrow[name] = k.narrow
        if args.narrow is not None:
            narrow[name] = None
            spans = build.narrow_rows((0, 0, 0), args.narrow)
            if spans is not None and all(k.lib.sd_set_x8_narrow(i, lo, hi) for i, (lo, hi) in enumerate(spans)):
                runs.append((f"{name} ymm {args.narrow}", k.lib, lean))
                narrow[f"{name} ymm {args.narrow}"] = spans

    ids = [(7919 * i + 13) % 150_000 for i in range(args.context + max(sizes))]
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    times: dict[tuple[str, int], list[float]] = {}
    idle = waited = 0
    def forward(lib, lf, cache, idv, n, start, logits, keep, label=None):
        if label in narrow:
            for i, (lo, hi) in enumerate(narrow[label] or ((1, 0), (1, 0))):
                lib.sd_set_x8_narrow(i, lo, hi)
        return lib.sd_forward(lf._struct, abi.ptr(cache.keys), abi.ptr(cache.values), cache.capacity, abi.ptr(idv), n,
                              start, abi.ptr(logits), keep, args.threads)

    for label, lib, lf in runs:
        cache = lf.new_cache()
        cache.reserve(args.context + max(sizes) + 1, keep=0)
        lf._bench = (lib, cache)
        prefill = torch.empty(1, lf.vocab)
        idv = np.asarray(ids[: args.context], np.int32)
        rc = forward(lib, lf, cache, idv, args.context, 0, prefill, 1, label)
        assert rc == 0, rc
    for rep in range(args.repeats + 1):
        for n in sizes:
            idv = np.asarray(ids[args.context : args.context + n], np.int32)
            for label, lib, lf in runs:
                cache = lf._bench[1]
                logits = torch.empty(n, lf.vocab)
                if args.quiet:
                    idle += _wait_idle(args.quiet)
                    waited += 1
                t0 = time.perf_counter()
                rc = forward(lib, lf, cache, idv, n, args.context, logits, n, label)
                dt = time.perf_counter() - t0
                assert rc == 0, rc
                if rep:  # the first round warms caches and pages
                    times.setdefault((label, n), []).append(dt * 1000)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.role}, {args.threads} threads, context {args.context}, {args.repeats} rounds, load average "
          f"{load_before:.2f} -> {load:.2f}" + (f", {idle} of {waited} passes started on an idle machine" if waited else ""))
    for stat, f in (("median", statistics.median), ("min", min)):
        print(f"\n{stat} (ms; x one row). per extra row: (t(9) - t(1)) / 8 / t(1)")
        print("| build | " + " | ".join(f"{n} rows" for n in sizes) + " | per extra row |")
        print("|---|" + "---|" * (len(sizes) + 1))
        for label, _, _ in runs:
            v = [f(times[(label, n)]) for n in sizes]
            one = v[0]
            cells = [f"{m:.1f} ({m / one:.2f}x)" for m in v]
            slope = (v[sizes.index(9)] - one) / 8 / one if 9 in sizes and 1 in sizes else float("nan")
            print(f"| {label} | " + " | ".join(cells) + f" | {slope:.3f} |")


if __name__ == "__main__":
    main()
