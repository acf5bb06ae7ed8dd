"""Start-up, cache and memory of the embedded pair, measured as a user meets them.

    python -m specdec_core.bench.startup --out docs/benchmarks/cpu-startup

- first start: a fresh cache folder, `specdec generate` from the installed data packages
  (assembling and checking the two GGUFs, building the CPU kernel, converting the tokenizers)
  to its first printed token, wall clock;
- later start: the same command again with that cache;
- the cache's size on disk against the two GGUF files' bytes;
- peak resident memory of a process that holds a chat of --chat-tokens tokens (several turns,
  each keeping the conversation's KV caches), against the GGUF bytes and the KV caches' bytes.
Each is its own process (fresh imports, nothing warmed by the others) except that the page
cache keeps the files the first start read, as it does for a user.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .markdown import table
from .report import save

PROMPT = "Write a Python function that checks whether a string is a palindrome."
CHAT = [
    "Write a Python function that checks whether a string is a palindrome, with a docstring.",
    "Now make it ignore punctuation and case, and add three doctests.",
    "Explain in a short paragraph how your function handles unicode.",
    "Rewrite it as a single expression and say what it costs in readability.",
    "Summarise our conversation in three bullet points.",
]

_CHAT_CHILD = r"""
import json, sys, resource
from specdec_core.engine import Engine
from specdec_core.decoder import DecodeSettings
target_tokens = int(sys.argv[1])
engine = Engine.load("default", "default", device="cpu")
turns, history, total = json.loads(sys.argv[2]), [], 0
for text in turns * 4:
    history.append({"role": "user", "content": text})
    ids = engine.encode_chat(history)
    room = target_tokens - len(ids)
    if room < 16:
        break
    gen = engine.generate(ids, DecodeSettings(max_new_tokens=min(256, room)), reuse_cache=True).run()
    history.append({"role": "assistant", "content": gen.text})
    total = len(ids) + len(gen.token_ids)
kv = sum(lm.cache.nbytes for lm in (engine.decoder.target, engine.proposer("draft").lm) if lm.cache is not None)
print(json.dumps({"conversation_tokens": total, "turns": len(history) // 2, "kv_bytes": kv}))
"""


def _first_token_seconds(env: dict) -> tuple[float, float, str]:
    """(seconds to the first printed token, seconds to exit, stderr tail) of one generate."""
    argv = [sys.executable, "-m", "specdec_core.cli", "generate", "--prompt", PROMPT, "--max-new-tokens", "8"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = None
    while True:
        ch = proc.stdout.read(1)
        if not ch:
            break
        if first is None and ch.strip():
            first = time.perf_counter() - t0
    err = proc.stderr.read().decode("utf-8", "replace")
    proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"specdec generate failed: {err.strip().splitlines()[-1] if err.strip() else proc.returncode}")
    return first if first is not None else float("nan"), time.perf_counter() - t0, err[-2000:]


def _peak_rss_of(argv: list[str], env: dict) -> tuple[int, str]:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"chat process failed: {proc.stderr.read().decode()[-1000:]}")
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024), out


def measure(cache: Path, chat_tokens: int) -> dict:
    from ..models import default_pair

    env = {**os.environ, "SPECDEC_CACHE_DIR": str(cache)}
    gguf_bytes = sum(m.size for m in default_pair.EMBEDDED.values())
    first_token, first_exit, first_log = _first_token_seconds(env)
    later = [_first_token_seconds(env)[:2] for _ in range(2)]
    cache_bytes = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    rss, out = _peak_rss_of([sys.executable, "-c", _CHAT_CHILD, str(chat_tokens), json.dumps(CHAT)], env)
    chat = json.loads(out.strip().splitlines()[-1])
    return {
        "gguf_bytes": gguf_bytes,
        "first_start_to_first_token_s": first_token,
        "first_start_exit_s": first_exit,
        "first_start_log": first_log,
        "later_start_to_first_token_s": [t for t, _ in later],
        "cache_bytes": cache_bytes,
        "cache_files": sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()),
        "chat": chat,
        "chat_peak_rss_bytes": rss,
    }


def render(r: dict) -> str:
    g = r["gguf_bytes"]
    kv = r["chat"]["kv_bytes"]
    budget = 1.3 * g + kv
    later = min(r["later_start_to_first_token_s"])
    rows = [
        ("from freshly installed parts to the first token", f"{r['first_start_to_first_token_s']:.1f} s", "<= 60 s",
         r["first_start_to_first_token_s"] <= 60),
        ("a later start to the first token (best of two)", f"{later:.1f} s", "<= 10 s", later <= 10),
        ("user cache / GGUF bytes", f"{r['cache_bytes'] / g:.3f}x ({r['cache_bytes'] / 2**30:.2f} GiB)", "<= 1.05x",
         r["cache_bytes"] <= 1.05 * g),
        (f"peak RSS, {r['chat']['conversation_tokens']}-token chat ({r['chat']['turns']} turns)",
         f"{r['chat_peak_rss_bytes'] / 2**30:.2f} GiB", f"<= 1.3 x GGUF + KV = {budget / 2**30:.2f} GiB",
         r["chat_peak_rss_bytes"] <= budget),
    ]
    L = ["# Start-up, cache and memory of the embedded pair\n", f"Command: `{r['command']}`\n",
         f"- **machine:** {r.get('machine', '?')}", f"- **GGUF bytes of the pair:** {g / 2**30:.2f} GiB; "
         f"KV caches at the end of the chat: {kv / 2**20:.0f} MiB\n",
         ]
    L += table(["what", "measured", "goal", "met"], ([a, b, c, "yes" if ok else "**no**"] for a, b, c, ok in rows))
    L += ["", "Cache contents after the runs:\n", "```"] + r["cache_files"] + ["```", ""]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specdec_core.bench.startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, metavar="DIR")
    ap.add_argument("--chat-tokens", type=int, default=1000)
    args = ap.parse_args(argv)
    from .machine import machine_info

    with tempfile.TemporaryDirectory(prefix="specdec-startup-") as tmp:
        report = measure(Path(tmp) / "cache", args.chat_tokens)
    m = machine_info()
    report["machine"] = f"{m['cpu_model']}, {m['cpus_available']} CPUs, flags {', '.join(m['cpu_flags'])}"
    report["command"] = "python -m specdec_core.bench.startup " + " ".join(argv if argv is not None else sys.argv[1:])
    save(Path(args.out), report, render(report))
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
