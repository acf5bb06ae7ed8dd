"""The benchmark's prompt set: JSONL, one prompt per line.

    {"id": "code-lru", "category": "code", "prompt": "Implement ..."}
    {"id": "chat-trip", "category": "chat", "messages": [{"role": "user", "content": "..."}, ...]}

`id` is optional (default: "<category>-<n>"). A `messages` list is a multi-turn chat ending in a
user turn; it goes through the target's chat template as is. A `prompt` is one user message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import BenchError

BUILTIN_PROMPTS = "bench_prompts.jsonl"  # in the assets (assets/, the wheel's specdec_assets)
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    category: str
    messages: tuple[dict, ...]

    @property
    def turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "user")

    def to_dict(self) -> dict:
        return {"id": self.id, "category": self.category, "messages": list(self.messages)}


def load_prompts(path: str | Path | None = None, categories: list[str] | None = None,
                 limit: int | None = None) -> list[BenchPrompt]:
    """Read and check a prompt file (None: the built-in set); keep `categories` (all if None),
    at most `limit` prompts per category, in file order."""
    if path is None:
        from .. import assets

        name, text = f"assets/{BUILTIN_PROMPTS}", assets.read_text(BUILTIN_PROMPTS)
    else:
        path = Path(path)
        if not path.is_file():
            raise BenchError(f"--prompts: no such file {str(path)!r} (give a JSONL file of "
                             '{"category": ..., "prompt": ...} lines)')
        name, text = str(path), path.read_text(encoding="utf-8")
    prompts = parse_prompts(text, name)
    if categories:
        known = sorted({p.category for p in prompts})
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise BenchError(f"--categories: {unknown[0]!r} is not in {Path(name).name}; "
                             f"its categories are: {', '.join(known)}")
        prompts = [p for p in prompts if p.category in categories]
    if limit is not None:
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] <= limit:
                kept.append(p)
        prompts = kept
    return prompts


def split_by_fit(engine, prompts: list[BenchPrompt], max_new_tokens: int) -> tuple[list[BenchPrompt], list[dict]]:
    """(the prompts whose chat plus the answer budget fit the target's context, the others as
    {"prompt_id", "category", "reason"}): found before anything runs, by the engine's own rule."""
    kept, skipped = [], []
    for p in prompts:
        fit = engine.fit(list(p.messages), max_new_tokens)
        if fit.fits:
            kept.append(p)
        else:
            skipped.append({"prompt_id": p.id, "category": p.category, "reason": str(fit.error())})
    return kept, skipped


def parse_prompts(text: str, name: str = "prompts") -> list[BenchPrompt]:
    prompts: list[BenchPrompt] = []
    ids: set[str] = set()
    counts: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{name}, line {n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise BenchError(f"{where}: expected an object like {{\"category\": ..., \"prompt\": ...}}")
        category = obj.get("category")
        if not isinstance(category, str) or not category.strip():
            raise BenchError(f"{where}: needs a non-empty \"category\" string")
        has_prompt, has_messages = "prompt" in obj, "messages" in obj
        if has_prompt == has_messages:
            raise BenchError(f"{where}: give exactly one of \"prompt\" (a string) or \"messages\" (a list)")
        if has_prompt:
            if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
                raise BenchError(f"{where}: \"prompt\" must be a non-empty string")
            messages = ({"role": "user", "content": obj["prompt"]},)
        else:
            messages = _check_messages(obj["messages"], where)
        counts[category] = counts.get(category, 0) + 1
        pid = obj.get("id", f"{category}-{counts[category]}")
        if not isinstance(pid, str) or not pid.strip():
            raise BenchError(f"{where}: \"id\" must be a non-empty string")
        if pid in ids:
            raise BenchError(f"{where}: duplicate id {pid!r}")
        ids.add(pid)
        prompts.append(BenchPrompt(pid, category.strip(), messages))
    if not prompts:
        raise BenchError(f"{name}: no prompts in the file")
    return prompts


def _check_messages(messages, where: str) -> tuple[dict, ...]:
    if not isinstance(messages, list) or not messages:
        raise BenchError(f"{where}: \"messages\" must be a non-empty list of {{\"role\", \"content\"}} objects")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise BenchError(f"{where}: message {i} needs \"role\" ({'/'.join(ROLES)}) and a \"content\" string")
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise BenchError(f"{where}: the last message must be the user's (the model answers it)")
    return tuple(out)
