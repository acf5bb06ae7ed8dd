"""What the CPU backend's arithmetic does to a model's output: a GGUF run on its own blocks with
8-bit activations (the kernel) against the float32 model the same file decodes to
(transformers' own GGUF import, which is what earlier versions of this app ran).

    python -m specdec_core.bench.quality --out docs/benchmarks/cpu-quality [--target SPEC]

Two measures, on the target (or --role draft):
- greedy agreement on the bench prompts: each model decodes N tokens greedily through the same
  CachedLM loop; how many tokens agree before they part, and the float model's top-1 - top-2
  logit margin where they do (a near-tie, or a real difference);
- next-token distributions, teacher-forced on a held-out text (this repository's README, used
  for nothing else): mean KL(p_float || p_kernel) per token, both perplexities, and how often
  the two models' top-1 tokens agree.
Writes report.json and report.md into --out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .markdown import table
from .report import save

HELD_OUT = Path(__file__).resolve().parents[2] / "README.md"


def _greedy(lm, ids: list[int], n: int, eos: set[int]):
    """(tokens, margins) of n greedy tokens from prompt ids through a CachedLM."""
    import torch

    lm.reset()
    tokens, margins = [], []
    logits = lm.forward(ids, 1)[-1]
    for _ in range(n):
        top2 = torch.topk(logits.float(), 2)
        tok = int(torch.argmax(logits))
        tokens.append(tok)
        margins.append(float(top2.values[0] - top2.values[1]))
        if tok in eos:
            break
        logits = lm.forward([tok], 1)[-1]
    return tokens, margins


def measure(path: Path, prompts, max_new_tokens: int, text_tokens: int, progress=print) -> dict:
    import torch

    from ..cpu import lean as lean_mod
    from ..cpu import model as cpu_model
    from ..lm import CachedLM
    from ..models.gguf_torch import load_gguf_with_transformers

    t0 = time.perf_counter()
    kernel = cpu_model.load(path)
    lean, why = lean_mod.attach(kernel.model)
    progress(f"kernel model loaded ({time.perf_counter() - t0:.0f} s){'' if lean else ': ' + why}")
    t0 = time.perf_counter()
    ref_model, _ = load_gguf_with_transformers(path, "float32", None, None)
    ref_model.eval()
    progress(f"float32 reference loaded ({time.perf_counter() - t0:.0f} s)")
    tok = kernel.tokenizer
    eos = set(kernel.eos_token_ids)
    ours, ref = CachedLM(kernel.model, lean=lean), CachedLM(ref_model)

    rows = []
    for p in prompts:
        enc = tok.apply_chat_template(list(p.messages), add_generation_prompt=True, tokenize=True)
        ids = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
        a, _ = _greedy(ours, ids, max_new_tokens, eos)
        b, margins = _greedy(ref, ids, max_new_tokens, eos)
        agree = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        parted = agree < max(len(a), len(b))
        rows.append({"prompt_id": p.id, "category": p.category, "tokens_kernel": len(a), "tokens_float": len(b),
                     "agree": agree, "identical": not parted,
                     "margin_at_parting": margins[agree] if parted and agree < len(margins) else None,
                     "text_kernel": tok.decode(a), "text_float": tok.decode(b)})
        progress(f"{p.id}: {'identical' if not parted else f'parts at token {agree}'}")

    text = HELD_OUT.read_text(encoding="utf-8")
    ids = tok(text)["input_ids"][:text_tokens]
    with torch.inference_mode():
        ours.reset()
        lk = torch.log_softmax(ours.forward(ids, len(ids)).double(), -1)  # [T, V]
        lf = torch.log_softmax(ref_model(torch.tensor([ids])).logits[0].double(), -1)
    kl = (lf.exp() * (lf - lk)).sum(-1)[:-1]  # positions predicting a next token of the text
    nxt = torch.tensor(ids[1:])
    nll_k = -lk[:-1].gather(1, nxt[:, None]).mean()
    nll_f = -lf[:-1].gather(1, nxt[:, None]).mean()
    return {
        "gguf": str(path),
        "greedy": rows,
        "held_out": {
            "text": str(HELD_OUT.name),
            "tokens": len(ids),
            "mean_kl": float(kl.mean()),
            "max_kl": float(kl.max()),
            "perplexity_kernel": float(torch.exp(nll_k)),
            "perplexity_float": float(torch.exp(nll_f)),
            "top1_agreement": float((lk[:-1].argmax(-1) == lf[:-1].argmax(-1)).double().mean()),
        },
    }


def render(report: dict) -> str:
    h = report["held_out"]
    g = report["greedy"]
    same = sum(r["identical"] for r in g)
    L = ["# Quality: GGUF blocks x 8-bit activations against the float32 model\n",
         f"- **model:** `{Path(report['gguf']).name}`; **kernel:** {report.get('kernel', '?')}",
         "- **reference:** the same file dequantized to float32 by transformers (what earlier versions ran)",
         f"- **command:** `{report['command']}`\n",
         f"## Greedy agreement on the bench prompts ({report['max_new_tokens']} new tokens)\n",
         f"{same} of {len(g)} prompts give the same tokens. Where they part, the float model's top-1 - top-2 "
         "logit margin at that token says how close its own choice was.\n",
         ]
    L += table(["prompt", "category", "tokens agreeing", "identical", "float margin where they part"],
               ([r["prompt_id"], r["category"], f"{r['agree']} / {max(r['tokens_kernel'], r['tokens_float'])}",
                 "yes" if r["identical"] else "no",
                 "–" if r["margin_at_parting"] is None else f"{r['margin_at_parting']:.3f}"] for r in g))
    L += ["", f"## Next-token distributions on a held-out text ({h['text']}, {h['tokens']} tokens, teacher-forced)\n"]
    L += table(["mean KL(float ‖ kernel)", "max KL", "perplexity, kernel", "perplexity, float32", "top-1 agreement"],
               [[f"{h['mean_kl']:.5f} nats", f"{h['max_kl']:.4f}", f"{h['perplexity_kernel']:.3f}",
                 f"{h['perplexity_float']:.3f}", f"{100 * h['top1_agreement']:.1f}%"]])
    L.append("")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    from .prompts import load_prompts

    ap = argparse.ArgumentParser(prog="python -m specdec_core.bench.quality", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="default", metavar="SPEC", help="a .gguf file, or 'default' (the embedded pair)")
    ap.add_argument("--role", default="target", choices=["target", "draft"], help="with 'default': which model")
    ap.add_argument("--categories", default=None, metavar="A,B")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--text-tokens", type=int, default=1024)
    ap.add_argument("--out", required=True, metavar="DIR")
    args = ap.parse_args(argv)
    if args.target == "default":
        from ..models import default_pair

        path = default_pair.ensure_assembled(default_pair.embedded(args.role))
    else:
        path = Path(args.target)
    cats = [c for c in (args.categories or "").split(",") if c] or None
    prompts = load_prompts(None, cats, None)
    report = measure(path, prompts, args.max_new_tokens, args.text_tokens, lambda m: print(m, file=sys.stderr))
    from ..cpu import build

    report["kernel"] = build.kernel().name
    report["max_new_tokens"] = args.max_new_tokens
    report["command"] = "python -m specdec_core.bench.quality " + " ".join(argv if argv is not None else sys.argv[1:])
    save(Path(args.out), report, render(report))
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
