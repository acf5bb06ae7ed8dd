"""GPU verification-cost profile: what speculative decoding would gain on a CUDA machine.

    python -m specdec_core.bench.gpu_profile [--sizes 7b,14b] [--quant nf4,bf16] [--alpha 0.8]

On random weights of 7B- and 14B-shaped Qwen2 configs (no downloads), it measures the
target's forward time for 1..9 new tokens over a 512-token cache, in NF4 (bitsandbytes) and
bf16, and a 0.5B-shaped draft's one-token time, then projects the speculative speedup for
each k from the acceptance rate alpha measured on CPU (pass it with --alpha; `specdec bench`
reports it):

    speedup(k) = E(k) * v(1) / (k * d + v(k)),   E(k) = (1 - alpha^(k+1)) / (1 - alpha)

It prints one JSON object (and a table on stderr). Needs CUDA; says so in one line otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

SHAPES = {
    # hidden, intermediate, layers, heads, kv heads (Qwen2.5 configs), vocab
    "0.5b": (896, 4864, 24, 14, 2),
    "7b": (3584, 18944, 28, 28, 4),
    "14b": (5120, 13824, 48, 40, 8),
}
VOCAB = 152064
CONTEXT = 512


def _config(size: str):
    from transformers import Qwen2Config

    h, inter, layers, heads, kv = SHAPES[size]
    return Qwen2Config(vocab_size=VOCAB, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=4096)


def _build(size: str, quant: str):
    import torch
    from transformers import AutoModelForCausalLM

    cfg = _config(size)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
    model.eval()
    if quant == "nf4":
        model = to_nf4(model)
    return model


def to_nf4(model):
    """Every decoder linear to bitsandbytes' NF4, quantized where it lies (as load_in_4bit does)."""
    import bitsandbytes as bnb
    import torch

    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and f"{name}.{child_name}" != "lm_head":
                q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=torch.bfloat16, quant_type="nf4", device="meta")
                q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, quant_type="nf4").to(
                    child.weight.device)
                if child.bias is not None:
                    q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
                setattr(module, child_name, q)
    return model


def _time_forward(model, n_new: int, reps: int = 10) -> float:
    import torch
    from transformers import DynamicCache

    ids = torch.randint(0, 1000, (1, CONTEXT), device="cuda")
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        new = torch.randint(0, 1000, (1, n_new), device="cuda")
        times = []
        for _ in range(reps + 2):  # two warm-ups
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(input_ids=new, cache=cache, use_cache=True, logits_to_keep=n_new)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            cache.crop(-n_new)
    times = sorted(times[2:])
    return times[len(times) // 2]


def project(alpha: float, d: float, v: dict[int, float]) -> dict[int, float]:
    """k -> projected speedup over one-token decoding (v[1]) for k = 1..max(v)-1."""
    out = {}
    for k in range(1, max(v)):
        e = (1 - alpha ** (k + 1)) / (1 - alpha) if alpha < 1 else k + 1
        out[k] = e * v[1] / (k * d + v[k + 1])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="specdec-gpu-profile")
    p.add_argument("--sizes", default="7b,14b")
    p.add_argument("--quant", default="nf4,bf16")
    p.add_argument("--alpha", type=float, default=0.8, help="acceptance rate measured on CPU (specdec bench)")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu-profile: no CUDA device here; run it on a machine with an NVIDIA GPU", file=sys.stderr)
        return 2
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "alpha": args.alpha, "targets": {}}
    draft = _build("0.5b", "bf16")
    d = _time_forward(draft, 1)
    result["draft_0.5b_bf16_s"] = d
    del draft
    torch.cuda.empty_cache()
    for size in args.sizes.split(","):
        for quant in args.quant.split(","):
            model = _build(size, quant)
            v = {n: _time_forward(model, n) for n in range(1, 10)}
            proj = project(args.alpha, d, v)
            result["targets"][f"{size}-{quant}"] = {
                "verify_s": v,
                "cost_ratio_c": d / v[1],
                "projected_speedup": proj,
                "memory_gib": torch.cuda.max_memory_allocated() / 2**30,
            }
            print(f"{size}-{quant}: v(1)={v[1] * 1e3:.1f} ms v(5)={v[5] * 1e3:.1f} ms c={d / v[1]:.2f} "
                  f"best k={max(proj, key=proj.get)} ({max(proj.values()):.2f}x)", file=sys.stderr)
            del model
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
