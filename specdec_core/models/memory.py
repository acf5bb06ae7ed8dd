"""How much memory a model will take, and whether it fits this machine, before it loads.

An estimate from the files' headers (local.py), never from loading:

* a safetensors model: its parameters at the compute dtype's width; with NF4, the decoder's
  linear weights at 4 bits plus their scales (one byte per 64 weights, double quantization's
  float32 per 256 of those), with int8 at one byte, and everything else (embeddings, output
  head, norms) at the compute dtype -- what bitsandbytes leaves unquantized;
* a GGUF: on a CPU the CPU backend reads its blocks in place, so about the file's size; on a
  GPU transformers dequantizes it to the compute dtype, so its parameters at that width;
* plus OVERHEAD for activations, the KV cache and the allocator's slack.

The machine's side: free RAM (psutil's "available") and, on CUDA, each GPU's free memory
(torch.cuda.mem_get_info -- this is the one function here that imports torch, so call it off
the GUI thread).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import ModelError
from .local import Tensor, describe_folder, folder_tensors, gguf_header
from .presets import KNOWN_SHAPES, PRESETS, Preset

OVERHEAD = 0.10
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# bitsandbytes NF4 with double quantization: 4 bits, a uint8 absmax per 64 weights, a float32
# per 256 absmax blocks (and a 256-entry code book: negligible)
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)
NF4_BYTES_PER_LAYER = (256 + 16) * 4 + 8  # its two code books and an offset: only small models notice
INT8_BYTES_PER_WEIGHT = 1.0
_NOT_QUANTIZED = ("embed", "lm_head", "wte", "wpe", "norm", "output.weight", "token_embd")

# the embedded pair's parameter counts (their GGUF headers), by sha256, for before they are assembled
EMBEDDED_PARAMS = {
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046": 1_777_088_000,
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32": 630_167_424,
}


@dataclass
class Estimate:
    bytes: int | None  # None: nothing to estimate from (a hub model not downloaded, not a preset's)
    how: str  # one line: what the number is made of

    def to_dict(self) -> dict:
        return asdict(self)


def gib(n: float | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.0f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


def linear_split(tensors: list[Tensor]) -> tuple[int, int, int]:
    """(all parameters, those in linear layers bitsandbytes would quantize, how many layers)."""
    total = sum(t.numel for t in tensors)
    linears = [t for t in tensors if len(t.shape) == 2 and t.name.endswith(".weight")
               and not any(w in t.name for w in _NOT_QUANTIZED)]
    return total, sum(t.numel for t in linears), len(linears)


def weight_bytes(total: int, linear: int, dtype: str, quantization: str, layers: int = 0) -> int:
    width = DTYPE_BYTES.get(dtype, 4)
    if quantization == "nf4":
        return int(linear * NF4_BYTES_PER_WEIGHT + layers * NF4_BYTES_PER_LAYER + (total - linear) * width)
    if quantization == "int8":
        return int(linear * INT8_BYTES_PER_WEIGHT + (total - linear) * width)
    return total * width


def _with_overhead(n: int) -> int:
    return int(n * (1 + OVERHEAD))


def _gguf(params: int, file_bytes: int, dtype: str, label: str, device: str) -> Estimate:
    if device != "cpu":  # transformers dequantizes a GGUF for a GPU
        return Estimate(_with_overhead(params * DTYPE_BYTES.get(dtype, 4)),
                        f"{label}: {count(params)} parameters as {dtype} (a GGUF is dequantized for {device}) "
                        f"+ {OVERHEAD:.0%}")
    return Estimate(_with_overhead(file_bytes), f"{label}: the GGUF's {gib(file_bytes)}, read in place + {OVERHEAD:.0%}")


def _shape(total: int, linear: int, dtype: str, quantization: str, label: str, layers: int = 0) -> Estimate:
    q = "" if quantization == "none" else f", linear layers {quantization}"
    return Estimate(_with_overhead(weight_bytes(total, linear, dtype, quantization, layers)),
                    f"{label}: {count(total)} parameters as {dtype}{q} + {OVERHEAD:.0%}")


def _folder(folder: Path, dtype: str, quantization: str, label: str) -> Estimate:
    m = describe_folder(folder, "local")
    if m.error:
        return Estimate(None, f"{label}: {m.error}")
    if "bitsandbytes" in m.quantization or m.format == "pickle":  # stored as it will sit in memory
        return Estimate(_with_overhead(m.bytes), f"{label}: its {gib(m.bytes)} on disk ({m.quantization}) + {OVERHEAD:.0%}")
    total, linear, layers = linear_split(folder_tensors(folder))
    return _shape(total, linear, dtype, quantization, label, layers)


def estimate(spec: str, role: str, *, dtype: str, quantization: str, device: str = "cpu") -> Estimate:
    """Memory `spec` needs loaded for `role` with a resolved dtype, quantization and device."""
    from . import default_pair
    from .spec import parse_spec

    try:
        sp = parse_spec(spec)
    except ModelError as e:
        return Estimate(None, str(e))
    label = spec if sp.kind != "default" else default_pair.embedded(role).name
    if sp.kind == "default":
        em = default_pair.embedded(role)
        path = default_pair.assembled_path(em)
        params = EMBEDDED_PARAMS.get(em.sha256)
        if path.is_file():
            _, tensors, _ = gguf_header(path)
            params = sum(t.numel for t in tensors)
        if params is None:
            return Estimate(None, f"{label}: not assembled yet")
        return _gguf(params, em.size, dtype, label, device)
    if sp.kind == "gguf":
        try:
            _, tensors, _ = gguf_header(sp.path)
        except Exception as e:  # noqa: BLE001
            return Estimate(None, f"{label}: not a readable GGUF ({type(e).__name__})")
        return _gguf(sum(t.numel for t in tensors), sp.path.stat().st_size, dtype, label, device)
    if sp.kind == "folder":
        return _folder(sp.path, dtype, quantization, label)
    from huggingface_hub import try_to_load_from_cache

    if sp.kind == "hub-gguf":
        cached = try_to_load_from_cache(sp.repo_id, sp.filename)
        if isinstance(cached, str):
            _, tensors, _ = gguf_header(Path(cached))
            return _gguf(sum(t.numel for t in tensors), Path(cached).stat().st_size, dtype, label, device)
        return Estimate(None, f"{label}: not downloaded yet")
    cached = try_to_load_from_cache(sp.repo_id, "config.json")
    if isinstance(cached, str):
        from .hub_files import has_weights

        folder = Path(cached).parent
        if has_weights(folder):
            return _folder(folder, dtype, quantization, label)
    if sp.repo_id in KNOWN_SHAPES:
        total, linear = KNOWN_SHAPES[sp.repo_id]
        return _shape(total, linear, dtype, quantization, label)
    return Estimate(None, f"{label}: not downloaded yet, size unknown")


# ---------------------------------------------------------------- the machine


@dataclass
class Machine:
    ram_total: int
    ram_available: int
    gpus: list[dict] = field(default_factory=list)  # [{"index", "name", "total", "free"}]

    def to_dict(self) -> dict:
        return asdict(self)

    def free(self, device: str) -> int:
        """Free bytes where `device` keeps weights ('cuda' counts every GPU: device_map spreads)."""
        if device.startswith("cuda"):
            _, _, index = device.partition(":")
            gpus = [g for g in self.gpus if not index or g["index"] == int(index)]
            return sum(g["free"] for g in gpus)
        return self.ram_available

    def total(self, device: str) -> int:
        if device.startswith("cuda"):
            return sum(g["total"] for g in self.gpus)
        return self.ram_total

    def summary(self) -> str:
        bits = [f"RAM {gib(self.ram_available)} free of {gib(self.ram_total)}"]
        bits += [f"GPU {g['index']} {g['name']}: {gib(g['free'])} free of {gib(g['total'])}" for g in self.gpus]
        if not self.gpus:
            bits.append("no CUDA GPU")
        return " · ".join(bits)


def probe(gpu: bool = True) -> Machine:
    """This machine's memory now. gpu=True imports torch to ask CUDA (seconds the first time)."""
    import psutil

    vm = psutil.virtual_memory()
    gpus = []
    if gpu:
        try:
            import torch

            if torch.cuda.is_available():
                for i in range(torch.cuda.device_count()):
                    free, total = torch.cuda.mem_get_info(i)
                    gpus.append({"index": i, "name": torch.cuda.get_device_name(i), "total": int(total),
                                 "free": int(free)})
        except Exception:  # noqa: BLE001 -- a broken CUDA setup: the RAM figures still stand
            gpus = []
    return Machine(int(vm.total), int(vm.available), gpus)


def place(device: str) -> str:
    return "VRAM" if device.startswith("cuda") else "RAM"


# ---------------------------------------------------------------- pairs, presets, the verdict


@dataclass
class PairEstimate:
    device: str
    target: Estimate
    draft: Estimate | None

    @property
    def bytes(self) -> int | None:
        parts = [self.target] + ([self.draft] if self.draft else [])
        return None if any(p.bytes is None for p in parts) else sum(p.bytes for p in parts)

    def to_dict(self) -> dict:
        return {"device": self.device, "place": place(self.device), "bytes": self.bytes,
                "target": self.target.to_dict(), "draft": self.draft.to_dict() if self.draft else None}


def resolve(device: str, dtype: str, quantization: str | None, role: str, spec: str, machine: Machine
            ) -> tuple[str, str, str]:
    """(device, dtype, quantization) as the loader would pick them, from `machine` (no torch)."""
    from .device import DTYPE_ALIASES, cpu_has_fast_bf16, resolve_quantization
    from .spec import parse_spec

    device = (device or "auto").lower()
    if device == "auto":
        device = "cuda" if machine.gpus else "cpu"
    dt = (dtype or "auto").lower()
    if dt == "auto":
        dt = "bfloat16" if device.startswith("cuda") or cpu_has_fast_bf16() else "float32"
    else:
        dt = DTYPE_ALIASES.get(dt, dt)
    try:
        is_gguf = parse_spec(spec).kind in ("default", "gguf", "hub-gguf")
    except ModelError:
        is_gguf = False
    try:
        q = resolve_quantization(quantization, role=role, device=device, is_gguf=is_gguf)
    except ModelError:
        q = "none"
    return device, dt, q


def estimate_for(spec: str, role: str, machine: Machine, *, device: str = "auto", quantization: str | None = None
                 ) -> tuple[str, Estimate]:
    """(device, estimate) for one model as it would load here by default."""
    dev, dt, q = resolve(device, "auto", quantization, role, spec, machine)
    return dev, estimate(spec, role, dtype=dt, quantization=q, device=dev)


def estimate_pair(target: str, draft: str | None, machine: Machine, *, device: str = "auto", dtype: str = "auto",
                  quantization: str | None = None) -> PairEstimate:
    dev, dt, q = resolve(device, dtype, quantization, "target", target, machine)
    t = estimate(target, "target", dtype=dt, quantization=q, device=dev)
    d = None
    if draft:
        _, ddt, dq = resolve(dev, dtype, None, "draft", draft, machine)
        d = estimate(draft, "draft", dtype=ddt, quantization=dq, device=dev)
    return PairEstimate(dev, t, d)


def estimate_preset(p: Preset, machine: Machine) -> PairEstimate:
    """A preset as it would load here: on its own device when this machine has it, else on CPU."""
    device = p.device if (p.device == "cpu" or machine.gpus) else "cpu"
    return estimate_pair(p.target, p.draft, machine, device=device, quantization=p.target_quantization)


def fits(need: int | None, device: str, machine: Machine, freeable: int = 0) -> bool:
    """Unknown needs are let through (the load's own out-of-memory message still stands)."""
    return need is None or need <= machine.free(device) + freeable


def smaller_preset(need: int, machine: Machine, freeable: int = 0) -> tuple[Preset, PairEstimate] | None:
    """The largest preset that needs less than `need` and fits this machine, if any."""
    smaller = [(p, e) for p in PRESETS for e in [estimate_preset(p, machine)]
               if e.bytes is not None and e.bytes < need and fits(e.bytes, e.device, machine, freeable)]
    return max(smaller, key=lambda pe: pe[1].bytes) if smaller else None


def too_big_message(pair: PairEstimate, machine: Machine, freeable: int = 0) -> str | None:
    """None when the pair fits; else the numbers and what would fit instead."""
    need = pair.bytes
    if fits(need, pair.device, machine, freeable):
        return None
    where = place(pair.device)
    free = machine.free(pair.device) + freeable
    parts = [f"target {gib(pair.target.bytes)}"] + ([f"draft {gib(pair.draft.bytes)}"] if pair.draft else [])
    msg = (f"This choice needs about {gib(need)} of {where} ({', '.join(parts)}), and this machine has "
           f"{gib(free)} free of {gib(machine.total(pair.device))}.")
    found = smaller_preset(need, machine, freeable)
    if found:
        p, e = found
        msg += f" The {p.name} preset ({p.target} + {p.draft}) needs about {gib(e.bytes)} and fits."
    else:
        msg += " None of the presets fits either: close other programs or pick a smaller model."
    return msg
