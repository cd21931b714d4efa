"""One path from a trial's outcome to the study, the Parquet row and the console: :class:`Settler`.

Every way a trial ends goes through :meth:`Settler.settle`: a launched trial's result, a configuration answered
without launching (constraint, duplicate, over budget), a trial stopped by Ctrl-C or the budget, and a trial whose
sweeper died. The order is fixed so that a kill between any two steps loses nothing:

1. the row is written (atomically, once: a row the trial wrote itself is kept);
2. the study is told (a kill before this leaves a RUNNING trial *with a row*: the next command's recovery tells
   the study what the row says);
3. the console line.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.trial import TrialState

from sweeper.results import lookup, rows, store
from sweeper.results.keys import set_dotted
from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.config.space import value_types
from sweeper.sweep.search.handbook import smaller_batch
from sweeper.sweep.study import optuna_private as private
from sweeper.sweep.study import trials as studies
from sweeper.sweep.study.attrs import START_KEY, is_start
from sweeper.sweep.study.faults import fault_point

log = logging.getLogger("sweeper.sweep")


class Settler:
    """Settles trials of one sweep (``plan``: the sweep's ``SweepPlan``; ``progress``: its console, or None)."""

    def __init__(self, plan: Any, progress: Any = None) -> None:
        self.plan = plan
        self.progress = progress

    def settle(
        self,
        trial_id: int,
        number: int,
        values: dict[str, Any],
        outcome: TrialOutcome,
        *,
        launched: bool,
        show: bool = True,
        path: str | None = None,
    ) -> None:
        """Row, then tell, then the console line. ``launched``: the trial ran as a job, which may have written its
        own row (kept); otherwise the sweeper's row is the only one. ``path``: the prefix of the kill points passed
        (``sweeper.sweep.study.faults``; default: none for a launched trial, ``skip-`` for one answered without it)."""
        if not launched:
            outcome.started_at = outcome.ended_at = outcome.started_at or time.time()
        path = ("" if launched else "skip-") if path is None else path
        self.record(number, values, outcome, only_if_missing=launched)
        fault_point(f"{path}row")
        self.tell(trial_id, outcome)
        fault_point(f"{path}told")
        if outcome.status is Status.INFEASIBLE:  # the handbook's start out of memory: its next smaller batch
            marked = is_start(private.storage_of(self.plan.study).get_trial(trial_id))
            retry = smaller_batch(self.plan.space, getattr(self.plan, "handbook", None), values, marked)
            if retry is not None:
                self.plan.study.enqueue_trial(retry, user_attrs={START_KEY: True}, skip_if_exists=True)
        if show and self.progress is not None:
            self.progress.trial_done(number, outcome, values, self.plan.study)

    def tell(self, trial_id: int, outcome: TrialOutcome) -> None:
        """The study learns ``outcome`` (a trial another process told first is left as it is)."""
        trial = optuna.trial.Trial(self.plan.study, trial_id)
        try:
            studies.tell(self.plan.study, trial, outcome, self.plan.objectives)
        except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError, ValueError):
            pass  # told already (another process recovered it first)

    def record(self, number: int, values: dict[str, Any], outcome: TrialOutcome, only_if_missing: bool = False) -> None:
        """The Parquet row of a trial from the sweeper's side (never launched, its job crashed, interrupted)."""
        plan = self.plan
        if only_if_missing and lookup.has_trial(plan.trials_dir, plan.study_name, number, plan.study_id):
            return  # (checked again under the study's lock below: this check only spares building the row)
        cfg = json.loads(json.dumps(plan.cfg, default=str))
        # Every sampled knob is written: a knob the trial did not sample (inactive under its condition, or a trial
        # whose params the study lost) is null, never the default it did not run with.
        sampled = {k: values.get(k) for k in plan.space.params}
        for key, value in {**plan.space.fixed, **sampled}.items():
            set_dotted(cfg, key, value)
        row = rows.make_row(
            outcome, study=plan.study_name, trial=number, cfg=cfg, objectives=plan.objectives, study_id=plan.study_id
        )
        row["baseline"] = is_baseline(plan, values)
        row.update(lookup.facts_columns(facts(plan)))
        types = lookup.column_types(value_types(plan.space), plan.defaults)
        store.write_trial(
            plan.trials_dir, plan.study_name, number, plan.study_id, row, types, only_if_missing=only_if_missing
        )

    def row_outcome(self, number: int) -> TrialOutcome | None:
        return lookup.read_trial_outcome(self.plan.trials_dir, self.plan.study_name, number, self.plan.study_id)

    def interrupted(
        self, trial_id: int, number: int, values: dict[str, Any], reason: Reason | str, message: str
    ) -> None:
        """A trial stopped before its end (Ctrl-C, SIGTERM, the budget: ``reason``, ``Reason.INTERRUPTED`` or
        ``Reason.BUDGET``): what its row says if it wrote one, else interrupted. Errors are logged, never raised: the
        next command settles what could not be written."""
        now = time.time()
        outcome = self.row_outcome(number)
        if outcome is None or outcome.status is Status.INTERRUPTED or outcome.kind is Reason.INTERRUPTED:
            text = reason.tag() if isinstance(reason, Reason) else str(reason)
            outcome = TrialOutcome(Status.INTERRUPTED, text, message, started_at=now, ended_at=now)
        try:
            self.settle(trial_id, number, values, outcome, launched=True, path="interrupted-")
        except OSError as e:  # a full disk: the study is told; the next command writes the row (recover)
            log.warning("trial %d: its row not written: %s", number, e)
            self.tell(trial_id, outcome)

    def recover(self) -> None:
        """Trials whose sweeper died (a dead pid on this host, a stale heartbeat, or asked and never owned): the
        study is told what their row says, or interrupted (a row is written). Several live processes may do this
        for one trial at once: each step tolerates losing that race."""
        study = self.plan.study
        for t in studies.orphaned_running(study):
            self._settle_orphan(t)
        if studies.heartbeat_enabled(self.plan.storage):
            with warnings.catch_warnings():  # Optuna's "experimental" notice, on every command of such a storage
                warnings.filterwarnings("ignore", r".*fail_stale_trials is experimental", ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
        for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            if t.number in self._checked or not studies.is_interrupted(t):
                continue
            self._checked.add(t.number)
            row = self.row_outcome(t.number)
            if row is not None and row.status is Status.INTERRUPTED:
                continue
            # No row, or a row the study was never told (its heartbeat went stale first): one truth, interrupted.
            now = time.time()
            outcome = TrialOutcome(
                Status.INTERRUPTED,
                Reason.INTERRUPTED.tag(),
                "the sweeper running this trial died"
                + (f" after the trial ended {row.status.value} (kept below); it runs again" if row else ""),
                metrics=row.metrics if row else {},
                started_at=t.datetime_start.timestamp() if t.datetime_start else now,
                ended_at=now,
            )
            try:
                self.record(t.number, dict(t.params), outcome)
            except OSError as e:
                log.warning("trial %d not recorded: %s", t.number, e)
                continue
            log.warning("trial %d was interrupted (its sweeper died); it runs again", t.number)

    @property
    def _checked(self) -> set[int]:
        if not hasattr(self, "_checked_numbers"):
            self._checked_numbers: set[int] = set()
        return self._checked_numbers

    def _settle_orphan(self, t: Any) -> None:
        """A RUNNING trial whose sweeper died: told what its row says (the sweeper died between the row and the
        tell), else interrupted with a row."""
        outcome = self.row_outcome(t.number)
        if outcome is not None and outcome.status is not Status.INTERRUPTED:
            self.tell(private.trial_id(t), outcome)
            fault_point("orphan-told")
            log.warning(
                "trial %d: its sweeper died after writing its row; the study is told %s", t.number, outcome.status.value
            )
            return
        now = time.time()
        started = t.datetime_start.timestamp() if t.datetime_start else now
        outcome = TrialOutcome(
            Status.INTERRUPTED,
            Reason.INTERRUPTED.tag(),
            "the sweeper running this trial died; it runs again",
            started_at=started,
            ended_at=now,
        )
        try:
            self.record(t.number, dict(t.params), outcome, only_if_missing=True)
        except OSError as e:
            log.warning("trial %d not recorded: %s", t.number, e)
        fault_point("orphan-row")
        self.tell(private.trial_id(t), outcome)
        fault_point("orphan-told")


def is_baseline(plan: Any, values: dict[str, Any]) -> bool:
    """This configuration is the workload's defaults (what a user gets without tuning)."""
    return all(values.get(k) is None or values.get(k) == plan.defaults.get(k) for k in plan.space.params)


def facts(plan: Any) -> dict[str, dict[str, Any]]:
    from sweeper.sweep.config.space import sweep_facts

    return sweep_facts({**plan.space.inactive, **plan.space.params}, plan.defaults)
