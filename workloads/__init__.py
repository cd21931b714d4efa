"""Workload registry: a workload is one module here (plus one YAML in ``conf/workload/``).

A workload module defines

* ``build(cfg: dict, device: torch.device) -> Workload`` (required): apply the knobs, return the step to time;
* ``check(cfg: dict, device: DeviceInfo) -> str | None`` (optional): why this configuration cannot run on this
  device (it is then skipped before launch), or None;
* ``METRICS: tuple[str, ...]`` (optional): extra metric names it returns, so objectives can name them;
* ``Knobs`` (optional): its knobs as a frozen dataclass (``Literal`` choices, defaults; see
  :class:`TrainingKnobs` for the ones the shared helpers read): values given on the command line or swept are
  checked against it before launch.

A built-in workload keeps ``check``, ``METRICS`` and ``Knobs`` in a torch-free module of its own,
``workloads.spec.<name>`` (its workload module re-exports them): the sweeper process reads that one through
:func:`load_spec` and never imports torch. A workload of the user's own is one module (imported for the check).

Modules are found by name (``workloads.<name>``), or by ``workload.module`` for a workload that lives
elsewhere: a user's own model (``examples/``), the fault-injection workload of the tests. ``workload.module`` is
a module name importable from the folder the command runs in, or a path to a ``.py`` file.
Nothing here imports Optuna or Hydra.

Runs in the trial process (``build``: in the isolated trial or each of its ranks) and in the Hydra job
(``check``, before a trial starts). The bottom layer: nothing here imports from ``sweeper``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
import zlib
from types import ModuleType

from workloads.base import DeviceInfo, Workload
from workloads.spec.training import TrainingKnobs

__all__ = ["DeviceInfo", "TrainingKnobs", "Workload", "available", "load", "load_spec"]


def available() -> list[str]:
    """Names of the workloads offered to users: modules of this package (not starting with ``_``) that define
    ``build``. Read from the source, not imported (helpers such as ``common`` or ``decode`` are not workloads)."""
    names = []
    for m in pkgutil.iter_modules(__path__):
        path = os.path.join(os.path.dirname(__file__), f"{m.name}.py")
        if m.name.startswith("_") or m.ispkg or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            if "\ndef build(" in f.read():
                names.append(m.name)
    return sorted(names)


def load(name: str, module: str | None = None) -> ModuleType:
    """The workload module for ``name``; a failed lookup lists the known names."""
    target = module or f"{__name__}.{name}"
    if module is None and name not in available():
        raise KeyError(
            f"unknown workload {name!r}; known workloads: {', '.join(available())}; a workload of "
            "your own names its Python module in its YAML: `workload.module: my_bench`"
        )
    mod = _import(target)
    if not callable(getattr(mod, "build", None)):
        raise KeyError(f"workload module {target!r} has no build(cfg, device) function")
    return mod


def load_spec(name: str, module: str | None = None) -> ModuleType:
    """What the sweeper needs of workload ``name`` before launch (``check``, ``METRICS``, ``Knobs``), without torch
    for a built-in one: its ``workloads.spec.<name>`` module. A workload of the user's own (``module``): that
    module, as :func:`load` returns it. A failed lookup lists the known names."""
    if module is None and name in available():
        spec = importlib.util.find_spec(f"{__name__}.spec.{name}")
        if spec is not None:
            return importlib.import_module(spec.name)
    return load(name, module)


def _import(target: str) -> ModuleType:
    """``target`` as a module name, or as a ``.py`` file path (relative to the current directory).

    A module name is also looked up in the current directory when it is not on ``sys.path`` (the console script
    ``knob-sweeper`` does not put it there, ``python -m`` does), so one command works from a user's project."""
    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise KeyError(f"workload module file {target!r} does not exist (relative to {os.getcwd()})")
        key = f"_workload_{os.path.splitext(os.path.basename(path))[0]}_{zlib.crc32(path.encode()):08x}"
        if key not in sys.modules:
            spec = importlib.util.spec_from_file_location(key, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[key] = mod
            spec.loader.exec_module(mod)
        return sys.modules[key]
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        top = target.split(".")[0]
        cwd = os.getcwd()
        if e.name not in (top, target) and not (e.name or "").startswith(top + "."):
            raise  # the module exists but imports something missing: show that
        if cwd not in sys.path and "" not in sys.path:
            sys.path.append(cwd)
            try:
                return importlib.import_module(target)
            except ModuleNotFoundError as e2:
                if e2.name not in (top, target):
                    raise
        raise KeyError(
            f"workload module {target!r} is not importable from {cwd}; run from the folder that holds "
            "it, or give its file: `workload.module: path/to/my_bench.py`"
        ) from None
