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
    save_pair(tmp_path) -> (target_dir, draft_dir)
"""

from __future__ import annotations

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
