"""What the project takes from the Hugging Face hub, and how the hub's failures read: the files a
causal LM needs, whether a snapshot holds its weights, and huggingface_hub's exceptions as
one-line ModelErrors. Shared by hub.py (the cache, then a download) and download.py (the
download itself), which neither needs the other for these.
"""

from __future__ import annotations

from pathlib import Path

from .errors import ModelError

_BASE_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken", "*.py"]
_PICKLE_PATTERNS = ["*.bin", "*.pt", "*.pth"]


def file_patterns(allow_pickle: bool) -> list[str]:
    """The files of a hub repo a causal LM needs (pickle weights only when allowed)."""
    return _BASE_PATTERNS + (_PICKLE_PATTERNS if allow_pickle else [])


def has_weights(folder: Path, allow_pickle: bool = False) -> bool:
    """Whether a snapshot folder holds model weights (all shards, when an index names them)."""
    import json

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return all((folder / s).is_file() for s in shards)
    suffixes = (".safetensors",) + ((".bin", ".pt", ".pth") if allow_pickle else ())
    return any(p.name.endswith(suffixes) and p.is_file() for p in folder.iterdir())


def _offline_error(label: str) -> ModelError:
    return ModelError(
        f"cannot reach the Hugging Face hub to download {label}, and it is not in the local HF cache (offline); "
        "connect to the internet once, or use 'default' or a local folder/.gguf"
    )


def hub_error(e: Exception, label: str) -> ModelError:
    """huggingface_hub's exceptions -> one-line ModelErrors."""
    from huggingface_hub import errors as hf_errors

    # First: it subclasses EntryNotFoundError.
    if isinstance(e, hf_errors.LocalEntryNotFoundError):  # offline mode, or the network is down
        return _offline_error(label)
    if isinstance(e, hf_errors.GatedRepoError):
        return ModelError(f"{label} is gated on the hub: accept its licence on huggingface.co and run `hf auth login`")
    if isinstance(e, hf_errors.RepositoryNotFoundError):
        return ModelError(f"no model {label} on the Hugging Face hub (or it is private: run `hf auth login`)")
    if isinstance(e, hf_errors.RevisionNotFoundError):
        return ModelError(f"{label}: revision not found on the hub")
    if isinstance(e, hf_errors.EntryNotFoundError):
        return ModelError(f"{label}: file not found in that hub repo")
    if isinstance(e, OSError) and "No space left" in str(e):
        return ModelError(f"no disk space left while downloading {label}; free space or set HF_HOME elsewhere")
    # requests/httpx connection errors: their classes differ across huggingface_hub versions
    name = type(e).__name__.lower()
    if any(w in name for w in ("connect", "timeout", "network", "offline")):
        return _offline_error(label)
    return ModelError(f"could not download {label} from the hub: {type(e).__name__}: {e}")
