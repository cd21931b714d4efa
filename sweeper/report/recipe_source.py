"""The recipe's snippet tables, read from the workload modules' source without importing them.

A workload module (built-in, or a user's own named by ``workload.module``, which the rows record as
``workload_module``) may hold ``RECIPE = {knob: {value: [lines]}}`` as a literal; ``workloads/common.py`` and
``workloads/data.py`` hold the shared knobs'. Each is found on disk (``importlib.machinery.PathFinder``, which
imports nothing), parsed with ``ast`` and its assignment read with ``ast.literal_eval``: the report process never
imports torch, a workload, or a user's code. The model's optimizer class is read from the same source (its one
``torch.optim.<Name>(...)`` call), so the optimizer line names the optimizer the model uses.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from dataclasses import dataclass, field
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any


@dataclass
class Tables:
    recipes: list[dict[str, Any]]  # the workload's own first, then the shared ones
    loader_args: tuple[str, ...] = ()
    optimizer: str | None = None  # e.g. torch.optim.AdamW; None when the source does not say
    notes: list[str] = field(default_factory=list)  # what could not be read, for the user


def module_file(name: str, search: list[str] | None = None) -> Path | None:
    """The ``.py`` file of module ``name`` (dotted), found without importing anything; None if not found."""
    paths: list[str] | None = list(search or []) + [os.getcwd()] + sys.path
    parts = name.split(".")
    own = sys.modules.get("workloads")  # the package's own (``sweeper`` imports it by location): never a user's
    if parts[0] == "workloads" and len(parts) > 1 and getattr(own, "__path__", None):
        paths, parts = list(own.__path__), parts[1:]
    for i, part in enumerate(parts):
        spec = PathFinder.find_spec(part, paths)
        if spec is None:
            return None
        if i < len(parts) - 1:
            paths = list(spec.submodule_search_locations or [])
        elif spec.origin and spec.origin.endswith(".py"):
            return Path(spec.origin)
    return None


def locate(module: str, search: list[str] | None = None) -> Path | None:
    """``workload.module`` as the sweep took it: a ``.py`` path (relative to where it ran) or a module name."""
    if module.endswith(".py") or os.sep in module:
        for base in [os.getcwd(), *(search or [])]:
            p = Path(base, module)
            if p.is_file():
                return p
        return None
    return module_file(module, search)


@functools.lru_cache(maxsize=64)
def _tree(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def literal(path: Path, name: str) -> Any:
    """The literal assigned to the top-level ``name`` in ``path`` (None when absent or not a literal)."""
    tree = _tree(path)
    for node in tree.body if tree else []:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
    return None


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def optimizer_of(path: Path) -> str | None:
    """``torch.optim.AdamW`` when the module's source constructs exactly one optimizer class, else None."""
    tree = _tree(path)
    found = set()
    for node in ast.walk(tree) if tree else []:
        if isinstance(node, ast.Call) and (name := _dotted(node.func)):
            head, _, cls = name.rpartition(".")
            if head.endswith("optim") and cls[:1].isupper():
                found.add(f"torch.optim.{cls}" if head in ("optim", "torch.optim") else name)
    return found.pop() if len(found) == 1 else None


def tables_for(workload: str, module: str | None, search: list[str] | None = None) -> Tables:
    """The snippet tables of a workload's rows: its module's ``RECIPE``, then the shared knobs'."""
    notes: list[str] = []
    own = None
    if module:
        own = locate(str(module), search)
        if own is None:
            notes.append(
                f"workload module {module!r} was not found from {os.getcwd()}: its own knobs have no "
                "lines here (run the report from the folder you swept in)"
            )
    else:
        own = module_file(f"workloads.{workload}")
    common, data = module_file("workloads.common"), module_file("workloads.data")
    recipes = []
    for path in (own, common, data):
        table = literal(path, "RECIPE") if path else None
        if isinstance(table, dict):
            recipes.append(table)
        elif path is own and path is not None and "RECIPE" in path.read_text(encoding="utf-8"):
            notes.append(f"RECIPE in {path} is not a literal ({{knob: {{value: [lines]}}}}): its lines are left out")
    loader = literal(data, "RECIPE_LOADER_ARGS") if data else None
    return Tables(recipes, tuple(loader or ()), optimizer_of(own) if own else None, notes)
