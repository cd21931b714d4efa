"""Stopping and resuming without losing a row: interrupts, a full disk, and trials whose sweeper died.

One truth between the study (Optuna) and the rows (Parquet), whatever stops a sweep:

* Ctrl-C or SIGTERM: the running trials' process groups are killed at once; each running trial is recorded as
  ``interrupted`` in both (not counted; the same command measures it again); one line; exit 130 or 143.
* A full disk: the sweep stops with one line naming the path (exit 1); the same is recorded where it can be,
  and what could not be written is settled by the next run of the command.
* A sweeper killed outright (SIGKILL, a node lost): the next run finds its RUNNING trials (dead pid on this
  host, a stale heartbeat, or a trial asked but never owned). A trial whose row was written before the kill is
  told to the study from its row; one without a row gets an ``interrupted`` row (``sweeper.sweep.run.settle``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.results import store
from sweeper.results.outcome import Reason, Status
from sweeper.sweep.config.secrets import mask
from sweeper.sweep.search import dedup
from sweeper.sweep.study import optuna_private as private
from sweeper.sweep.study import trials as studies
from sweeper.sweep.study.attrs import (
    CONFIG_KEY,
    CONFIRM_KEY,
    PROFILE_KEY,
    REMEASURE_FOR_KEY,
    REQUEUED_KEY,
    reason_of,
    status_of,
)
from sweeper.sweep.study.faults import fault_point
from sweeper.trial import isolate as runner

log = logging.getLogger("sweeper.sweep")
MAX_BUDGET_CUTS = 2  # budget cuts of one configuration before it is taken as too slow for the budget


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (exit 143 instead of 130)."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


class DeferredInterrupts:
    """While trials run, Ctrl-C and SIGTERM are noted by the handler and raised by the sweep loop at its next
    :meth:`check` (at least once a second), never in the middle of a database write: an interrupt raised inside a
    commit left SQLite's write lock held, and the settling of the running trials that follows waited on it for good.
    A second signal while the trials are settled is noted, not raised, so the settling ends."""

    def __init__(self) -> None:
        self.pending: KeyboardInterrupt | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> DeferredInterrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._note)
        return self

    def _note(self, signum: int, frame: Any) -> None:
        if self.pending is None:
            self.pending = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def check(self) -> None:
        """Raise the noted interrupt here, at a point where no write is half done."""
        if self.pending is not None:
            raise self.pending

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()


def start_forkserver_here(config: Any, may_run_here: bool) -> None:
    """Trials run in this process's forkserver: started now, from the main thread so that Ctrl-C does not reach
    it, with the workload's module on its import list; its imports (torch: seconds) overlap the sweep's own start
    (the study opened, the space checked), and the first trial waits for them."""
    if may_run_here and config.trial.isolate and threading.current_thread() is threading.main_thread():
        workload = config.get("workload") or {}
        runner.preload_workload(
            {
                "workload": {"name": workload.get("name"), "module": workload.get("module")},
                "knobs": {k: None for k in (config.get("knobs") or {})},  # which knobs it has, not their values
                "env": _plain_env(config),
            }
        )
        runner.start_forkserver()


def _plain_env(config: Any) -> dict[str, Any]:
    """The sweep's ``env``, its values resolved; an entry that does not resolve is left out (the config's own
    check names it)."""
    env = config.get("env") or {}
    out = {}
    for key in list(env):
        try:
            out[str(key)] = env[key]  # an OmegaConf node resolves its interpolation here
        except Exception:  # noqa: BLE001 - reported by the config's check, not here
            continue
    return out


def _say(text: str) -> None:
    """One line on stderr for a person, wrapped under itself at the terminal's width (``progress.notice``)."""
    from rich.console import Console

    from sweeper.sweep.run.progress import notice

    notice(Console(stderr=True, highlight=False), text)


def guarded(run: Callable[[], Any], storage_url: Callable[[], str]) -> Any:
    """``run()`` with SIGTERM handled like Ctrl-C; an interrupt or a full disk ends in one line and an exit code
    (also while the study is opened). ``storage_url()``: the storage, for the message about its database."""
    logging.raiseExceptions = False  # a log line that cannot be written (full disk) is dropped, not a traceback
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main else None
    try:
        return run()
    except KeyboardInterrupt as e:
        name = "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"
        _say(
            f"interrupted ({name}): running trials were stopped and recorded as interrupted; run the same "
            "command again to resume"
        )
        # Everything is recorded (the study's writes are committed, rows renamed into place). The interpreter's
        # own teardown of torch, Hydra and the rest takes 3-10 s on a loaded machine: the user asked to stop now.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(143 if isinstance(e, Terminated) else 130)
    except Exception as e:  # noqa: BLE001 - a full disk, whatever error wraps it (the study's tell, a row's write)
        full = store.disk_full_in(e)
        if full is None:
            raise
        if isinstance(full, store.DiskFull):
            what = str(full)
        elif isinstance(full, OSError) and full.filename:
            what = f"no space left writing {full.filename}"
        else:
            what = f"no space left writing the study's database ({mask(storage_url()) or 'results_dir'})"
        print(f"error: {what}; free space and run the same command again to resume", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def raise_if_disk_full(ret: Any, folder: Any) -> None:
    """A job that failed for lack of disk space (its row, Hydra's files under ``folder``): the sweep stops."""
    exc = ret if isinstance(ret, BaseException) else getattr(ret, "_return_value", None)
    full = store.disk_full_in(exc) if isinstance(exc, BaseException) else None  # however deep it is wrapped
    if isinstance(full, store.DiskFull):
        raise full
    if isinstance(full, OSError):
        raise store.DiskFull(getattr(full, "filename", None) or folder, full)
    if full is not None:  # a database's (the study's storage): ``guarded`` names it
        raise exc


def requeue_interrupted(study: optuna.Study) -> list[dict[str, Any]]:
    """Configurations cut by Ctrl-C, SIGTERM, the budget or a dead sweeper are queued again (once each): the same
    command measures what the last one could not. A queued configuration taken by a trial stopped before it was
    sampled (no params yet) is queued again from the queue's own record of it. One the budget cut
    ``MAX_BUDGET_CUTS`` times is too slow for the budget: not queued again (the cost model holds what it ran as a
    lower bound on its cost, so a proposal of it is skipped ``over-budget``); returns those."""
    trials = study.get_trials(deepcopy=False)
    cuts: dict[str, int] = {}
    for t in trials:
        if reason_of(t) is Reason.BUDGET and studies.is_interrupted(t) and private.configuration(t):
            key = t.user_attrs.get(CONFIG_KEY) or dedup.config_key(private.configuration(t))
            cuts[key] = cuts.get(key, 0) + 1
    too_slow: list[dict[str, Any]] = []
    taken = {
        t.user_attrs.get(CONFIG_KEY)
        for t in trials
        if t.state in (TrialState.RUNNING, TrialState.WAITING)
        or (t.state == TrialState.COMPLETE and status_of(t) in (Status.COMPLETE, Status.INFEASIBLE))
    }
    queued = {dedup.config_key(private.configuration(t)) for t in trials if t.state == TrialState.WAITING}
    for t in trials:
        params = private.configuration(t)
        if not studies.is_interrupted(t) or not params:
            continue
        key = t.user_attrs.get(CONFIG_KEY) or dedup.config_key(params)
        if key in taken or key in queued:
            continue
        if cuts.get(key, 0) >= MAX_BUDGET_CUTS:
            too_slow.append(params)
            queued.add(key)
            continue
        attrs = {k: t.user_attrs[k] for k in (CONFIRM_KEY, REMEASURE_FOR_KEY, PROFILE_KEY) if k in t.user_attrs}
        study.enqueue_trial(params, user_attrs=attrs)
        storage = private.storage_of(study)  # (the storage's own list: the study's may be cached)
        waiting = storage.get_all_trials(private.study_id(study), deepcopy=False, states=(TrialState.WAITING,))
        newest = max(waiting, key=lambda w: w.number)
        storage.set_trial_system_attr(private.trial_id(newest), REQUEUED_KEY, True)  # measured first
        fault_point("requeued")
        queued.add(key)
    return too_slow
