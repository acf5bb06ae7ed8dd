"""A clock for tests that assert what the adaptive controller chose.

The controller decides from measured costs (a plain step's time, a drafted token's, a verified
row's); on the wall clock those depend on how fast and how busy the machine is, so a test that
asserts "the draft proposed" passed on a quiet machine and failed while the other core built
something. `WorkClock` is the decoder's and the draft's clock (Decoder(clock=...),
DraftModelProposer(clock=...), Engine(clock=...)) with the costs pinned: time passes only while
a model runs a forward pass, by that model's cost per pass plus its cost per row fed. The models
still compute every token; only what their work took is fixed.
"""

from __future__ import annotations

import torch

from specdec_core.lm import CachedLM


class WorkClock:
    """costs: {model: (seconds per forward pass, seconds per row fed)}; a model not named costs
    nothing. `install(monkeypatch)` makes every CachedLM's forward advance it."""

    def __init__(self, costs: dict[torch.nn.Module, tuple[float, float]]):
        self.now = 0.0
        self.costs = costs
        self.passes = 0  # forward passes it charged

    def __call__(self) -> float:
        return self.now

    def charge(self, model: torch.nn.Module, rows: int) -> None:
        per_pass, per_row = self.costs.get(model, (0.0, 0.0))
        self.now += per_pass + per_row * rows
        self.passes += model in self.costs

    def install(self, monkeypatch) -> WorkClock:
        forward = CachedLM.forward

        def timed(lm: CachedLM, ids: list[int], logits_to_keep: int = 1) -> torch.Tensor:
            self.charge(lm.model, len(ids))
            return forward(lm, ids, logits_to_keep)

        monkeypatch.setattr(CachedLM, "forward", timed)
        return self
