"""Declarative sweeps of PyTorch performance knobs: Hydra configs -> Optuna trials -> Parquet rows -> reports."""


def _import_own_workloads() -> None:
    """Import the ``workloads`` package installed beside this one, by its location.

    ``python -m sweeper`` puts the current directory first on ``sys.path``, and a user's project may well hold a
    folder named ``workloads/`` (with or without ``__init__.py``): imported by name, it would shadow the built-in
    workloads and break them all. A user's own workload is named by ``workload.module`` instead.
    """
    import importlib.util
    import sys
    from pathlib import Path

    if "workloads" in sys.modules:
        return
    folder = Path(__file__).resolve().parent.parent / "workloads"
    spec = importlib.util.spec_from_file_location(
        "workloads", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None or not (folder / "__init__.py").is_file():
        return  # an unusual install: the ordinary import decides
    module = importlib.util.module_from_spec(spec)
    sys.modules["workloads"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["workloads"]
        raise


_import_own_workloads()

# The public names, imported when first used: ``python -m sweeper`` and the console script import this package
# before anything else, and a Ctrl-C must meet the command's own start-up handler (``sweeper.__main__``), not
# the seconds of pyarrow's import; Hydra's plugin discovery imports it too. ``tests/test_startup.py`` holds this.
_PUBLIC = {
    "ConfigError": "sweeper.errors",
    "Status": "sweeper.results.outcome",
    "TrialOutcome": "sweeper.results.outcome",
    "read_results": "sweeper.results.store",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> object:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'sweeper' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_PUBLIC[name]), name)
