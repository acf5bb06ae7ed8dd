"""Building the kernel (kernels/*.c) for each instruction set, and loading the one this CPU runs.

Why a plain C library opened through cffi: one forward pass is one call (no Python per layer),
the integer dot products need intrinsics no library in the dependency set offers for GGUF
blocks, and a plain C library compiles in seconds with the system's compiler where a torch
extension takes a minute and torch's headers. Its ABI is declared once, in kernels/sdcpu.h,
and read from there (abi.py); a call releases the GIL.

One source, several builds (the "variants"), best first; the first whose CPU features this
machine has is used (one the compiler cannot build gives way to the next):
    amx         avx512vnni + AMX-INT8 tiles for Q4_K's passes of many rows (Intel Xeon of Sapphire
                Rapids and later; x8_amx.h)
    avx512vnni  AVX512-F/BW/VL + VNNI (Intel Ice Lake and later, AMD Zen 4 and later)
    avxvnni     AVX2 + AVX-VNNI (Intel Alder Lake and later)
    avx2        AVX2 + F16C (x86-64 since 2013)
    neon-dotprod  AArch64 with ARMv8.2's sdot (Apple Silicon, recent ARM servers)
    neon        AArch64
    portable    plain C, any CPU: the reference the others are tested against, bit for bit
All compute the same numbers (kernels/sdcpu.h says why). $SPECDEC_CPU_KERNEL picks one by
name ("off": no kernel, torch's path).

Where a library comes from, first found wins: beside this file in kernels/lib/ (the
installers build them ahead: users need no compiler), else the user cache's cpu/ folder, built
there on first use (about 2 s a variant). A file's name carries a hash of the sources and
flags, so an edited kernel is rebuilt, never reused stale.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import abi

KERNELS = Path(__file__).with_name("kernels")
SOURCES = ("blocks.c", "quants.c", "x8_narrow.c", "attention.c", "forward.c", "features.c")
HEADERS = ("sdcpu.h", "dot_portable.h", "dot_x86.h", "dot_neon.h", "x8_x86.h", "x8_amx.h", "x8_neon.h")
SHIPPED = KERNELS / "lib"
ENV = "SPECDEC_CPU_KERNEL"

# -ffp-contract=off: no fused multiply-add the source did not write (every build must round
# alike); -fvisibility=hidden: only the SD_EXPORT entry points leave the library
CFLAGS = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-Werror=implicit-function-declaration"]
COMMON = CFLAGS + ["-fPIC", "-shared", "-fvisibility=hidden"]

# cpu feature bits, as features.c reports them (sdcpu.h's sd_cpu_feature)
_BITS = abi.enum("sd_cpu_feature")
AVX2, FMA, F16C, AVX512F, AVX512BW, AVX512VL, AVX512VNNI, AVXVNNI, NEON, DOTPROD, AMXINT8 = (
    _BITS[f"SD_CPU_{n}"] for n in ("AVX2", "FMA", "F16C", "AVX512F", "AVX512BW", "AVX512VL", "AVX512VNNI", "AVXVNNI",
                                   "NEON", "DOTPROD", "AMXINT8"))


@dataclass(frozen=True)
class Variant:
    name: str
    arch: str  # "x86_64", "aarch64" or "any"
    flags: tuple[str, ...]
    needs: int  # feature bits

    def runs_on(self, arch: str, features: int) -> bool:
        return (self.arch in ("any", arch)) and (features & self.needs) == self.needs


VARIANTS = (
    Variant("amx", "x86_64",
            ("-mavx2", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-mamx-tile", "-mamx-int8",
             "-DSD_VNNI=1", "-DSD_AMX=1"),
            AVX2 | F16C | AVX512F | AVX512BW | AVX512VL | AVX512VNNI | AMXINT8),
    Variant("avx512vnni", "x86_64",
            ("-mavx2", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni", "-DSD_VNNI=1"),
            AVX2 | F16C | AVX512F | AVX512BW | AVX512VL | AVX512VNNI),
    Variant("avxvnni", "x86_64", ("-mavx2", "-mf16c", "-mavxvnni", "-DSD_VNNI=2"), AVX2 | F16C | AVXVNNI),
    Variant("avx2", "x86_64", ("-mavx2", "-mf16c"), AVX2 | F16C),
    Variant("neon-dotprod", "aarch64", ("-march=armv8.2-a+dotprod",), NEON | DOTPROD),
    Variant("neon", "aarch64", (), NEON),
    Variant("portable", "any", (), 0),
)
BY_NAME = {v.name: v for v in VARIANTS}
# the tests' builds of the VNNI paths for CPUs without VNNI: vpdpbusd through SIMDe's emulation
# (the only instruction those paths add to avx2's), so its use is checked bit for bit here too
EMULATED = (
    Variant("avx512vnni-simde", "x86_64", ("-mavx2", "-mf16c", "-DSD_VNNI=1", "-DSD_SIMDE_VNNI"), AVX2 | F16C),
    Variant("avxvnni-simde", "x86_64", ("-mavx2", "-mf16c", "-DSD_VNNI=2", "-DSD_SIMDE_VNNI"), AVX2 | F16C),
    # the amx build's tile path: its tile instructions in C (x8_amx.h), the rest as avx512vnni-simde
    Variant("amx-emulated", "x86_64", ("-mavx2", "-mf16c", "-DSD_VNNI=1", "-DSD_SIMDE_VNNI", "-DSD_AMX=1",
                                       "-DSD_AMX_EMULATED"), AVX2 | F16C),
)


class KernelUnavailable(RuntimeError):
    """No kernel library for this machine; the message says why in one line."""


def machine_arch() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(m, m)


def compiler() -> list[str] | None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    return shlex.split(cc) if cc else None  # CC may carry flags of its own, e.g. "gcc -m64"


def _openmp_flags(cc: list[str]) -> tuple[list[str], list[str]]:
    """(compile flags, link flags) for OpenMP. Apple's clang has no -fopenmp of its own: it
    takes torch's libomp (the runtime torch runs on, so both share one thread pool)."""
    if sys.platform != "darwin":
        return ["-fopenmp"], []
    import torch

    lib = Path(torch.__file__).parent / "lib"
    inc = Path(torch.__file__).parent / "include"
    if (lib / "libomp.dylib").is_file() and (inc / "omp.h").is_file():
        return ["-Xpreprocessor", "-fopenmp", f"-I{inc}"], [f"-L{lib}", "-lomp", f"-Wl,-rpath,{lib}"]
    return [], []  # no OpenMP runtime to link: one thread (build_report says so)


# the cpuid probe alone (features.c), built in a fraction of a second: which variants this CPU
# runs is known before any kernel is compiled
PROBE = Variant("probe", "any", (), 0)


def _sources(variant: Variant) -> tuple[str, ...]:
    return ("features.c",) if variant is PROBE else SOURCES


def library_name(variant: Variant) -> str:
    h = hashlib.sha256()
    for name in _sources(variant) + HEADERS:
        h.update((KERNELS / name).read_bytes())
    h.update(" ".join(COMMON + list(variant.flags)).encode())
    suffix = ".dll" if sys.platform == "win32" else ".dylib" if sys.platform == "darwin" else ".so"
    return f"sdcpu-{variant.name}-{h.hexdigest()[:12]}{suffix}"


def compile_library(variant: Variant, sources: list[Path], out: Path, cc: list[str] | None = None) -> Path:
    """Compile C `sources` with the variant's flags into the library `out` (written under a
    temporary name first: never a half-written library); RuntimeError with the compiler's last
    line on failure."""
    cc = cc or compiler()
    if not cc:
        raise RuntimeError("no C compiler found (install gcc or clang, or set CC)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")
    omp_c, omp_l = _openmp_flags(cc)
    cmd = [*cc, *COMMON, *variant.flags, *omp_c, *(str(s) for s in sources), "-o", str(tmp), "-lm", *omp_l]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"{Path(cc[0]).name} failed for the {variant.name} kernel: {last}")
    os.replace(tmp, out)
    return out


def build(variant: Variant, dest: Path, cc: list[str] | None = None) -> Path:
    """Compile one variant of this checkout's kernel into dest/<library_name>."""
    return compile_library(variant, [KERNELS / s for s in _sources(variant)], dest / library_name(variant), cc)


def find_or_build(variant: Variant) -> Path:
    name = library_name(variant)
    if (SHIPPED / name).is_file():
        return SHIPPED / name
    from ..paths import cache_dir

    cached = cache_dir() / "cpu" / name
    return cached if cached.is_file() else build(variant, cached.parent)


def find_or_build_all(variants: list[Variant], jobs: int | None = None) -> list[Path]:
    """find_or_build for each variant, the missing ones compiled side by side: one compiler
    process builds one variant on one core, so a test run that needs every build (the emulated
    VNNI ones included) waits about their sum over the cores, not their sum. The first build
    that fails raises its RuntimeError."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        return list(pool.map(find_or_build, variants))


@dataclass
class Kernel:
    """A loaded kernel library (its entry points as sdcpu.h declares them), which variant it is,
    and the pass sizes its ymm copy of the interleaved matmuls takes (narrow_rows)."""

    lib: object
    variant: Variant
    path: Path
    narrow: Narrow | None = None

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def described(self) -> str:
        """The build as reports name it: "avx512vnni", or with its ymm passes where it takes them."""
        if not self.narrow:
            return self.name
        spans = [f"{what} {lo}-{hi} rows" for what, (lo, hi) in zip(("K-quants", "32-element blocks"), self.narrow)
                 if lo <= hi]
        return f"{self.name} (ymm unit: {', '.join(spans)})"


# Which passes take the avx512vnni build's ymm copy of the interleaved matmuls (x8_narrow.c), as
# ((first, last) activation rows of the K-quants, the same of the 32-element blocks), by CPU
# (vendor, family) as sd_cpu_ident reads it. Measured where listed, both widths side by side in
# passbench (speed notes, items 115-116); every other CPU keeps the zmm unit for every pass (the ymm
# copy is not measured there: the Intel VM's passes were tuned on zmm). Both copies give the same
# numbers bit for bit. (1, 0): no pass of that kind.
Narrow = tuple[tuple[int, int], tuple[int, int]]
NARROW_ENV = "SPECDEC_X8_NARROW"
NARROW_BY_CPU: dict[tuple[int, int], Narrow] = {
    # AMD family 25 with AVX-512, Zen 4: the draft's 3-9-row passes 6-19% cheaper on ymm (item 115).
    # The K-quants' 5-16-row passes were 10-23% cheaper on ymm while the blocks ahead were hinted
    # into L1; hinted into L2 (item 116) zmm is 3-9% cheaper than ymm at every size, so none.
    (2, 25): ((1, 0), (3, 9)),
}


def cpu_ident(lib=None) -> tuple[int, int, int]:
    """(vendor: 1 Intel, 2 AMD, 0 other; family; model) of this CPU, from cpuid."""
    lib = lib if lib is not None else abi.open_library(find_or_build(PROBE))
    out = abi.ffi.new("int32_t[3]")
    lib.sd_cpu_ident(out)
    return int(out[0]), int(out[1]), int(out[2])


def narrow_rows(ident: tuple[int, int, int], asked: str | None = None) -> Narrow | None:
    """The ymm copy's pass sizes for a CPU: SPECDEC_X8_NARROW=auto (the table above; the
    default), off, or "K_FIRST-K_LAST[,B_FIRST-B_LAST]" (to measure another CPU). A setting
    that cannot be read raises KernelUnavailable with the reason in one line."""
    asked = (os.environ.get(NARROW_ENV, "auto") if asked is None else asked).strip().lower() or "auto"
    if asked == "auto":
        return NARROW_BY_CPU.get(ident[:2])
    if asked == "off":
        return None
    try:
        spans = [tuple(int(x) for x in part.split("-")) for part in asked.split(",")]
        if len(spans) == 1:
            spans.append((1, 0))
        (k0, k1), (b0, b1) = spans
    except ValueError:
        raise KernelUnavailable(f"{NARROW_ENV}={asked!r}: use auto, off, or rows as 5-16 or 5-16,3-9") from None
    return (k0, k1), (b0, b1)


def load_variant(variant: Variant) -> Kernel:
    """Build (if needed) and load one variant, its ymm passes set for this CPU; the caller makes
    sure this CPU runs it."""
    path = find_or_build(variant)
    lib = abi.open_library(path)
    narrow = narrow_rows(cpu_ident(lib))
    if narrow is not None:
        has = [lib.sd_set_x8_narrow(kind, lo, hi) for kind, (lo, hi) in enumerate(narrow)]
        narrow = narrow if all(has) and any(lo <= hi for lo, hi in narrow) else None
    return Kernel(lib, variant, path, narrow)


def cpu_features() -> int:
    """This CPU's feature bits, as the cpuid probe (features.c) reports them."""
    return abi.open_library(find_or_build(PROBE)).sd_cpu_features()


def runnable(features: int | None = None) -> list[Variant]:
    """The variants this machine runs, best first (portable last)."""
    features = cpu_features() if features is None else features
    arch = machine_arch()
    return [v for v in VARIANTS if v.runs_on(arch, features)]


_chosen: Kernel | None = None
_why_not: str | None = None


def kernel() -> Kernel:
    """The kernel for this machine (loaded once per process); KernelUnavailable says why not."""
    global _chosen, _why_not
    if _chosen is not None:
        return _chosen
    if _why_not is not None:
        raise KernelUnavailable(_why_not)
    asked = os.environ.get(ENV, "auto").strip().lower() or "auto"
    try:
        if asked == "off":
            raise KernelUnavailable(f"turned off by {ENV}=off")
        if asked != "auto" and asked not in BY_NAME:
            raise KernelUnavailable(f"{ENV}={asked!r} names no kernel; use auto, off or one of {', '.join(BY_NAME)}")
        choices = runnable()
        if asked != "auto":
            if BY_NAME[asked] not in choices:
                raise KernelUnavailable(f"{ENV}={asked}: this CPU cannot run it (it runs {', '.join(v.name for v in choices)})")
            choices = [BY_NAME[asked]]
        # the best build this CPU runs; in auto mode one the compiler cannot build gives way to the
        # next (a GCC older than 11 knows no -mamx-tile: that machine runs avx512vnni)
        for i, variant in enumerate(choices):
            try:
                _chosen = load_variant(variant)
                return _chosen
            except RuntimeError:
                if i + 1 == len(choices):
                    raise
        raise KernelUnavailable("no kernel build for this CPU")
    except KernelUnavailable as e:
        _why_not = str(e)
        raise
    except (OSError, RuntimeError) as e:
        _why_not = f"could not build or load the CPU kernel: {e}"
        raise KernelUnavailable(_why_not) from None


def loaded() -> Kernel | None:
    """The kernel this process loaded through kernel(), if it has (no build, no load)."""
    return _chosen


def unavailable() -> str | None:
    """None when the kernel loads, else a one-line reason (the app shows it)."""
    try:
        kernel()
    except KernelUnavailable as e:
        return str(e)
    return None
