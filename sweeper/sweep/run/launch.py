"""Hydra's side of a sweep: the space a command resolves to, thread-safe launching, job returns, the report cache."""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from sweeper.errors import ConfigError
from sweeper.results.keys import flatten
from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.config.space import SearchSpace, build_space
from sweeper.sweep.config.trial_config import as_dict, preset_params, trial_config
from sweeper.trial import gpu

log = logging.getLogger(__name__)


def resolve_space(
    config: DictConfig, conf: Mapping[str, Any], arguments: list[str]
) -> tuple[dict[str, Any], SearchSpace, dict[str, Any], list[str]]:
    """What a sweep samples, from Hydra's composed ``config``, the sweeper's ``conf`` and the command's
    ``arguments``: the trial config of the defaults, the search space, the defaults as flat dotted keys, and the
    plain (non-sweep) overrides every trial gets. The space is the workload's, then its preset's, then what the
    command line wrote (``hydra.sweeper.params=...`` and ``key=choice(...)``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(arguments)
    cfg = trial_config(as_dict(config), gpu.device_info(), [o.input_line for o in parsed if not o.is_sweep_override()])
    params = dict(conf.get("params") or {})
    params.update(preset_params(cfg))
    params.update(command_line_params(list(config.hydra.overrides.hydra)))  # the user's beats the preset's
    fixed_args: list[str] = []
    for override in parsed:
        if override.is_sweep_override():
            params[override.get_key_element().lstrip("+~")] = override.input_line.split("=", 1)[1]
        else:
            fixed_args.append(override.input_line)
    defaults = flatten({k: v for k, v in cfg.items() if k in ("knobs", "workload", "measure", "data", "distributed")})
    space = build_space(params, dict(conf.get("conditions") or {}), list(conf.get("constraints") or []), defaults)
    return cfg, space, defaults, fixed_args


# Hydra's launchers are written for one launch at a time; the sweep launches from several slot threads. Two steps
# are not thread safe: composing a job's config (ConfigLoader.load_sweep_config re-initializes the shared config
# repository's search path) and, in-process, run_job's set-up and tear-down of process-wide state (HydraConfig,
# JobRuntime, logging, working directory, environment). A trial once failed with `launcher:AssertionError` while two
# started at once. Both steps are serialized; the trial itself (the task) runs outside the lock, so trials overlap.
# What run_job restores afterwards may then be another job's state: the task reads nothing of it (trial.context),
# and the sweep refuses hydra.job.chdir / env_set with trials at once in-process.
_COMPOSE_LOCK = threading.Lock()
_JOB_LOCK = threading.Lock()
_holds_job_lock = threading.local()


class _UnlockedTask:
    """The task function as launchers call it: under the in-process launcher, the sweep thread holds ``_JOB_LOCK``
    through Hydra's job bookkeeping and this releases it while the trial runs. Elsewhere (a joblib worker, a SLURM
    job) the flag is unset and it only calls the task. Picklable: the locks are module globals, not state."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, cfg: DictConfig) -> Any:
        if threading.current_thread() is threading.main_thread():
            # A launcher's worker process (joblib's), started from a slot thread deaf to Ctrl-C (see
            # ``scheduler``): from here on a Ctrl-C stops its trial as it does in the sweeper's process.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        if not getattr(_holds_job_lock, "value", False):
            return self.fn(cfg)
        _JOB_LOCK.release()
        try:
            return self.fn(cfg)
        finally:
            _JOB_LOCK.acquire()


class _Serialized:
    """``fn`` called under ``_COMPOSE_LOCK``. A module-level class, not a closure: launchers that pickle Hydra's
    context to other processes (joblib) pickle this with it, and the lock, a module global, stays behind."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with _COMPOSE_LOCK:
            return self.fn(*args, **kwargs)


def thread_safe_launcher(hydra_context: Any, task_function: Any, config: DictConfig) -> Any:
    """Hydra's configured launcher, made safe to call from several slot threads (see ``_COMPOSE_LOCK``)."""
    from hydra.core.plugins import Plugins

    loader = hydra_context.config_loader
    if not isinstance(loader.load_sweep_config, _Serialized):
        loader.load_sweep_config = _Serialized(loader.load_sweep_config)
    return Plugins.instance().instantiate_launcher(
        hydra_context=hydra_context, task_function=_UnlockedTask(task_function), config=config
    )


def in_process(launcher: Any) -> bool:
    """Whether ``launcher`` runs the task in the sweeper's own process (Hydra's basic launcher)."""
    from hydra._internal.core_plugins.basic_launcher import BasicLauncher

    return isinstance(launcher, BasicLauncher)


def may_run_here(launcher: Any) -> bool:
    """Whether ``launcher`` may run a task in the sweeper's own process: the basic launcher, or joblib with
    ``n_jobs=1`` (joblib then runs each job in the calling thread instead of a worker process)."""
    joblib = getattr(launcher, "joblib", None)
    return in_process(launcher) or (hasattr(joblib, "get") and joblib.get("n_jobs") == 1)


def check_concurrent(launcher: Any, config: DictConfig, slots: int) -> None:
    """Trials at once in the sweeper's process share its working directory and environment: Hydra settings that
    change those per job (``hydra.job.chdir``, ``hydra.job.env_set``) are bad input there."""
    if slots < 2 or not in_process(launcher):
        return
    if not config.trial.isolate:
        raise ConfigError("trial.isolate", f"is false, so trials run inside the sweeper's process, and {slots} slots "
                          "would run them at once: their environment, cores and GPUs would mix",
                          "set trial.isolate=true, or run one trial at a time (no trial.resources)")
    for key in ("chdir", "env_set"):
        if config.hydra.job.get(key):
            raise ConfigError(
                f"hydra.job.{key}",
                "is process-wide, and trials run at once in the sweeper's process",
                "turn it off (trial environment variables go in `env:`), or run one trial at a time",
            )


def launch_one(launcher: Any, overrides: list[str], job_idx: int) -> Any:
    """One job through ``launcher`` (from ``thread_safe_launcher``); returns its JobReturn."""
    if not in_process(launcher):
        return launcher.launch([overrides], initial_job_idx=job_idx)[0]
    with _JOB_LOCK:  # released by _UnlockedTask while the trial runs
        _holds_job_lock.value = True
        try:
            return launcher.launch([overrides], initial_job_idx=job_idx)[0]
        finally:
            _holds_job_lock.value = False


def compact_and_refresh(results_dir: Path, study: str, study_id: str = "") -> None:
    """At a sweep's end: fold the study's per-trial files into one (``store.compact``: a later report parses one
    file, not one per trial), then this sweep's rows into the report's read cache. Neither may fail the sweep."""
    from sweeper.results import store

    try:
        store.compact(results_dir / "trials", study, study_id)
    except Exception as e:  # noqa: BLE001 - every row stays readable, compacted or not
        log.warning("study %s not compacted: %s", study, e)
    try:
        from sweeper.results.read import read_rows

        read_rows(results_dir)
    except Exception as e:  # noqa: BLE001 - a cache must never fail a sweep
        log.warning("report cache not refreshed: %s", e)


def command_line_params(hydra_overrides: list[str]) -> dict[str, Any]:
    """``hydra.sweeper.params`` entries given on the command line (``hydra.sweeper.params={knobs.x: ...}``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out: dict[str, Any] = {}
    for override in OverridesParser.create().parse_overrides(hydra_overrides):
        key = override.key_or_group.lstrip("+~")
        if key == "hydra.sweeper.params" and isinstance(override.value(), dict):
            out.update(override.value())
    return out


def outcome_of(ret: Any) -> TrialOutcome:
    """A launcher's JobReturn (or the exception it raised) -> TrialOutcome."""
    from hydra.core.utils import JobStatus

    now = time.time()
    if isinstance(ret, BaseException):
        return TrialOutcome(
            Status.FAILED, Reason.LAUNCHER.tag(type(ret).__name__), str(ret)[:2000], started_at=now, ended_at=now
        )
    if ret.status == JobStatus.COMPLETED and isinstance(ret.return_value, dict):
        return TrialOutcome.from_dict(ret.return_value)
    exc = getattr(ret, "_return_value", None)
    name = type(exc).__name__ if isinstance(exc, BaseException) else "unknown"
    return TrialOutcome(Status.FAILED, Reason.EXCEPTION.tag(name), str(exc)[:2000], started_at=now, ended_at=now)
