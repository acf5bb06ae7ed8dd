"""Hugging Face hub ids: the local HF cache first, then a download with progress.

Downloads go into the standard HF cache (huggingface_hub decides where; HF_HOME applies),
so models are shared with every other HF tool on the machine. Only the files a causal LM
needs are fetched: safetensors weights, configs, tokenizer files -- never other formats
the repo may also carry (GGUF, ONNX, ...), and pickle weights only when allowed.
"""

from __future__ import annotations

from pathlib import Path

from .errors import ModelError
from .hub_files import file_patterns, has_weights, hub_error
from .types import Progress


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

    patterns = file_patterns(allow_pickle)
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
        # a snapshot holding only the tokenizer files (fetched to check a draft's compatibility)
        # or cut short by a cancelled download is not the model: fetch the rest below
        if has_weights(folder, allow_pickle):
            return folder
    except hf_errors.LocalEntryNotFoundError:
        pass  # not cached: download below
    except Exception as e:  # noqa: BLE001 -- anything else is a real error worth reporting
        raise hub_error(e, repo_id) from None
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
        raise hub_error(e, label) from None
    return _download(label, label, progress, False)
