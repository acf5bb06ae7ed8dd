"""The Models dialog's draft list: for the chosen target, "target only" first, then the drafts
that fit (smallest first), those being checked or not checkable, and last the ones that do not
fit, greyed, each with the reason (the first differing token id, an eos mismatch, a smaller
vocabulary) as the dialog's inspector reported it.

`draft_candidates` says which local models may be drafts of a target (pure: plain dicts in,
plain dicts out); `DraftList` lays them out. The dialog owns the checks and the choice. No torch.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QListWidget, QListWidgetItem

from .download_panel import size_text
from .model_targets import KEY, spec_for

NO_DRAFT = "none"
ORDER = {"ok": 0, "checking": 1, "unknown": 2, "no": 3}


def identity(t: dict) -> str:
    """The file or hub id behind a target entry ('default' means the embedded target's file)."""
    m = t.get("model")
    if m is not None:
        return m.get("path") or m["spec"]
    return t["spec"]


def draft_candidates(t: dict, local: list[dict], key_for_spec: Callable[[str, str], str | None]) -> dict[str, dict]:
    """key -> {"spec", "role", "name", "bytes", "detail", "status", "reason"}: every local model
    that can be the draft of target entry `t` ("checking": its vocabulary is still to compare),
    and a preset's own draft (a known-good pair: "ok", downloaded or not)."""
    cands: dict[str, dict] = {}
    same = identity(t)
    for m in local:
        spec = spec_for(m, "draft")
        if not spec or (m.get("path") or m["spec"]) == same:
            continue  # not loadable as a draft, or the target itself
        key = "model:default:draft" if spec == "default" else f"model:{spec}"
        cands[key] = {"spec": spec, "role": "draft", "bytes": m["bytes"],
                      "name": m["name"] + (f" ({m['where']})" if m.get("where") else ""),
                      "detail": f"{m['format']} {m['quantization']} · {size_text(m['bytes'])}"}
    for c in cands.values():
        c.update(status="checking", reason="")
    if t["kind"] == "preset":
        d = t["preset"]["draft"]
        key = "model:default:draft" if d == "default" else key_for_spec(d, "draft")
        detail = cands[key]["detail"] if key in cands else "hub model, downloaded when loaded"
        cands[key] = {"spec": d, "role": "draft", "name": cands.get(key, {}).get("name", d),
                      "bytes": cands.get(key, {}).get("bytes", 0), "status": "ok", "reason": "",
                      "detail": f"the preset's own draft (a known-good pair) · {detail}"}
    return cands


def _row(c: dict) -> tuple[str, str]:
    """(text, tooltip) of one draft by its check's status."""
    status = c["status"]
    if status == "ok":
        return (f"✓  {c['name']}\n     fits · {c['detail']}",
                "same token ids and end-of-generation ids as the target")
    if status == "checking":
        return (f"…  {c['name']}\n     checking its vocabulary…", "reading its tokenizer")
    if status == "unknown":
        return (f"?  {c['name']}\n     not checked: {c['reason']}",
                f"{c['reason']}\nloading checks it again and says why if it does not fit")
    return (f"✗  {c['name']}\n     does not fit: {c['reason']}", c["reason"])


class DraftList(QListWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("DraftList")
        self.setWordWrap(True)
        self.setSpacing(2)

    def fill(self, drafts: dict[str, dict], wanted: str | None) -> None:
        """List `drafts` and select `wanted` (when it fits or is unchecked); with none wanted, the
        smallest one that fits; else target only. Signals blocked: the caller follows up."""
        self.blockSignals(True)
        self.clear()
        none = QListWidgetItem("None: target only (prompt lookup proposes from the chat itself)")
        none.setData(KEY, NO_DRAFT)
        none.setToolTip("standard decoding, or speculative decoding with prompt lookup: no draft model to load")
        self.addItem(none)
        chosen = none if wanted == NO_DRAFT else None
        first_ok = None
        for key, c in sorted(drafts.items(), key=lambda kc: (ORDER[kc[1]["status"]], kc[1]["bytes"] or 0,
                                                            kc[1]["name"])):
            text, tip = _row(c)
            item = QListWidgetItem(text)
            item.setData(KEY, key)
            item.setToolTip(tip)
            if c["status"] in ("no", "checking"):
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled & ~Qt.ItemFlag.ItemIsSelectable)
            self.addItem(item)
            if c["status"] == "ok" and first_ok is None:
                first_ok = item
            if key == wanted and c["status"] in ("ok", "unknown"):
                chosen = item
        if chosen is None and wanted is None:
            chosen = first_ok
        self.setCurrentItem(chosen if chosen is not None else none)
        self.blockSignals(False)

    def current_key(self) -> str | None:
        item = self.currentItem()
        return item.data(KEY) if item is not None else None

    def rows(self, drafts: dict[str, dict]) -> list[tuple[str, str, bool, str]]:
        """(key, status, enabled, text) of each listed draft, in order."""
        out = []
        for i in range(self.count()):
            it = self.item(i)
            key = it.data(KEY)
            status = "none" if key == NO_DRAFT else drafts[key]["status"]
            out.append((key, status, bool(it.flags() & Qt.ItemFlag.ItemIsEnabled), it.text()))
        return out
