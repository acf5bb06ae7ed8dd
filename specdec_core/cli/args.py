"""What the commands share on the way in: the parser that fails in one line, the flag types,
the model and sampling flags, and the flags -> the settings value -> an opened engine."""

from __future__ import annotations

import argparse
import sys

from ..open_engine import DEFAULT_TIMEOUT
from ..settings import DEFAULT_DRAFT_TOKENS, DEFAULT_PROPOSER, DecodeSettings, SamplingParams
from .terminal import progress_printer, server_progress


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit code 2."""


class ArgParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + message
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def int_at_least(name: str, minimum: int = 1):
    """argparse type: an integer >= minimum, with a one-line message naming the flag."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} takes an integer, got {value!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {n}")
        return n

    return parse


def _draft_tokens(value: str) -> int | str:
    if value == "adaptive":
        return value
    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--draft-tokens takes an integer k >= 1 or 'adaptive', got {value!r}")
    if k < 1:
        raise argparse.ArgumentTypeError(f"--draft-tokens must be >= 1 (or 'adaptive'), got {k}")
    return k


def _seconds(value: str) -> float:
    try:
        s = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--timeout takes seconds, e.g. 30, got {value!r}") from None
    if not s > 0:
        raise argparse.ArgumentTypeError(f"--timeout must be > 0 seconds, got {value}")
    return s


def _bias(value: str) -> tuple[int, float]:
    token, eq, bias = value.partition("=")
    try:
        if not eq:
            raise ValueError
        return int(token), float(bias)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--logit-bias takes TOKEN_ID=BIAS, e.g. 42=-100, got {value!r}") from None


def add_model_args(p: argparse.ArgumentParser, draft: bool = True, server_target: bool = True) -> None:
    """--target/--draft/--device/--dtype/--quantization, shared by generate, bench, race and serve
    (which loads models here only: server_target=False leaves out a server target's flags)."""
    p.add_argument("--target", default="default", metavar="SPEC",
                   help="local HF folder, .gguf file, hub id, 'default' (the embedded target)" +
                        (", or a server http://HOST:PORT (llama-server, vLLM: it decodes with its own draft)"
                         if server_target else ""))
    if draft:
        p.add_argument("--draft", default="default", metavar="SPEC",
                       help="draft model SPEC (same forms); 'default' = the embedded draft" +
                            ("" if server_target else "; 'none' for no draft (prompt lookup only)"))
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--quantization", default=None, choices=["nf4", "int8", "none"],
                   help="target quantization (default: nf4 on CUDA, none on CPU; GGUF keeps its own)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow model repos to run their own Python code (off unless you trust them)")
    if not server_target:
        return
    p.add_argument("--api-key", default=None, metavar="KEY",
                   help="a server target's API key (default: $SPECDEC_API_KEY; the variable keeps it out of ps)")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT, metavar="S",
                   help=f"a server target: seconds to wait for each piece of the answer (default {DEFAULT_TIMEOUT:g})")


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int_at_least("--max-new-tokens"), default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    p.add_argument("--min-p", type=float, default=0.0,
                   help="drop tokens below this share of the likeliest one's probability (0 = off)")
    p.add_argument("--presence-penalty", type=float, default=0.0, metavar="P",
                   help="-2..2, subtracted once from each token the answer has used (0 = off)")
    p.add_argument("--frequency-penalty", type=float, default=0.0, metavar="F",
                   help="-2..2, subtracted per use from each token the answer has used (0 = off)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R",
                   help="divides the logits of every token seen, prompt included (1 = off)")
    p.add_argument("--logit-bias", type=_bias, action="append", default=[], metavar="TOKEN_ID=BIAS",
                   help="add BIAS (-100..100) to a token's logit; repeat for more tokens")
    p.add_argument("--seed", type=int, default=0,
                   help="sampling seed; with a fixed --draft-tokens K it reproduces a sample exactly, with adaptive "
                        "k (which follows measured speed) the distribution is the same but a sample may differ")
    p.add_argument("--draft-tokens", type=_draft_tokens, default=DEFAULT_DRAFT_TOKENS, metavar="K|adaptive",
                   help="tokens the draft proposes per verification, or adaptive (default: measured faster "
                        "than any fixed k on the built-in prompts)")


def settings_from_args(args) -> DecodeSettings:
    """The flags -> the one settings value (checked here, before anything loads). A command
    without --mode or --proposer gets the defaults."""
    bias = tuple(sorted(dict(args.logit_bias).items()))  # a token given twice: its last bias
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p, args.presence_penalty,
                              args.frequency_penalty, args.repetition_penalty, bias)
    return DecodeSettings(args.max_new_tokens, sampling, args.draft_tokens, args.seed,
                          mode=getattr(args, "mode", "speculative"),
                          proposer=getattr(args, "proposer", None) or DEFAULT_PROPOSER)


def check_bias(settings: DecodeSettings, engine) -> None:
    """--logit-bias ids inside the target's vocabulary (a server target checks its own)."""
    vocab = engine.vocab_size
    bad = [t for t, _ in settings.sampling.logit_bias if vocab is not None and t >= vocab]
    if bad:
        raise UsageError(f"--logit-bias: token id {bad[0]} is outside the target's vocabulary (size {vocab})")


def open_from_args(args, need_draft: bool):
    """--target/--draft/... -> an engine (engines.open_engine), with a progress display on a
    terminal. A server target drafts with its own draft: --draft and --proposer are refused."""
    from ..open_engine import open_engine
    from ..remote import is_server_spec

    server = is_server_spec(args.target)
    if server and getattr(args, "draft", "default") not in (None, "", "default", "none"):
        raise UsageError("--draft: a server target drafts with the server's own draft model (llama-server "
                         "--model-draft, vLLM --speculative-config); drop --draft")
    if server and getattr(args, "proposer", None) is not None:
        raise UsageError(f"--proposer {args.proposer}: a server target proposes with the server's own drafting; "
                         "drop --proposer")
    progress = None
    if sys.stderr.isatty():
        progress = server_progress if server else progress_printer()
    return open_engine(args.target, args.draft if need_draft else None, device=args.device, dtype=args.dtype,
                       quantization=args.quantization, trust_remote_code=args.trust_remote_code,
                       api_key=args.api_key, timeout=args.timeout, progress=progress)
