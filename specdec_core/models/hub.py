"""Hugging Face hub ids: the local HF cache first, then a download with progress.

Downloads go into the standard HF cache (huggingface_hub decides where; HF_HOME applies),
so models are shared with every other HF tool on the machine. Only the files a causal LM
needs are fetched: safetensors weights, configs, tokenizer files -- never other formats
the repo may also carry (GGUF, ONNX, ...), and pickle weights only when allowed.
"""

from __future__ import annotations

from pathlib import Path

from .errors import ModelError
from .types import Progress

_BASE_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken", "*.py"]
_PICKLE_PATTERNS = ["*.bin", "*.pt", "*.pth"]


def _patterns(allow_pickle: bool) -> list[str]:
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


def _translate(e: Exception, label: str) -> ModelError:
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


def _download(spec: str, label: str, progress: Progress | None, allow_pickle: bool) -> Path:
    """A download with byte progress that resumes where a stopped one ended (download.py)."""
    from .download import DownloadCancelled, download

    def report(p) -> None:
        if progress:
            progress(f"downloading {label}", p.fraction)

    if progress:
        progress(f"downloading {label}", None)
    try:
        return download(spec, report, None, allow_pickle)
    except DownloadCancelled as e:  # not from here (no cancel is passed), but never a traceback
        raise ModelError(str(e)) from None


def snapshot(repo_id: str, *, allow_pickle: bool, progress: Progress | None = None) -> Path:
    """Local folder of hub model `repo_id`: from the HF cache if there, else downloaded."""
    from huggingface_hub import snapshot_download
    from huggingface_hub import errors as hf_errors

    patterns = _patterns(allow_pickle)
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
        # a snapshot holding only the tokenizer files (fetched to check a draft's compatibility)
        # or cut short by a cancelled download is not the model: fetch the rest below
        if has_weights(folder, allow_pickle):
            return folder
    except hf_errors.LocalEntryNotFoundError:
        pass  # not cached: download below
    except Exception as e:  # noqa: BLE001 -- anything else is a real error worth reporting
        raise _translate(e, repo_id) from None
    return _download(repo_id, repo_id, progress, allow_pickle)


def gguf_file(repo_id: str, filename: str, *, progress: Progress | None = None) -> Path:
    """Local path of one GGUF file of a hub repo: from the HF cache if there, else downloaded."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub import errors as hf_errors

    label = f"{repo_id}/{filename}"
    try:
        return Path(hf_hub_download(repo_id, filename, local_files_only=True))
    except hf_errors.LocalEntryNotFoundError:
        pass
    except Exception as e:  # noqa: BLE001
        raise _translate(e, label) from None
    return _download(label, label, progress, False)
