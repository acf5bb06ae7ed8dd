"""What shapes the logits before the warp: logit_bias, then the repetition penalty, then the
presence and frequency penalties -- vLLM's order and formulas (the repetition penalty is
transformers' and CTRL's: a seen token's positive logit divided by it, a negative one
multiplied), so a request means here what it means there:

    logit[t] += bias[t]
    logit[t] = logit[t] / r if logit[t] > 0 else logit[t] * r     for t in the sequence so far
    logit[t] -= frequency * count[t] + presence * (count[t] > 0)   count: t in the answer so far

Penalties depend on the tokens so far, so a verification pass's rows differ: row i follows
the committed sequence and the first i proposals. A proposal the target later rejects was
still "so far" for the rows after it -- the rows that test the proposals after it -- which is
what speculative sampling needs: each row is the distribution standard decoding would have at
that position had it emitted those proposals.

Only the columns of tokens that occur (or have a bias) are touched: a step costs what the
sequence's distinct tokens cost, never a pass over the 152k-token vocabulary per row.
"""

from __future__ import annotations

from collections import Counter

import torch

from .settings import SamplingParams


def shape_logits(scores: torch.Tensor, params: SamplingParams, ids: list[int], proposals: list[int] = ()) -> torch.Tensor:
    """scores [rows, V] float -> a new tensor with bias and penalties applied; row i follows
    `ids` + proposals[:i] (rows <= len(proposals) + 1)."""
    rows = scores.shape[0]
    proposals = list(proposals)
    if rows > len(proposals) + 1:
        raise ValueError(f"{rows} rows need at least {rows - 1} proposals before them, got {len(proposals)}")
    answer = Counter(ids[params.answer_start:])
    bias = dict(params.logit_bias)
    repeat = params.repetition_penalty != 1
    prompt = set(ids[: params.answer_start]) if repeat else set()
    cols = sorted(set(answer) | set(proposals[: rows - 1]) | prompt | set(bias))
    if not cols:
        return scores.clone()
    if cols[-1] >= scores.shape[-1]:
        raise ValueError(f"token id {cols[-1]} is outside the vocabulary (size {scores.shape[-1]})")
    at = {t: j for j, t in enumerate(cols)}
    counts = torch.zeros((rows, len(cols)), dtype=scores.dtype, device=scores.device)
    counts[:] = torch.tensor([answer.get(t, 0) for t in cols], dtype=scores.dtype)
    for i, t in enumerate(proposals[: rows - 1]):
        counts[i + 1 :, at[t]] += 1  # the rows after proposal i follow it
    index = torch.tensor(cols, dtype=torch.long, device=scores.device)
    sub = scores[:, index]
    if bias:
        sub = sub + torch.tensor([bias.get(t, 0.0) for t in cols], dtype=scores.dtype, device=scores.device)
    if repeat:
        r = params.repetition_penalty
        seen = counts > 0
        if prompt:
            seen |= torch.tensor([t in prompt for t in cols], device=scores.device)
        sub = torch.where(seen, torch.where(sub < 0, sub * r, sub / r), sub)
    if params.frequency_penalty:
        sub = sub - params.frequency_penalty * counts
    if params.presence_penalty:
        sub = sub - params.presence_penalty * (counts > 0).to(scores.dtype)
    out = scores.clone()
    out[:, index] = sub
    return out
