"""Workload registry: a workload is one module here (plus one YAML in ``conf/workload/``).

A workload module defines

* ``build(cfg: dict, device: torch.device) -> Workload`` (required): apply the knobs, return the step to time;
* ``check(cfg: dict, device: DeviceInfo) -> str | None`` (optional): why this configuration cannot run on this
  device (it is then skipped before launch), or None;
* ``METRICS: tuple[str, ...]`` (optional): extra metric names it returns, so objectives can name them.

Modules are found by name (``workloads.<name>``), or by ``workload.module`` for a workload that lives
elsewhere (the fault-injection workload of the tests). Nothing here imports Optuna or Hydra.

Runs in the trial process (``build``: in the isolated trial or each of its ranks) and in the Hydra job
(``check``, before a trial starts). The bottom layer: nothing here imports from ``sweeper``.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from workloads.base import DeviceInfo, Workload

__all__ = ["DeviceInfo", "Workload", "available", "load"]


def available() -> list[str]:
    """Names of the workloads offered to users (modules of this package not starting with ``_``)."""
    skip = {"base", "common", "data", "parallel"}
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name not in skip)


def load(name: str, module: str | None = None) -> ModuleType:
    """The workload module for ``name``; a failed lookup lists the known names."""
    target = module or f"{__name__}.{name}"
    if module is None and name not in available():
        raise KeyError(f"unknown workload {name!r}; known workloads: {', '.join(available())}")
    mod = importlib.import_module(target)
    if not callable(getattr(mod, "build", None)):
        raise KeyError(f"workload module {target!r} has no build(cfg, device) function")
    return mod
