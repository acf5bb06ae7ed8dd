"""The warped distribution: temperature, then top-k, then top-p, then min-p -- exactly as
transformers' `generate(do_sample=True)` builds it, by calling the very same warpers in the same
order -- after the logit bias and the penalties (penalties.py), which depend on the tokens so far.

The same function serves the target (p_target) and the draft (q_draft), so both sides of the
acceptance test speak about the same kind of distribution.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from .penalties import shape_logits
from .settings import SamplingParams  # defined with the other settings (no torch there)


def greedy_picks(logits: torch.Tensor) -> tuple[list[int], list[float]]:
    """logits [rows, V] -> (each row's argmax, its top-1 minus top-2 logit).

    The first of equal maxima wins, as torch.argmax and generate() pick it. On a CPU through
    NumPy: torch 2.13's argmax and topk over a 152k vocabulary took 2 and 4 ms a row here,
    NumPy's passes ~0.1 ms -- at ~50 ms a target step, the difference was 12% of every step.
    """
    if logits.device.type != "cpu":
        top2 = torch.topk(logits.float(), 2, dim=-1).values
        return torch.argmax(logits, dim=-1).tolist(), (top2[:, 0] - top2[:, 1]).tolist()
    rows = logits.detach().float().numpy()
    picks, margins = [], []
    for row in rows:
        i = int(row.argmax())
        rest = max(row[:i].max(initial=-np.inf), row[i + 1 :].max(initial=-np.inf))
        picks.append(i)
        margins.append(float(row[i] - rest))
    return picks, margins


def top_probability(logits: torch.Tensor) -> tuple[int, float]:
    """logits [V] -> (argmax, its softmax probability): a greedy draft's pick and its confidence
    in it, in two NumPy passes (torch's argmax and softmax cost ~3 ms a 152k row here)."""
    row = logits.detach().float().cpu().numpy()
    i = int(row.argmax())
    return i, float(1.0 / np.exp(row - row[i]).sum())


def shaped_logits(logits: torch.Tensor, params: SamplingParams, ids: list[int] | None = None,
                  proposals: list[int] = ()) -> torch.Tensor:
    """logits [rows, V] with the bias and penalties applied (the logits themselves when there are
    none): what greedy decoding takes the argmax of. Row i follows ids + proposals[:i]."""
    if not params.shapes_logits:
        return logits
    if ids is None:
        raise ValueError("penalties and logit_bias depend on the tokens so far: pass ids")
    return shape_logits(logits.float(), params, ids, proposals)


def warp_logits(logits: torch.Tensor, params: SamplingParams, ids: list[int] | None = None,
                proposals: list[int] = ()) -> torch.Tensor:
    """logits [rows, V] -> warped float32 logits [rows, V] (-inf where filtered).

    Row-wise, so a verification pass's k+1 rows are warped as k+1 independent next-token
    distributions, each exactly as generate() would warp it; row i follows ids + proposals[:i]
    (only read when params.shapes_logits).
    """
    scores = shaped_logits(logits, params, ids, proposals).float()
    if params.greedy:
        raise ValueError("greedy decoding has no warped distribution; use argmax")
    # input_ids are unused by these warpers; generate passes them, we pass a stand-in.
    stand_in = scores.new_zeros((scores.shape[0], 1), dtype=torch.long)
    if params.temperature != 1.0:
        scores = TemperatureLogitsWarper(params.temperature)(stand_in, scores)
    if params.top_k != 0:
        scores = TopKLogitsWarper(top_k=params.top_k, min_tokens_to_keep=1)(stand_in, scores)
    if params.top_p < 1.0:
        scores = TopPLogitsWarper(top_p=params.top_p, min_tokens_to_keep=1)(stand_in, scores)
    if params.min_p > 0.0:
        scores = MinPLogitsWarper(min_p=params.min_p, min_tokens_to_keep=1)(stand_in, scores)
    return scores


def probabilities(logits: torch.Tensor, params: SamplingParams, ids: list[int] | None = None,
                  proposals: list[int] = ()) -> torch.Tensor:
    """logits [rows, V] -> probabilities [rows, V] float32 of the warped distribution."""
    return torch.softmax(warp_logits(logits, params, ids, proposals), dim=-1)


def sample_from(probs: torch.Tensor, u: float) -> int:
    """Inverse-CDF draw from one distribution probs [V] (need not be normalised) with u ~ U[0,1).

    The random number is passed in so callers (and tests) control every draw. The result is
    always a token with positive mass, even when u rounds up against the total.
    """
    cdf = torch.cumsum(probs.double(), dim=-1)
    total = cdf[-1]
    idx = int(torch.searchsorted(cdf, u * total, right=True))
    idx = min(idx, probs.shape[-1] - 1)
    # searchsorted never lands on a zero-mass token (its cdf equals its predecessor's); only
    # the clamp above can, when rounding puts u * total at the very top: step back to mass.
    while probs[idx] <= 0 and idx > 0:
        idx -= 1
    return idx
