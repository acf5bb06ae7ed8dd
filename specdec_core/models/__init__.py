"""The models layer: SPEC parsing, the embedded default pair, loaders, compatibility, presets.

    from specdec_core.models import load_model, check_compatible
    target = load_model("default", role="target")
    draft = load_model("default", role="draft")
    check_compatible(target, draft)

Heavy libraries (torch, transformers, bitsandbytes, huggingface_hub) are imported inside
the functions that need them, so importing this package is cheap (the CLI's --help).
"""

from __future__ import annotations

from . import cache
from .compat import check_compatible
from .default_pair import EMBEDDED, EmbeddedModel, ensure_assembled
from .default_pair import status as _role_status
from .device import cpu_has_fast_bf16, resolve_device, resolve_dtype
from .errors import ModelError
from .loader import load_model
from .presets import PRESETS, Preset, get_preset
from .spec import Spec, parse_spec
from .types import LoadedModel, ModelInfo, Progress


def default_pair_status() -> dict:
    """{"cache_dir", "target": {...}, "draft": {...}}: installed? assembled? converted? sizes, paths."""
    return {
        "cache_dir": str(cache.cache_dir()),
        "target": _role_status("target"),
        "draft": _role_status("draft"),
    }


def load_default_pair(
    device: str = "cpu", dtype: str = "auto", progress: Progress | None = None
) -> tuple[LoadedModel, LoadedModel]:
    """The embedded (target, draft), loaded and checked compatible."""
    target = load_model("default", role="target", device=device, dtype=dtype, progress=progress)
    draft = load_model("default", role="draft", device=device, dtype=dtype, progress=progress)
    check_compatible(target, draft)
    return target, draft


__all__ = [
    "EMBEDDED", "PRESETS", "EmbeddedModel", "LoadedModel", "ModelError", "ModelInfo", "Preset",
    "Progress", "Spec", "check_compatible", "cpu_has_fast_bf16", "default_pair_status",
    "ensure_assembled", "get_preset", "load_default_pair", "load_model", "parse_spec",
    "resolve_device", "resolve_dtype",
]
