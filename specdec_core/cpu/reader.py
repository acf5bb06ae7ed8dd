"""Reading a GGUF file: its metadata, its tensor table, and its tensors memory-mapped as they are.

Nothing is converted: a quantized tensor is a [rows, row_bytes] uint8 view into the mapped
file (the kernel reads the blocks in place, and the OS shares the pages with the page cache),
and only the small float tensors a model needs as floats -- norms, biases -- are copied out.

Why our own header walk rather than gguf.GGUFReader: that reader parses every metadata array
into numpy (12-16 s for a Qwen vocabulary of 152k tokens and as many merges) where loading
needs none of them; here a string array is skipped (its length is still walked) unless asked
for. The gguf package still supplies the type table (block sizes) and the dequantizers the
tests compare against.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# metadata value types: fixed-size ones by struct format; 8 is a string, 9 an array
_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

F32, F16, BF16 = (int(GGMLQuantizationType[n]) for n in ("F32", "F16", "BF16"))


class GGUFError(ValueError):
    """The file is not a GGUF this reader can take (the message says why, in one line)."""


@dataclass(frozen=True)
class TensorEntry:
    name: str
    ggml_type: int
    shape: tuple[int, ...]  # numpy order: [..., rows, cols]; cols runs along a block
    offset: int  # absolute, from the start of the file
    nbytes: int

    @property
    def cols(self) -> int:
        return self.shape[-1]

    @property
    def rows(self) -> int:
        n = 1
        for d in self.shape[:-1]:
            n *= d
        return n

    @property
    def type_name(self) -> str:
        import gguf

        try:
            return gguf.GGMLQuantizationType(self.ggml_type).name
        except ValueError:
            return f"type{self.ggml_type}"


def block_size(ggml_type: int) -> tuple[int, int]:
    """(elements, bytes) of one block of this type."""
    import gguf

    try:
        return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise GGUFError(f"unknown ggml tensor type {ggml_type}") from None


class _Cursor:
    def __init__(self, blob: np.ndarray):
        self.blob, self.pos = blob, 0

    def unpack(self, fmt: str):
        vals = struct.unpack_from(fmt, self.blob, self.pos)
        self.pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        s = bytes(self.blob[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def skip_string(self) -> None:
        self.pos += 8 + struct.unpack_from("<Q", self.blob, self.pos)[0]

    def value(self, vtype: int, keep: bool):
        if vtype in _FIXED:
            return self.unpack(_FIXED[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.unpack("<IQ")
            if etype in _FIXED:
                fmt = _FIXED[etype]
                vals = list(struct.unpack_from(f"<{count}{fmt[1]}", self.blob, self.pos))
                self.pos += count * struct.calcsize(fmt)
                return vals
            if etype == _STRING:
                if keep:
                    return [self.string() for _ in range(count)]
                for _ in range(count):
                    self.skip_string()
                return count  # skipped: only its length is known
            raise GGUFError(f"metadata array of type {etype} is not supported")
        raise GGUFError(f"metadata value of type {vtype} is not supported")


class GGUFFile:
    """A GGUF file, mapped: `meta` (string arrays as their lengths unless named in
    `keep_arrays`), `tensors` by name, `raw(name)` for a tensor's bytes in place.
    check_size=False: a file shorter than its tensors is read anyway (to describe it)."""

    def __init__(self, path: str | Path, keep_arrays: tuple[str, ...] = (), check_size: bool = True):
        self.path = Path(path)
        try:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise GGUFError(f"cannot open {self.path}: {e}") from None
        if bytes(self._map[:4]) != GGUF_MAGIC:
            raise GGUFError(f"{self.path} is not a GGUF file (it does not start with the GGUF magic bytes)")
        try:
            self.meta, self.tensors = self._parse(keep_arrays)
        except (struct.error, UnicodeDecodeError, IndexError, OverflowError) as e:
            raise GGUFError(f"{self.path} is truncated or corrupt (cannot read its header: {type(e).__name__})") from None
        size = len(self._map)
        end = max((t.offset + t.nbytes for t in self.tensors.values()), default=0)
        if check_size and end > size:
            raise GGUFError(f"{self.path} is truncated: its tensors need {end:,} bytes but the file has {size:,}")

    def _parse(self, keep_arrays):
        c = _Cursor(self._map)
        c.pos = 4
        version, n_tensors, n_kv = c.unpack("<IQQ")
        if version not in (2, 3):
            raise GGUFError(f"{self.path} is GGUF version {version}; versions 2 and 3 are supported")
        meta = {}
        for _ in range(n_kv):
            key = c.string()
            vtype = c.unpack("<I")
            meta[key] = c.value(vtype, key in keep_arrays)
        table = []
        for _ in range(n_tensors):
            name = c.string()
            ndim = c.unpack("<I")
            dims = struct.unpack_from(f"<{ndim}Q", self._map, c.pos)
            c.pos += 8 * ndim
            ggml_type, offset = c.unpack("<IQ")
            table.append((name, tuple(int(d) for d in reversed(dims)), int(ggml_type), int(offset)))
        align = int(meta.get("general.alignment", DEFAULT_ALIGNMENT))
        data_start = (c.pos + align - 1) // align * align
        tensors = {}
        for name, shape, ggml_type, offset in table:
            elements = 1
            for d in shape:
                elements *= d
            be, bb = block_size(ggml_type)
            tensors[name] = TensorEntry(name, ggml_type, shape, data_start + offset, elements // be * bb)
        return meta, tensors

    @property
    def architecture(self) -> str:
        return str(self.meta.get("general.architecture", ""))

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes in place: uint8 [rows, row_bytes] (a view of the mapped file)."""
        t = self.tensors[name]
        return self._map[t.offset : t.offset + t.nbytes].reshape(t.rows, -1)

    def floats(self, name: str) -> np.ndarray:
        """A copy as float32 in the tensor's shape, for small tensors (norms, biases) only."""
        import gguf

        t = self.tensors[name]
        data = self.raw(name)
        if t.ggml_type == F32:
            out = data.view(np.float32)
        elif t.ggml_type == F16:
            out = data.view(np.float16).astype(np.float32)
        else:
            out = gguf.quants.dequantize(np.asarray(data), gguf.GGMLQuantizationType(t.ggml_type))
        return np.array(out, dtype=np.float32).reshape(t.shape)

    def close(self) -> None:
        self._map = None  # the mapping goes when the last view of it does
