"""The benchmark's prompt set: JSONL, one prompt per line.

    {"id": "code-lru", "category": "code", "split": "holdout", "prompt": "Implement ..."}
    {"id": "chat-trip", "category": "chat", "messages": [{"role": "user", "content": "..."}, ...]}
    {"id": "conv-todo", "category": "conversation", "turns": ["Explain ...", "Now write ...", ...]}
    {"id": "structured-invoice", "category": "structured", "prompt": "Extract ...", "schema": {...}}

`id` is optional (default: "<category>-<n>"). A `messages` list is a multi-turn chat ending in a
user turn; it goes through the target's chat template as is. A `prompt` is one user message.
`turns` is a conversation the model takes part in: it answers each user turn in turn, its own
answer kept in the chat before the next one, each turn decoded on the cache the previous one
left (as the app and `specdec serve` run a chat), and every turn is measured. A `schema` (a
JSON Schema object, with a `prompt` or `messages`) constrains the answer to JSON matching it, as
`specdec serve`'s response_format json_schema does: every mode of ours decodes under that grammar
(the peers are not given it: their rows say so). `split`
("tuning" or "holdout", optional) says which half of the corpus a prompt belongs to: tuning
decisions are made on the tuning half, and `--split holdout` measures the other on its own.

Two sets are built in: "corpus" (the default: assets/bench_corpus.jsonl, 180 prompts written
for the project over 15 kinds of text, conversations, long contexts and JSON extraction included, split once
into halves) and "classic" (assets/bench_prompts.jsonl, the 18 prompts of the earlier reports).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import BenchError

# the built-in sets by name (the first the default), in the assets (assets/, the wheel's specdec_assets)
BUILTIN_SETS = ("corpus", "classic")
ROLES = ("system", "user", "assistant")
SPLITS = ("tuning", "holdout")


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    category: str
    messages: tuple[dict, ...]  # a conversation's: its first user turn
    split: str | None = None
    # a conversation: every user turn, the first included (empty for a one-shot prompt)
    conversation: tuple[str, ...] = ()
    schema: str | None = None  # a JSON Schema as JSON text: the answer's grammar (None: free text)

    @property
    def turns(self) -> int:
        if self.conversation:
            return len(self.conversation)
        return sum(1 for m in self.messages if m["role"] == "user")

    def to_dict(self) -> dict:
        d = {"id": self.id, "category": self.category, "messages": list(self.messages)}
        if self.split:
            d["split"] = self.split
        if self.conversation:
            d["turns"] = list(self.conversation)
        if self.schema is not None:
            d["schema"] = json.loads(self.schema)
        return d


def load_prompts(path: str | Path | None = None, categories: list[str] | None = None,
                 limit: int | None = None, split: str | None = None) -> list[BenchPrompt]:
    """Read and check a prompt file (None: the built-in corpus; a name of BUILTIN_SETS: that
    set); keep `categories` (all if None), the `split` half (all if None), at most `limit`
    prompts per category, in file order."""
    if path is None or str(path) in BUILTIN_SETS:
        from .. import assets

        name, text = f"assets/{builtin_file(path)}", assets.read_text(builtin_file(path))
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
    if split is not None:
        if split not in SPLITS:
            raise BenchError(f"--split: {split!r} is not one of {', '.join(SPLITS)}")
        prompts = [p for p in prompts if p.split == split]
        if not prompts:
            raise BenchError(f"--split {split}: no prompt of the chosen set is in that half (give a file whose "
                             'lines say "split")')
    if limit is not None:
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] <= limit:
                kept.append(p)
        prompts = kept
    return prompts


def builtin_file(name: str | Path | None) -> str:
    """The asset file of a built-in set (None: the default, the corpus)."""
    if name is not None and str(name) == "classic":
        return "bench_prompts.jsonl"
    return "bench_corpus.jsonl"


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
        shapes = [k for k in ("prompt", "messages", "turns") if k in obj]
        if len(shapes) != 1:
            raise BenchError(f"{where}: give exactly one of \"prompt\" (a string), \"messages\" (a list) or "
                             '"turns" (a list of user messages)')
        conversation: tuple[str, ...] = ()
        if "prompt" in obj:
            if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
                raise BenchError(f"{where}: \"prompt\" must be a non-empty string")
            messages = ({"role": "user", "content": obj["prompt"]},)
        elif "turns" in obj:
            turns = obj["turns"]
            if (not isinstance(turns, list) or len(turns) < 2
                    or not all(isinstance(t, str) and t.strip() for t in turns)):
                raise BenchError(f"{where}: \"turns\" must be a list of at least two non-empty user messages")
            conversation = tuple(turns)
            messages = ({"role": "user", "content": turns[0]},)
        else:
            messages = _check_messages(obj["messages"], where)
        schema = obj.get("schema")
        if schema is not None and (not isinstance(schema, dict) or conversation):
            raise BenchError(f"{where}: \"schema\" must be a JSON Schema object, with a \"prompt\" or \"messages\"")
        split = obj.get("split")
        if split is not None and split not in SPLITS:
            raise BenchError(f"{where}: \"split\" must be one of {', '.join(SPLITS)}")
        counts[category] = counts.get(category, 0) + 1
        pid = obj.get("id", f"{category}-{counts[category]}")
        if not isinstance(pid, str) or not pid.strip():
            raise BenchError(f"{where}: \"id\" must be a non-empty string")
        if pid in ids:
            raise BenchError(f"{where}: duplicate id {pid!r}")
        ids.add(pid)
        prompts.append(BenchPrompt(pid, category.strip(), messages, split, conversation,
                                   None if schema is None else json.dumps(schema)))
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
