"""Shared test helpers: run the real CLI in a subprocess against a temporary results folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A process started in the background by a non-interactive shell (``cmd &``, nohup) ignores Ctrl-C, and the
# processes it starts inherit that: a sweeper that inherits it keeps Ctrl-C ignored, as asked (sweeper/__main__.py).
# The tests' commands start as from a terminal, whatever started pytest.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The fault-injection workload (tests/faultload) and a quick random sweep of its good trials. trial.timeout_s:
# the first trial starts the forkserver (imports torch), which takes long on a loaded machine.
FAULTS = ["hydra.searchpath=[file://tests/faultload/conf]", "+workload=faults"]
# A sweep measures the baseline and the best again after its search, and each configuration whose step times were
# unstable once (on by default, the CPU too): up to two trials and more per sweep. Sweeps of tests that are not
# about those re-measurements turn them off with these settings (tests/test_remeasure.py is about them).
NO_REMEASURE = ["hydra.sweeper.confirm_top_k=0", "hydra.sweeper.confirm_unstable=false"]
QUICK = [
    *FAULTS,
    "-m",
    "hydra.sweeper.params={knobs.fault:none,knobs.work:'range(8,1000)'}",
    "hydra.sweeper.sampler=random",
    "trial.timeout_s=300",
    *NO_REMEASURE,
]


def run_cli(
    args: list[str],
    results: Path | None = None,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    module: str = "sweeper",
    check: bool = False,
) -> subprocess.CompletedProcess:
    """``python -m <module> <args> results_dir=<results>`` in a subprocess; returns the completed process."""
    cmd = [sys.executable, "-m", module, *args]
    if results is not None and module == "sweeper":
        cmd.append(f"results_dir={results}")
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", **(env or {})}
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return tmp_path / "results"


@pytest.fixture(autouse=True)
def _node_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's sweepers take turns among themselves only: the node-wide default lock folder
    (``slots.default_lock_dir``) would make them wait for the sweeps of other test runs on the machine."""
    monkeypatch.setenv("KNOB_SWEEPER_LOCK_DIR", str(tmp_path / "node-locks"))


# The test files that take longest on the 2-core CI machine (seconds of test time, in this order), run first: the
# three workers (``-n 3 --dist loadfile --no-loadscope-reorder``) take files in collection order, so the longest
# start first and the short ones fill in at the end (longest-first list scheduling), instead of one long file
# running alone on one worker after the others have finished.
LONGEST_FIRST = (  # seconds of test time on a 2-core VM at two workers, 2026-12-08
    "test_bench_cpu.py",  # ~310 s
    "test_failures.py",  # ~120 s
    "test_adversarial.py",  # ~110 s
    "test_sweep_e2e.py",  # ~95 s
    "test_kill_points.py",  # ~85 s
    "test_scheduler.py",  # ~85 s
    "test_scale_out.py",  # ~80 s
    "test_distributed.py",  # ~75 s
    "test_install.py",  # ~70 s
    "test_slots.py",  # ~50 s
    "test_compaction.py",  # ~40 s
    "test_newcomer.py",
    "test_replay.py",
    "test_adversarial_inputs.py",
    "test_data.py",
    "test_nightly.py",
    "test_duplicates.py",
    "test_warm_start.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (``LONGEST_FIRST``; the rest after them, in their order). Tests marked ``gpu``
    need a CUDA GPU: skipped without one (``bench/gpu_checks.py --stages gpu_tests`` runs every one of them on the
    GPU machine, ``pytest -m gpu``, and keeps the output)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its order
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if not marked:
        return
    import torch

    if not torch.cuda.is_available():
        for item in marked:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


def run_report(
    args: list[str], env: dict[str, str] | None = None, check: bool = False
) -> subprocess.CompletedProcess:
    """``python -m sweeper.report <args>`` in this process (``sweeper.report.__main__.main``): the same code path
    without a new interpreter's imports. Returns what :func:`run_cli` does; the environment is restored after.
    A test about warnings the report gives once per process runs it with :func:`run_cli`."""
    import contextlib
    import io

    from sweeper.report.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, code = dict(os.environ), 0
    os.environ.update({"COLUMNS": "200", **(env or {})})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
    proc = subprocess.CompletedProcess(["sweeper.report", *args], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"report {args} exited {code}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc


def run_main(args: list[str], results: Path | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """``python -m sweeper <args>`` in this process (``sweeper.__main__.main``): the same code path without a new
    interpreter's imports. For commands whose sweeper need not be a process of its own (no signal, kill, timing
    or environment of its own): bad input, and sweeps whose trials run isolated as always, forked from this
    process's forkserver (started once, torch imported once for every such command of the test file). Returns
    what :func:`run_cli` does. Hydra's global state, the working folder, the environment (a command keeps a
    storage URL there) and the signal handlers are restored after the call."""
    import contextlib
    import io
    import signal

    from hydra.core.global_hydra import GlobalHydra

    # the entry module installs its own SIGINT handler for a command's start, the loop its SIGTERM one
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    from sweeper import __main__ as entry
    from sweeper.sweep.run.scheduler import command_started_at
    from sweeper.trial import isolate

    command_started_at(time.time())  # its budget counts from now, as a command's own process would

    argv = ["sweeper", *args] + ([f"results_dir={results}"] if results is not None else [])
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_env, cwd, code = sys.argv, dict(os.environ), os.getcwd(), 0
    try:
        os.chdir(ROOT)
        sys.argv = argv
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                entry.main()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved_argv
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        GlobalHydra.instance().clear()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert not isolate.INTERRUPTED.is_set(), "a command run here was interrupted: run it with run_cli"
    proc = subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"{' '.join(argv)} exited {code}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return proc
