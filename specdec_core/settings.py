"""The one settings value of a generation: what the chat window, the CLI, the race, the bench and a
server request carry from the user to the engine, and what every engine reads.

No torch here (the GUI thread builds these values). The names are the shared words of
docs/architecture.md: mode (standard | speculative), proposer, draft length k.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .grammar.spec import GrammarSpec

MODES = ("speculative", "standard")
MAX_TOP_LOGPROBS = 20  # alternatives a token's logprobs may list (OpenAI's limit)

# The draft length the app, the CLI and the race use unless the user picks one: the adaptive
# controller (measured faster than any fixed k on the built-in prompts, docs/speed-notes.md item 16).
DEFAULT_DRAFT_TOKENS = "adaptive"


class SettingsError(ValueError):
    """Settings out of range; the message says what and how to fix it."""


@dataclass(frozen=True)
class ProposerKind:
    """A way of proposing draft tokens, as the front ends offer it."""

    name: str  # what settings, the CLI (--proposer) and Stats.proposer call it
    label: str  # what the app's menu shows
    needs_draft: bool  # it proposes from a loaded draft model


# Every proposer the engine can build, in the order the front ends list them. A new kind is one
# line here and its builder in engine.py (PROPOSER_BUILDERS); the CLI and the app follow.
PROPOSER_KINDS = (
    ProposerKind("lookup+draft", "Lookup + draft model", needs_draft=True),
    ProposerKind("draft", "Draft model", needs_draft=True),
    ProposerKind("prompt-lookup", "Prompt lookup", needs_draft=False),
)
PROPOSERS = tuple(kind.name for kind in PROPOSER_KINDS)
DEFAULT_PROPOSER = "lookup+draft"  # copy from the conversation where it can, else ask the draft


def proposer_kind(name: str) -> ProposerKind:
    for kind in PROPOSER_KINDS:
        if kind.name == name:
            return kind
    raise SettingsError(f"unknown proposer {name!r}; choose one of: {', '.join(PROPOSERS)}")


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 = greedy; top_k 0 = off; top_p 1 = off; min_p 0 = off.

    What shapes the logits before the warp, at any temperature (greedy too): logit_bias (token
    id, bias) pairs added to the logits; repetition_penalty (1 = off) on every token of the
    sequence so far, prompt included; presence_penalty and frequency_penalty (0 = off) on the
    tokens of the answer so far, those at or after `answer_start` in the sequence (the decoder
    sets it to the prompt's length for each generation). specdec_core/penalties.py applies them.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    answer_start: int = 0

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # also catches NaN
            raise SettingsError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k < 0:
            raise SettingsError(f"top-k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise SettingsError(f"top-p must be in (0, 1] (1 = off), got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise SettingsError(f"min-p must be in [0, 1] (0 = off), got {self.min_p}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise SettingsError(f"{name.replace('_', '-')} must be in [-2, 2] (0 = off), got {getattr(self, name)}")
        if not 0 < self.repetition_penalty <= 10:  # also NaN; past 10 every seen token is gone anyway
            raise SettingsError(f"repetition-penalty must be in (0, 10] (1 = off), got {self.repetition_penalty}")
        for token, bias in self.logit_bias:
            if token < 0 or not -100 <= bias <= 100:
                raise SettingsError(f"logit bias takes token ids >= 0 and biases in [-100, 100], got {token}: {bias}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def shapes_logits(self) -> bool:
        """Whether the logits change before the warp (a bias or a penalty): then each row's value
        depends on the tokens before it, and the decoder passes them."""
        return bool(self.logit_bias) or self.presence_penalty != 0 or self.frequency_penalty != 0 \
            or self.repetition_penalty != 1


@dataclass(frozen=True)
class DecodeSettings:
    """How to decode one answer. Checked when made, so a bad value is refused before anything
    loads or computes."""

    # the answer's budget; None: no limit of its own, the answer may run until the target's context
    # is full (the decoder stops it there, stop reason "context") -- what the app does by default
    max_new_tokens: int | None = 256
    sampling: SamplingParams = SamplingParams()
    draft_tokens: int | str = 4  # k >= 1, or "adaptive"
    seed: int = 0  # the whole random stream of one generation derives from this
    mode: str = "speculative"  # "speculative" | "standard"
    proposer: str = DEFAULT_PROPOSER  # one of PROPOSERS; read in speculative mode only
    # each emitted token's log-probability under the target and this many alternatives
    # (events.Logprobs); None: none computed (they cost a log-softmax over the vocabulary a token)
    logprobs: int | None = None
    # what the answer must match (a JSON schema, a Lark grammar, a regex); None: free text
    grammar: GrammarSpec | None = None

    def __post_init__(self) -> None:
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise SettingsError(f"logprobs takes 0 to {MAX_TOP_LOGPROBS} alternatives, got {self.logprobs}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise SettingsError(f"max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.draft_tokens != "adaptive":
            if not isinstance(self.draft_tokens, int) or self.draft_tokens < 1:
                raise SettingsError(f"draft length must be an integer >= 1 or 'adaptive', got {self.draft_tokens!r}")
        if self.mode not in MODES:
            raise SettingsError(f"unknown mode {self.mode!r}; choose one of: {', '.join(MODES)}")
        proposer_kind(self.proposer)

    @property
    def speculative(self) -> bool:
        return self.mode == "speculative"

    @property
    def needs_draft(self) -> bool:
        """Whether decoding with these settings needs a draft model loaded."""
        return self.speculative and proposer_kind(self.proposer).needs_draft

    def replace(self, **changes) -> DecodeSettings:
        return dataclasses.replace(self, **changes)

    def for_sample(self, index: int) -> DecodeSettings:
        """The settings of sample `index` of a run of several (its own seed, sample_seed)."""
        return self.replace(seed=sample_seed(self.seed, index))

    def to_dict(self) -> dict:
        """The sampling and length figures as plain values (what a saved message and a race's
        JSON record; the mode and the proposer are recorded beside them, from the Stats)."""
        s = self.sampling
        return {"max_new_tokens": self.max_new_tokens, "temperature": s.temperature, "top_k": s.top_k,
                "top_p": s.top_p, "draft_tokens": self.draft_tokens, "seed": self.seed}


def sample_seed(seed: int, index: int) -> int:
    """Seed of sample `index` of a run seeded with `seed`: depends on those two only, so the
    first m samples are the same whatever the number of samples asked for."""
    return (seed * 1_000_003 + index * 7_919 + 0x5DEECE66D) % (2**63 - 1)


def usable_proposer(name: str, has_draft: bool) -> str:
    """`name`, or, where it needs a draft and none is loaded, the first kind that needs none."""
    if has_draft or not proposer_kind(name).needs_draft:
        return name
    return next(kind.name for kind in PROPOSER_KINDS if not kind.needs_draft)
