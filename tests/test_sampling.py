"""Tier 1-2: the greedy picks equal torch's argmax and top-2 margins, exact ties included."""

import torch

from specdec_core.sampling import greedy_picks, top_probability


def test_greedy_picks_equal_torch_argmax_and_topk():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(9, 151936, generator=g)
    picks, margins = greedy_picks(logits)
    top2 = torch.topk(logits, 2, dim=-1).values
    assert picks == torch.argmax(logits, dim=-1).tolist()
    assert margins == (top2[:, 0] - top2[:, 1]).tolist()


def test_the_first_of_equal_maxima_wins_with_a_zero_margin():
    row = torch.tensor([[0.5, 2.0, -1.0, 2.0, 2.0]])
    assert greedy_picks(row) == ([1], [0.0]) and torch.argmax(row, dim=-1).tolist() == [1]
    # the maximum at either end of the row
    assert greedy_picks(torch.tensor([[3.0, 1.0, 2.0]])) == ([0], [1.0])
    assert greedy_picks(torch.tensor([[1.0, 2.0, 3.5]])) == ([2], [1.5])


def test_views_and_bfloat16_rows():
    base = torch.randn(3, 40, generator=torch.Generator().manual_seed(1))
    view = base[:, :32]  # a head trimmed to the target's vocabulary: not contiguous
    assert greedy_picks(view)[0] == torch.argmax(view, dim=-1).tolist()
    b = base.bfloat16()
    assert greedy_picks(b)[0] == torch.argmax(b.float(), dim=-1).tolist()


def test_top_probability_is_the_softmax_of_the_pick():
    row = torch.randn(1000, generator=torch.Generator().manual_seed(2)) * 3
    tok, p = top_probability(row)
    assert tok == int(torch.argmax(row))
    assert abs(p - float(torch.softmax(row, -1)[tok])) < 1e-6
