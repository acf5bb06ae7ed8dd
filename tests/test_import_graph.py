"""The import graph of specdec_core and app, built from the source (every import statement,
those inside functions too): no module reaches itself again, and the layers point one way
(app -> specdec_core, never back; no Qt in specdec_core). See docs/architecture.md."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("specdec_core", "app")


def module_files() -> dict[str, Path]:
    """dotted module name -> its file, for every .py file of the project's packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """A relative import's absolute name (PEP 328)."""
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `module` imports. `from pkg import name` counts as importing
    pkg.name where that is a module, else pkg itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # import a.b.c where only a.b is ours
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {m: imports_of(m, p, known) for m, p in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read_from_the_source():
    """The builder itself, on what it must see: relative imports, imports inside functions,
    a package's modules named in `from . import`, and a cycle made on purpose."""
    graph = import_graph()
    assert "specdec_core.decoder" in graph["specdec_core.engine"]  # from .decoder import ...
    assert "specdec_core.open_engine" in graph["app.worker"]  # inside a function
    assert {"specdec_core.cli.generate", "specdec_core.cli.bench"} <= graph["specdec_core.cli.dispatch"]
    assert "specdec_core.models" in graph["specdec_core.engine"]  # from .models.types -> ...models.types
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_specdec_core_or_app():
    found = cycles(import_graph())
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_layers_point_one_way():
    for module, targets in import_graph().items():
        if module.startswith("specdec_core"):
            assert not [t for t in targets if t.startswith("app")], f"{module} imports the app"
    for path in (ROOT / "specdec_core").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        qt = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
              and any((getattr(n, "module", None) or a.name).startswith("PySide6") for a in n.names)]
        assert not qt, f"{path.relative_to(ROOT)} imports Qt"
