"""The Models dialog's target list: the presets with what each needs against this machine's
memory, then the models on this computer (embedded, the caches, recent files and folders) with
format, quantization and size.

One tree widget that lists what the dialog's scan found and remembers, per row, the key the
dialog selects by ("preset:NAME", "model:SPEC", "model:default:target"). The dialog owns the
choosing; this module only lays the rows out. No torch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QFont, QPalette
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTreeWidget, QTreeWidgetItem

from .download_panel import size_text

KEY = Qt.ItemDataRole.UserRole
COLUMNS = ["Model", "Format", "Quantization", "Size", "Needs here"]
ORIGINS = {"embedded": "embedded", "app cache": "app cache", "hf cache": "Hugging Face cache", "recent": "recent"}


def gib_text(n: int | float | None) -> str:
    """Memory in binary units: GiB from 1 GiB up, MiB or KiB below (tiny models are tiny)."""
    if n is None:
        return "?"
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    if n >= 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{max(n, 1) / 2**10:.0f} KiB"


def spec_for(m: dict, role: str) -> str | None:
    """What --target/--draft take to load local model `m` in `role` (None: it cannot be)."""
    if m.get("error"):
        return None
    if m["origin"] == "embedded":
        if m["role"] == role:
            return "default"
        # the other embedded model: by its assembled file, once it exists
        return m["path"] if m.get("path") and Path(m["path"]).is_file() else None
    return m["spec"]


def need_cell(need: dict | None, free: Callable[[str], int], fits: bool | None = None) -> tuple[str, str]:
    """(text, tooltip) for the 'Needs here' column; `free(device)` is the memory free there."""
    if not need or need.get("bytes") is None:
        return ("?", (need or {}).get("how", "unknown until downloaded"))
    ok = fits if fits is not None else need["bytes"] <= free(need.get("device", "cpu"))
    mark = "✓" if ok else "too big"
    return (f"{gib_text(need['bytes'])} {need.get('place', 'RAM')}  {mark}", need.get("how", ""))


def _group(title: str) -> QTreeWidgetItem:
    group = QTreeWidgetItem([title])
    bold = QFont()
    bold.setBold(True)
    group.setFont(0, bold)
    group.setFlags(Qt.ItemFlag.ItemIsEnabled)
    return group


class TargetTree(QTreeWidget):
    """The targets, in two groups; `fill` returns what each listed key stands for."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("ModelTree")
        self.setColumnCount(len(COLUMNS))
        self.setHeaderLabels(COLUMNS)
        self.setRootIsDecorated(False)
        self.setUniformRowHeights(True)
        self.setAlternatingRowColors(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        header = self.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col in range(1, len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)

    def fill(self, presets: list[dict], local: list[dict], machine: dict, free: Callable[[str], int],
             palette: QPalette) -> dict[str, dict]:
        """List the presets and the local models (signals blocked: the caller selects after);
        returns key -> {"kind", "spec", "name", "format", "preset" | "model"}."""
        self.blockSignals(True)
        self.clear()
        targets: dict[str, dict] = {}
        group = _group("Presets (known-good pairs)")
        self.addTopLevelItem(group)
        for p in presets:
            key = f"preset:{p['name']}"
            group.addChild(self._preset_item(p, key, machine, free, palette))
            targets[key] = {"kind": "preset", "spec": p["target"], "name": p["name"], "preset": p,
                            "format": "GGUF" if p["target"] == "default" else "safetensors"}
        group = _group("On this computer")
        self.addTopLevelItem(group)
        muted = QBrush(palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
        for m in local:
            spec = spec_for(m, "target")
            key = "model:default:target" if spec == "default" else f"model:{spec or m.get('path') or m['spec']}"
            if key in targets:
                continue
            group.addChild(self._local_item(m, spec, key, free, muted))
            targets[key] = {"kind": "model", "spec": spec, "name": m["name"], "model": m, "format": m["format"]}
        if not local:
            empty = QTreeWidgetItem(["(none yet: open a file or folder, or download from the hub)"])
            empty.setFlags(Qt.ItemFlag.NoItemFlags)
            group.addChild(empty)
        self.expandAll()
        self.blockSignals(False)
        return targets

    @staticmethod
    def _preset_item(p: dict, key: str, machine: dict, free: Callable[[str], int],
                     palette: QPalette) -> QTreeWidgetItem:
        e = p["estimate"]
        where = "for CUDA GPUs" if p["device"] == "cuda" else "for the CPU"
        if p["device"] == "cuda" and not machine.get("gpus"):
            where += " (none here: on the CPU, slowly)"
        need_text, need_tip = need_cell({**e, "how": " · ".join(
            x["how"] for x in (e["target"], e["draft"]) if x)}, free, p["fits"])
        quant = p["target_quantization"] or ("Q4_K_M" if p["target"] == "default" else "auto")
        shown = "embedded Qwen2.5-Coder-1.5B-Instruct" if p["target"] == "default" else p["target"].split("/")[-1]
        item = QTreeWidgetItem([f"{p['name']}: {shown}",
                                "GGUF" if p["target"] == "default" else "safetensors",
                                quant.upper() if quant in ("nf4", "int8") else quant, "", need_text])
        item.setToolTip(0, f"{p['target']} + draft {p['draft']}\n{p['notes']} — {where}")
        item.setToolTip(4, need_tip)
        if not p["fits"]:
            item.setForeground(4, QBrush(palette.color(QPalette.ColorRole.PlaceholderText)))
        item.setData(0, KEY, key)
        return item

    @staticmethod
    def _local_item(m: dict, spec: str | None, key: str, free: Callable[[str], int],
                    muted: QBrush) -> QTreeWidgetItem:
        origin = ORIGINS.get(m["origin"], m["origin"])
        if m["origin"] == "embedded":
            origin += f" {m['role']}"
        if m.get("where"):  # another model here has the same name: its folder tells them apart
            origin += f" · {m['where']}"
        need_text, need_tip = need_cell(m.get("need"), free) if spec else ("", "")
        params = f" · {m['params'] / 1e9:.2f} B parameters" if m.get("params") else ""
        item = QTreeWidgetItem([f"{m['name']}  ({origin})", m["format"], m["quantization"],
                                size_text(m["bytes"]), need_text])
        tip = f"{m.get('path') or m['spec']}{params}"
        if m.get("loaded"):
            ld = m["loaded"]
            tip += (f"\nlast loaded as {ld.get('quantization')} ({ld.get('dtype')}) on {ld.get('device')}, "
                    f"{gib_text(ld.get('memory_bytes'))}")
        if m.get("error"):
            tip += f"\n{m['error']}"
            item.setText(4, m["error"])
        elif not spec:
            tip += "\nnot assembled yet: usable as the draft of the default pair"
        item.setToolTip(0, tip)
        item.setToolTip(4, need_tip or tip)
        item.setData(0, KEY, key)
        if not spec:
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            for col in range(len(COLUMNS)):
                item.setForeground(col, muted)
        return item

    def item_for(self, key: str) -> QTreeWidgetItem | None:
        for i in range(self.topLevelItemCount()):
            top = self.topLevelItem(i)
            for j in range(top.childCount()):
                if top.child(j).data(0, KEY) == key:
                    return top.child(j)
        return None

    def current_key(self) -> str | None:
        item = self.currentItem()
        return item.data(0, KEY) if item is not None else None
