"""Time one weight matrix of the embedded target through kernels built from several source
folders, in one process: the matmul-level before/after that passbench (whole passes) cannot
split into its parts (speed notes, item 111).

    python scripts/matmul_ab.py OLD_KERNELS_DIR,NEW_KERNELS_DIR [--tensor blk.0.ffn_gate.weight]
        [--rows 1,2,3,4] [--threads 1] [--copies 12] [--nrows 0] [--inner 1] [--variant avx512vnni]

Each folder (e.g. `git archive HEAD~1 specdec_core/cpu/kernels | tar -x -C /tmp/old`) is
compiled with the variant's flags and repacks the tensor itself (interleaved layout). The
kernels and row counts run round-robin; the first round is a warm-up whose outputs must be
equal bit for bit across the folders ("DIFFERS" otherwise). `--copies 12` streams twelve
copies in turn, so every call reads the weights from memory; `--copies 1` lets a matrix sit in
L3; `--nrows 768 --inner 50` (its first 768 rows, fifty calls a timing) fits one core's L2, so
the time is the arithmetic alone. Prints medians (ms) and each folder's ratio to the first.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    import gguf

    from specdec_core.cpu import abi, build
    from specdec_core.models.default_pair import EMBEDDED, assembled_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", help="kernel source folders, comma-separated; ratios are to the first")
    ap.add_argument("--tensor", default="blk.0.ffn_gate.weight")
    ap.add_argument("--rows", default="1,2,3,4", help="activation rows of a call")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--copies", type=int, default=12)
    ap.add_argument("--nrows", type=int, default=0, help="only the matrix's first N output rows")
    ap.add_argument("--inner", type=int, default=1, help="calls a timing")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--variant", default="avx512vnni")
    args = ap.parse_args()

    reader = gguf.GGUFReader(str(assembled_path(EMBEDDED["target"])))
    t = next(t for t in reader.tensors if t.name == args.tensor)
    n_out, k = int(t.shape[1]), int(t.shape[0])
    raw = np.ascontiguousarray(np.asarray(t.data).view(np.uint8)).reshape(n_out, -1)
    if args.nrows:
        raw, n_out = np.ascontiguousarray(raw[: args.nrows]), args.nrows
    row_bytes = raw.shape[1]
    print(f"{args.tensor}: {t.tensor_type.name} {n_out} x {k}, {args.variant}, {args.threads} thread(s), "
          f"{args.copies} copies")
    x8 = abi.enum("sd_layout")["SD_LAYOUT_X8"]
    out_dir = Path(tempfile.mkdtemp(prefix="sd-matmul-ab-"))
    kernels = []  # (label, lib, copies of the matrix in its own layout)
    for i, d in enumerate(args.dirs.split(",")):
        lib = abi.open_library(build.compile_library(build.BY_NAME[args.variant], sorted(Path(d).glob("*.c")),
                                                     out_dir / f"k{i}-{args.variant}.so"))
        mats = []
        for _ in range(args.copies):
            m = np.empty_like(raw)
            rc = lib.sd_repack(int(t.tensor_type), abi.ptr(raw), row_bytes, n_out, k, abi.ptr(m), x8, 2)
            if rc:
                raise SystemExit(f"repack failed in {d}: {rc}")
            mats.append(m)
        kernels.append((f"{i}:{Path(d).name}", lib, mats))
    rows = [int(r) for r in args.rows.split(",")]
    rng = np.random.default_rng(0)
    xs = {m: rng.standard_normal((m, k)).astype(np.float32) for m in rows}
    ys = {m: np.empty((m, n_out), np.float32) for m in rows}
    times: dict[tuple[str, int], list[float]] = {}
    first: dict[int, np.ndarray] = {}
    call = 0
    for rnd in range(args.rounds + 1):
        for m in rows:
            for label, lib, mats in kernels:
                w = mats[call % args.copies]
                call += 1
                px, pw, py = abi.ptr(xs[m]), abi.ptr(w), abi.ptr(ys[m])
                t0 = time.perf_counter()
                for _ in range(args.inner):
                    rc = lib.sd_matmul(px, m, k, int(t.tensor_type), pw, n_out, row_bytes, x8, abi.NULL, py, n_out,
                                       args.threads)
                dt = (time.perf_counter() - t0) / args.inner
                if rc:
                    raise SystemExit(f"sd_matmul failed in {label}: {rc}")
                if rnd:
                    times.setdefault((label, m), []).append(dt * 1e3)
                elif m in first and not np.array_equal(first[m], ys[m]):
                    print(f"DIFFERS: {label}, {m} rows")
                else:
                    first.setdefault(m, ys[m].copy())
    base = kernels[0][0]
    print("| kernel | " + " | ".join(f"{m} rows" for m in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for label, _, _ in kernels:
        cells = []
        for m in rows:
            v, b = statistics.median(times[(label, m)]), statistics.median(times[(base, m)])
            cells.append(f"{v:.3f} ({v / b:.2f})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("ps per activation row x weight element, first folder: "
          + ", ".join(f"{m} rows {statistics.median(times[(base, m)]) * 1e9 / (n_out * k * m):.1f}" for m in rows))


if __name__ == "__main__":
    main()
