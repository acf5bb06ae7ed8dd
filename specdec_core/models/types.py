"""What a load returns: the model, its tokenizer, and a report of what was actually loaded."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:  # transformers is heavy to import; only the type checker needs these names
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# progress(message, fraction) -- fraction in [0, 1], or None when the length is unknown.
Progress = Callable[[str, Optional[float]], None]


@dataclass
class ModelInfo:
    """What was actually loaded, for CLI/GUI reporting (not what was asked for)."""

    name: str  # short human name, e.g. "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)"
    source: str  # "default:target", a folder or .gguf path, or a hub id
    dtype: str  # torch dtype of the weights, e.g. "float32"
    quantization: str  # "nf4" | "int8" | "none" | "gguf(Q4_K_M)" (own blocks) | "gguf-dequantized(Q4_K_M)"
    device: str  # "cpu" | "cuda" | "cuda:0" | "mps" | "auto(device_map)"
    memory_bytes: int  # parameters + buffers, or for a GGUF on the CPU kernel the bytes it reads in place
    load_seconds: float
    notes: list[str] = field(default_factory=list)  # what ran where, fallbacks and why, load times
    kernels: str = ""  # CPU kernel in use, e.g. "avx2 kernel: Q4_K x169, Q6_K x29 (GGUF blocks, ...) + lean forward"

    def to_dict(self) -> dict:
        """Plain values (the GUI's models box, the last-load record, a bench report)."""
        d = asdict(self)
        d["notes"] = [str(n) for n in self.notes]
        return d

    def summary(self) -> str:
        """One line for logs and the CLI."""
        gib = self.memory_bytes / 2**30
        return (
            f"{self.name} [{self.source}] {self.dtype}, quantization {self.quantization}, "
            f"on {self.device}, {gib:.2f} GiB, loaded in {self.load_seconds:.1f} s"
        )


@dataclass
class LoadedModel:
    model: "PreTrainedModel"
    tokenizer: "PreTrainedTokenizerBase"
    info: ModelInfo
    # Every id that ends generation: generation_config.eos_token_id (a list for Qwen2.5-Instruct:
    # <|im_end|> and <|endoftext|>) plus tokenizer.eos_token_id. Sorted, no duplicates.
    eos_token_ids: list[int]
    # The GGUF the weights came from, when there is one.
    gguf_path: Path | None = None
    # The CPU backend's lean forward (cpu/lean.py) where it applies: CachedLM decodes through it.
    lean: object | None = None
