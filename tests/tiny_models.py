"""Tiny Qwen2 models and a tiny word-level tokenizer, shared by the test suites.

Why: the real models take minutes to load on CPU; these load in milliseconds and behave
like the real thing from the point of view of the decoder (same model class, same chat
markers, same eos handling). Random weights, so outputs are nonsense but deterministic
for a given seed.

Stable API (other test files depend on it):
    WORDS, SPECIAL_TOKENS
    make_tokenizer(words=None) -> PreTrainedTokenizerFast
    make_model(vocab_size, seed, hidden=32, layers=2, ...) -> Qwen2ForCausalLM (float32, eval)
    save_model(dir, model, tokenizer) -> Path
    save_folder(root, name, words=None, eos=(2, 0), **shape) -> Path
    save_pair(tmp_path) -> (target_dir, draft_dir)
    save_gguf(path, model, tokenizer, ...) -> Path
    install_embedded(site, role, name, filename, {dist: bytes}) -> default_pair.EmbeddedModel
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

# Ids 0..2 are the special tokens, in the same roles as in Qwen2.5 (<|endoftext|> is pad,
# <|im_end|> ends an assistant turn).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Why a byte-level BPE and not a simpler WordLevel: transformers 5 forces the Qwen2Tokenizer
# pipeline (byte-level BPE) on any folder whose config says model_type "qwen2", and the GGUF
# loader rebuilds the tokenizer from GGUF "gpt2" metadata (tokens + merges) the same way. A
# WordLevel vocabulary would silently mis-tokenize after a save/load round trip.
#
# Words carry GPT-2's leading-space marker "Ġ" (" cat" is one token "Ġcat"), built up by
# left-to-right prefix merges; every character of the alphabet is a token too, so any text
# over the alphabet encodes. Kept within 64 tokens in total.
ALPHABET = list("acdehimnorstuy") + ["Ġ", "Ċ", "."]  # Ġ = space, Ċ = newline (byte-level)
WORDS = ["the", "cat", "sat", "on", "mat", "a", "hat", "is", "it", "in", "and", "not", "no",
         "yes", "to", "too", "done", "this"]
ROLE_WORDS = ["user"]  # appears right after <|im_start|>, without a leading space

# Qwen-style ChatML (the real Qwen2.5 template, minus tools and the default system prompt).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _vocab_and_merges(words: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Specials, then the alphabet, then every prefix of every word (" word" and role words).

    Merges are ordered by the length of what they build, so BPE rebuilds each word strictly
    left to right and the result does not depend on merge interactions between words.
    """
    pieces = ["Ġ" + w for w in words] + ROLE_WORDS
    alphabet = list(ALPHABET)
    for ch in "".join(pieces):  # letters a custom word list needs beyond the default alphabet
        if ch not in alphabet:
            alphabet.append(ch)
    vocab: dict[str, int] = {}
    for tok in SPECIAL_TOKENS + alphabet:
        vocab.setdefault(tok, len(vocab))
    merges: dict[tuple[str, str], int] = {}
    for piece in pieces:
        for n in range(2, len(piece) + 1):
            merges.setdefault((piece[: n - 1], piece[n - 1]), n)
    for (left, right), _ in sorted(merges.items(), key=lambda kv: kv[1]):
        vocab.setdefault(left + right, len(vocab))
    ordered = [pair for pair, _ in sorted(merges.items(), key=lambda kv: kv[1])]
    return vocab, ordered


def make_tokenizer(words: list[str] | None = None) -> PreTrainedTokenizerFast:
    """A tiny Qwen2-style tokenizer: SPECIAL_TOKENS (ids 0..2), the alphabet, then the words.

    Passing different `words` gives a tokenizer whose vocabulary disagrees with the default
    one (the compatibility-check tests use that). The default has <= 64 tokens.
    """
    vocab, merges = _vocab_and_merges(list(WORDS if words is None else words))
    tok = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def make_model(
    vocab_size: int,
    seed: int,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 64,
    max_positions: int = 512,
    eos_token_id: int | list[int] = (2, 0),
    tie_word_embeddings: bool = True,
) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2ForCausalLM, float32, in eval mode, deterministic per seed.

    eos_token_id defaults to [<|im_end|>, <|endoftext|>] like Qwen2.5-Instruct's
    generation_config, so code that must honour *all* eos ids gets exercised.
    """
    eos = list(eos_token_id) if isinstance(eos_token_id, (list, tuple)) else [eos_token_id]
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos[0],
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    # Random init with std 0.02 gives near-uniform logits; scale up so greedy choices are
    # clear-cut (ties would make greedy comparisons fragile).
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(25.0)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=0)
    model.eval()
    return model


def save_model(directory: Path | str, model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast) -> Path:
    """save_pretrained model (safetensors) + tokenizer into `directory`; returns it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def save_folder(root: Path | str, name: str, words: list[str] | None = None, eos=(2, 0), **shape) -> Path:
    """A tiny model folder `root/name` on its own vocabulary (`words`) and eos ids; `shape` goes to
    make_model (hidden, layers, ...)."""
    tok = make_tokenizer(words)
    return save_model(Path(root) / name, make_model(len(tok), seed=0, eos_token_id=list(eos), **shape), tok)


def install_embedded(site: Path, role: str, name: str, filename: str, pieces: dict[str, bytes]):
    """An embedded model as installed data packages under `site` (put it on sys.path): each piece
    one distribution, named by its key, holding one part of the file as importlib.metadata sees
    it (dist-info, RECORD, the file). Returns the default_pair.EmbeddedModel that assembles them."""
    from specdec_core.models import default_pair

    parts = []
    for n, (dist, data) in enumerate(pieces.items(), 1):
        module = dist.replace("-", "_")
        rel = f"{module}/data/part{n:02d}.bin"
        file = site / rel
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(data)
        info = site / f"{module}-0.0.1.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n")
        (info / "RECORD").write_text(f"{rel},,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
        parts.append(default_pair.Part(dist, "0.0.1", rel))
    whole = b"".join(pieces.values())
    return default_pair.EmbeddedModel(role=role, name=name, filename=filename, size=len(whole),
                                      sha256=hashlib.sha256(whole).hexdigest(), parts=tuple(parts))


def save_pair(tmp_path: Path | str) -> tuple[Path, Path]:
    """A compatible target/draft pair as two HF folders under tmp_path.

    Target: 2 layers, hidden 32 (seed 0). Draft: 1 layer, hidden 16 (seed 1). Same tokenizer.
    """
    tmp_path = Path(tmp_path)
    tokenizer = make_tokenizer()
    vocab = len(tokenizer)
    target = make_model(vocab, seed=0, hidden=32, layers=2)
    draft = make_model(vocab, seed=1, hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32)
    return (
        save_model(tmp_path / "target", target, tokenizer),
        save_model(tmp_path / "draft", draft, tokenizer),
    )


def save_gguf(path: Path | str, model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast,
              quantized: bool = False, quant_type: str = "Q8_0",
              overrides: dict | None = None) -> Path:
    """Write `model` + `tokenizer` as a llama.cpp-style GGUF (arch qwen2 or llama, gpt2 tokenizer).

    quantized=False: every tensor F32, so loading it back gives the same logits as `model`.
    quantized=True: the 2-D weight matrices as `quant_type` (Q8_0 or Q4_0: blocks of 32 along
    rows), like a real quantized file.
    overrides: GGUF tensor name -> (raw blocks, type name), written as they are (e.g. random
    valid Q6_K blocks, a type gguf-py cannot quantize to); the file's model is what they decode to.
    The tensor and metadata names are llama.cpp's (what transformers' GGUF loader maps).
    """
    import gguf
    import numpy as np

    path = Path(path)
    cfg = model.config
    w = gguf.GGUFWriter(str(path), cfg.model_type)  # "qwen2" or "llama"
    w.add_name(f"tiny-{cfg.model_type}")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType[f"MOSTLY_{quant_type}"] if quantized else gguf.LlamaFileType.ALL_F32)

    vocab = tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    special = set(tokenizer.all_special_tokens)
    merges = [" ".join(m) for m in tokenizer.backend_tokenizer.model.get_merges()] \
        if hasattr(tokenizer.backend_tokenizer.model, "get_merges") else _merges_from_json(tokenizer)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_pad_token_id(tokenizer.pad_token_id)
    w.add_bos_token_id(tokenizer.pad_token_id)  # as Qwen2.5's GGUFs do
    w.add_add_bos_token(False)
    w.add_chat_template(tokenizer.chat_template)

    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
        "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for i in range(cfg.num_hidden_layers):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}"] = f"blk.{i}.{gg}"
    state = model.state_dict()
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # a missing output.weight tells loaders "tied"
    overrides = overrides or {}
    for hf_name, tensor in state.items():
        data = tensor.detach().to(torch.float32).numpy()
        if names[hf_name] in overrides:
            raw, type_name = overrides[names[hf_name]]
            qtype = gguf.GGMLQuantizationType[type_name]
            w.add_tensor(names[hf_name], raw.reshape(data.shape[0], -1), raw_dtype=qtype)
            continue
        if quantized and data.ndim == 2 and data.shape[-1] % 32 == 0:
            qtype = gguf.GGMLQuantizationType[quant_type]
            w.add_tensor(names[hf_name], gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(names[hf_name], np.ascontiguousarray(data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _merges_from_json(tokenizer) -> list[str]:
    import json

    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    return [" ".join(m) if isinstance(m, list) else m for m in merges]
