"""Choosing the device, the dtype and the quantization a model is loaded with.

The "auto" rules, in one place so the CLI, the GUI and the docs agree:

* device auto: CUDA, then Apple MPS, then CPU.
* dtype auto:
    - CUDA: bfloat16 where the GPU supports it (Ampere and later), else float16.
    - MPS: float16.
    - CPU: float32, unless the CPU has native bf16 arithmetic (x86 AVX512_BF16 or AMX-BF16
      flags, or Arm's bf16 flag); then bfloat16. Without those instructions PyTorch emulates
      bf16 matmuls on CPU, which is slower than float32 and also less accurate, so the
      halved memory is not worth it.
* quantization default: nf4 (bitsandbytes 4-bit) for a *target* on CUDA; none elsewhere
  (bitsandbytes' CPU kernels are slow, and the draft is small anyway). Asked for, nf4 and int8
  also run on CPU through bitsandbytes' CPU backend (slower than on a GPU, said in a load note);
  Apple MPS has no bitsandbytes backend here, so it is refused there. GGUF files keep their own
  quantization.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from .errors import ModelError

DTYPE_ALIASES = {
    "float32": "float32", "fp32": "float32", "f32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "f16": "float16", "half": "float16",
}
QUANTIZATIONS = ("nf4", "int8", "none")
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # "bf16" is the Arm (aarch64) flag


def resolve_device(device: str = "auto") -> str:
    """'auto' -> 'cuda' | 'mps' | 'cpu'; an explicit device is checked to exist."""
    import torch

    device = (device or "auto").strip().lower()
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    kind, _, index = device.partition(":")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ModelError(
                f"device {device!r} asked for, but no CUDA GPU is available to PyTorch; "
                "use --device cpu (or auto), or install a CUDA build of torch"
            )
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ModelError(f"device {device!r} does not exist; this machine has {torch.cuda.device_count()} CUDA GPU(s)")
        return device
    if kind == "mps":
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise ModelError("device 'mps' asked for, but Apple MPS is not available; use --device cpu (or auto)")
        return "mps"
    if kind == "cpu":
        return "cpu"
    raise ModelError(f"unknown device {device!r}; use auto, cpu, cuda, cuda:N or mps")


@functools.lru_cache(maxsize=1)
def cpu_has_fast_bf16() -> bool:
    """Whether this CPU does bf16 arithmetic natively (Linux: /proc/cpuinfo flags).
    $SPECDEC_CPU_BF16=0 (or 1) overrides what the flags say (the tests keep float32 with it)."""
    override = os.environ.get("SPECDEC_CPU_BF16", "").strip()
    if override in ("0", "1"):
        return override == "1"
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False  # macOS/Windows: no cheap check; float32 is the safe choice on CPU
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return any(f in flags for f in CPU_BF16_FLAGS)


def resolve_dtype(dtype: str, device: str) -> str:
    """The dtype name to load with, applying the 'auto' rules above."""
    dtype = (dtype or "auto").strip().lower()
    if dtype != "auto":
        try:
            return DTYPE_ALIASES[dtype]
        except KeyError:
            raise ModelError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16") from None
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    if device == "mps":
        return "float16"
    return "bfloat16" if cpu_has_fast_bf16() else "float32"


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def resolve_quantization(quantization: str | None, *, role: str, device: str, is_gguf: bool) -> str:
    """'nf4' | 'int8' | 'none' for a safetensors model; 'none' for GGUF (it keeps its own)."""
    if quantization is not None:
        quantization = quantization.strip().lower()
        if quantization not in QUANTIZATIONS:
            raise ModelError(f"unknown quantization {quantization!r}; use nf4, int8 or none")
    if is_gguf:
        if quantization in ("nf4", "int8"):
            raise ModelError(
                f"a GGUF file keeps its own quantization; --quantization {quantization} does not apply to it "
                "(omit it, or load the original safetensors model instead)"
            )
        return "none"
    if quantization is None:
        return "nf4" if (role == "target" and device.startswith("cuda")) else "none"
    if quantization != "none" and device not in ("cpu",) and not device.startswith("cuda"):
        raise ModelError(
            f"--quantization {quantization} runs on a CUDA GPU or the CPU (bitsandbytes); on {device} use "
            "--quantization none or --device cpu"
        )
    return quantization


def bnb_note(quantization: str, device: str) -> str | None:
    """The one-line note a bitsandbytes load on CPU carries (None where there is nothing to say)."""
    if quantization not in ("nf4", "int8") or device != "cpu":
        return None
    return (f"{quantization} through bitsandbytes' CPU backend: it runs, but slowly (each layer is "
            "dequantized per pass); a CUDA GPU is where bitsandbytes is fast")


def bnb_config(quantization: str, compute_dtype: str):
    """transformers' BitsAndBytesConfig; bitsandbytes is imported only here, only when asked for."""
    try:
        import bitsandbytes  # noqa: F401  (import check only: transformers imports it itself)
    except ImportError:
        raise ModelError(
            f"--quantization {quantization} needs the bitsandbytes package: pip install bitsandbytes "
            "(or use --quantization none)"
        ) from None
    from transformers import BitsAndBytesConfig

    if quantization == "int8":
        # LLM.int8() casts activations to float16 on every call and logs that each time: once
        # is enough to know (the load note says int8 computes in float16 on CPU)
        import logging

        logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch_dtype(compute_dtype),
    )
