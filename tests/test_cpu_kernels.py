"""oneDNN linears: same numbers as nn.Linear (to float32 rounding), and the decoder stays exact
on a converted model (speculative greedy == standard greedy == generate on that model)."""

import copy

import pytest
import torch
from torch import nn

from specdec_core.cpu_kernels import OneDNNLinear, onednn_available, use_onednn_linears
from specdec_core.decoder import DecodeSettings, Decoder
from specdec_core.proposers import DraftModelProposer
from test_decoder import PROMPTS, eos_of, hf_greedy

pytestmark = pytest.mark.skipif(not onednn_available(), reason="torch built without oneDNN")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 5, 9])
def test_onednn_linear_matches_linear(bias, rows):
    torch.manual_seed(0)
    lin = nn.Linear(48, 80, bias=bias)
    x = torch.randn(1, rows, 48)
    torch.testing.assert_close(OneDNNLinear(lin)(x), lin(x), rtol=1e-5, atol=1e-5)


def test_conversion_keeps_tied_head_and_counts(tiny):
    m = copy.deepcopy(tiny.target)
    n_linear = sum(type(x) is nn.Linear for x in m.modules())
    swapped = use_onednn_linears(m, include_head=False)
    assert swapped == n_linear - 1  # everything but the tied output head
    assert type(m.get_output_embeddings()) is nn.Linear


def test_decoder_exact_on_converted_model(tiny):
    target = copy.deepcopy(tiny.target)
    draft = copy.deepcopy(tiny.draft)
    use_onednn_linears(target)
    use_onednn_linears(draft)
    dec = Decoder(target, tiny.tokenizer)
    for prompt in PROMPTS[:3]:
        ref = hf_greedy(target, prompt, 16, eos_of(target))
        std = dec.generate(prompt, DecodeSettings(max_new_tokens=16)).run()
        spec = dec.generate(prompt, DecodeSettings(max_new_tokens=16, draft_tokens=3),
                            DraftModelProposer(draft, tiny.vocab)).run()
        assert spec.token_ids == std.token_ids == ref
