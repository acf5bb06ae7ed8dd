"""A model's vocabulary, read without its weights, and the one rule for "this draft fits this target".

Speculative decoding hands the draft's token ids straight to the target, so the two vocabularies
must agree on every id the target can emit (all ids < the target's vocabulary size); the draft may
know more ids. The ids that end generation must be the same too, or one model would stop where the
other goes on. `incompatibility(target, draft)` says why a pair does not fit (None when it does);
compat.check_compatible applies it to loaded models, and the Models dialog to files before anything
loads -- the same words either way.

Reading is cheap next to a load: a folder's tokenizer (what the loader reads), a GGUF's token list
from its header (about 3 s for Qwen's 152k tokens: the metadata only, no tensor), a hub id's
tokenizer files alone (a few MB) when it is not in the local cache.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelError

# What a hub id's compatibility needs: its tokenizer and the two configs naming eos ids.
TOKENIZER_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model")


@dataclass(frozen=True)
class Vocab:
    tokens: tuple  # id -> token string (None where an id has none)
    eos_ids: tuple  # every id that ends generation, sorted
    source: str  # what it was read from, for messages

    def __len__(self) -> int:
        return len(self.tokens)


def incompatibility(target: Vocab, draft: Vocab) -> str | None:
    """Why `draft` cannot propose for `target` (the first difference), or None when it can."""
    n_target, n_draft = len(target), len(draft)
    if n_draft < n_target:
        return (f"the target has {n_target:,} tokens but the draft only {n_draft:,} "
                f"(first missing id {n_draft}, {target.tokens[n_draft]!r})")
    if target.tokens != draft.tokens[:n_target]:  # one C-level comparison; the loop only finds where
        i = next(i for i in range(n_target) if target.tokens[i] != draft.tokens[i])
        return f"token id {i} is {target.tokens[i]!r} in the target but {draft.tokens[i]!r} in the draft"
    t_eos, d_eos = sorted(target.eos_ids), sorted(draft.eos_ids)
    if t_eos != d_eos:
        diff = sorted(set(t_eos) ^ set(d_eos))[0]
        side = "target" if diff in t_eos else "draft"
        text = target.tokens[diff] if diff < n_target else draft.tokens[diff] if diff < n_draft else None
        return (f"token id {diff} ({text!r}) ends generation for the {side} only "
                f"(target eos ids {t_eos}, draft {d_eos})")
    return None


# ---------------------------------------------------------------- reading


def of_tokenizer(tokenizer, eos_ids, source: str) -> Vocab:
    # convert_ids_to_tokens on a list is one call into the Rust tokenizer: fast for 150k ids
    tokens = tuple(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))
    return Vocab(tokens, tuple(sorted(set(int(i) for i in eos_ids))), source)


def _ids(value) -> set[int]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, (list, tuple)):
        return {int(v) for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_folder(folder: Path, trust_remote_code: bool = False) -> Vocab:
    """A Hugging Face folder: its tokenizer as the loader reads it, eos ids as the loader
    gathers them (generation_config, config, the tokenizer's own)."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 -- whatever the tokenizer files do wrong: one line
        text = str(e).strip().splitlines()
        raise ModelError(f"cannot read the tokenizer of {folder}: {text[0] if text else type(e).__name__}") from None
    eos = _ids(_json(folder / "generation_config.json").get("eos_token_id"))
    eos |= _ids(_json(folder / "config.json").get("eos_token_id"))
    if tok.eos_token_id is not None:
        eos.add(int(tok.eos_token_id))
    return of_tokenizer(tok, eos, str(folder))


def read_gguf(path: Path) -> Vocab:
    """A GGUF: the token list and end-of-generation ids from its header (the ids the loader
    gives the model: the file's eos/eot/eom ids and the known end-of-turn tokens by text)."""
    from ..cpu.model import _EOG_ID_KEYS, EOG_TOKEN_TEXTS
    from ..cpu.reader import GGUFError, GGUFFile

    try:
        meta = GGUFFile(path, keep_arrays=("tokenizer.ggml.tokens",)).meta
    except GGUFError as e:
        raise ModelError(f"not a readable GGUF: {e}; download or assemble it again") from None
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        raise ModelError(f"{path.name} has no token list in its header, so no draft can be matched to it")
    eos = {int(meta[k]) for k in _EOG_ID_KEYS if isinstance(meta.get(k), int)}
    eos |= {i for i, t in enumerate(tokens) if t in EOG_TOKEN_TEXTS}
    return Vocab(tuple(tokens), tuple(sorted(eos)), str(path))


def hub_tokenizer_folder(repo_id: str) -> Path:
    """A folder holding hub model `repo_id`'s tokenizer files: its local snapshot when cached,
    else the tokenizer files alone, fetched (a few MB, not the weights)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url, try_to_load_from_cache
    from huggingface_hub import errors as hf_errors

    from .hub_files import hub_error

    cached = try_to_load_from_cache(repo_id, "config.json")
    if isinstance(cached, str):
        return Path(cached).parent
    try:
        # one request without retries first: offline, hf_hub_download retries each file with
        # backoff (about 23 s) before giving up, far too long for a list waiting on the answer
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json"))
    except hf_errors.EntryNotFoundError as e:
        if isinstance(e, hf_errors.LocalEntryNotFoundError):
            raise hub_error(e, repo_id) from None
    except Exception as e:  # noqa: BLE001
        raise hub_error(e, repo_id) from None
    folder = None
    for name in TOKENIZER_FILES:
        try:
            folder = Path(hf_hub_download(repo_id, name)).parent
        except hf_errors.EntryNotFoundError as e:
            if isinstance(e, hf_errors.LocalEntryNotFoundError):
                raise hub_error(e, repo_id) from None
            continue  # a repo has only some of these
        except Exception as e:  # noqa: BLE001
            raise hub_error(e, repo_id) from None
    if folder is None:
        raise ModelError(f"{repo_id} has no tokenizer files on the hub")
    return folder


_cache: dict[tuple, Vocab] = {}
_lock = threading.Lock()


def read_vocab(spec: str, role: str = "target") -> Vocab:
    """The vocabulary of a model SPEC (folder, .gguf, hub id, owner/repo/file.gguf, 'default'),
    without loading weights. Remembered per file and modification time for this process."""
    from . import default_pair
    from .spec import parse_spec

    sp = parse_spec(spec)
    if sp.kind == "default":
        path = default_pair.ensure_assembled(default_pair.embedded(role))
        kind = "gguf"
    elif sp.kind == "gguf":
        path, kind = sp.path, "gguf"
    elif sp.kind == "folder":
        path, kind = sp.path, "folder"
    elif sp.kind == "hub":
        path, kind = hub_tokenizer_folder(sp.repo_id), "folder"
    else:  # hub-gguf: the tokens live in the file itself; only a downloaded one can be read
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(sp.repo_id, sp.filename)
        if not isinstance(cached, str):
            raise ModelError(f"{sp.value} is not downloaded yet; its tokens are read from the file itself")
        path, kind = Path(cached), "gguf"
    path = Path(path).resolve()
    marker = path / "tokenizer.json" if kind == "folder" else path
    try:
        stamp = marker.stat().st_mtime_ns
    except OSError:
        stamp = None
    key = (str(path), stamp)
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    vocab = read_gguf(path) if kind == "gguf" else read_folder(path)
    with _lock:
        _cache[key] = vocab
    return vocab
