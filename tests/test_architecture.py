"""The import graph, read from the source with ``ast``: imports go down the layers only, and nothing is circular.

Layers (the README's architecture): ``sweeper.sweep`` -> ``sweeper.trial`` -> ``workloads``;
``sweeper.sweep`` and ``sweeper.trial`` -> ``sweeper.results``; ``sweeper.report`` -> ``sweeper.results`` only;
``workloads`` imports nothing from ``sweeper``. Every import counts, also one inside a function (a lazy import
is still a dependency). A rule broken here names the importing module, its line and the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sweeper", "workloads", "hydra_plugins")

# layer -> the layers it may import (its own always allowed). A module's layer is the longest prefix listed here.
ALLOWED: dict[str, set[str]] = {
    "sweeper.errors": set(),
    "sweeper.results": set(),
    "sweeper.report": {"sweeper.results"},
    "sweeper.trial": {"sweeper.results", "sweeper.errors", "workloads"},
    "sweeper.sweep": {"sweeper.trial", "sweeper.results", "sweeper.errors", "workloads"},
    "workloads": set(),
    "sweeper": {"sweeper.errors", "sweeper.results"},  # the package root re-exports the public names
    "sweeper.__main__": {"sweeper", "sweeper.errors", "sweeper.sweep", "hydra_plugins"},  # the CLI entry point
    # (it registers the plugin class itself: an editable install's finder cannot be listed by Hydra's discovery)
    # --recipe reads the knobs' snippet tables from the workloads' source (ast), never importing them
    "hydra_plugins": {"sweeper.sweep"},  # the thin plugin class, lazy import of the sweep
}
# third-party packages a layer must not import (the report and every reader of rows stay free of them)
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "sweeper.results": {"optuna", "torch", "torchvision", "hydra"},
    "sweeper.report": {"torch", "torchvision", "hydra"},
    "workloads": {"optuna", "hydra"},
}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every first-party module: dotted name -> file."""
    found = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def imports(path: Path, name: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file; ``from a import b`` is ``a.b`` when that is a module."""
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, base] if base else pkg)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((node.lineno, sub if sub in known else base))
    return out


def layer_of(name: str) -> str | None:
    best = None
    for layer in ALLOWED:
        if (name == layer or name.startswith(layer + ".")) and (best is None or len(layer) > len(best)):
            best = layer
    return best


def graph(root: Path = ROOT) -> tuple[dict[str, list[tuple[int, str]]], dict[str, Path]]:
    """First-party module -> [(line, first-party or third-party module it imports)]."""
    mods = modules(root)
    known = set(mods)
    return {name: imports(path, name, known) for name, path in mods.items()}, mods


def violations(root: Path = ROOT) -> list[str]:
    edges, mods = graph(root)
    out = []
    for name, targets in edges.items():
        layer = layer_of(name)
        for line, target in targets:
            top = target.split(".")[0]
            where = f"{mods[name].relative_to(root)}:{line}: {name} imports {target}"
            if top in PACKAGES:
                to = layer_of(target)
                if to is None:
                    out.append(f"{where} (a module outside the layers)")
                elif to != layer and to not in ALLOWED[layer]:
                    out.append(f"{where} ({layer} may import only {sorted(ALLOWED[layer]) or 'itself'})")
            elif top in FORBIDDEN_THIRD_PARTY.get(layer, set()):
                out.append(f"{where} ({layer} must not import {top})")
    return out


def cycles(root: Path = ROOT) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    edges, mods = graph(root)
    adj = {n: sorted({t for _, t in ts if t in mods and t != n}) for n, ts in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan; the graph has under 100 nodes, recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
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
                found.append(sorted(comp))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return found


def test_every_module_is_in_a_layer() -> None:
    assert {n for n in modules() if layer_of(n) is None} == set()


def test_imports_go_down_the_layers_only() -> None:
    assert violations() == []


def test_no_import_cycles() -> None:
    assert cycles() == []


def test_every_package_says_which_process_runs_it() -> None:
    for pkg in ("sweeper.sweep", "sweeper.trial", "sweeper.results", "sweeper.report", "workloads"):
        path = ROOT / pkg.replace(".", "/") / "__init__.py"
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        assert "process" in doc.lower(), f"{path}: the docstring must say which process runs this package"


def test_no_module_over_400_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules().values()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("workloads/extra.py", "from sweeper.results import store\n", "workloads may import only itself"),
        (
            "sweeper/report/extra.py",
            "def f():\n    from sweeper.sweep import study\n",
            "sweeper.report may import only",
        ),
        ("sweeper/results/extra.py", "import optuna\n", "sweeper.results must not import optuna"),
        ("sweeper/trial/extra.py", "from sweeper.sweep.space import flatten\n", "sweeper.trial may import only"),
    ],
)
def test_a_forbidden_import_is_caught(tmp_path: Path, module: str, source: str, expected: str) -> None:
    """The checks above fail for a forbidden import (checked on a copy of the tree with one module added)."""
    copy = _copy_tree(tmp_path)
    (copy / module).write_text(source, encoding="utf-8")
    found = violations(copy)
    assert len(found) == 1 and expected in found[0], found


def test_a_cycle_is_caught(tmp_path: Path) -> None:
    copy = _copy_tree(tmp_path)
    (copy / "sweeper/results/a.py").write_text("from sweeper.results import b\n", encoding="utf-8")
    (copy / "sweeper/results/b.py").write_text("def f():\n    import sweeper.results.a\n", encoding="utf-8")
    assert ["sweeper.results.a", "sweeper.results.b"] in cycles(copy)


def _copy_tree(tmp_path: Path) -> Path:
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            dest = tmp_path / path.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path
