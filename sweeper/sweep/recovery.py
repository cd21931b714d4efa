"""Stopping and resuming without losing a row: interrupts, a full disk, and trials whose sweeper died.

One truth between the study (Optuna) and the rows (Parquet), whatever stops a sweep:

* Ctrl-C or SIGTERM: the running trials' process groups are killed at once; each running trial is recorded as
  ``failed (interrupted)`` in both (not counted, so the same command runs it again); one line; exit 130 or 143.
* A full disk: the sweep stops with one line naming the path (exit 1); the same is recorded where it can be,
  and what could not be written is settled by the next run of the command.
* A sweeper killed outright (SIGKILL, a node lost): the next run finds its RUNNING trials (dead pid on this
  host, or a stale heartbeat). A trial whose row was written before the kill is told to the study from its row;
  one without a row is FAIL (interrupted) and gets an ``interrupted`` row.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.results import lookup, store
from sweeper.results.outcome import Status, TrialOutcome
from sweeper.sweep import study as studies
from sweeper.sweep.secrets import mask
from sweeper.trial import isolate as runner

log = logging.getLogger("sweeper.sweep")


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (exit 143 instead of 130)."""


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def guarded(run: Callable[[], Any], storage_url: str, forkserver: bool = False) -> Any:
    """``run()`` with SIGTERM handled like Ctrl-C; an interrupt or a full disk ends in one line and an exit code.
    ``forkserver``: trials run in this process's forkserver, started here so that Ctrl-C does not reach it."""
    logging.raiseExceptions = False  # a log line that cannot be written (full disk) is dropped, not a traceback
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main else None
    try:
        if forkserver and main:
            runner.start_forkserver()
        return run()
    except KeyboardInterrupt as e:
        name = "SIGTERM" if isinstance(e, Terminated) else "Ctrl-C"
        print(
            f"interrupted ({name}): running trials were stopped and recorded as interrupted; run the same "
            "command again to resume",
            file=sys.stderr,
        )
        # Everything is recorded (the study's writes are committed, rows renamed into place). The interpreter's
        # own teardown of torch, Hydra and the rest takes 3-10 s on a loaded machine: the user asked to stop now.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(143 if isinstance(e, Terminated) else 130)
    except store.DiskFull as e:
        print(f"error: {e}; free space and run the same command again to resume", file=sys.stderr)
        raise SystemExit(1) from None
    except Exception as e:  # noqa: BLE001 - the study's own database on a full disk (SQLite)
        if "database or disk is full" not in str(e):
            raise
        print(
            f"error: no space left writing the study's database ({mask(storage_url)}); free space and run "
            "the same command again to resume",
            file=sys.stderr,
        )
        raise SystemExit(1) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def raise_if_disk_full(ret: Any, folder: Any) -> None:
    """A job that failed for lack of disk space (its row, Hydra's files under ``folder``): the sweep stops."""
    exc = ret if isinstance(ret, BaseException) else getattr(ret, "_return_value", None)
    if isinstance(exc, store.DiskFull):
        raise exc
    if isinstance(exc, BaseException) and store.is_disk_full(exc):
        raise store.DiskFull(getattr(exc, "filename", None) or folder, exc)


class Recovery:
    """The sweep loop's side of it (mixed into ``SweepImpl``: study, storage, trials folder, objectives)."""

    @contextlib.contextmanager
    def _interruptible(self, running: dict[Future, tuple[optuna.Trial, dict[str, Any], Any]]) -> Iterator[None]:
        """Ctrl-C, SIGTERM or a full disk while trials run: their process groups are killed at once (the pool's
        threads then return within a second), and each running trial is recorded, in the study and in Parquet,
        as interrupted (run again by the same command) or, if it ended just before, as what its row says; trials
        waiting for a running one with their configuration never ran: FAIL (surplus), not counted."""
        try:
            yield
        except (KeyboardInterrupt, store.DiskFull):
            runner.interrupt_all()
            wait(list(running), timeout=30)
            for trial, values, _slot in list(running.values()):
                self._settle_interrupted(trial, values)
            waits = getattr(self, "waits", None)  # asked, waiting for a running twin: never ran, not counted
            if waits:
                with contextlib.suppress(Exception):
                    waits.give_up(self.plan.study, studies.REASON_KEY)
            raise

    def _settle_interrupted(self, trial: optuna.Trial, values: dict[str, Any]) -> None:
        now = time.time()
        outcome = lookup.read_trial_outcome(
            self.plan.trials_dir, self.plan.study_name, trial.number, self.plan.study_id
        )
        try:
            if outcome is None or outcome.reason == "interrupted":
                self.plan.storage.set_trial_user_attr(trial._trial_id, studies.REASON_KEY, "interrupted")
                self.plan.storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
                outcome = TrialOutcome(
                    Status.FAILED,
                    "interrupted",
                    "the sweep was interrupted while this trial ran; the same command runs it again",
                    started_at=now,
                    ended_at=now,
                )
            else:
                studies.tell(self.plan.study, trial, outcome, self.plan.objectives)
            self._record(trial.number, values, outcome, only_if_missing=True)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, ValueError):
            pass  # told already
        except OSError as e:  # a full disk: the next run of the command settles it (see _recover_interrupted)
            log.warning("trial %d not recorded: %s", trial.number, e)

    def _recover_interrupted(self) -> None:
        """Trials whose sweeper died (dead pid on this host, or a stale heartbeat): FAIL (interrupted) + a row.

        Several live processes may do this for the same trial at once; each step tolerates losing that race.
        """
        self.last_recovery = time.time()
        for t in studies.orphaned_running(self.plan.study):
            self._settle_orphan(t)
        if studies.heartbeat_enabled(self.plan.storage):
            optuna.storages.fail_stale_trials(self.plan.study)
        settled = self.__dict__.setdefault("_settled_interrupted", set())  # rows checked once per process
        for t in self.plan.study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            if t.number in settled or not studies.is_interrupted(t):
                continue
            row = lookup.read_trial_outcome(self.plan.trials_dir, self.plan.study_name, t.number, self.plan.study_id)
            settled.add(t.number)
            if row is not None and row.reason == "interrupted":
                continue
            # No row, or a row the study was never told (its heartbeat went stale first): one truth, interrupted.
            now = time.time()
            outcome = TrialOutcome(
                Status.FAILED,
                "interrupted",
                "the sweeper running this trial died"
                + (
                    f" after the trial ended {row.status.value} (kept below); the study failed it, so it runs again"
                    if row
                    else ""
                ),
                metrics=row.metrics if row else {},
                started_at=t.datetime_start.timestamp() if t.datetime_start else now,
                ended_at=now,
            )
            self._record(t.number, t.params, outcome)
            log.warning("trial %d was interrupted (its sweeper died); marked failed", t.number)

    def _settle_orphan(self, t: Any) -> None:
        """A RUNNING trial whose sweeper died: if its row was written (the sweeper died between the row and the
        tell), the study is told what the row says; otherwise it is FAIL (interrupted) and will be run again."""
        try:
            outcome = lookup.read_trial_outcome(
                self.plan.trials_dir, self.plan.study_name, t.number, self.plan.study_id
            )
            if outcome is not None and outcome.reason != "interrupted":
                studies.tell(
                    self.plan.study, optuna.trial.Trial(self.plan.study, t._trial_id), outcome, self.plan.objectives
                )
                log.warning(
                    "trial %d: its sweeper died after writing its row; the study is told %s",
                    t.number,
                    outcome.status.value,
                )
                return
            self.plan.storage.set_trial_user_attr(t._trial_id, studies.REASON_KEY, "interrupted")
            self.plan.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, ValueError):
            pass  # another process recovered it first
