"""What the reports write alike: a Markdown table, the prompts that were skipped."""

from __future__ import annotations

from collections.abc import Iterable


def table(head: Iterable[str], rows: Iterable[Iterable[object]], right: Iterable[int] = ()) -> list[str]:
    """Lines of a table: the head, its rule, one line per row. `right`: the columns aligned right."""
    head = list(head)
    right = set(right)
    rule = "|" + "".join("---:|" if i in right else "---|" for i in range(len(head)))
    return ["| " + " | ".join(head) + " |", rule] + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def skipped_lines(skipped: list[dict] | None) -> list[str]:
    """The prompts left out before anything ran (they did not fit the target's context), and why."""
    if not skipped:
        return []
    return [f"Skipped {len(skipped)} prompt(s) that do not fit the target's context with the answer budget:", ""] + [
        f"- {s['prompt_id']} ({s['category']}): {s['reason']}" for s in skipped]
