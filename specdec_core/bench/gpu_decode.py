"""End-to-end speculative decoding on a CUDA GPU: an NF4 target with a draft, through the engine's
own decoder, proposers and adaptive controller.

    python -m specdec_core.bench.gpu_decode [--size 7b] [--draft-layers 2] [--tokens 128]

Nothing can be downloaded on the machines this runs on, so the weights are random, shaped as a
Qwen2.5 target (7B by default). Random weights make random text, a 152k-way near-tie no draft
could predict; so the head maps each token's embedding to one successor (a random permutation)
and the layers' writes to the residual stream are scaled, calibrated on the bf16 pair so that
the draft predicts `--agreement` of the target's greedy tokens: the last token steers the next
one, and every layer perturbs that choice. The draft is the target's own first `--draft-layers`
layers, its embedding, norm and head, in bf16 (an early-exit draft, as in LayerSkip), while the target runs in NF4 (bitsandbytes). The
acceptance that gives is the machine's answer to "how often do a few bf16 layers agree with all
of them in NF4", not a language model's; the step costs -- a plain NF4 step, a verified row, a
drafted token -- are the GPU's own, and the controller measures them as it would for any pair.

It reports, per mode (standard; the default: lookup then the draft, adaptive; the draft at
fixed k and adaptive), tokens per second, alpha, tau, the plain-step share, and whether the
greedy text equals standard's -- where it does not (NF4 on a GPU is not batch invariant: a
verification pass may round differently from one-token decoding), the position and the target's
top-1 minus top-2 margin there, as the product promises. One JSON object on stdout, a table on
stderr. Needs CUDA and bitsandbytes; says so in one line otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .gpu_profile import SHAPES, VOCAB, to_nf4


def build_pair(size: str, draft_layers: int, seed: int = 0, device: str = "cuda"):
    """(target, draft), both bf16: the draft a copy of the target's first `draft_layers` layers
    with its embedding, norm and head. set_scale() then sets how much the layers perturb."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    h, inter, layers, heads, kv = SHAPES[size]
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=4096,
                      tie_word_embeddings=False, eos_token_id=[])
    torch.manual_seed(seed)
    with torch.device(device):
        target = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        # the head maps each token's embedding to one successor (a random permutation): text then
        # has a next token for the layers to agree or disagree on, not a 152k-way near-tie
        g = torch.Generator().manual_seed(seed + 1)
        perm = torch.randperm(VOCAB, generator=g).to(device)
        emb = target.model.embed_tokens.weight
        target.lm_head.weight[perm] = emb / emb.norm(dim=-1, keepdim=True)
    dcfg = copy.deepcopy(cfg)
    dcfg.num_hidden_layers = draft_layers
    with torch.device(device):
        draft = AutoModelForCausalLM.from_config(dcfg, dtype=torch.bfloat16).eval()
    own = {k: v for k, v in target.state_dict().items()
           if not k.startswith("model.layers.") or int(k.split(".")[2]) < draft_layers}
    draft.load_state_dict(own, strict=True)
    for m in (target, draft):  # the layers' writes to the residual stream, as built: set_scale's unit
        m._unit = [(lay.self_attn.o_proj.weight.detach().clone(), lay.mlp.down_proj.weight.detach().clone())
                   for lay in m.model.layers]
    return target, draft


def set_scale(models, scale: float) -> None:
    """Scale every layer's writes to the residual stream (o_proj, down_proj) to `scale` x as built."""
    import torch

    with torch.no_grad():
        for m in models:
            for lay, (o, down) in zip(m.model.layers, m._unit):
                lay.self_attn.o_proj.weight.copy_(o * scale)
                lay.mlp.down_proj.weight.copy_(down * scale)


def agreement(target, draft, n: int = 64, seed: int = 0) -> float:
    """Share of the target's greedy tokens (n from a random prompt) the draft predicts too."""
    import torch

    dev = next(target.parameters()).device
    seq = torch.randint(0, 5000, (1, 32), generator=torch.Generator().manual_seed(seed)).to(dev)
    with torch.inference_mode():
        for _ in range(n):
            seq = torch.cat([seq, target(seq).logits[:, -1].argmax(-1, keepdim=True)], 1)
        t = target(seq).logits[0, 31:-1].argmax(-1)
        d = draft(seq).logits[0, 31:-1].argmax(-1)
    return float((t == d).float().mean())


def calibrate(target, draft, goal: float, lo: float = 0.005, hi: float = 0.5, steps: int = 7) -> tuple[float, float]:
    """The layer scale whose agreement is nearest `goal` (bisection in log scale): (scale, agreement)."""
    best = (lo, 1.0)
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        set_scale((target, draft), mid)
        a = agreement(target, draft)
        if abs(a - goal) < abs(best[1] - goal):
            best = (mid, a)
        lo, hi = (mid, hi) if a > goal else (lo, mid)
    set_scale((target, draft), best[0])
    return best


MODES = (("standard", "standard", None, 1), ("default", "speculative", "lookup+draft", "adaptive"),
         ("draft k=4", "speculative", "draft", 4), ("draft adaptive", "speculative", "draft", "adaptive"))


def run(target, draft, tokens: int, prompt_len: int = 64, repeats: int = 3, seed: int = 0) -> dict:
    import torch

    from ..decoder import Decoder
    from ..events import first_divergence
    from ..proposers import DraftModelProposer, LookupDraftProposer
    from ..settings import DecodeSettings

    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 5000, (prompt_len,), generator=g).tolist()
    dec = Decoder(target, None, eos_token_ids=[])
    props = {"draft": DraftModelProposer(draft, VOCAB)}
    props["lookup+draft"] = LookupDraftProposer(DraftModelProposer(draft, VOCAB))
    out: dict = {"prompt_tokens": prompt_len, "new_tokens": tokens, "modes": {}}
    ref = None
    for name, mode, proposer, k in MODES:
        rows = []
        for _ in range(repeats + 1):  # the first is a warm-up
            s = DecodeSettings(max_new_tokens=tokens, draft_tokens=k, mode=mode, proposer=proposer or "draft")
            _sync()
            gen = dec.generate(prompt, s, props[proposer] if proposer else None).run()
            _sync()
            rows.append(gen)
        rows = rows[1:]
        st = sorted(rows, key=lambda r: r.stats.tokens_per_second)[len(rows) // 2].stats
        if ref is None:
            ref = rows[0]
        div = first_divergence(ref.events, rows[0].events)
        out["modes"][name] = {
            "tokens_per_second": st.tokens_per_second,
            "decode_tokens_per_second": st.decode_tokens_per_second,
            "acceptance_rate": st.acceptance_rate if st.proposed_tokens else None,
            "tokens_per_speculative_step": st.tokens_per_speculative_step if st.speculative_steps else None,
            "plain_step_share": st.plain_step_share,
            "steps_by_source": st.steps_by_source,
            "identical_to_standard": div is None,
            "divergence": None if div is None else {"position": div.position, "margin": div.margin},
        }
    base = out["modes"]["standard"]["tokens_per_second"]
    for m in out["modes"].values():
        m["speedup_vs_standard"] = m["tokens_per_second"] / base if base else None
    return out


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="specdec-gpu-decode")
    p.add_argument("--size", default="7b", choices=sorted(SHAPES))
    p.add_argument("--draft-layers", type=int, default=2)
    p.add_argument("--agreement", type=float, default=0.8,
                   help="the draft's greedy agreement with the target to calibrate the layers' scale for")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu-decode: no CUDA device here; run it on a machine with an NVIDIA GPU", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    target, draft = build_pair(args.size, args.draft_layers)
    scale, agree_bf16 = calibrate(target, draft, args.agreement)
    target = to_nf4(target)
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "target": f"{args.size}-nf4",
              "draft": f"first {args.draft_layers} layers, bf16", "layer_scale": scale,
              "agreement_bf16": agree_bf16, "agreement_nf4": agreement(target, draft),
              "build_seconds": time.perf_counter() - t0}
    result.update(run(target, draft, args.tokens, repeats=args.repeats))
    result["memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    for name, m in result["modes"].items():
        alpha = "-" if m["acceptance_rate"] is None else f"{m['acceptance_rate']:.2f}"
        print(f"{name:16s} {m['tokens_per_second']:7.1f} tok/s  x{m['speedup_vs_standard']:.2f}  alpha {alpha}  "
              f"identical {m['identical_to_standard']}  {m['divergence'] or ''}", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
