"""The kernel's ABI, declared once: the block of kernels/sdcpu.h between its "ABI begin" and
"ABI end" lines, read by cffi (ABI mode: no compiler at import, the built library opened as it
is). The structs Python fills in, the entry points and their signatures, the type ids, layouts,
return codes and CPU feature bits all come from that one text, so the C side and the Python
side cannot drift apart; tests/test_cpu_kernel.py checks cffi's struct layouts against the C
compiler's and the type ids against gguf-py's.

Pointers travel as cdata: `ptr()` turns a numpy array, a torch tensor, an address or None
into one. A call releases the GIL, as ctypes' did.
"""

from __future__ import annotations

import re
from pathlib import Path

from cffi import FFI

HEADER = Path(__file__).with_name("kernels") / "sdcpu.h"
_BLOCK = re.compile(r"/\* ABI begin .*?\*/(.*?)/\* ABI end \*/", re.S)


def declarations(header: Path = HEADER) -> str:
    """The header's ABI block as plain C for cffi: comments and the SD_EXPORT marker dropped."""
    m = _BLOCK.search(header.read_text())
    if m is None:
        raise RuntimeError(f"{header} has no ABI block")
    text = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    return text.replace("SD_EXPORT ", "")


ffi = FFI()
ffi.cdef(declarations())
NULL = ffi.NULL


def enum(name: str) -> dict[str, int]:
    """A named enum of the ABI block, {member: value}."""
    return dict(ffi.typeof(name).relements)


def open_library(path: Path | str):
    """A built kernel library (or the cpuid probe, which defines only sd_cpu_features)."""
    return ffi.dlopen(str(path))


def ptr(x) -> object:
    """`x` as a void* for the kernel: None -> NULL; an int -> that address; a numpy array or a
    torch tensor -> its data (contiguous: the kernel reads it flat); cdata as it is."""
    if x is None:
        return NULL
    if isinstance(x, int):
        return ffi.cast("void *", x)
    if isinstance(x, ffi.CData):
        return x
    if hasattr(x, "data_ptr"):  # torch
        return ffi.cast("void *", x.data_ptr())
    return ffi.cast("void *", x.ctypes.data)  # numpy
