"""A transformers model that runs on a GGUF's own blocks: config, tokenizer, modules.

The structure is transformers' own, so any architecture it knows runs: its config comes from
the GGUF's metadata (transformers' mapping tables), the model is built with its parameters on
the meta device (accelerate's init_empty_weights; buffers such as RoPE's inv_freq are real),
every linear and the token embedding become GGUFLinear / GGUFEmbedding over the mapped file,
and the few float tensors left (norms, biases) are copied out of the file. Tensor names come
from gguf-py's name map through transformers' own GGUF name mapping; where transformers
transforms a tensor on import, a pure row permutation (llama's q/k) becomes the layer's
row_map, and any other transform means this path cannot take the file (GGUFUnsupported).

The tokenizer is transformers' GGUF conversion (a few seconds for a 152k vocabulary), saved
once into the cache folder the caller names, so later starts read tokenizer.json.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType

from .abi import ptr
from .linear import ROWS, X8, GGUFEmbedding, GGUFLinear, GGUFMatrix, release_pages
from .reader import F16, F32, GGUFError, GGUFFile

# llama.cpp ends generation on these too, whatever eos id the file names (llama-vocab.cpp)
EOG_TOKEN_TEXTS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endofturn|>")
_EOG_ID_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
_ARCH_RENAMES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}
_MODEL_TYPE_RENAMES = {"gemma3": "gemma3_text", "gemma4": "gemma4_text"}


class GGUFUnsupported(GGUFError):
    """transformers cannot run this file's architecture from its blocks (the message says why)."""


# ---------------------------------------------------------------- config


def config_from_gguf(f: GGUFFile):
    """The transformers config the file describes, as transformers' own GGUF import builds it
    (tests/test_cpu_model.py compares the two), from metadata read without the vocabulary."""
    from transformers import CONFIG_MAPPING
    from transformers.integrations.ggml import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    arch = f.architecture
    name = f.meta.get("general.name")
    updated = "mistral" if "llama" in arch and name == "mistral" else _ARCH_RENAMES.get(arch, arch)
    if arch not in GGUF_CONFIG_MAPPING and updated not in GGUF_CONFIG_MAPPING:
        raise GGUFUnsupported(f"{f.path.name}: GGUF architecture {arch!r} is not supported by transformers")
    config: dict = {"tie_word_embeddings": "output.weight" not in f.tensors}
    for key, value in (GGUF_CONFIG_DEFAULTS_MAPPING.get(updated) or GGUF_CONFIG_DEFAULTS_MAPPING.get(arch) or {}).items():
        config.setdefault(key, value)
    for key, value in f.meta.items():
        key = key.replace(arch, updated)
        prefix, _, rest = key.partition(".")
        if isinstance(value, str) and arch in value:
            value = value.replace(arch, updated)
        target = GGUF_CONFIG_MAPPING.get(prefix, {}).get(rest, -1)
        if target not in (-1, None):
            config[target] = value
    config["model_type"] = _MODEL_TYPE_RENAMES.get(config.get("model_type"), config.get("model_type"))
    if "vocab_size" not in config and isinstance(f.meta.get("tokenizer.ggml.tokens"), int):
        config["vocab_size"] = f.meta["tokenizer.ggml.tokens"]
    if config["model_type"] not in CONFIG_MAPPING:
        raise GGUFUnsupported(f"{f.path.name}: transformers has no model type {config['model_type']!r}")
    return CONFIG_MAPPING[config["model_type"]].from_dict(config)


# ---------------------------------------------------------------- tokenizer


def tokenizer_from_gguf(path: Path, cache_folder: Path | None):
    """transformers' conversion of the file's tokenizer, read back from cache_folder when
    saved there before (the same tokenizer.json: the second start tokenizes like the first)."""
    from transformers import PreTrainedTokenizerFast

    if cache_folder is not None and (cache_folder / "tokenizer.json").is_file():
        try:
            return PreTrainedTokenizerFast.from_pretrained(cache_folder)
        except Exception:  # noqa: BLE001 -- a damaged cache: convert again
            pass
    from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer, get_gguf_tokenizer

    arch, tok_dict, tok_config = get_gguf_tokenizer(str(path))
    backend, _ = convert_gguf_tokenizer(arch, tok_dict)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **tok_config)
    if cache_folder is not None:
        _save_tokenizer(tokenizer, cache_folder)
    return tokenizer


def _save_tokenizer(tokenizer, folder: Path) -> None:
    """Written to a temporary folder and renamed: never a half-saved tokenizer."""
    import os
    import shutil

    tmp = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # a cache is an optimisation: a full disk must not stop a load


def eos_ids(f: GGUFFile, tokenizer) -> list[int]:
    """Every id that ends generation: the file's eos/eot/eom ids and the known end-of-turn
    tokens (a GGUF carries no generation_config; llama.cpp stops on these too)."""
    ids = {int(f.meta[k]) for k in _EOG_ID_KEYS if isinstance(f.meta.get(k), int)}
    vocab = tokenizer.get_vocab()
    ids |= {vocab[t] for t in EOG_TOKEN_TEXTS if t in vocab}
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)


# ---------------------------------------------------------------- modules


def _processor(f: GGUFFile, config):
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

    return TENSOR_PROCESSORS.get(f.architecture, TensorProcessor)(config=config.to_dict())


def _processed(processor, data: np.ndarray, gguf_name: str) -> np.ndarray:
    try:
        return np.asarray(processor.process(weights=data, name=gguf_name, tensor_key_mapping={},
                                            parsed_parameters={"tensors": {}}).weights)
    except Exception as e:  # noqa: BLE001 -- a processor that needs more than one tensor
        raise GGUFUnsupported(f"{gguf_name}: transformers converts this tensor in a way the CPU backend cannot "
                              f"follow ({type(e).__name__})") from None


def _row_map(processor, gguf_name: str, rows: int) -> np.ndarray | None:
    """transformers' import transform of this matrix as a row permutation (None: unchanged)."""
    index = np.arange(rows, dtype=np.int64).reshape(rows, 1)
    out = _processed(processor, index, gguf_name)
    if out.shape != index.shape or not np.array_equal(np.sort(out[:, 0]), index[:, 0]):
        raise GGUFUnsupported(f"{gguf_name}: transformers transforms this matrix on import (not a row permutation)")
    out = out[:, 0]
    return None if np.array_equal(out, index[:, 0]) else out.astype(np.int32)


def _tensor_names(f: GGUFFile, model, processor) -> dict[str, str]:
    """transformers parameter name -> the file's tensor name, through gguf-py's name map for
    the file's own architecture (what transformers' GGUF import does, with one map built
    instead of one per submodule: ~10 s less on a 28-layer model)."""
    import gguf

    arch = next((a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == f.architecture), None)
    if arch is None:
        raise GGUFUnsupported(f"{f.path.name}: gguf-py knows no architecture {f.architecture!r}")
    name_map = gguf.get_tensor_name_map(arch, model.config.get_text_config().num_hidden_layers)
    out = {}
    for hf_name in model.state_dict():
        base, dot, suffix = processor.preprocess_name(hf_name).rpartition(".")
        gguf_base = name_map.get_name(base) if suffix in ("weight", "bias") else None
        if gguf_base is not None and f"{gguf_base}.{suffix}" in f.tensors:
            out[hf_name] = f"{gguf_base}.{suffix}"
    return out


@dataclass
class BuildReport:
    types: dict[str, int] = field(default_factory=dict)  # ggml type name -> matrices on it
    matrix_bytes: int = 0  # bytes of blocks the model reads in place
    float_bytes: int = 0  # bytes of float tensors copied out (norms, biases)


def build_model(f: GGUFFile, config) -> tuple[torch.nn.Module, BuildReport]:
    """The model with every linear and the embedding on the file's blocks; eval mode, float32."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    from .build import kernel

    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    processor = _processor(f, config)
    from_hf = _tensor_names(f, model, processor)
    lib = kernel().lib
    report = BuildReport()

    def matrix(hf_param: str) -> GGUFMatrix | None:
        gname = from_hf.get(hf_param)
        if gname is None:
            return None
        t = f.tensors[gname]
        if len(t.shape) != 2 or not lib.sd_type_supported(t.ggml_type):
            raise GGUFUnsupported(f"{gname}: a {t.type_name} matrix of shape {t.shape}, which the CPU kernel "
                                  f"does not read (it reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)")
        report.types[t.type_name] = report.types.get(t.type_name, 0) + 1
        return GGUFMatrix(f.raw(gname), t.ggml_type, t.rows, t.cols, _row_map(processor, gname, t.rows))

    shared: dict[str, GGUFMatrix] = {}  # one matrix per file tensor (a tied head is the embedding)
    for name, module in list(model.named_modules()):
        if type(module) not in (torch.nn.Linear, torch.nn.Embedding):
            continue
        key = f"{name}.weight"
        gname = from_hf.get(key)
        if gname is None and isinstance(module, torch.nn.Linear) and getattr(config, "tie_word_embeddings", False) \
                and module is model.get_output_embeddings():
            key = next(n for n, m in model.named_modules() if m is model.get_input_embeddings()) + ".weight"
            gname = from_hf.get(key)
        if gname is None:
            raise GGUFUnsupported(f"{f.path.name}: no tensor in the file for {name}")
        m = shared.get(gname) or matrix(key)
        if gname not in shared:
            report.matrix_bytes += m.nbytes
        shared[gname] = m
        if isinstance(module, torch.nn.Linear):
            bias = None
            if module.bias is not None:
                bias = _float_param(f, processor, from_hf, f"{name}.bias", report)
            new = GGUFLinear(m, bias)
        else:
            new = GGUFEmbedding(m, module.padding_idx)
        model.set_submodule(name, new)
    for pname, param in list(model.named_parameters()):
        if param.device.type != "meta":
            continue
        value = _float_param(f, processor, from_hf, pname, report)
        if tuple(value.shape) != tuple(param.shape):
            raise GGUFUnsupported(f"{pname}: shape {tuple(value.shape)} in the file, {tuple(param.shape)} in the model")
        owner, _, attr = pname.rpartition(".")
        setattr(model.get_submodule(owner), attr, torch.nn.Parameter(value, requires_grad=False))
    return model, report


def _float_param(f: GGUFFile, processor, from_hf: dict, hf_param: str, report: BuildReport) -> torch.Tensor:
    gname = from_hf.get(hf_param)
    if gname is None:
        raise GGUFUnsupported(f"{f.path.name}: no tensor in the file for {hf_param}")
    value = _processed(processor, f.floats(gname), gname).astype(np.float32)
    report.float_bytes += value.nbytes
    return torch.from_numpy(np.ascontiguousarray(value))


# ---------------------------------------------------------------- drafts: fewer bytes per token

Q4_0 = int(GGMLQuantizationType.Q4_0)
_KEEP_FOR_DRAFT = (Q4_0, int(GGMLQuantizationType.Q4_K))  # already 4-bit


def requantize_for_draft(model, f: GGUFFile) -> tuple[int, int, int]:
    """Every matrix of a draft's linears that is not 4-bit yet (Q5_0, Q8_0, Q6_K, ... F16)
    becomes Q4_0 in memory -- straight into the interleaved layout where the kernel has one and
    the rows are a multiple of 8 -- and the file's pages it came from are handed back to the OS.
    A draft's precision changes what it proposes, never the output (the target verifies what
    the draft proposed from its own distribution), and a drafted token costs the bytes it reads.
    The embedding stays: it is looked up, not read whole. Returns (matrices, bytes before, after)."""
    from .build import kernel

    lib = kernel().lib
    seen: set[int] = set()
    count = before = after = 0
    for module in model.modules():
        if not isinstance(module, GGUFLinear):
            continue
        m = module.matrix
        if m.ggml_type in _KEEP_FOR_DRAFT or m.cols % 32 or id(m) in seen:
            continue
        layout = X8 if (not m.rows % 8 and lib.sd_x8_native()) else ROWS
        out = np.empty((m.rows, m.cols // 32 * 18), np.uint8)
        step = max(256, (16 << 20) // m.row_bytes // 256 * 256)  # slices of ~16 MiB: whole groups of 8 rows
        for r0 in range(0, m.rows, step):  # the file's pages under each slice handed back once it is copied
            r1 = min(m.rows, r0 + step)
            rc = lib.sd_requantize_q4_0(m.ggml_type, ptr(m.data[r0:r1]), m.row_bytes, r1 - r0, m.cols, ptr(out[r0:r1]),
                                        layout, torch.get_num_threads())
            if rc:
                raise RuntimeError(f"CPU kernel could not requantize a matrix of type {m.ggml_type} (code {rc})")
            release_pages(m.data[r0:r1])
        count, before, after = count + 1, before + m.nbytes, after + out.nbytes
        m.release_pages()  # and the pages the slices' edges shared
        m.data, m.ggml_type, m.row_bytes, m.layout = out, Q4_0, out.shape[1], layout
        seen.add(id(m))
    return count, before, after


# ---------------------------------------------------------------- the whole load


@dataclass
class CPUModel:
    model: torch.nn.Module
    tokenizer: object
    eos_token_ids: list[int]
    file: GGUFFile
    report: BuildReport
    quantization: str  # the file's type, e.g. "Q4_K_M"
    name: str
    seconds: dict[str, float]  # where the load's time went


def file_type_name(meta: dict, matrix_types: list[int]) -> str:
    """A GGUF's quantization as people name it ("Q4_K_M"): general.file_type, else the most
    common type among its matrices."""
    import gguf

    ft = meta.get("general.file_type")
    if isinstance(ft, int):
        try:
            return gguf.LlamaFileType(ft).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    if not matrix_types:
        return "unknown"
    common = max(set(matrix_types), key=matrix_types.count)
    try:
        return gguf.GGMLQuantizationType(common).name
    except ValueError:
        return f"type{common}"


def load(path: str | Path, tokenizer_cache: Path | None = None, progress=None) -> CPUModel:
    """Everything the engine needs from a GGUF, on the CPU kernel. GGUFError (one line) when
    the file is damaged, GGUFUnsupported when this path cannot run it."""
    path = Path(path)
    seconds = {}
    t0 = time.perf_counter()
    f = GGUFFile(path)
    config = config_from_gguf(f)
    seconds["header"] = time.perf_counter() - t0
    if progress:
        progress(f"reading the tokenizer of {path.name}", None)
    t0 = time.perf_counter()
    tokenizer = tokenizer_from_gguf(path, tokenizer_cache)
    seconds["tokenizer"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    model, report = build_model(f, config)
    seconds["modules"] = time.perf_counter() - t0
    from transformers import GenerationConfig

    eos = eos_ids(f, tokenizer)
    model.generation_config = GenerationConfig(eos_token_id=eos if len(eos) > 1 else eos[0],
                                               pad_token_id=tokenizer.pad_token_id,
                                               bos_token_id=getattr(config, "bos_token_id", None))
    name = f.meta.get("general.name")
    return CPUModel(model, tokenizer, eos, f, report,
                    file_type_name(f.meta, [t.ggml_type for t in f.tensors.values() if len(t.shape) == 2]),
                    name if isinstance(name, str) and name else path.stem, seconds)


