"""The CPU backend's model (specdec_core/cpu/model.py, reader.py, linear.py): a transformers
model built from a GGUF's metadata on the meta device, its linears and embedding on the file's
blocks, read in place.

References: transformers' own GGUF import (config, tokenizer, and for llama its q/k
un-permutation), and a float twin of each tiny model that is exactly what the file decodes to.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import soften
from gguf_blocks import make_llama, write_gguf
from specdec_core.cpu import model as cm
from specdec_core.cpu.abi import ptr
from specdec_core.cpu.linear import GGUFEmbedding, GGUFLinear
from specdec_core.cpu.reader import GGUFError, GGUFFile
from tiny_models import make_model, make_tokenizer

PROMPT = "the cat sat on a mat . is it done"


def _logits(model, ids):
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0].float()


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def _qwen(tok, seed=0, **kw):
    return make_model(len(tok), seed=seed, **kw)


def test_config_equals_transformers_own_import(tmp_path, tok):
    from transformers import AutoConfig

    for model in (_qwen(tok, tie_word_embeddings=False), make_llama(len(tok), seed=1)):
        path = write_gguf(tmp_path / f"{model.config.model_type}.gguf", model, tok)
        ours = cm.config_from_gguf(GGUFFile(path)).to_dict()
        theirs = AutoConfig.from_pretrained(tmp_path, gguf_file=path.name).to_dict()
        for d in (ours, theirs):
            d.pop("transformers_version", None)
            d.pop("_name_or_path", None)  # from_pretrained records the folder it was given
        assert ours == theirs


def test_tokenizer_is_the_files_and_is_cached(tmp_path, tok):
    path = write_gguf(tmp_path / "t.gguf", _qwen(tok), tok)
    folder = tmp_path / "tokcache"
    first = cm.tokenizer_from_gguf(path, folder)
    assert (folder / "tokenizer.json").is_file()
    again = cm.tokenizer_from_gguf(path, folder)
    assert first.get_vocab() == tok.get_vocab() == again.get_vocab()
    assert first(PROMPT)["input_ids"] == tok(PROMPT)["input_ids"] == again(PROMPT)["input_ids"]
    assert again.chat_template == tok.chat_template
    assert cm.eos_ids(GGUFFile(path), again) == [0, 2]  # <|im_end|> from the file, <|endoftext|> by name


@pytest.mark.parametrize("types,tol", [
    ({}, 1e-4),  # F32: float activations, only the sum order differs from torch's matmul
    ({"attn_q": "Q8_0", "attn_k": "Q4_0", "attn_v": "Q5_1", "attn_output": "Q5_0", "ffn_gate": "Q4_1",
      "ffn_up": "F16", "ffn_down": "BF16", "output": "Q8_0", "token_embd": "Q8_0"}, 0.08),
])
def test_qwen2_on_blocks_matches_its_float_twin(tmp_path, tok, types, tol):
    twin = _qwen(tok, tie_word_embeddings=False)
    path = write_gguf(tmp_path / "q.gguf", twin, tok, types)
    loaded = cm.load(path, tmp_path / "tok")
    model = loaded.model
    assert all(not p.is_meta for p in model.parameters())
    assert isinstance(model.model.embed_tokens, GGUFEmbedding) and isinstance(model.lm_head, GGUFLinear)
    assert sum(loaded.report.types.values()) == 2 * 7 + 2
    ids = tok(PROMPT)["input_ids"]
    ours, ref = _logits(model, ids), _logits(twin, ids)
    scale = ref.abs().max()
    assert (ours - ref).abs().max() <= tol * scale
    assert (ours.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9


def test_k_quant_layers_on_their_blocks(tmp_path, tok):
    # hidden 256: K-quant rows are whole super-blocks. Softened: with tiny_models' full weight
    # scale, attention is so peaked that 8-bit activations flip it at some positions
    twin = soften(_qwen(tok, hidden=256, intermediate=512, heads=4, kv_heads=2, tie_word_embeddings=False), 5.0)
    path = write_gguf(tmp_path / "k.gguf", twin, tok,
                      {"attn_q": "Q4_K", "attn_k": "Q4_K", "attn_v": "Q6_K", "attn_output": "Q5_K",
                       "ffn_gate": "Q4_K", "ffn_up": "Q4_K", "ffn_down": "Q6_K", "output": "Q6_K"})
    loaded = cm.load(path, tmp_path / "tok")
    assert set(loaded.report.types) >= {"Q4_K", "Q5_K", "Q6_K"}
    ids = tok(PROMPT)["input_ids"]
    ours, ref = _logits(loaded.model, ids), _logits(twin, ids)
    assert ((ours - ref).abs().amax(-1) <= 0.08 * ref.abs().amax(-1)).all()
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_llama_q_k_rows_are_read_through_transformers_permutation(tmp_path, tok):
    twin = make_llama(len(tok), seed=3)
    path = write_gguf(tmp_path / "l.gguf", twin, tok)  # F32: the permuted q/k rows are the only difference
    loaded = cm.load(path, tmp_path / "tok")
    q = loaded.model.model.layers[0].self_attn.q_proj.matrix
    assert q.row_map is not None and sorted(q.row_map.tolist()) == list(range(q.rows))
    ids = tok(PROMPT)["input_ids"]
    ours, ref = _logits(loaded.model, ids), _logits(twin, ids)
    assert (ours - ref).abs().max() <= 1e-4 * ref.abs().max()


def test_tied_head_reads_the_embedding_blocks(tmp_path, tok):
    twin = _qwen(tok, tie_word_embeddings=True)
    path = write_gguf(tmp_path / "tied.gguf", twin, tok, {"token_embd": "Q8_0"})
    loaded = cm.load(path, tmp_path / "tok")
    assert loaded.model.lm_head.matrix is loaded.model.model.embed_tokens.matrix  # one copy: the file's
    ids = tok(PROMPT)["input_ids"]
    ref = _logits(twin, ids)
    assert (_logits(loaded.model, ids) - ref).abs().max() <= 0.08 * ref.abs().max()


def test_quantized_layers_are_never_expanded(tmp_path, tok):
    twin = _qwen(tok, hidden=256, intermediate=512, tie_word_embeddings=False)
    path = write_gguf(tmp_path / "m.gguf", twin, tok, {k: "Q4_K" for k in ("attn_q", "attn_k", "attn_v", "attn_output",
                                                                           "ffn_gate", "ffn_up", "ffn_down")})
    loaded = cm.load(path, tmp_path / "tok")
    f = loaded.file
    for layer in loaded.model.model.layers:
        m = layer.mlp.down_proj.matrix
        assert isinstance(m.data, np.memmap) or isinstance(m.data.base, np.memmap)  # a view of the mapped file
        assert m.nbytes == 512 // 256 * 144 * 256
    floats = sum(p.numel() * 4 for p in loaded.model.parameters())
    assert floats == loaded.report.float_bytes < f.tensors["blk.0.ffn_down.weight"].nbytes * 4


def test_damaged_files_are_refused_in_one_line(tmp_path, tok):
    path = write_gguf(tmp_path / "ok.gguf", _qwen(tok), tok)
    data = path.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) - 1000])
    (tmp_path / "junk.gguf").write_bytes(b"NOPE" + data[4:])
    (tmp_path / "header.gguf").write_bytes(data[:40])
    for name, match in (("cut", "truncated"), ("junk", "not a GGUF"), ("header", "truncated or corrupt")):
        with pytest.raises(GGUFError, match=match) as e:
            GGUFFile(tmp_path / f"{name}.gguf")
        assert "\n" not in str(e.value)


def test_an_architecture_transformers_lacks_is_refused(tmp_path, tok):
    import gguf

    w = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "no-such-arch")
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(cm.GGUFUnsupported, match="not supported by transformers"):
        cm.config_from_gguf(GGUFFile(tmp_path / "x.gguf"))


def test_a_draft_is_requantized_to_4_bits_and_stays_close(tmp_path, tok):
    from specdec_core.cpu.build import kernel

    twin = _qwen(tok, tie_word_embeddings=False)
    path = write_gguf(tmp_path / "d.gguf", twin, tok, {"attn_q": "Q8_0", "attn_k": "Q5_0", "attn_v": "Q4_0",
                                                        "ffn_down": "F16", "output": "Q8_0"})
    loaded = cm.load(path, None)
    before = {n: (m.matrix.ggml_type, m.matrix.data.copy()) for n, m in loaded.model.named_modules()
              if isinstance(m, GGUFLinear)}
    count, b, a = cm.requantize_for_draft(loaded.model, loaded.file)
    assert count == len([t for t, _ in before.values() if t not in (2, 12)]) and a < b
    lib = kernel().lib
    for name, m in loaded.model.named_modules():
        if not isinstance(m, GGUFLinear):
            continue
        assert m.matrix.ggml_type in (2, 12), name  # Q4_0, or Q4_K left as it was
        t0, raw0 = before[name]
        old = np.empty((m.matrix.rows, m.matrix.cols), np.float32)
        new = np.empty_like(old)
        lib.sd_dequantize(t0, ptr(raw0), raw0.shape[1], 0, ptr(None), old.shape[0], old.shape[1], ptr(old))
        lib.sd_dequantize(2, m.matrix.pointer(), m.matrix.row_bytes, m.matrix.layout, ptr(None), new.shape[0], new.shape[1],
                          ptr(new))
        # Q4_0: a step is amax/8 of the block; rounding moves a weight by half a step, except at
        # the far end of the range, clamped to code 15, by up to one (and d is rounded to fp16)
        step = np.abs(old.reshape(-1, 32)).max(-1, keepdims=True) / 8
        err = np.abs(new - old).reshape(-1, 32)
        assert (err <= step * 1.002 + 1e-6).all(), name
