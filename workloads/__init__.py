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

__all__ = ["DeviceInfo", "TrainingKnobs", "Workload", "WorkloadNotLoadable", "available", "load", "load_spec"]


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
            return _check_contract(importlib.import_module(spec.name))
    return _check_contract(load(name, module))


def _check_contract(module: ModuleType) -> ModuleType:
    """``module``, if what the sweeper reads of it has the shape it reads (``METRICS`` names, a ``Knobs``
    dataclass, a callable ``check``); else :class:`WorkloadNotLoadable` naming its file (a wrong one was a
    traceback, or an error under the wrong key)."""
    import dataclasses

    name = getattr(module, "__file__", None) or module.__name__
    metrics = getattr(module, "METRICS", ())
    if not isinstance(metrics, (tuple, list)) or not all(isinstance(m, str) for m in metrics):
        raise WorkloadNotLoadable(
            f"METRICS in {name} is {metrics!r}", 'make it a tuple of metric names: ("my_metric",)'
        )
    knobs = getattr(module, "Knobs", None)
    if knobs is not None and not (isinstance(knobs, type) and dataclasses.is_dataclass(knobs)):
        raise WorkloadNotLoadable(
            f"Knobs in {name} is {knobs!r}, not a dataclass",
            "declare the knobs as a frozen dataclass (see workloads.spec.training.TrainingKnobs)",
        )
    if not callable(getattr(module, "check", _check_contract)):
        raise WorkloadNotLoadable(f"check in {name} is not a function", "define check(cfg, device) -> str | None")
    return module


class WorkloadNotLoadable(KeyError):
    """A workload module that cannot be found or does not import: ``args[0]`` says which module and file, and why
    (the sweeper's one line under ``workload.module``); ``fix`` what to do."""

    def __init__(self, problem: str, fix: str = "see the README's 'Your own model'") -> None:
        super().__init__(problem)
        self.fix = fix

    def __str__(self) -> str:
        return str(self.args[0])


def _import(target: str) -> ModuleType:
    """``target`` as a module name, or as a ``.py`` file path (relative to the current directory).

    A module name is also looked up in the current directory when it is not on ``sys.path`` (the console script
    ``knob-sweeper`` does not put it there, ``python -m`` does), so one command works from a user's project. A
    name a standard-library module has is refused: ``python -m`` would find the user's file and the console
    script the library's. A module that does not import names the file and line that failed, and what was
    missing or raised."""
    if target.endswith(".py") or os.sep in target:
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise WorkloadNotLoadable(f"workload module file {target!r} does not exist (relative to {os.getcwd()})")
        key = f"_workload_{os.path.splitext(os.path.basename(path))[0]}_{zlib.crc32(path.encode()):08x}"
        if key not in sys.modules:
            spec = importlib.util.spec_from_file_location(key, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[key] = mod
            try:
                spec.loader.exec_module(mod)
            except Exception as e:  # noqa: BLE001 - the user's module: whatever it raises is said in one line
                del sys.modules[key]
                raise _not_importing(target, e) from None
        return sys.modules[key]
    top = target.split(".")[0]
    if top in sys.stdlib_module_names:
        raise WorkloadNotLoadable(
            f"{target!r} is the name of a Python standard-library module, so `import {target}` finds the library's "
            "module, not yours (or yours replaces the library's for the whole sweeper)",
            f"rename your module (e.g. {top}_bench.py), or give its file: `workload.module: path/to/{top}.py`",
        )
    cwd = os.getcwd()
    if top == __name__ and importlib.util.find_spec(target) is None:
        raise WorkloadNotLoadable(
            f"{target!r} is not a built-in workload, and the package name {__name__!r} is the built-in workloads' "
            f"(a folder {__name__}/ of yours is not searched)",
            f"rename your folder, or give the file: `workload.module: {target.replace('.', '/')}.py`",
        )
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as e:
        if not _names_target(e.name, target):
            raise _not_importing(target, e) from None  # the module exists but imports something missing
    except Exception as e:  # noqa: BLE001 - a SyntaxError, or anything the module raises while it is imported
        raise _not_importing(target, e) from None
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
        try:
            return importlib.import_module(target)
        except ModuleNotFoundError as e:
            if not _names_target(e.name, target):
                raise _not_importing(target, e) from None
        except Exception as e:  # noqa: BLE001 - as above
            raise _not_importing(target, e) from None
    raise WorkloadNotLoadable(
        f"workload module {target!r} is not importable from {cwd}",
        "run from the folder that holds it, or give its file: `workload.module: path/to/my_bench.py`",
    )


def _names_target(missing: str | None, target: str) -> bool:
    """Whether a ModuleNotFoundError for ``missing`` means ``target`` itself (or a package above it) is absent,
    rather than a module ``target`` imports."""
    return missing is not None and (missing == target or target.startswith(missing + "."))


def _not_importing(target: str, e: BaseException) -> WorkloadNotLoadable:
    """One line: which module did not import, the file and line that failed, and the missing module or the error."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<frozen")]
    if isinstance(e, SyntaxError) and e.filename:
        where = f"{e.filename}:{e.lineno}"
    else:
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else target
    if isinstance(e, ModuleNotFoundError):
        problem = f"workload module {target!r} does not import: {where} imports {e.name!r}, which is not found"
        fix = f"install {e.name!r} or fix that import" if e.name and "." not in e.name else "fix that import"
        if e.name and e.name.startswith(f"{__name__}."):
            fix = (
                f"{e.name!r} is not part of the installed workloads: a copy of a built-in workload imports its "
                f"contract from workloads/spec/; define check, METRICS and Knobs in your module instead (see the "
                f"README's 'Your own model')"
            )
        return WorkloadNotLoadable(problem, fix)
    text = (str(e).strip().splitlines() or [""])[0]
    return WorkloadNotLoadable(
        f"workload module {target!r} does not import: {where} raised {type(e).__name__}: {text}".rstrip(": "),
        "fix the module (importing it runs its top level)",
    )
