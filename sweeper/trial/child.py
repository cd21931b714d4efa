"""Inside the trial process: apply the environment, build the workload, measure, classify the ending.

This module is preloaded by the forkserver (it imports torch but never touches CUDA; the sweep adds its built-in
workload's module, ``isolate.preload_workload``), so a trial process starts in milliseconds with torch already
imported. Everything here runs in the child.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Iterator
from typing import Any

import torch

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.trial import local
from sweeper.trial.measure import NonFiniteLoss
from sweeper.trial.proc import STACKS_SIGNAL, become_subreaper, die_with_parent, end_descendants
from workloads.common import ENV_KNOBS, knob_env


class PruneRequested(Exception):
    """The pruner decided to stop this trial; carries the throughput seen so far."""

    def __init__(self, step: int, value: float) -> None:
        super().__init__(f"pruned after {step} measured steps at {value:.4g}")
        self.step, self.value = step, value


def execute(cfg: dict[str, Any], report=None, measured=None) -> dict[str, Any]:
    """Build and measure the configured workload; returns the flat metrics dict (fingerprint included).

    One process (:func:`sweeper.trial.local.execute`), or, when ``distributed.strategy`` is not ``none``,
    ``distributed.nproc`` ranks with this process as their agent (:func:`sweeper.trial.ranks.execute`).
    """
    if cfg["distributed"]["strategy"] != "none":
        from sweeper.trial import ranks  # start N ranks (this process is their agent); each runs local.execute

        return ranks.execute(cfg, measured)
    return local.execute(cfg, report, measured)


def _is_oom(exc: BaseException) -> bool:
    """Out of memory, or an error that wraps one at any depth (torch.compile raises its own error with the
    allocator's as its cause; so may a workload)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
            return True
        # The CPU allocator raises a plain RuntimeError; its message is the only signal it gives.
        if isinstance(e, RuntimeError) and "can't allocate memory" in str(e):
            return True
        e = e.__cause__ or e.__context__ or getattr(e, "inner_exception", None)  # torch.compile's: ``from None``
    return False


def classify(exc: BaseException) -> TrialOutcome:
    """An exception raised by a trial -> its outcome (status, reason, message)."""
    first = (str(exc).strip().splitlines() or [""])[0][:500]
    if _is_oom(exc):
        return TrialOutcome(Status.INFEASIBLE, Reason.OOM.tag(), first)
    if isinstance(exc, NonFiniteLoss):
        return TrialOutcome(Status.FAILED, Reason.NONFINITE.tag(), first, metrics=dict(exc.metrics))
    if isinstance(exc, PruneRequested):
        return TrialOutcome(Status.PRUNED, Reason.PRUNED.tag(), first, metrics={"throughput": exc.value,
                                                                     "steps_measured": exc.step})
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])[-2000:]
    return TrialOutcome(Status.FAILED, Reason.EXCEPTION.tag(type(exc).__name__), f"{first}\n{tail}".strip())


# The variables CUDA reads once, when it starts: which GPUs it sees, and those the knobs set (ENV_KNOBS)
CUDA_START_VARS = ("CUDA_VISIBLE_DEVICES", *ENV_KNOBS.values())
# their values when CUDA started in this process (None until it has started)
_CUDA_ENV: dict[str, str | None] | None = None


def _note_cuda_env() -> None:
    global _CUDA_ENV
    if _CUDA_ENV is None and torch.cuda.is_initialized():
        _CUDA_ENV = {var: os.environ.get(var) for var in CUDA_START_VARS}


@contextlib.contextmanager
def placed(cfg: dict[str, Any]) -> Iterator[None]:
    """The trial's ``env`` (``CUDA_VISIBLE_DEVICES`` for its ``gpus`` included), the environment its knobs set
    (``workloads.common.ENV_KNOBS``, which win over ``env``) and ``cpus`` applied to this process, restored afterwards
    (``trial.isolate=false`` runs in a process that lives on). CUDA reads some of these variables once, when it
    starts (``CUDA_START_VARS``): a trial wanting other values than those CUDA started with in this process (one that
    leaves a variable unset wants the process's own) is refused, not run on other GPUs or queues than it records."""
    env = {**{k: str(v) for k, v in (cfg.get("env") or {}).items()}, **knob_env(cfg.get("knobs") or {})}
    _note_cuda_env()
    for var in CUDA_START_VARS:
        wanted = env.get(var, os.environ.get(var))
        if _CUDA_ENV is not None and _CUDA_ENV[var] != wanted:
            raise RuntimeError(f"this trial runs with {var}={wanted}, which CUDA reads when it starts, but CUDA "
                               f"already runs in this process with {_CUDA_ENV[var]}; run it with trial.isolate=true")
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cpus = os.sched_getaffinity(0)
    os.environ.update(env)
    if cfg.get("cpus"):
        os.sched_setaffinity(0, [int(c) for c in cfg["cpus"]])
    try:
        yield
    finally:
        _note_cuda_env()  # CUDA started during this trial: with this trial's variables, read before they are restored
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.sched_setaffinity(0, saved_cpus)


def run_here(cfg: dict[str, Any], report=None, measured=None) -> TrialOutcome:
    """Run the trial in this process, placed as configured (``placed``), and classify its ending (never raises for
    a trial's own failure); ``measured``: as :func:`sweeper.trial.local.execute` takes it."""
    started = time.time()
    try:
        with placed(cfg):
            outcome = TrialOutcome(Status.COMPLETE, metrics=execute(cfg, report, measured))
    except Exception as exc:  # noqa: BLE001 - every trial failure becomes an outcome
        outcome = classify(exc)
    outcome.started_at, outcome.ended_at = started, time.time()
    return outcome


def plain(value: Any) -> Any:
    """``value`` with builtin types in place of their subclasses (torch's ``TorchVersion``, numpy's scalars): what
    the sweeper unpickles must not import torch or a workload's module into its torch-free process."""
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value) if type(value) in (list, tuple) else [plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def child_main(cfg: dict[str, Any], conn, log_path: str) -> None:
    """Entry point of the isolated trial process (started from the forkserver)."""
    os.setpgid(0, 0)  # own process group: a timeout kills the trial and its DataLoader workers together
    die_with_parent()
    become_subreaper()  # its descendants stay in its tree, also those that left its group
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    faulthandler.enable()
    # the sweeper asks for every thread's stack before it kills a trial at its deadline (``isolate._stacks``)
    faulthandler.register(STACKS_SIGNAL, all_threads=True)
    # multiprocessing's default as in the user's own script (Linux: fork, Python 3.14: forkserver), not the
    # "forkserver" this process inherited from its start: a DataLoader of the user's own would otherwise start a
    # new forkserver in every trial, which imports torch and the user's module again before its first batch (a
    # DeepLabV3's first step 27 s with 12 workers on an H100 host, 1 s without workers).
    multiprocessing.set_start_method(None, force=True)

    def report(step: int, value: float) -> None:
        conn.send(("report", step, value))
        if conn.recv() == "prune":
            raise PruneRequested(step, value)

    def measured(metrics: dict[str, Any]) -> None:  # before a profile: kept by the sweeper if the profile is cut
        conn.send(("measured", plain(metrics)))

    outcome = run_here(cfg, report, measured)
    conn.send(("done", plain(outcome.to_dict())))
    conn.close()
    end_descendants()  # nothing the trial started outlives it
    sys.stdout.flush()
    sys.stderr.flush()

