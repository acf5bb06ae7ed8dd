"""What one benchmark run measures: a list of modes, each run on every prompt in turn."""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import DEFAULT_PROPOSER, DecodeSettings
from . import BenchError

STANDARD = "standard"
DEFAULT = "default"  # what the app and the CLI do unless told otherwise: lookup, then the draft, adaptive
HF_GENERATE = "hf-generate"
HF_ASSISTED = "hf-assisted"
PROMPT_LOOKUP = "prompt-lookup"
LLAMACPP = "llama.cpp"  # llama.cpp's plain decoding (llama-completion)
LLAMACPP_SPEC = "llama.cpp-spec"  # llama.cpp's speculative decoding (llama-speculative-simple)
# its draft model at its default draft length, and tuned (--spec-draft-n-max, --spec-draft-p-min)
LLAMACPP_SPEC_DEFAULT = 3
LLAMACPP_SPEC_TUNED = (16, 0.75)
# its drafts from the text itself (n-grams of the prompt and the answer so far), alone and before
# the draft model: the --spec-type values of the llama.cpp that scripts/build-llamacpp.sh builds
LLAMACPP_DRAFT, LLAMACPP_NGRAM, LLAMACPP_DRAFT_NGRAM = "draft-simple", "ngram-mod", "draft-simple,ngram-mod"


@dataclass(frozen=True)
class Mode:
    name: str  # "standard", "speculative k=4", "speculative adaptive", "prompt-lookup k=4", "hf-generate", ...
    kind: str  # "standard" | "default" | "speculative" | "prompt-lookup" | "hf-generate" | "hf-assisted" | llama.cpp's
    draft_tokens: int | str | None = None  # k, "adaptive", or None (standard, hf baselines)
    p_min: float | None = None  # llama.cpp's --spec-draft-p-min, where set
    spec_type: str | None = None  # llama.cpp's --spec-type, for its speculative modes

    @property
    def engine_mode(self) -> str:
        return "standard" if self.kind == STANDARD else "speculative"

    @property
    def proposer(self) -> str | None:
        return {DEFAULT: DEFAULT_PROPOSER, "speculative": "draft", PROMPT_LOOKUP: "prompt-lookup"}.get(self.kind)

    def settings(self, base: DecodeSettings) -> DecodeSettings:
        """Our engine's settings for this mode: `base` (budget, sampling, seed) with its own
        mode, proposer and draft length."""
        return base.replace(mode=self.engine_mode, proposer=self.proposer or "draft",
                            draft_tokens=self.draft_tokens or 1)

    @property
    def is_hf(self) -> bool:
        return self.kind in (HF_GENERATE, HF_ASSISTED)

    @property
    def is_llamacpp(self) -> bool:
        return self.kind in (LLAMACPP, LLAMACPP_SPEC)

    @property
    def needs_draft(self) -> bool:
        if self.kind == LLAMACPP_SPEC:
            return LLAMACPP_DRAFT in (self.spec_type or "").split(",")
        return self.kind in (DEFAULT, "speculative", HF_ASSISTED)

    @property
    def proposes(self) -> bool:
        """Our speculative modes: acceptance and per-position figures apply."""
        return self.kind in (DEFAULT, "speculative", PROMPT_LOOKUP)


def parse_draft_lengths(value: str) -> list[int | str]:
    """"1,2,4,8,adaptive" -> [1, 2, 4, 8, "adaptive"]; "none" -> [] (no draft-model modes);
    "default" -> ["default"]: the default mode alone beside standard (what a user gets)."""
    value = value.strip()
    if value == "none":
        return []
    if value == DEFAULT:
        return [DEFAULT]
    out: list[int | str] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        if part == "adaptive":
            k: int | str = part
        else:
            try:
                k = int(part)
            except ValueError:
                raise BenchError(f"--draft-tokens takes a comma-separated list of k >= 1 and/or 'adaptive' "
                                 f"(or 'none', or 'default' alone), got {part!r}") from None
            if k < 1:
                raise BenchError(f"--draft-tokens: each k must be >= 1, got {k}")
        if k not in out:
            out.append(k)
    if not out:
        raise BenchError("--draft-tokens: give at least one k (e.g. 2,4,adaptive) or 'none'")
    return out


BASELINES = ("hf", "llama.cpp", "none")


def parse_baselines(value: str) -> set[str]:
    """"hf,llama.cpp" -> {"hf", "llama.cpp"}; "none" -> set()."""
    names = {v.strip() for v in value.split(",") if v.strip()}
    bad = names - set(BASELINES)
    if bad or not names:
        raise BenchError(f"--baseline takes a comma-separated list of {', '.join(BASELINES)}; got {value!r}")
    return names - {"none"}


def parse_lookup_tokens(value: str) -> int | str | None:
    value = value.strip()
    if value == "none":
        return None
    if value == "adaptive":
        return value
    try:
        k = int(value)
    except ValueError:
        raise BenchError(f"--lookup-tokens takes k >= 1, 'adaptive' or 'none', got {value!r}") from None
    if k < 1:
        raise BenchError(f"--lookup-tokens must be >= 1 (or 'adaptive' / 'none'), got {k}")
    return k


def build_modes(draft_lengths: list[int | str], lookup_tokens: int | str | None, hf_baseline: bool,
                llamacpp_baseline: bool = False) -> list[Mode]:
    """standard first, then our speculative modes, then the transformers and llama.cpp baselines
    (llama.cpp: plain, its draft model at its default and tuned, n-grams of the text, both)."""
    modes = [Mode(STANDARD, STANDARD)]
    if draft_lengths:  # a draft is loaded: the default, as a user gets it
        modes.append(Mode(DEFAULT, DEFAULT, "adaptive"))
    fixed = sorted(k for k in draft_lengths if k not in ("adaptive", DEFAULT))
    for k in fixed:
        modes.append(Mode(f"speculative k={k}", "speculative", k))
    if "adaptive" in draft_lengths:
        modes.append(Mode("speculative adaptive", "speculative", "adaptive"))
    if lookup_tokens is not None:
        modes.append(Mode(f"prompt-lookup k={lookup_tokens}" if lookup_tokens != "adaptive"
                          else "prompt-lookup adaptive", PROMPT_LOOKUP, lookup_tokens))
    if hf_baseline:
        modes.append(Mode(HF_GENERATE, HF_GENERATE))
        modes.append(Mode(HF_ASSISTED, HF_ASSISTED))
    if llamacpp_baseline:
        modes.append(Mode(LLAMACPP, LLAMACPP))
        if draft_lengths:
            modes.append(Mode(f"llama.cpp spec k={LLAMACPP_SPEC_DEFAULT}", LLAMACPP_SPEC, LLAMACPP_SPEC_DEFAULT,
                              spec_type=LLAMACPP_DRAFT))
            n, p = LLAMACPP_SPEC_TUNED
            modes.append(Mode(f"llama.cpp spec k<={n} p>={p:g}", LLAMACPP_SPEC, n, p, spec_type=LLAMACPP_DRAFT))
        modes.append(Mode("llama.cpp ngram", LLAMACPP_SPEC, spec_type=LLAMACPP_NGRAM))
        if draft_lengths:
            modes.append(Mode("llama.cpp draft+ngram", LLAMACPP_SPEC, spec_type=LLAMACPP_DRAFT_NGRAM))
    return modes
