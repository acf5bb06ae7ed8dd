"""Can this draft propose tokens for this target? Same token ids must mean the same strings.

The rule itself (every id the target can emit means the same token to the draft, and the same
ids end generation) lives in vocab.incompatibility, so the check on loaded models here and the
one the Models dialog runs on files before loading say the same thing in the same words.

Not compared: bos/unk tokens (the draft only ever reads ids the target's tokenizer produced, so
they cannot matter, and a GGUF and a Hugging Face folder of the same model name them differently)
and the *model* vocab sizes (Qwen2.5-7B pads its embedding to 152,064 rows, 0.5B to 151,936).
"""

from __future__ import annotations

from .errors import ModelError
from .types import LoadedModel
from .vocab import incompatibility, of_tokenizer

HINT = "use a draft from the same model family (`specdec models` lists known-good pairs)"


def check_compatible(target: LoadedModel, draft: LoadedModel) -> None:
    """Raise ModelError naming the first difference between the two tokenizers."""
    why = incompatibility(of_tokenizer(target.tokenizer, target.eos_token_ids, "target"),
                          of_tokenizer(draft.tokenizer, draft.eos_token_ids, "draft"))
    if why is not None:
        raise ModelError(f"target and draft are incompatible: {why}; {HINT}")
