"""Checking a GGUF file before handing it to transformers, and reading what we report.

transformers' own errors on a bad GGUF are deep tracebacks (struct.error, a numpy reshape
error half-way through dequantizing). We read the header and the tensor table first --
cheaply, see read_header -- and check that every tensor lies inside the file, so a truncated or corrupt
file is refused in one line before any slow work starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError

# llama.cpp ends generation on these tokens too ("end of generation", llama-vocab.cpp), even
# when the file's eos id names only one of them; Qwen2.5-Instruct's generation_config lists
# both <|im_end|> and <|endoftext|>. A GGUF carries no generation_config, so we rebuild it.
EOG_TOKEN_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endofturn|>")
_EOG_ID_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


@dataclass
class GgufSummary:
    path: Path
    architecture: str
    name: str  # general.name, or the file stem
    quantization: str  # "Q4_K_M", "F32", ... (general.file_type, else the most common tensor type)
    tensor_count: int
    eos_token_ids: list[int]


def _file_type_name(file_type: int | None, tensor_types: list[int]) -> str:
    import gguf

    if file_type is not None:
        try:
            return gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    if not tensor_types:
        return "unknown"
    common = max(set(tensor_types), key=tensor_types.count)
    try:
        return gguf.GGMLQuantizationType(common).name
    except ValueError:
        return f"type{common}"


@dataclass(frozen=True)
class GgufTensor:
    name: str
    shape: tuple[int, ...]  # numpy order (transformers' reader reverses GGUF's): [out, in] for a matrix
    ggml_type: int
    offset: int  # from the start of the data section
    nbytes: int


def read_header(path: Path) -> tuple[dict, list[GgufTensor], int]:
    """(metadata, tensor table, data_start) without reading tensor data.

    gguf.GGUFReader would do, but it parses every metadata array into numpy (12-15 s for the
    Qwen vocabulary); transformers' reader skips them, but its public entry point rejects
    some ggml types (Q5_0, used by the embedded draft) that the legacy loader handles. So:
    transformers' metadata walker, and byte sizes from the gguf package's table.
    """
    import gguf
    from transformers.integrations.gguf import reader

    blob = reader._mapped(str(path))
    meta, tensor_count, pos = reader._read_metadata(blob, str(path), ("tokenizer.ggml.tokens",))
    entries, pos = reader._read_tensor_table(blob, tensor_count, pos)
    alignment = int(meta.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT))
    data_start = (pos + alignment - 1) // alignment * alignment
    tensors = []
    for name, shape, ggml_type, offset in entries:
        block_elements, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
        elements = 1
        for d in shape:
            elements *= d
        tensors.append(GgufTensor(name, tuple(int(d) for d in shape), int(ggml_type), int(offset),
                                  elements // block_elements * block_bytes))
    return meta, tensors, data_start


def inspect_gguf(path: str | Path) -> GgufSummary:
    """Validate `path` as a complete GGUF file and summarise it; ModelError if it is not."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"GGUF file not found: {path}")
    size = path.stat().st_size
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")

    try:
        meta, tensors, data_start = read_header(path)
    except Exception as e:  # struct.error / ValueError / UnicodeDecodeError on a damaged header
        raise ModelError(
            f"{path} is truncated or corrupt (cannot read its header: {type(e).__name__}); download or assemble it again"
        ) from None

    end = max((data_start + t.offset + t.nbytes for t in tensors), default=data_start)
    if end > size:
        raise ModelError(
            f"{path} is truncated: its tensors need {end:,} bytes but the file has {size:,}; download or assemble it again"
        )

    tokens = meta.get("tokenizer.ggml.tokens")
    tokens = tokens if isinstance(tokens, list) else []
    eos = {int(meta[k]) for k in _EOG_ID_KEYS if isinstance(meta.get(k), int)}
    eos |= {i for i, t in enumerate(tokens) if t in EOG_TOKEN_TEXTS}

    name = meta.get("general.name")
    return GgufSummary(
        path=path,
        architecture=str(meta["general.architecture"]),
        name=name if isinstance(name, str) and name else path.stem,
        quantization=_file_type_name(meta.get("general.file_type"), [t.ggml_type for t in tensors]),
        tensor_count=len(tensors),
        eos_token_ids=sorted(eos),
    )
