"""Known-good target/draft pairs, as data (`specdec models` prints them; the GUI offers them)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ModelError


@dataclass(frozen=True)
class Preset:
    name: str
    target: str  # a model SPEC
    draft: str
    device: str  # what it is meant for: "cpu" | "cuda"
    target_quantization: str | None  # None: the default for the device
    memory: str  # rough need, for the listing (memory.estimate_preset computes it for this machine)
    notes: str


PRESETS: tuple[Preset, ...] = (
    Preset(
        "cpu-default", "default", "default", "cpu", None, "~2 GiB RAM (its GGUFs read in place)",
        "embedded Qwen2.5-Coder-1.5B-Instruct + 0.5B-Instruct (Q4_K_M GGUF, from PyPI); works offline",
    ),
    Preset(
        "gpu-7b", "Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "cuda", "nf4", "~7 GiB VRAM",
        "NF4 target + bf16 draft; the usual GPU choice",
    ),
    Preset(
        "gpu-14b", "Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "cuda", "nf4", "~11 GiB VRAM",
        "NF4 target + bf16 draft; larger gap between target and draft = bigger speed-ups",
    ),
    Preset(
        "gpu-coder-7b", "Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct", "cuda", "nf4",
        "~7 GiB VRAM", "for code; high acceptance on code prompts",
    ),
)


def get_preset(name: str) -> Preset:
    for p in PRESETS:
        if p.name == name:
            return p
    raise ModelError(f"unknown preset {name!r}; known: {', '.join(p.name for p in PRESETS)}")


# Parameter counts of the presets' hub models (from each repo's safetensors headers): total, and
# the share in the decoder's linear layers (what bitsandbytes quantizes; embeddings, the output
# head and norms stay in the compute dtype). memory.py estimates a model that is not downloaded
# from these; once downloaded, its own files are read instead.
KNOWN_SHAPES: dict[str, tuple[int, int]] = {
    "Qwen/Qwen2.5-7B-Instruct": (7_615_616_512, 6_525_580_800),
    "Qwen/Qwen2.5-Coder-7B-Instruct": (7_615_616_512, 6_525_580_800),
    "Qwen/Qwen2.5-14B-Instruct": (14_770_033_664, 13_212_898_304),
    "Qwen/Qwen2.5-0.5B-Instruct": (494_032_768, 357_783_424),
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": (494_032_768, 357_783_424),
}
