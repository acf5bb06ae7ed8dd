"""load_model: turn a SPEC into a LoadedModel, with one-line errors for everything a user can fix."""

from __future__ import annotations

import time
from pathlib import Path

from . import default_pair, hub
from .device import bnb_config, bnb_note, resolve_device, resolve_dtype, resolve_quantization, torch_dtype
from .errors import ModelError
from .gguf import load_gguf
from .spec import Spec, parse_spec
from .types import LoadedModel, ModelInfo, Progress

ROLES = ("target", "draft")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


# ---------------------------------------------------------------- memory figures


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _gpu_allocated(device: str) -> int:
    import torch

    if device.startswith("cuda"):
        return sum(torch.cuda.memory_allocated(i) for i in range(torch.cuda.device_count()))
    return 0


def measure_memory(model, device: str, gpu_before: int) -> int:
    """GPU: the torch.cuda allocation delta (includes what bitsandbytes packs). Else the bytes of
    parameters and buffers -- deterministic, where an RSS delta depends on what the allocator
    and the page cache happen to do (the RSS delta is reported as a note)."""
    if device.startswith("cuda"):
        return max(0, _gpu_allocated(device) - gpu_before)
    return int(model.get_memory_footprint(return_buffers=True)) + _bnb_state_bytes(model)


def _bnb_state_bytes(model) -> int:
    """bitsandbytes keeps each 4-bit layer's scales (absmax, and with double quantization their
    own scales and code book) in a quant_state beside the packed weight, and each int8 layer's
    row scales (SCB) on the weight: neither is a parameter or buffer, so the footprint above
    leaves them out."""
    total = 0
    for p in model.parameters():
        qs = getattr(p, "quant_state", None)
        tensors = []
        if qs is not None:
            tensors += [qs.absmax, getattr(qs, "code", None)]
            inner = getattr(qs, "state2", None)
            if inner is not None:
                tensors += [inner.absmax, getattr(inner, "code", None), getattr(qs, "offset", None)]
        tensors.append(getattr(p, "SCB", None))
        total += sum(t.numel() * t.element_size() for t in tensors if t is not None and hasattr(t, "numel"))
    return total


# ---------------------------------------------------------------- safetensors folders


def _check_folder(folder: Path, allow_pickle: bool, label: str) -> None:
    if not (folder / "config.json").is_file():
        raise ModelError(f"{label} is not a model folder (no config.json in {folder})")
    files = [p.name for p in folder.iterdir() if p.is_file()]
    if any(f.endswith(".safetensors") for f in files):
        return
    pickles = [f for f in files if f.endswith(_PICKLE_SUFFIXES)]
    if pickles and not allow_pickle:
        raise ModelError(
            f"{label} has only pickle weights ({pickles[0]}), which can run arbitrary code when loaded; "
            "convert it to safetensors, or pass --allow-pickle if you trust its source"
        )
    if not pickles:
        hint = " (pickle weights are skipped unless --allow-pickle)" if not allow_pickle else ""
        raise ModelError(f"{label} has no model weights (*.safetensors) in {folder}{hint}")


def _load_folder(folder: Path, label: str, *, device: str, dtype: str, quantization: str,
                 trust_remote_code: bool, allow_pickle: bool, progress: Progress | None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _check_folder(folder, allow_pickle, label)
    kwargs = {
        "dtype": torch_dtype(dtype),
        "trust_remote_code": trust_remote_code,
        # Without the opt-in, transformers itself refuses to unpickle anything.
        "use_safetensors": None if allow_pickle else True,
    }
    if quantization != "none":
        kwargs["quantization_config"] = bnb_config(quantization, dtype)
    if device == "cuda":
        kwargs["device_map"] = "auto"  # accelerate spreads a target too big for one GPU
    elif device != "cpu":
        kwargs["device_map"] = {"": device}
    if progress:
        progress(f"loading {label}", None)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    return model, tokenizer


# ---------------------------------------------------------------- dispatch


def _load_any(sp: Spec, role: str, *, device: str, dtype: str, quantization: str | None,
              trust_remote_code: bool, allow_pickle: bool, progress: Progress | None) -> dict:
    """What load_model needs: model, tokenizer, name, source, quant, notes, and for a GGUF
    its path, kernels line, lean forward and the bytes it reads."""
    if sp.kind in ("default", "gguf", "hub-gguf"):
        resolve_quantization(quantization, role=role, device=device, is_gguf=True)  # refuses nf4/int8
        key = None
        if sp.kind == "default":
            em = default_pair.embedded(role)
            path, name, source, key = default_pair.ensure_assembled(em, progress), em.name, f"default:{role}", em.sha256
        elif sp.kind == "gguf":
            path, name, source = Path(sp.path), Path(sp.path).stem, sp.value
        else:
            path = hub.gguf_file(sp.repo_id, sp.filename, progress=progress)
            name, source = Path(path).stem, sp.value
        g = load_gguf(Path(path), device=device, dtype=dtype, key=key, progress=progress, role=role)
        return dict(model=g.model, tokenizer=g.tokenizer, name=name, source=source, quant=g.quantization,
                    notes=g.notes, gguf_path=Path(path), kernels=g.kernels, lean=g.lean, memory=g.memory_bytes)

    quant = resolve_quantization(quantization, role=role, device=device, is_gguf=False)
    if sp.kind == "hub":
        folder = hub.snapshot(sp.repo_id, allow_pickle=allow_pickle, progress=progress)
        name = sp.repo_id
    else:
        folder = sp.path
        name = sp.path.resolve().name
    model, tok = _load_folder(folder, sp.value, device=device, dtype=dtype, quantization=quant,
                              trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, progress=progress)
    note = bnb_note(quant, device)
    return dict(model=model, tokenizer=tok, name=name, source=sp.value, quant=quant, notes=[note] if note else [])


def _translate(e: BaseException, spec: str, device: str) -> ModelError:
    """Library exceptions -> one line a user can act on."""
    import torch

    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), torch.cuda.OutOfMemoryError) if t)
    text = str(e)
    if isinstance(e, (MemoryError, *oom_types)) or (
        isinstance(e, RuntimeError) and ("out of memory" in text.lower() or "can't allocate memory" in text)
    ):
        return ModelError(
            f"out of memory while loading {spec} on {device}; close other programs, pick a smaller model, "
            "use --quantization nf4 (a safetensors model), or a smaller --dtype"
        )
    if "trust_remote_code" in text:
        return ModelError(
            f"{spec} needs custom code from its repository; pass --trust-remote-code only if you trust it"
        )
    first = text.strip().splitlines()[0] if text.strip() else ""
    return ModelError(f"could not load {spec}: {type(e).__name__}: {first}"[:400])


def _eos_ids(model, tokenizer) -> list[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)


def _device_and_notes(model) -> tuple[str, list[str]]:
    """A device string load_model accepts again (engine.py loads the draft on the target's
    device): where the input embeddings live, plus a note when accelerate spread the model."""
    weight = getattr(model.get_input_embeddings(), "weight", None)  # a GGUF embedding holds blocks, no weight
    device = str(weight.device if weight is not None else next(model.parameters()).device)
    device_map = getattr(model, "hf_device_map", None) or {}
    places = sorted(set(map(str, device_map.values())))
    notes = [f"spread over {', '.join(places)} by accelerate device_map"] if len(places) > 1 else []
    return device, notes


def load_model(
    spec: str,
    *,
    role: str = "target",
    device: str = "auto",
    dtype: str = "auto",
    quantization: str | None = None,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
    progress: Progress | None = None,
) -> LoadedModel:
    """Load a model SPEC (folder | .gguf | hub id | owner/repo/file.gguf | 'default') for `role`.

    Raises ModelError (one line) for anything the user can fix. The model is in eval mode.
    """
    if role not in ROLES:
        raise ModelError(f"unknown role {role!r}; use 'target' or 'draft'")
    start = time.perf_counter()
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    sp = parse_spec(spec)
    rss_before, gpu_before = _rss(), _gpu_allocated(device)
    try:
        got = _load_any(sp, role, device=device, dtype=dtype, quantization=quantization,
                        trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, progress=progress)
    except ModelError:
        raise
    except Exception as e:  # noqa: BLE001 -- every other failure (MemoryError included) becomes one line
        raise _translate(e, spec, device) from e
    model, tokenizer, quant = got["model"], got["tokenizer"], got["quant"]
    model.eval()
    device_label, map_notes = _device_and_notes(model)
    notes = list(got["notes"]) + map_notes + [f"process RSS grew by {(_rss() - rss_before) / 2**30:.2f} GiB"]
    memory = got.get("memory")
    info = ModelInfo(
        name=got["name"],
        source=got["source"],
        # bitsandbytes packs weights into uint8; the meaningful dtype is the compute dtype.
        dtype=dtype if quant in ("nf4", "int8") else str(next(model.parameters()).dtype).removeprefix("torch."),
        quantization=quant,
        device=device_label,
        memory_bytes=memory if memory is not None else measure_memory(model, device, gpu_before),
        load_seconds=time.perf_counter() - start,
        notes=notes,
        kernels=got.get("kernels", ""),
    )
    if progress:
        progress(f"loaded {got['name']}", 1.0)
    return LoadedModel(model=model, tokenizer=tokenizer, info=info, eos_token_ids=_eos_ids(model, tokenizer),
                       gguf_path=got.get("gguf_path"), lean=got.get("lean"))
