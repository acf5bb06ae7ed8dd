"""The project's one native kernel (qgemm.c), built on first use and called through ctypes.

Why C: torch's CPU int4 kernel re-decodes the weights for every 4 rows, so on an AVX2 machine a
verification of k+1 tokens cost 2-4 decode steps; qgemm.c decodes each weight once per call
(measurements in docs/speed-notes.md, item 15). No library in the dependency set offers that for
GGUF's 4-bit and 6-bit codes on AVX2.

Why ctypes and a plain C file rather than a torch C++ extension: it compiles in about a second
with the system's C compiler (a torch extension takes a minute and needs torch's headers), and
it needs nothing from Python but data pointers. ctypes releases the GIL during the call.

Where the library comes from, first found wins:
1. beside this file, built ahead by the packaging scripts (the installers ship no compiler);
2. the user cache (models.cache.cache_dir() / "native"), built there on first use.
A file's name carries a hash of the source and flags, so an edited kernel is rebuilt. When
there is no x86-64 AVX2+FMA CPU or no compiler, `load()` returns None and `unavailable()` says
why; callers fall back to torch's kernels.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("qgemm.c")
FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC"]

_lib: ctypes.CDLL | None = None
_why: str | None = None  # why the library is unavailable, once known


def library_name() -> str:
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:12]
    return f"qgemm-{digest}{'.dll' if sys.platform == 'win32' else '.so'}"


def cpu_supported() -> bool:
    """x86-64 with AVX2 and FMA (torch reports "AVX2" or "AVX512" for those CPUs)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    except Exception:  # noqa: BLE001 -- an old torch without the query: do not guess
        return False


def build(dest: Path) -> Path:
    """Compile qgemm.c into dest/<library_name()>; raises RuntimeError with the compiler's
    message on failure. Written under a temporary name first: never a half-written library."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler found (install gcc, or set CC)")
    cc_args = shlex.split(cc)  # CC may carry flags of its own, e.g. "gcc -m64"
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / library_name()
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")
    proc = subprocess.run([*cc_args, *FLAGS, str(SOURCE), "-o", str(tmp)], capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"{Path(cc_args[0]).name} failed: {last}")
    os.replace(tmp, out)
    return out


def _find_or_build() -> Path:
    name = library_name()
    shipped = Path(__file__).with_name(name)
    if shipped.is_file():
        return shipped
    from ..models.cache import cache_dir

    cached = cache_dir() / "native" / name
    return cached if cached.is_file() else build(cached.parent)


def load() -> ctypes.CDLL | None:
    """The kernel library, or None (see unavailable()). Loaded once per process."""
    global _lib, _why
    if _lib is not None or _why is not None:
        return _lib
    if os.environ.get("SPECDEC_NO_NATIVE"):
        _why = "turned off by SPECDEC_NO_NATIVE"
    elif not cpu_supported():
        _why = f"needs an x86-64 CPU with AVX2 and FMA (this one: {platform.machine()}, " \
               f"{torch.backends.cpu.get_cpu_capability()})"
    else:
        try:
            lib = ctypes.CDLL(str(_find_or_build()))
        except (OSError, RuntimeError) as exc:
            _why = f"could not build or load the kernel: {exc}"
        else:
            i64, ptr = ctypes.c_int64, ctypes.c_void_p
            lib.q4_gemm.argtypes = [ptr, i64, i64, ptr, ptr, ptr, ptr, i64, ctypes.c_int]
            lib.q8_gemm.argtypes = [ptr, i64, i64, ptr, ptr, ptr, i64, ctypes.c_int]
            lib.q4_gemv_grouped.argtypes = [ptr, i64, ptr, ptr, ptr, ptr, i64, ctypes.c_int]
            lib.q4_gemm.restype = lib.q8_gemm.restype = lib.q4_gemv_grouped.restype = None
            _lib = lib
    return _lib


def unavailable() -> str | None:
    """None when the kernel loads, else a one-line reason."""
    load()
    return _why


def gemm_into(x: torch.Tensor, rows: int, y: torch.Tensor, bits: int, codes: torch.Tensor,
              scale: torch.Tensor, offset: torch.Tensor | None, grouped: bool = False) -> None:
    """y[rows, N] = x[rows, K] @ W.T, float32, both contiguous (any leading shape); W from
    codes/scale/offset in qgemm.c's panel layout (native_linear.pack_*). load() must have
    succeeded and the caller guarantees shapes and dtypes: nothing is checked here.
    grouped: a one-row 4-bit pass sums per group before scaling (faster, other rounding: for
    a draft's layers only, see qgemm.c)."""
    k, n = x.shape[-1], y.shape[-1]
    if grouped and rows == 1 and bits == 4:
        _lib.q4_gemv_grouped(x.data_ptr(), k, codes.data_ptr(), scale.data_ptr(), offset.data_ptr(),
                             y.data_ptr(), n, torch.get_num_threads())
    elif bits == 4:
        _lib.q4_gemm(x.data_ptr(), rows, k, codes.data_ptr(), scale.data_ptr(), offset.data_ptr(),
                     y.data_ptr(), n, torch.get_num_threads())
    else:
        _lib.q8_gemm(x.data_ptr(), rows, k, codes.data_ptr(), scale.data_ptr(), y.data_ptr(), n,
                     torch.get_num_threads())
