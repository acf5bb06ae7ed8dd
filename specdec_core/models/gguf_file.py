"""Checking a GGUF file before loading it, and summarising what we report.

A damaged file must be refused in one line before any slow work starts (transformers' own
errors on one are deep tracebacks): the CPU backend's reader walks the header and the tensor
table, and checks that every tensor lies inside the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError


@dataclass
class GgufSummary:
    path: Path
    architecture: str
    name: str  # general.name, or the file stem
    quantization: str  # "Q4_K_M", "F32", ... (general.file_type, else the most common matrix type)
    tensor_count: int


def inspect_gguf(path: str | Path) -> GgufSummary:
    """Validate `path` as a complete GGUF file and summarise it; ModelError if it is not."""
    from ..cpu.model import file_type_name
    from ..cpu.reader import GGUFError, GGUFFile

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"GGUF file not found: {path}")
    try:
        f = GGUFFile(path)
    except GGUFError as e:
        raise ModelError(f"{e}; download or assemble it again") from None
    name = f.meta.get("general.name")
    return GgufSummary(
        path=path,
        architecture=f.architecture,
        name=name if isinstance(name, str) and name else path.stem,
        quantization=file_type_name(f.meta, [t.ggml_type for t in f.tensors.values() if len(t.shape) == 2]),
        tensor_count=len(f.tensors),
    )
