"""The engine façade every front end uses (CLI, GUI worker, benchmark, race).

It holds a loaded target (and optionally a draft), turns chat messages into prompt ids with
the target's chat template, builds the proposer asked for and runs the decoder.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from .decoder import DecodeSettings, Decoder, Generation
from .proposers import DraftModelProposer, LookupDraftProposer, PromptLookupProposer, Proposer

MODES = ("speculative", "standard")
PROPOSERS = ("lookup+draft", "draft", "prompt-lookup")


class EngineError(ValueError):
    """A request the loaded engine cannot serve; the message says how to fix it."""


@dataclass
class Engine:
    target: object  # specdec_core.models.LoadedModel
    draft: object | None = None  # LoadedModel, or None: only standard / prompt lookup

    def __post_init__(self) -> None:
        self.tokenizer = self.target.tokenizer
        self.decoder = Decoder(self.target.model, self.tokenizer, self.target.eos_token_ids, lean=getattr(self.target, "lean", None))
        self._proposers: dict[str, Proposer] = {}

    @classmethod
    def load(
        cls,
        target: str = "default",
        draft: str | None = "default",
        *,
        device: str = "auto",
        dtype: str = "auto",
        quantization: str | None = None,
        progress: Callable[[str, float | None], None] | None = None,
        **load_kwargs,
    ) -> Engine:
        """Load a pair by SPEC (see models) and check it is compatible before any decoding.

        On a CPU a GGUF runs on its own blocks through the CPU backend (specdec_core/cpu):
        integer kernels for the instruction set this CPU has, and the lean forward for the
        families it covers; each model's info.kernels and info.notes say what ran where.
        """
        from .models import check_compatible, load_model

        t = load_model(target, role="target", device=device, dtype=dtype, quantization=quantization,
                       progress=progress, **load_kwargs)
        d = None
        if draft is not None:
            d = load_model(draft, role="draft", device=t.info.device, dtype=dtype, progress=progress, **load_kwargs)
            check_compatible(t, d)
        return cls(t, d)

    # -- prompts ---------------------------------------------------------------------------
    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """messages [{"role": "system"|"user"|"assistant", "content": ...}] -> prompt ids,
        through the target's own chat template, ending with the assistant's turn opener."""
        if getattr(self.tokenizer, "chat_template", None):
            enc = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = enc["input_ids"] if hasattr(enc, "keys") else enc
            return list(ids)
        # A base model without a template: plain concatenation of the contents.
        text = "\n\n".join(m["content"] for m in messages)
        return self.tokenizer(text)["input_ids"]

    def encode_prompt(self, text: str) -> list[int]:
        """One user message through the chat template."""
        return self.encode_chat([{"role": "user", "content": text}])

    @property
    def context_length(self) -> int | None:
        """The target's context window in tokens (None when its config does not say)."""
        return self.decoder.context_length

    # -- decoding --------------------------------------------------------------------------
    def new_proposer(self, name: str) -> Proposer:
        """A fresh proposer with its own state (the race needs one the chat does not share)."""
        if name not in PROPOSERS:
            raise EngineError(f"unknown proposer {name!r}; choose one of: {', '.join(PROPOSERS)}")
        if name == "prompt-lookup":
            return PromptLookupProposer()
        if self.draft is None:
            raise EngineError("no draft model is loaded: pass --draft SPEC, or use --proposer prompt-lookup")
        # the target's logits width (config, not weight shape: 4-bit weights are packed)
        vocab = self.target.model.config.get_text_config().vocab_size
        draft = DraftModelProposer(self.draft.model, vocab, lean=getattr(self.draft, "lean", None))
        return LookupDraftProposer(draft) if name == "lookup+draft" else draft

    def proposer(self, name: str) -> Proposer:
        """The engine's own proposer of that kind, created once and reused across messages."""
        if name not in self._proposers:
            self._proposers[name] = self.new_proposer(name)
        return self._proposers[name]

    def generate(
        self,
        prompt_ids: list[int],
        settings: DecodeSettings = DecodeSettings(),
        *,
        mode: str = "speculative",
        proposer: str = "draft",
        cancel: threading.Event | None = None,
        reuse_cache: bool = False,
    ) -> Generation:
        if mode not in MODES:
            raise EngineError(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}")
        prop = self.proposer(proposer) if mode == "speculative" else None
        return self.decoder.generate(prompt_ids, settings, prop, cancel, reuse_cache=reuse_cache)
