"""The data path as code: no import cycles, no borrowed private names, no import back up the path.

Every ``import``/``from … import`` in zopt's modules counts, function-level ones included (they
hide cycles from Python but not from a reader). Each module belongs to one layer of the data path
(``docs/architecture.md``); a module may import its own layer and the layers before it. A new
module must be placed in ``LAYERS`` — the test names any that is not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "zopt"

# (layer, module-name prefixes), bottom to top: one folder of zopt/ per layer, plus the
# foundation and frontend modules at the root. A prefix ending in "." takes a package.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("zopt.errors", "zopt.notes", "zopt.types", "zopt._version")),
    ("compat", ("zopt.compat", "zopt.compat.")),
    ("dtypes", ("zopt.dtypes", "zopt.dtypes.")),
    # the codecs, the writer side of `conditional` (its decisions), the pipeline that publishes
    # each chunk's index to it, grid arithmetic, registration with zarr
    ("codecs", ("zopt.codecs", "zopt.codecs.")),
    ("store", ("zopt.store", "zopt.store.")),
    ("io", ("zopt.io", "zopt.io.")),
    ("planning", ("zopt.planning", "zopt.planning.")),
    ("lossy", ("zopt.lossy", "zopt.lossy.")),
    ("job", ("zopt.job", "zopt.job.")),
    ("readback", ("zopt.readback", "zopt.readback.")),
    ("frontends", ("zopt.cli", "zopt.cli.", "zopt.xarray", "zopt.__main__", "zopt")),
]
#: what may stand at the root of zopt/ besides the layer folders
ROOT_MODULES = {"__init__.py", "__main__.py", "_version.py", "errors.py", "notes.py", "types.py", "xarray.py"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str, int]]:
    """``(imported module, imported name or "", line)`` for every zopt import in a module."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, "", node.lineno) for a in node.names if a.name in modules]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for a in node.names:
                if f"{base}.{a.name}" in modules:
                    found.append((f"{base}.{a.name}", "", node.lineno))
                elif base in modules:
                    found.append((base, a.name, node.lineno))
    return found


def _layer(name: str) -> int | None:
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or (p.endswith(".") and name.startswith(p))) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return None if best is None else best[0]


MODULES = _modules()
EDGES = {m: _imports(m, p, MODULES) for m, p in MODULES.items()}


def test_every_module_has_a_layer():
    assert [m for m in sorted(MODULES) if _layer(m) is None] == []


def test_no_import_cycles():
    graph = {m: {t for t, _, _ in edges if t != m} for m, edges in EDGES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_module_imports_another_modules_private_names():
    borrowed = [f"{m}:{line} imports {t}.{n}" for m, edges in EDGES.items() for t, n, line in edges
                if n.startswith("_") and not n.startswith("__") and t != m]
    assert borrowed == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_nothing_imports_back_up_the_data_path(module):
    mine = _layer(module)
    if module == "zopt":  # the package re-exports the public API of every layer
        return
    upward = [f"line {line}: {t} ({LAYERS[_layer(t)][0]})" for t, _, line in EDGES[module]
              if _layer(t) is not None and mine is not None and _layer(t) > mine]
    assert upward == [], f"{module} ({LAYERS[mine][0]}) imports a later layer"


def test_the_folders_are_the_layers():
    """``ls zopt`` shows the layers: every folder is one layer, only a few modules sit at the root."""
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    layer_folders = {prefix.split(".")[1] for _, prefixes in LAYERS for prefix in prefixes
                     if prefix.endswith(".") and prefix.count(".") == 2}
    assert folders == layer_folders
    assert {p.name for p in ROOT.glob("*.py")} <= ROOT_MODULES
