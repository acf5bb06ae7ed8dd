"""The peer baselines: transformers' own `generate()`, plain and assisted (`assistant_model=`).

Both run with a clean GenerationConfig, so nothing from a model's generation_config.json
(Qwen2.5-Instruct ships repetition_penalty 1.1, temperature 0.7, top_p 0.8, top_k 20) sneaks in:
transformers fills every unset field of a passed config from `model.generation_config`, so the
models' own configs are swapped for clean ones for the duration of the call. Assisted generation
keeps transformers' defaults for the draft length (num_assistant_tokens=20, "constant" schedule,
assistant_confidence_threshold=0.4): that is what a user calling it gets.

Forward passes are counted with forward pre-hooks on the target and the draft.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class HFResult:
    token_ids: list[int]
    seconds: float  # generate() only
    first_token_at: float | None  # perf_counter() when the first new token reached the streamer
    target_forward_passes: int
    draft_forward_passes: int
    started_at: float = 0.0  # perf_counter() when generate() was called

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens after the first over the time after the first token: our Stats' definition."""
        if self.first_token_at is None or len(self.token_ids) < 2:
            return 0.0
        dt = self.seconds - (self.first_token_at - self.started_at)
        return (len(self.token_ids) - 1) / dt if dt > 0 else 0.0


def clean_config(max_new_tokens: int, temperature: float, top_k: int, top_p: float,
                 eos_token_ids: list[int], pad_token_id: int | None):
    from transformers import GenerationConfig

    sample = temperature > 0
    # greedy: temperature/top-k/top-p stay unset, i.e. transformers' neutral defaults (the
    # model's own values cannot fill them: its generation_config is swapped out meanwhile)
    warp = dict(temperature=temperature, top_k=top_k, top_p=top_p) if sample else {}
    cfg = GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        do_sample=sample,
        num_beams=1,
        **warp,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        eos_token_id=list(eos_token_ids),
        pad_token_id=pad_token_id if pad_token_id is not None else (eos_token_ids[0] if eos_token_ids else None),
        use_cache=True,
    )
    return cfg


@contextmanager
def _swapped_config(models, cfg):
    saved = [(m, m.generation_config) for m in models]
    try:
        for m in models:
            m.generation_config = cfg
        yield
    finally:
        for m, g in saved:
            m.generation_config = g


@contextmanager
def _count_forwards(model):
    box = [0]

    def hook(_module, _args, _kwargs=None):
        box[0] += 1

    handle = model.register_forward_pre_hook(hook)
    try:
        yield box
    finally:
        handle.remove()


class _FirstTokenStreamer:
    """generate() puts the prompt first, then new tokens: remember when the first new ones came."""

    def __init__(self):
        self.calls = 0
        self.first_token_at: float | None = None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2 and self.first_token_at is None:
            self.first_token_at = time.perf_counter()

    def end(self) -> None:
        pass


class HFBaseline:
    def __init__(self, target, draft=None, eos_token_ids: list[int] | None = None):
        """target/draft: LoadedModel (model, tokenizer, eos_token_ids)."""
        self.target = target
        self.draft = draft
        self.eos = list(eos_token_ids if eos_token_ids is not None else target.eos_token_ids)
        self.pad = getattr(target.tokenizer, "pad_token_id", None)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, temperature: float, top_k: int,
                 top_p: float, seed: int, assisted: bool) -> HFResult:
        import torch
        from transformers.generation.streamers import BaseStreamer

        if assisted and self.draft is None:
            raise ValueError("assisted generation needs a draft model")
        model = self.target.model
        device = next(model.parameters()).device
        cfg = clean_config(max_new_tokens, temperature, top_k, top_p, self.eos, self.pad)
        # a fresh, unset config for the assistant too: transformers' own defaults apply
        from transformers import GenerationConfig

        assistant_cfg = GenerationConfig(eos_token_id=list(self.eos), pad_token_id=cfg.pad_token_id)
        x = torch.tensor([prompt_ids], dtype=torch.long, device=device)
        mask = torch.ones_like(x)
        streamer = type("_S", (_FirstTokenStreamer, BaseStreamer), {})()
        kwargs = dict(input_ids=x, attention_mask=mask, generation_config=cfg, streamer=streamer)
        models = [model]
        if assisted:
            kwargs["assistant_model"] = self.draft.model
        torch.manual_seed(seed)
        with _count_forwards(model) as tp, _swapped_config(models, cfg), torch.inference_mode():
            if assisted:
                with _swapped_config([self.draft.model], assistant_cfg), _count_forwards(self.draft.model) as dp:
                    t0 = time.perf_counter()
                    out = model.generate(**kwargs)
                    seconds = time.perf_counter() - t0
                draft_passes = dp[0]
            else:
                t0 = time.perf_counter()
                out = model.generate(**kwargs)
                seconds = time.perf_counter() - t0
                draft_passes = 0
        new = out[0, len(prompt_ids):].tolist()
        return HFResult(new, seconds, streamer.first_token_at, tp[0], draft_passes, t0)
