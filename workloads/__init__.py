"""Workload registry: a workload is one module here (plus one YAML in ``conf/workload/``).

A workload module defines

* ``build(cfg: dict, device: torch.device) -> Workload`` (required): apply the knobs, return the step to time;
* ``check(cfg: dict, device: DeviceInfo) -> str | None`` (optional): why this configuration cannot run on this
  device (it is then skipped before launch), or None;
* ``METRICS: tuple[str, ...]`` (optional): extra metric names it returns, so objectives can name them.

Modules are found by name (``workloads.<name>``), or by ``workload.module`` for a workload that lives
elsewhere (the fault-injection workload of the tests). Nothing here imports Optuna or Hydra.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

from workloads.base import DeviceInfo, Workload

__all__ = ["DeviceInfo", "Workload", "available", "load"]


def _defines_build(path: Path) -> bool:
    """Whether the module's source defines ``build`` at top level: a workload declares itself by its contract,
    read without importing it (helpers such as ``common`` or ``data`` define no ``build``)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == "build" for node in tree.body)


@functools.cache
def available() -> list[str]:
    """Names of the workloads offered to users: modules of this package (not starting with ``_``) that define
    ``build(cfg, device)``. Nothing is listed anywhere else."""
    here = Path(__file__).parent
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if not m.name.startswith("_") and not m.ispkg and _defines_build(here / f"{m.name}.py"))


def load(name: str, module: str | None = None) -> ModuleType:
    """The workload module for ``name``; a failed lookup lists the known names."""
    target = module or f"{__name__}.{name}"
    if module is None and name not in available():
        raise KeyError(f"unknown workload {name!r}; known workloads: {', '.join(available())}")
    mod = importlib.import_module(target)
    if not callable(getattr(mod, "build", None)):
        raise KeyError(f"workload module {target!r} has no build(cfg, device) function")
    return mod
