"""Fill in the middle: code before a gap and after it, as the model's own FIM tokens put them
(what an editor's autocompletion sends: OpenAI's `suffix`, llama-server's `/infill`).

    plain (a completion's suffix)   [PRE] prefix [SUF] suffix [MID]            -> the middle
    repo-level (llama-server's /infill, where the vocabulary has the repo and file tokens):
        [REP] myproject\\n [SEP] filename0\\n text0 ... [SEP] filename\\n [PRE] prefix prompt [SUF] suffix [MID]

Qwen2.5-Coder's tokens are <|fim_prefix|> <|fim_suffix|> <|fim_middle|> (<|repo_name|>,
<|file_sep|>); StarCoder's and DeepSeek-Coder's are known too. The texts are tokenized with
special tokens read as plain text, as llama-server does: a file that contains "<|fim_suffix|>"
cannot end its own prefix. A tokenizer with none of these refuses (FimError).
"""

from __future__ import annotations

from dataclasses import dataclass


class FimError(ValueError):
    """The model has no fill-in-the-middle tokens; the message says so."""


@dataclass(frozen=True)
class Infill:
    prefix: str  # the code before the gap
    suffix: str  # the code after it
    extra: tuple[tuple[str, str], ...] = ()  # other files of the project: (filename, text)
    prompt: str = ""  # text the middle starts with (llama-server puts it after the prefix)
    repo_level: bool = False  # llama-server's /infill layout (repo and file tokens where there are)


@dataclass(frozen=True)
class FimTokens:
    prefix: str
    suffix: str
    middle: str
    repo: str | None = None
    file_sep: str | None = None


FAMILIES = (
    FimTokens("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"),  # Qwen2.5-Coder
    FimTokens("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<reponame>", "<file_sep>"),  # StarCoder
    FimTokens("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder
)
SNIPPET = "\n\n--- snippet ---\n\n"  # llama-server's separator of extra chunks without file tokens


def fim_tokens(tokenizer) -> tuple[FimTokens, dict[str, int]] | None:
    """The family whose three FIM tokens the vocabulary has, and their ids (repo and file too,
    where it has them); None when it has none."""
    vocab = tokenizer.get_vocab()
    for family in FAMILIES:
        names = [n for n in (family.prefix, family.suffix, family.middle, family.repo, family.file_sep) if n]
        if all(n in vocab for n in names[:3]):
            return family, {n: vocab[n] for n in names if n in vocab}
    return None


def encode_infill(tokenizer, infill: Infill) -> list[int]:
    found = fim_tokens(tokenizer)
    if found is None:
        raise FimError("the target has no fill-in-the-middle tokens (such as Qwen2.5-Coder's <|fim_prefix|>, "
                       "<|fim_suffix|>, <|fim_middle|>): a code model trained for infilling is needed")
    family, ids = found

    def text(s: str) -> list[int]:
        return list(tokenizer(s, add_special_tokens=False, split_special_tokens=True)["input_ids"]) if s else []

    bos = tokenizer.bos_token_id if getattr(tokenizer, "add_bos_token", False) else None
    out: list[int] = [] if bos is None else [bos]
    if infill.repo_level:
        if family.repo in ids:
            out += [ids[family.repo], *text("myproject\n")]
        for filename, chunk in infill.extra:
            out += [ids[family.file_sep], *text(filename + "\n")] if family.file_sep in ids else text(SNIPPET)
            out += text(chunk)
        if family.file_sep in ids:
            out += [ids[family.file_sep], *text("filename\n")]
    return out + [ids[family.prefix], *text(infill.prefix), *text(infill.prompt), ids[family.suffix],
                         *text(infill.suffix), ids[family.middle]]
