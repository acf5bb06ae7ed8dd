"""The engine façade every front end uses (CLI, GUI worker, benchmark, race).

It holds a loaded target (and optionally a draft), turns chat messages into prompt ids with
the target's chat template, builds the proposer asked for and runs the decoder.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from .decoder import DecodeSettings, Decoder, Generation
from .proposers import DraftModelProposer, PromptLookupProposer, Proposer

MODES = ("speculative", "standard")
PROPOSERS = ("draft", "prompt-lookup")


class EngineError(ValueError):
    """A request the loaded engine cannot serve; the message says how to fix it."""


CPU_KERNELS = ("auto", "native", "int4", "onednn", "default")
# "auto" keeps float32 copies of the 4-bit layers for prompt prefill only when this much memory
# would still be free after them: they are a speed option for machines with memory to spare
# (~6 GiB for the embedded pair), never a reason for the desktop to swap
DENSE_HEADROOM_BYTES = 8 << 30


def _dense_fits(model) -> tuple[bool, int]:
    """(float32 prefill copies fit in free memory, their bytes at most): every CPU linear is
    counted, though the ones that stay float32 (a tied head, Q6_K layers) need no copy."""
    import psutil

    from .cpu_kernels import cpu_linears

    need = sum(4 * child.weight.numel() for *_, child in cpu_linears(model))
    return psutil.virtual_memory().available - need >= DENSE_HEADROOM_BYTES, need


def _swap_coded_layers(lm, role: str, native: bool, dense: bool):
    """Put the model's linears on their codes (native kernel or torch's int4 kernel), from the
    saved cache when it fits, else from the GGUF (and save it). Returns the report."""
    from . import int4_cache
    from .int4_linear import use_int4_linears
    from .models.cache import converted_dir
    from .models.gguf_convert import fingerprint
    from .models.gguf_int4 import read_int4_codes
    from .native_linear import use_native_linears

    # a draft's precision never reaches the output (the target verifies what it sampled), so
    # every draft linear may be requantized; the target only runs on its own codes
    requantize = role == "draft"
    mode = ("native-" if native else "") + ("draft" if requantize else "exact")
    saved = None
    if lm.gguf_path is not None:
        saved = int4_cache.cache_file(converted_dir(), fingerprint(lm.gguf_path), mode)
    report = int4_cache.load(lm.model, saved, dense) if saved is not None and saved.is_file() else None
    if report is not None:
        lm.info.notes.append(f"coded layers loaded from {saved}")
        return report
    # a draft's 6-bit layers are requantized to 4-bit too: fewer bytes per drafted token
    six_bit = native and not requantize
    codes = read_int4_codes(lm.gguf_path, lm.model, six_bit=six_bit) if lm.gguf_path is not None else {}
    if native:
        report = use_native_linears(lm.model, codes, requantize=requantize)
    else:
        report = use_int4_linears(lm.model, codes, requantize=requantize, dense=dense)
    del codes
    if saved is not None:
        int4_cache.save(lm.model, report, saved)
    return report


def _use_cpu_kernels(lm, role: str, mode: str) -> None:
    """Swap a float32 CPU model's linears for faster kernels, in place; notes say what ran where.

    Measured on the project's 2-core AVX2 machine (embedded pair, speed notes items 9 and 15):
    the target's one-row step was 460 ms on float32 oneDNN, 288 ms with its Q4_K layers on
    torch's int4 kernel (249 ms in a later measurement), and 161 ms on the native kernel with
    its Q4_K *and* Q6_K layers on their codes (native_linear.py), where a 5-row verification
    also fell from 634 to 351 ms. The target stays the GGUF's model: its own codes, decoded to
    the same float32 weights.
    "auto": native where it builds, else torch's int4 kernel, which keeps each 4-bit layer's
    float32 weight for prompt prefill (int4_linear.DENSE_FROM_ROWS) when memory allows.
    "native" insists on the native kernel; "int4" is torch's kernel without the copies.
    """
    import gc

    from .cpu_kernels import onednn_bytes, use_onednn_linears
    from .int4_linear import DENSE_FROM_ROWS, int4_available
    from .lean_forward import attach as attach_lean
    from .models.loader import measure_memory
    from .native import unavailable
    from .native_linear import allow_grouped_rows

    if mode == "default":
        return
    kernels = []
    native = mode in ("auto", "native") and unavailable() is None
    if mode == "native" and not native:
        raise EngineError(f"--cpu-kernels native: {unavailable()}; use auto or int4")
    if mode == "auto" and not native:
        lm.info.notes.append(f"native 4-bit kernel off ({unavailable()}): torch's int4 kernel instead")
    if native or (mode in ("auto", "int4") and int4_available()):
        dense = False
        if mode == "auto" and not native:
            dense, need = _dense_fits(lm.model)
            if not dense:
                lm.info.notes.append(f"prompt prefill stays on the 4-bit kernel: float32 copies "
                                     f"(up to {need / 2**30:.1f} GiB) would leave under "
                                     f"{DENSE_HEADROOM_BYTES >> 30} GiB of memory free")
        report = _swap_coded_layers(lm, role, native, dense)
        kind = "native" if native else "int4"
        how = "native kernel, float32 activations" if native else "int4 kernel, bfloat16 activations"
        if report.exact:
            kernels.append(f"{kind} 4-bit x{report.exact} (GGUF codes)")
            lm.info.notes.append(f"{report.exact} linear layers run on the GGUF's own 4-bit codes ({how})")
        if report.exact8:
            kernels.append(f"{kind} 6-bit x{report.exact8} (GGUF codes)")
            lm.info.notes.append(f"{report.exact8} linear layers run on the GGUF's own 6-bit codes ({how})")
        if report.requantized:
            kernels.append(f"{kind} 4-bit x{report.requantized} (requantized)")
            lm.info.notes.append(f"{report.requantized} linear layers requantized to 4-bit for speed "
                                 f"(a draft's precision does not change the output)")
        if dense and report.exact + report.requantized:
            kernels.append(f"float32 prefill from {DENSE_FROM_ROWS} rows")
            lm.info.notes.append(f"passes of {DENSE_FROM_ROWS}+ rows (prompt prefill) run those layers "
                                 f"on float32 copies through oneDNN, ~2x the 4-bit kernel there")
    n = use_onednn_linears(lm.model)
    if n:
        kernels.append(f"oneDNN x{n} (float32)")
        lm.info.notes.append(f"{n} linear layers run through oneDNN (float32)")
    if native:
        if role == "draft":
            # one-row draft steps sum each group before scaling (qgemm.c): ~1.4-2x faster on
            # the trunk's matrices, other rounding -- which a draft may have, never a target
            n = allow_grouped_rows(lm.model.modules())
            if n:
                kernels.append("grouped one-row path")
                lm.info.notes.append(f"{n} of the draft's 4-bit layers take the grouped one-row path")
        # q/k/v and gate/up joined (as their parts: grouped or not), a positional cache, no
        # per-module plumbing (lean_forward.py)
        why = attach_lean(lm.model)
        lm.info.notes.append("decoding runs a lean forward (joined q/k/v and gate/up, positional cache)"
                             if why is None else f"decoding runs transformers' forward ({why})")
    lm.info.kernels = " + ".join(kernels)
    gc.collect()
    lm.info.memory_bytes = measure_memory(lm.model, "cpu", 0) + onednn_bytes(lm.model)


@dataclass
class Engine:
    target: object  # specdec_core.models.LoadedModel
    draft: object | None = None  # LoadedModel, or None: only standard / prompt lookup

    def __post_init__(self) -> None:
        self.tokenizer = self.target.tokenizer
        self.decoder = Decoder(self.target.model, self.tokenizer, self.target.eos_token_ids)
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
        cpu_kernels: str = "auto",
        **load_kwargs,
    ) -> Engine:
        """Load a pair by SPEC (see models) and check it is compatible before any decoding.

        cpu_kernels (float32 models on CPU only):
          "auto"    the target's 4-bit and 6-bit GGUF layers run on their own codes through the
                    native kernel (native_linear.py), the draft's linears are requantized to
                    4-bit, and whatever is left runs through oneDNN (cpu_kernels.py); where the
                    native kernel does not build, torch's int4 kernel takes the 4-bit layers
                    (int4_linear.py), with float32 copies for prompt prefill when memory allows;
          "native"  the native kernel or an error saying why it is unavailable;
          "int4"    torch's int4 kernel without the float32 copies;
          "onednn"  every linear through oneDNN, float32;
          "default" torch's own kernels.
        """
        from .models import check_compatible, load_model

        if cpu_kernels not in CPU_KERNELS:
            raise EngineError(f"cpu_kernels must be one of {', '.join(CPU_KERNELS)}; got {cpu_kernels!r}")
        t = load_model(target, role="target", device=device, dtype=dtype, quantization=quantization,
                       progress=progress, **load_kwargs)
        d = None
        if draft is not None:
            d = load_model(draft, role="draft", device=t.info.device, dtype=dtype, progress=progress, **load_kwargs)
            check_compatible(t, d)
        for lm, role in ((t, "target"), (d, "draft")):
            # a bitsandbytes model (nf4/int8) keeps bitsandbytes' own layers: they are what was asked for
            if lm is not None and lm.info.device == "cpu" and lm.info.quantization not in ("nf4", "int8"):
                _use_cpu_kernels(lm, role, cpu_kernels)
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
        return DraftModelProposer(self.draft.model, vocab)

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
