"""The one way the reports write a Markdown table."""

from __future__ import annotations

from collections.abc import Iterable


def table(head: Iterable[str], rows: Iterable[Iterable[object]], right: Iterable[int] = ()) -> list[str]:
    """Lines of a table: the head, its rule, one line per row. `right`: the columns aligned right."""
    head = list(head)
    right = set(right)
    rule = "|" + "".join("---:|" if i in right else "---|" for i in range(len(head)))
    return ["| " + " | ".join(head) + " |", rule] + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
