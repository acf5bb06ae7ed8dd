"""The CPU backend's kernel (specdec_core/cpu/kernels): block formats, integer dot products,
batch invariance, and every build against the portable one.

Three tiers: hand-built blocks, exact equalities (decoders against gguf-py's dequantization bit
for bit; every instruction-set build against the portable C bit for bit; a row alone against
the same row among 17, with 1 and 2 threads), and bounds against a float64 reference.
The builds tried are those this machine runs, the VNNI paths through SIMDe's emulation of
their one extra instruction, and, where Debian's aarch64 cross compiler and qemu-user are
installed (.ci/run installs them), the NEON build under qemu.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gguf_blocks import ALL_TYPES, GOLDEN_DIR, dequantize, golden_matmul_case, random_blocks, sha, type_id
from specdec_core.cpu import build
from specdec_core.cpu.abi import ptr

P = ptr  # an array (or None) as the kernel's pointer argument


@pytest.fixture(scope="module")
def portable():
    # every build this module tries, compiled side by side before the first test needs one (a
    # fresh clone compiles five or six here: ~60 s each on one core); a build that fails here
    # fails again in the tests that load it, with the compiler's message, and only there
    try:
        build.find_or_build_all([build.BY_NAME["portable"], *SIMD])
    except RuntimeError:
        pass
    return build.load_variant(build.BY_NAME["portable"])


# .ci/run installs the cross compiler, qemu-user and SIMDe, and sets this: there a missing tool
# fails the run instead of skipping the builds it would test
REQUIRE_TOOLS = bool(os.environ.get("SPECDEC_REQUIRE_KERNEL_TOOLS"))
SIMDE = Path("/usr/include/simde/x86/avx512/dpbusd.h")


def _simd_builds():
    """Every build this machine can run besides the portable one, emulated VNNI included."""
    out = [v for v in build.runnable() if v.name != "portable"]
    if build.BY_NAME["avx2"] in out and (SIMDE.is_file() or REQUIRE_TOOLS):
        out += list(build.EMULATED)  # without SIMDe under REQUIRE_TOOLS: their build fails the tests
    return out


SIMD = _simd_builds()
# the activation block each weight type takes (0: float activations)
ACT_BLOCK = {**{n: 32 for n in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")}, **{n: 256 for n in ("Q4_K", "Q5_K", "Q6_K")}}


def matmul(k, x: np.ndarray, raw: np.ndarray, name: str, threads: int = 1, rowmap=None, layout: int = 0) -> np.ndarray:
    m, kdim = x.shape
    n = raw.shape[0] if rowmap is None else len(rowmap)
    y = np.full((m, n), np.nan, np.float32)
    rc = k.lib.sd_matmul(P(x), m, kdim, type_id(name), P(raw), n, raw.shape[1], layout,
                         P(rowmap), P(y), n, threads)
    assert rc == 0
    return y


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


# ---------------------------------------------------------------- the ABI, declared once (sdcpu.h)


def test_the_abi_block_declares_every_entry_point_and_nothing_else():
    import re

    from specdec_core.cpu import abi

    defined = set()
    for src in build.SOURCES:
        defined |= set(re.findall(r"^SD_EXPORT [\w\s\*]+?\b(sd_\w+)\(", (build.KERNELS / src).read_text(), re.M))
    declared = set(re.findall(r"\b(sd_\w+)\(", abi.declarations()))
    assert declared == defined


def test_struct_layouts_are_the_compilers(portable):
    """cffi lays the structs out from the declarations; each build's compiler must agree."""
    from specdec_core.cpu.abi import ffi

    expect = [ffi.sizeof("sd_mat"), ffi.offsetof("sd_mat", "row_bytes"), ffi.offsetof("sd_mat", "type"),
              ffi.offsetof("sd_mat", "layout"), ffi.sizeof("sd_layer"), ffi.offsetof("sd_layer", "wq"),
              ffi.offsetof("sd_layer", "wdown"), ffi.offsetof("sd_layer", "bq"), ffi.offsetof("sd_layer", "k_norm"),
              ffi.sizeof("sd_model"), ffi.offsetof("sd_model", "rms_eps"), ffi.offsetof("sd_model", "inv_freq"),
              ffi.offsetof("sd_model", "tok_embd"), ffi.offsetof("sd_model", "output"),
              ffi.offsetof("sd_model", "output_norm"), ffi.offsetof("sd_model", "layers")]
    for k in [portable] + [build.load_variant(v) for v in SIMD]:
        out = np.zeros(32, np.int64)
        assert k.lib.sd_abi_layout(P(out), 32) == len(expect)
        assert out[: len(expect)].tolist() == expect, k.name


def test_builds_side_by_side_are_the_ones_found_one_at_a_time(portable):
    wanted = [build.BY_NAME["portable"], *SIMD]
    assert build.find_or_build_all(wanted, jobs=2) == [build.find_or_build(v) for v in wanted]


@pytest.mark.parametrize("asked", ["auto", "amx"])
def test_a_build_the_compiler_cannot_make_gives_way_to_the_next_one(monkeypatch, asked):
    """A CPU with AMX and a compiler without -mamx-tile (GCC < 11): picked by itself, the next
    build this CPU runs loads instead; asked for by name, the one-line reason says why not."""
    tried = []

    def load(variant):
        tried.append(variant.name)
        if variant.name == "amx":
            raise RuntimeError("cc failed for the amx kernel: unrecognized option '-mamx-tile'")
        return build.Kernel(None, variant, Path("/nowhere"))

    monkeypatch.setattr(build, "runnable", lambda features=None: [build.BY_NAME[n] for n in ("amx", "avx512vnni", "portable")])
    monkeypatch.setattr(build, "load_variant", load)
    monkeypatch.setattr(build, "_chosen", None)
    monkeypatch.setattr(build, "_why_not", None)
    monkeypatch.setenv(build.ENV, asked)
    if asked == "auto":
        assert build.kernel().name == "avx512vnni" and tried == ["amx", "avx512vnni"]
    else:
        with pytest.raises(build.KernelUnavailable, match="-mamx-tile"):
            build.kernel()


def test_type_ids_are_ggmls():
    import gguf

    from specdec_core.cpu.abi import enum

    for name, value in enum("sd_type").items():
        assert value == int(gguf.GGMLQuantizationType[name.removeprefix("SD_")]), name


# ---------------------------------------------------------------- hand-built cases


def test_q4_0_hand_built_block(portable):
    # one block, d = 0.5: codes 0..15 then 15..0 -> weights (q - 8) * 0.5
    codes = list(range(16)) + list(range(15, -1, -1))
    qs = bytes((codes[j] | (codes[j + 16] << 4)) for j in range(16))
    raw = np.frombuffer(np.float16(0.5).tobytes() + qs, dtype=np.uint8).reshape(1, 18).copy()
    w = dequantize(raw, "Q4_0", 32)[0]
    assert w.tolist() == [(c - 8) * 0.5 for c in codes]
    # x = 127 at element 0, 0 elsewhere: one code, scale 1 -> y = w[0] exactly
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 127.0
    assert matmul(portable, x, raw, "Q4_0")[0, 0] == w[0] * 127


def test_activations_quantize_to_nearest_even_codes(portable):
    x = np.array([[127.0, -127.0, 0.5, 1.5, 2.5, -0.5, 63.5, 0.0] + [0.0] * 24], np.float32)
    q, d, s = np.zeros(32, np.int8), np.zeros(1, np.float32), np.zeros(2, np.int16)
    portable.lib.sd_quantize_act(P(x), 1, 32, 32, P(q), P(d), P(s))
    assert d[0] == np.float32(127.0) / np.float32(127.0)
    assert q[:8].tolist() == [127, -127, 0, 2, 2, 0, 64, 0]  # ties to even
    assert s.tolist() == [int(q[:16].sum()), int(q[16:].sum())]


def test_zero_rows_quantize_to_zero(portable):
    x = np.zeros((2, 256), np.float32)
    raw = random_blocks("Q4_K", 3, 256, np.random.default_rng(0))
    assert not matmul(portable, x, raw, "Q4_K").any()


# ---------------------------------------------------------------- exact equalities


@pytest.mark.parametrize("name", ALL_TYPES)
def test_decoders_equal_gguf_py_bit_for_bit(portable, name):
    rng = np.random.default_rng(1)
    raw = random_blocks(name, 7, 512, rng)
    ref = dequantize(raw, name, 512)
    for k in [portable] + [build.load_variant(v) for v in SIMD]:
        out = np.empty_like(ref)
        k.lib.sd_dequantize(type_id(name), P(raw), raw.shape[1], 0, P(None), 7, 512, P(out))
        assert np.array_equal(bits(out), bits(ref)), k.name
    # rows gathered by index (an embedding lookup)
    idx = np.array([6, 0, 3, 3], np.int32)
    out = np.empty((4, 512), np.float32)
    portable.lib.sd_dequantize(type_id(name), P(raw), raw.shape[1], 0, P(idx), 4, 512, P(out))
    assert np.array_equal(bits(out), bits(ref[idx]))


@pytest.mark.parametrize("name", ALL_TYPES)
def test_rows_alone_equal_rows_together_for_any_thread_count(portable, name):
    """Batch invariance: rows computed alone or in passes of every size 1..17 equal them
    computed among 17, with 1 and 2 threads, on every build; and every build equals the
    portable one. 896 columns of 32-blocks end in a partial group of 8 blocks (the 0.5B's width)."""
    rng = np.random.default_rng(2)
    kdim = 896 if name not in ("Q4_K", "Q5_K", "Q6_K") else 1024
    raw = random_blocks(name, 40, kdim, rng)
    x = rng.standard_normal((17, kdim)).astype(np.float32)
    x[3] *= 100  # an outlier row: other scales, same rules
    ref = matmul(portable, x, raw, name, threads=1)
    assert not np.isnan(ref).any()
    for k in [portable] + [build.load_variant(v) for v in SIMD]:
        for threads in (1, 2):
            together = matmul(k, x, raw, name, threads)
            assert np.array_equal(bits(together), bits(ref)), (k.name, threads)
            for rows in [slice(0, n) for n in range(1, 17)] + [slice(5, 7), slice(8, 17), slice(16, 17)]:
                alone = matmul(k, np.ascontiguousarray(x[rows]), raw, name, threads)
                assert np.array_equal(bits(alone), bits(ref[rows])), (k.name, threads, rows)


# SPECDEC_WRITE_CPU_GOLDEN=1 rewrites the stored numbers from the code as it is: only for a
# reviewed change of what the kernel computes (never to make a failing test pass)
WRITE_GOLDEN = bool(os.environ.get("SPECDEC_WRITE_CPU_GOLDEN"))
GOLDEN_MATMUL = GOLDEN_DIR / "cpu_golden_matmul.npz"


def test_every_build_gives_the_stored_numbers():
    """Each type's matmul of 17 rows (an outlier row, a zero row), on every build, equals the
    bits stored from the kernel before the interleaved layouts (tests/data)."""
    kernels = [build.load_variant(build.BY_NAME["portable"])] + [build.load_variant(v) for v in SIMD]
    if WRITE_GOLDEN:
        out = {}
        for name in ALL_TYPES:
            raw, x = golden_matmul_case(name)
            out[f"{name}.inputs"] = np.array(sha(raw, x))
            out[f"{name}.y"] = matmul(kernels[0], x, raw, name)
        GOLDEN_MATMUL.parent.mkdir(exist_ok=True)
        np.savez_compressed(GOLDEN_MATMUL, **out)
    stored = np.load(GOLDEN_MATMUL)
    for name in ALL_TYPES:
        raw, x = golden_matmul_case(name)
        assert str(stored[f"{name}.inputs"]) == sha(raw, x), f"{name}: the inputs changed (numpy or gguf-py?), not the kernel"
        for k in kernels:
            for threads in (1, 2):
                assert np.array_equal(bits(matmul(k, x, raw, name, threads)), bits(stored[f"{name}.y"])), (name, k.name, threads)


# ---------------------------------------------------------------- the interleaved layout (x8)

X8_TYPES = ("Q4_K", "Q6_K", "Q4_0", "Q5_0", "Q8_0")
X8 = 1


def repack(k, raw: np.ndarray, name: str, kdim: int, layout: int = X8) -> np.ndarray:
    out = np.empty_like(raw)
    assert k.lib.sd_repack(type_id(name), P(raw), raw.shape[1], raw.shape[0], kdim, P(out), layout, 2) == 0
    return out


def test_x8_types_are_the_ones_the_kernel_interleaves(portable):
    assert [n for n in ALL_TYPES if portable.lib.sd_x8_supported(type_id(n))] == sorted(X8_TYPES, key=ALL_TYPES.index)


@pytest.mark.parametrize("name", X8_TYPES)
def test_x8_repack_is_a_permutation_undone_exactly(portable, name):
    """Repacking moves every byte (Q4_K's scales and Q5_0's high bits are re-encoded, in the
    same bits) and unpacking gives the file's rows back; dequantized rows read through either
    layout agree bit for bit."""
    rng = np.random.default_rng(20)
    kdim = 512 if name in ("Q4_K", "Q6_K") else 224
    raw = random_blocks(name, 24, kdim, rng)
    x8 = repack(portable, raw, name, kdim)
    assert not np.array_equal(x8, raw) and x8.nbytes == raw.nbytes
    assert np.array_equal(repack(portable, x8, name, kdim, layout=0), raw)
    idx = np.array([23, 0, 9, 9, 16], np.int32)
    a, b = np.empty((5, kdim), np.float32), np.empty((5, kdim), np.float32)
    assert portable.lib.sd_dequantize(type_id(name), P(raw), raw.shape[1], 0, P(idx), 5, kdim, P(a)) == 0
    assert portable.lib.sd_dequantize(type_id(name), P(x8), raw.shape[1], X8, P(idx), 5, kdim, P(b)) == 0
    assert np.array_equal(bits(a), bits(b))


WIDE = ((1, 0), (1, 0))  # no pass takes the ymm copy
YMM = ((1, 10_000), (1, 10_000))  # every pass does


def has_ymm_copy(k) -> bool:
    """The build has a ymm copy of its interleaved matmuls (x8_narrow.c: avx512vnni and amx)."""
    return bool(k.lib.sd_set_x8_narrow(0, *(k.narrow or WIDE)[0]))


def builds_and_widths(portable):
    """Every build, and those with a ymm copy once more with every pass on it."""
    for k in [portable] + [build.load_variant(v) for v in SIMD]:
        yield k, False
        if has_ymm_copy(k):
            yield k, True


@contextlib.contextmanager
def widths(k, ymm: bool):
    """Every pass on the ymm copy (ymm) or on the build's own (zmm) copy, then the build's
    setting for this CPU again (one library per process: the setting is shared)."""
    for kind, (lo, hi) in enumerate(YMM if ymm else WIDE):
        k.lib.sd_set_x8_narrow(kind, lo, hi)
    try:
        yield
    finally:
        for kind, (lo, hi) in enumerate(k.narrow or WIDE):
            k.lib.sd_set_x8_narrow(kind, lo, hi)


def ymm_copy_expected(v) -> bool:
    """x8_narrow.c compiles the interleaved matmuls on ymm registers in the native builds whose
    own copy is zmm (avx512vnni, amx); not in their SIMDe emulations (avxvnni-simde's code)."""
    return "-DSD_VNNI=1" in v.flags and "-DSD_SIMDE_VNNI" not in v.flags


def test_the_ymm_copy_is_in_the_avx512vnni_builds_only(portable):
    """The setter says 1 where the build has a ymm copy and 0 everywhere else."""
    for k in [portable] + [build.load_variant(v) for v in SIMD]:
        assert has_ymm_copy(k) == ymm_copy_expected(k.variant), k.name


def test_the_ymm_passes_are_chosen_by_cpu_and_by_setting(monkeypatch):
    """auto takes the table's entry for this CPU's vendor and family, off none; spans can be
    asked for; a setting that cannot be read is one line."""
    zen4 = (2, 25, 17)
    assert build.narrow_rows(zen4, "auto") == build.NARROW_BY_CPU[(2, 25)]
    assert build.narrow_rows((1, 6, 143), "auto") is None  # Intel: the zmm copy for every pass
    assert build.narrow_rows(zen4, "off") is None
    assert build.narrow_rows((1, 6, 143), "5-9") == ((5, 9), (1, 0))
    assert build.narrow_rows((1, 6, 143), "5-9, 3-4") == ((5, 9), (3, 4))
    one_span = build.Kernel(None, build.BY_NAME["avx512vnni"], Path("x"), ((5, 9), (1, 0)))
    assert one_span.described == "avx512vnni (ymm unit: K-quants 5-9 rows)"
    with pytest.raises(build.KernelUnavailable, match="SPECDEC_X8_NARROW"):
        build.narrow_rows(zen4, "five")
    vendor, family, _ = build.cpu_ident()
    if build.machine_arch() == "x86_64":
        assert vendor in (1, 2) and family >= 6
    # loading a build with a ymm copy on a Zen 4 sets the table's spans; off sets none
    monkeypatch.setattr(build, "cpu_ident", lambda lib=None: zen4)
    ymm_builds = [v for v in SIMD if ymm_copy_expected(v)]
    if not ymm_builds:
        pytest.skip("no build with a ymm copy runs here")
    k = build.load_variant(ymm_builds[0])
    assert k.narrow == build.NARROW_BY_CPU[(2, 25)] and "ymm unit" in k.described
    monkeypatch.setenv(build.NARROW_ENV, "off")
    k = build.load_variant(ymm_builds[0])
    assert k.narrow is None and k.described == k.name
    monkeypatch.undo()
    build.load_variant(ymm_builds[0])  # this CPU's own setting again, for the tests after this one


@pytest.mark.parametrize("name", X8_TYPES)
def test_x8_equals_the_file_rows_for_every_pass_size_thread_count_and_build(portable, name):
    """The interleaved matmul gives the row-major matmul's bits (the portable build's, today's
    numbers) for passes of 1..17 rows and of 70 (two kernel blocks of activation rows), with 1
    and 2 threads, on every build; 56 rows of 32-blocks: an odd number of 8-row groups."""
    rng = np.random.default_rng(21)
    kdim = 1024 if name in ("Q4_K", "Q6_K") else 896
    rows = 56
    raw = random_blocks(name, rows, kdim, rng)
    x = rng.standard_normal((70, kdim)).astype(np.float32)
    x[3] *= 100
    x[5] = 0.0
    ref = matmul(portable, x, raw, name)
    for k, ymm in builds_and_widths(portable):
        x8 = repack(k, raw, name, kdim)
        with widths(k, ymm):
            for threads in (1, 2):
                got = matmul(k, x, x8, name, threads, layout=X8)
                assert np.array_equal(bits(got), bits(ref)), (k.name, ymm, threads)
                for m in range(1, 18):
                    got = matmul(k, np.ascontiguousarray(x[20 : 20 + m]), x8, name, threads, layout=X8)
                    assert np.array_equal(bits(got), bits(ref[20 : 20 + m])), (k.name, ymm, threads, m)


@pytest.mark.parametrize("name", X8_TYPES)
def test_x8_holds_at_the_extremes_of_the_int16_sums(portable, name):
    """Codes at the top of their range against activation codes of +-127 everywhere (a constant
    row quantizes to 127s): the int16 sums' worst case (30480, 31496, 32004, 32512) must not
    wrap, nor the amx build's folded bytes (Q4_K code 15 x scale 63 split into 15 x 15 and
    15 x 3; Q6_K's scale * (code - 32) at +-4096 and 127 x 31 split into a low and a high byte),
    in a pass of 4 rows and in one of 20 (the tiles take passes of 5 and more); the results
    equal the row-major kernel's bits."""
    rng = np.random.default_rng(22)
    kdim = 512 if name in ("Q4_K", "Q6_K") else 256
    raw = random_blocks(name, 16, kdim, rng)
    blocks = raw.reshape(16, -1, raw.shape[1] * (256 if name in ("Q4_K", "Q6_K") else 32) // kdim)
    if name == "Q4_K":
        blocks[:, :, 16:] = 0xFF  # every code 15, scales and mins 63
    elif name == "Q6_K":
        blocks[:, :, :192] = 0xFF  # every code 63
        blocks[:, :, 192:208] = 0x7F  # scales 127
        blocks[8:, :, :192] = 0x00  # rows 8-15: every code 0 (weight -32) ...
        blocks[8:, :, 192:208] = 0x80  # ... at scale -128: -128 * -32 = 4096
    elif name == "Q4_0":
        blocks[:, :, 2:] = 0xFF
    elif name == "Q5_0":
        blocks[:, :, 2:] = 0xFF
    else:
        blocks[:8, :, 2:] = 0x80  # -128: |w| = 128 against sign(x, w)
        blocks[8:, :, 2:] = 0x7F
    x = np.ones((20, kdim), np.float32)
    x[1::4] = -1.0
    x[2::4, ::2] = -1.0
    x[3::4] = rng.standard_normal((5, kdim))
    ref = matmul(portable, x, raw, name)
    assert np.isfinite(ref).all()
    for k, ymm in builds_and_widths(portable):
        x8 = repack(k, raw, name, kdim)
        with widths(k, ymm):
            for rows in (4, 20):
                got = matmul(k, np.ascontiguousarray(x[:rows]), x8, name, layout=X8)
                assert np.array_equal(bits(got), bits(ref[:rows])), (k.name, ymm, rows)


def test_x8_refuses_what_it_cannot_take(portable):
    raw = random_blocks("Q4_K", 12, 256, np.random.default_rng(23))
    out = np.empty_like(raw)
    assert portable.lib.sd_repack(type_id("Q4_K"), P(raw), raw.shape[1], 12, 256, P(out), X8, 1) == 2  # 12 rows
    q41 = random_blocks("Q4_1", 8, 64, np.random.default_rng(23))
    assert portable.lib.sd_repack(type_id("Q4_1"), P(q41), q41.shape[1], 8, 64, P(np.empty_like(q41)), X8, 1) == 1
    x = np.ones((1, 256), np.float32)
    y = np.empty((1, 12), np.float32)
    assert portable.lib.sd_matmul(P(x), 1, 256, type_id("Q4_K"), P(raw), 12, raw.shape[1], X8, P(None), P(y), 12, 1) == 2


def test_types_outside_the_table_are_refused_everywhere():
    """The kernel's type table (quants.c) holds exactly sdcpu.h's sd_type ids, in every build;
    any other id -- or an interleaved layout for a type without one -- is refused by every
    entry point (SD_EUNSUPPORTED), never read as some other type's blocks."""
    from specdec_core.cpu.abi import enum

    known = set(enum("sd_type").values())
    raw = random_blocks("Q8_0", 8, 64, np.random.default_rng(24))
    x, y, out = np.ones((2, 64), np.float32), np.empty((2, 8), np.float32), np.empty((8, 64), np.float32)
    for k in [build.load_variant(build.BY_NAME["portable"])] + [build.load_variant(v) for v in SIMD]:
        lib = k.lib
        assert {t for t in range(-2, 64) if lib.sd_type_supported(t)} == known, k.name
        for t in (-1, 4, 9, 15, 31, 1000):  # 4: a retired ggml id; 9: Q8_1 (ggml's, not read here); 15: Q8_K
            assert lib.sd_matmul(P(x), 2, 64, t, P(raw), 8, raw.shape[1], 0, P(None), P(y), 8, 1) == 1, (k.name, t)
            assert lib.sd_dequantize(t, P(raw), raw.shape[1], 0, P(None), 8, 64, P(out)) == 1, (k.name, t)
            assert lib.sd_repack(t, P(raw), raw.shape[1], 8, 64, P(np.empty_like(raw)), X8, 1) == 1, (k.name, t)
            assert lib.sd_requantize_q4_0(t, P(raw), raw.shape[1], 8, 64, P(np.empty_like(raw)), 0, 1) == 1, (k.name, t)
        q41 = random_blocks("Q4_1", 8, 64, np.random.default_rng(25))
        assert lib.sd_matmul(P(x), 2, 64, type_id("Q4_1"), P(q41), 8, q41.shape[1], X8, P(None), P(y), 8, 1) == 1
        assert lib.sd_matmul(P(x), 2, 64, type_id("Q8_0"), P(raw), 8, raw.shape[1], 7, P(None), P(y), 8, 1) == 1


def test_row_map_reads_rows_in_its_order(portable):
    rng = np.random.default_rng(3)
    raw = random_blocks("Q4_K", 8, 256, rng)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    perm = np.array([7, 0, 6, 1, 5, 2, 4, 3], np.int32)
    assert np.array_equal(matmul(portable, x, raw, "Q4_K", rowmap=perm), matmul(portable, x, raw, "Q4_K")[:, perm])


def test_exp_is_the_same_everywhere_and_close_to_libm(portable):
    x = np.linspace(-90, 90, 10_001, dtype=np.float32)
    ref = x.copy()
    portable.lib.sd_exp(P(ref), ref.size)
    for v in SIMD:
        y = x.copy()
        build.load_variant(v).lib.sd_exp(P(y), y.size)
        assert np.array_equal(bits(y), bits(ref)), v.name
    inside = (x > -87) & (x < 88)
    rel = np.abs(ref[inside].astype(np.float64) / np.exp(x[inside].astype(np.float64)) - 1)
    assert rel.max() < 4e-7  # a few ulp
    assert ref[0] > 0 and np.isfinite(ref[-1])  # clamped, never 0 or inf


# ---------------------------------------------------------------- against float64


@pytest.mark.parametrize("name", ALL_TYPES)
def test_dot_within_the_activation_rounding_bound(portable, name):
    """|y - x.W| is at most what rounding x to 8-bit codes can move it -- sum over blocks of
    (amax/127)/2 * sum|w| -- plus float32 rounding; and with x replaced by its own codes the
    integer part is exact, leaving float32 rounding only."""
    rng = np.random.default_rng(4)
    kdim = 512
    raw = random_blocks(name, 24, kdim, rng)
    w = dequantize(raw, name, kdim).astype(np.float64)
    x = rng.standard_normal((5, kdim)).astype(np.float32)
    y = matmul(portable, x, raw, name).astype(np.float64)
    exact = x.astype(np.float64) @ w.T
    float_tol = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(w).T) + 1e-30
    blk = ACT_BLOCK.get(name, 0)
    if blk == 0:  # float weights take float activations: only float32 rounding
        assert (np.abs(y - exact) <= float_tol).all()
        return
    amax = np.abs(x).reshape(5, kdim // blk, blk).max(-1).astype(np.float64)  # [rows, blocks]
    wabs = np.abs(w).reshape(24, kdim // blk, blk).sum(-1)  # [cols, blocks]
    bound = (amax / 127 / 2) @ wabs.T
    assert (np.abs(y - exact) <= bound * 1.0001 + float_tol).all()
    # the same with x on its own 8-bit grid: nothing left but float32 rounding
    q = np.zeros((5, kdim), np.int8)
    d = np.zeros((5, kdim // blk), np.float32)
    s = np.zeros((5, kdim // 16), np.int16)
    portable.lib.sd_quantize_act(P(x), 5, kdim, blk, P(q), P(d), P(s))
    xq = (q.reshape(5, -1, blk).astype(np.float64) * d[..., None]).reshape(5, kdim)
    assert (np.abs(y - xq @ w.T) <= float_tol).all()


# ---------------------------------------------------------------- NEON, under qemu

NEON_DRIVER = Path(__file__).with_name("cpu_neon_driver.c")


def _cross() -> tuple[str, str] | None:
    cc, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    return (cc, qemu) if cc and qemu else None


@pytest.mark.skipif(_cross() is None and not REQUIRE_TOOLS,
                    reason="needs aarch64-linux-gnu-gcc and qemu-aarch64 (.ci/run installs them)")
@pytest.mark.parametrize("flavour", ["neon", "neon-dotprod"])
def test_neon_build_equals_portable_under_qemu(portable, tmp_path, flavour):
    """The NEON build, cross-compiled and run under qemu-user, gives the portable build's bits
    for every type: dequantizing, and matmuls of 1..17 rows with 1 and 2 threads, in the file's
    rows and (where the type has one) in the interleaved layout."""
    assert _cross() is not None, "aarch64-linux-gnu-gcc or qemu-aarch64 missing"
    cc, qemu = _cross()
    exe = tmp_path / "driver"
    march = "-march=armv8.2-a+dotprod" if flavour == "neon-dotprod" else "-march=armv8-a"
    sources = [str(build.KERNELS / s) for s in build.SOURCES]
    subprocess.run([cc, *build.CFLAGS, march, "-fopenmp", "-static", *sources, str(NEON_DRIVER), "-o", str(exe),
                    "-lm"], check=True, capture_output=True)
    rng = np.random.default_rng(5)
    for name in ALL_TYPES:
        kdim = 512 if name in ("Q4_K", "Q5_K", "Q6_K") else 224  # 7 blocks of 32: a partial group
        rows = 24
        raw = random_blocks(name, rows, kdim, rng)
        x = rng.standard_normal((17, kdim)).astype(np.float32)
        raw.tofile(tmp_path / "w.bin")
        x.tofile(tmp_path / "x.bin")
        proc = subprocess.run([qemu, "-cpu", "max", str(exe), str(type_id(name)), str(rows), str(kdim), str(raw.shape[1]),
                               str(tmp_path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["neon=1", "x8=1"]
        deq = np.fromfile(tmp_path / "deq.bin", np.float32).reshape(rows, kdim)
        assert np.array_equal(bits(deq), bits(dequantize(raw, name, kdim))), name
        ref = matmul(portable, x, raw, name)
        tags = ["all1", "all2", "one1", "one2"]
        if name in X8_TYPES:
            tags += ["x8" + t for t in tags]
        for tag in tags:
            got = np.fromfile(tmp_path / f"{tag}.bin", np.float32).reshape(17, rows)
            assert np.array_equal(bits(got), bits(ref)), (name, tag)
