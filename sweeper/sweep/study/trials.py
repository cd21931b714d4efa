"""Optuna plumbing: storage, sampler by name, the study's trial target, telling outcomes, resume bookkeeping."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.results.poll import poll
from sweeper.sweep.config.space import SearchSpace
from sweeper.sweep.study import optuna_private as private
from sweeper.sweep.study.attrs import (  # noqa: F401 (the attributes' names, re-exported)
    COMMAND_KEY,
    CONFIRM_KEY,
    CONSTRAINT_KEY,
    COST_KEY,
    FAILED_WITH_KEY,
    FINISHED_KEY,
    OWNER_KEY,
    PREDICTED_KEY,
    REASON_KEY,
    REQUEUED_KEY,
    SEARCHED_KEY,
    SPENT_KEY,
    STATUS_KEY,
    STUDY_ID_KEY,
    TARGET_KEY,
    UNOWNED_S,
    WARM_KEY,
    Owner,
    owner_state,
    reason_of,
    status_of,
)
from sweeper.sweep.study.faults import fault_point
from sweeper.sweep.study.storage import make_storage, storage_url  # noqa: F401 (re-exported)


def suggest(trial: optuna.Trial, name: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    raise TypeError(f"unsupported distribution {dist!r}")


def sample(trial: optuna.Trial, space: SearchSpace, defaults: dict[str, Any]) -> dict[str, Any]:
    """Define-by-run sampling of ``space``: a knob whose condition does not hold is not sampled (None)."""
    from sweeper.sweep.config.space import evaluate

    ns = {**defaults, **space.fixed}
    values: dict[str, Any] = {}
    for name, dist in space.params.items():
        cond = space.conditions.get(name)
        if cond is not None and not evaluate(cond, ns):
            values[name] = ns[name] = None
            continue
        values[name] = ns[name] = suggest(trial, name, dist)
    return values


def create_if_missing(storage: Any, name: str, directions: list[str]) -> bool:
    """Create the study ``name`` unless it exists; True when this process created it (the storage lets one
    process do that, however many try at once)."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweep's console says it once (SweepProgress.opened)
    try:
        storage.create_new_study([StudyDirection[d.upper()] for d in directions], name)
    except optuna.exceptions.DuplicatedStudyError:
        return False
    finally:
        optuna.logging.set_verbosity(verbosity)
    return True


def study_id(study: optuna.Study, created: bool, wait_s: float = 10.0) -> str:
    """The study's id: random, stored with the study, so rows of two storages that use one study name (two
    machines) keep apart when their results are merged. Processes sharing the storage share it: the process that
    ``created`` the study sets it; another one that finds a new study (no trials) without it waits up to
    ``wait_s`` for its creator to (last-writer-wins would leave two processes started together with two ids, and
    each would find only its own rows). A study made elsewhere without one gets one from whoever opens it."""
    import uuid

    def stored() -> Any:
        return private.storage_of(study).get_study_user_attrs(private.study_id(study)).get(STUDY_ID_KEY)

    sid = study.user_attrs.get(STUDY_ID_KEY)
    if not sid and not created and not study.trials:
        sid = poll(stored, wait_s, 0.05)
    if not sid:
        study.set_user_attr(STUDY_ID_KEY, uuid.uuid4().hex[:12])
        sid = stored()
    return str(sid)


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def is_interrupted(t: FrozenTrial) -> bool:
    """Stopped before its end (Ctrl-C, SIGTERM, the budget, its sweeper's death), or failed by Optuna's
    stale-heartbeat check (never told): its configuration is measured again."""
    if status_of(t) is Status.INTERRUPTED or reason_of(t) in (Reason.INTERRUPTED, Reason.BUDGET):
        return True
    return t.state == TrialState.FAIL and STATUS_KEY not in t.user_attrs and reason_of(t) is not Reason.SURPLUS


def is_remeasure(t: FrozenTrial) -> bool:
    """A re-measurement after the search (``confirm_of``: the best and the baseline again, perhaps profiled)."""
    return t.user_attrs.get(CONFIRM_KEY) is not None


def is_counted(t: FrozenTrial) -> bool:
    """Trials that count toward the target: everything except interrupted runs, surplus asks, duplicates
    (``n_trials`` means new measurements; a duplicate reuses another trial's), proposals holding a value this
    sweep's failures blame (``search.failing``: nothing run), configurations left out because
    they would overrun the budget, re-measurements after the search, and warm-start history (an earlier study's
    trials)."""
    return (
        reason_of(t) not in (Reason.SURPLUS, Reason.DUPLICATE, Reason.FAILS, Reason.OVER_BUDGET)
        and WARM_KEY not in t.user_attrs
        and not is_remeasure(t)
        and not is_interrupted(t)
    )


def priced(study: optuna.Study) -> list[tuple[float, float]]:
    """(predicted, actual) wall seconds of this study's launched trials that ran to their end with a price set at
    launch (:func:`price_of`)."""
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
        pair = price_of(t)
        if pair is not None:
            out.append(pair)
    return out


def price_of(t: FrozenTrial) -> tuple[float, float] | None:
    """(predicted, actual) wall seconds of a launched trial that ran to its end with a price set at launch; None
    for the others (a failed, out-of-memory or cut trial ended early: its wall is not the run predicted; 0: priced
    before anything was measured; an earlier study's trials were priced by another sweep)."""
    predicted, actual = t.user_attrs.get(PREDICTED_KEY), t.user_attrs.get(SPENT_KEY)
    if WARM_KEY in t.user_attrs or not isinstance(predicted, (int, float)) or not isinstance(actual, (int, float)):
        return None
    if status_of(t) is not Status.COMPLETE or actual <= 0 or predicted <= 0 or not math.isfinite(predicted):
        return None
    return float(predicted), float(actual)


def counted(study: optuna.Study) -> int:
    """Counted trials asked so far: an enqueued one (the baseline, a confirmation) counts once it is asked."""
    return sum(1 for t in study.get_trials(deepcopy=False) if is_counted(t) and t.state != TrialState.WAITING)


def failures(study: optuna.Study) -> int:
    """Failed trials of the study (interrupted ones are the sweeper's failure, not the workload's)."""
    return sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)) if is_counted(t))


def failure_budget_spent(study: optuna.Study, max_failures: int | None, max_rate: float | None) -> bool:
    """The study's failures reach ``max_failures``, or exceed ``max_rate`` of its finished trials (from 5 on)."""
    failed = failures(study)
    if max_failures is not None and failed >= int(max_failures):
        return True
    finished = sum(1 for t in study.get_trials(deepcopy=False) if t.state.is_finished() and is_counted(t))
    return max_rate is not None and finished >= 5 and failed / finished > float(max_rate)


def others_running(study: optuna.Study, storage: Any) -> bool:
    """RUNNING trials of other sweeper processes whose death this process would notice (same host, or
    heartbeats): worth waiting for, since an interrupted one must be run again to reach the target."""
    me, host = owner_id(), socket.gethostname()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = str(t.user_attrs.get(OWNER_KEY, ""))
        if owner != me and (owner.rpartition(":")[0] == host or heartbeat_enabled(storage)):
            return True
    return False


def orphaned_running(study: optuna.Study) -> list[FrozenTrial]:
    """RUNNING trials that will never be told: their sweeper process on this host is gone (killed; its pid perhaps
    reused since), or nobody owns them ``UNOWNED_S`` after they started (a kill between a queued trial's pop and
    its owner's write; the owner is written within milliseconds of the ask)."""
    import datetime

    now = datetime.datetime.now()
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if OWNER_KEY not in t.user_attrs:
            if t.datetime_start is not None and (now - t.datetime_start).total_seconds() > UNOWNED_S:
                out.append(t)
        elif owner_state(t) is Owner.DEAD:
            out.append(t)
    return out


def heartbeat_enabled(storage: Any) -> bool:
    return isinstance(storage, optuna.storages.RDBStorage) and storage.get_heartbeat_interval() is not None


class Heartbeat:
    """Records the heartbeat of every running trial (ask/tell has no ``optimize`` to do it), so that another
    process sees a dead node's trials go stale and fails them (``optuna.storages.fail_stale_trials``)."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self.interval = storage.get_heartbeat_interval() if heartbeat_enabled(storage) else None
        self.ids: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        if self.interval:
            self.thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join()

    def add(self, trial_id: int) -> None:
        with self.lock:
            self.ids.add(trial_id)
        if self.interval:
            self.storage.record_heartbeat(trial_id)

    def discard(self, trial_id: int) -> None:
        with self.lock:
            self.ids.discard(trial_id)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            with self.lock:
                ids = list(self.ids)
            for trial_id in ids:
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception:  # noqa: BLE001 - a missed beat is retried next interval
                    pass


def update_target(study: optuna.Study, n_trials: int) -> int:
    """The counted-trial total this sweep aims for.

    A sweep that did not reach its target (killed, out of budget, or another process still on it) is continued:
    its finished trials count; one whose search ended but whose re-measurements did not (``SEARCHED_KEY`` without
    ``FINISHED_KEY``) finishes them. Otherwise a study at its target gets a new target ``n_trials`` further on.
    So one command run twice gives 2 x n_trials trials, a killed sweep re-run finishes its n_trials (and its
    re-measurements), and several processes on one study together run n_trials.
    """
    done = counted(study)
    target = study.user_attrs.get(TARGET_KEY)
    in_remeasure = (
        target is not None
        and study.user_attrs.get(SEARCHED_KEY) == int(target)
        and study.user_attrs.get(FINISHED_KEY) != int(target)
    )  # its search ended, its re-measurements did not: they are finished first
    if target is None or (done >= int(target) and not in_remeasure):
        target = done + n_trials
        study.set_user_attr(TARGET_KEY, target)
    return int(target)


def mark_searched(study: optuna.Study, target: int) -> None:
    """The search toward ``target`` ended (its trials counted, or the space exhausted): re-measurements follow."""
    study.set_user_attr(SEARCHED_KEY, int(target))


def mark_finished(study: optuna.Study, target: int) -> None:
    """The sweep toward ``target`` ran to its end (search and re-measurements): the next command starts anew."""
    study.set_user_attr(FINISHED_KEY, int(target))


def ask(study: optuna.Study, command: str | None = None) -> optuna.Trial:
    """``study.ask()`` with this process's owner (and the sweep ``command`` asking it, where given) recorded in
    the same write that creates the trial, so that no kill can leave a RUNNING trial nobody owns. A queued trial
    (popped from WAITING) gets them right before the pop and again after it; :func:`orphaned_running` takes an
    unowned one older than ``UNOWNED_S`` for dead."""
    import datetime

    private.forget_cached_trials(study)
    storage = private.storage_of(study)
    trial_id = None  # queued trials in order; first those a cut run left (REQUEUED_KEY), then re-measurements
    waiting = storage.get_all_trials(private.study_id(study), deepcopy=False, states=(TrialState.WAITING,))
    for t in sorted(waiting, key=lambda t: (not t.system_attrs.get(REQUEUED_KEY), not is_remeasure(t), t.number)):
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError, RuntimeError):
            if command is not None:  # a queued trial is this command's once it pops it, whoever queued it
                storage.set_trial_user_attr(private.trial_id(t), COMMAND_KEY, command)
            storage.set_trial_user_attr(private.trial_id(t), OWNER_KEY, owner_id())  # before the pop: no gap
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            if storage.set_trial_state_values(private.trial_id(t), state=TrialState.RUNNING):
                trial_id = private.trial_id(t)
                break
    if trial_id is None:
        template = FrozenTrial(
            number=-1,
            state=TrialState.RUNNING,
            value=None,
            datetime_start=datetime.datetime.now(),
            datetime_complete=None,
            params={},
            distributions={},
            user_attrs={OWNER_KEY: owner_id(), **({COMMAND_KEY: command} if command is not None else {})},
            system_attrs={},
            intermediate_values={},
            trial_id=-1,
        )
        trial_id = storage.create_new_trial(private.study_id(study), template_trial=template)
        fault_point("asked")
        return optuna.Trial(study, trial_id)
    fault_point("asked")
    trial = optuna.Trial(study, trial_id)
    trial.set_user_attr(OWNER_KEY, owner_id())  # again: another process may have written its own before its pop lost
    if command is not None:
        trial.set_user_attr(COMMAND_KEY, command)
    return trial


def tell(study: optuna.Study, trial: optuna.Trial, outcome: TrialOutcome, objectives: list[tuple[str, str]]) -> None:
    """Report an outcome to Optuna: values, a violated constraint (OOM), PRUNED (skipped/pruned) or FAIL."""
    from sweeper.results.rows import SWEEPER_ATTRIBUTES

    attrs = {
        key: value
        for key, value in outcome.metrics.items()
        # the sweeper's own attributes (owner, confirm_of, ...) are never a metric's (the trial refuses them)
        if key not in SWEEPER_ATTRIBUTES
        and (isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)))
    }
    attrs[STATUS_KEY] = outcome.status.value
    attrs[COST_KEY] = outcome.wall_s  # what the trial cost: the staged sampler weighs gains by it
    if outcome.reason:
        attrs[REASON_KEY] = outcome.reason
    if outcome.status is Status.FAILED and outcome.message:  # what it failed with: one cause, one line
        attrs[FAILED_WITH_KEY] = (outcome.message.strip().splitlines() or [""])[0][:200]
    private.set_user_attrs(trial, attrs)  # one transaction, not one per metric
    if outcome.status is Status.COMPLETE:
        values = outcome.objective_values(objectives)
        if values is not None:
            trial.set_constraint(CONSTRAINT_KEY, 0.0)
            study.tell(trial, values)
            return
        trial.set_user_attr(REASON_KEY, Reason.OBJECTIVE_MISSING.tag())
        study.tell(trial, state=TrialState.FAIL)
    elif outcome.status is Status.INFEASIBLE:
        # Penalty values with a violated constraint: constraint-aware samplers rank it below every feasible trial.
        values = [0.0 if d == "maximize" else _worst_minimized(study, i) for i, (_m, d) in enumerate(objectives)]
        trial.set_constraint(CONSTRAINT_KEY, 1.0)
        study.tell(trial, values)
    elif outcome.status in (Status.PRUNED, Status.SKIPPED):
        # A duplicate too: PRUNED, not a second COMPLETE copy of one measurement (importance, the dashboard).
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)


def _worst_minimized(study: optuna.Study, index: int) -> float:
    values = [
        t.values[index]
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.values and math.isfinite(t.values[index])
    ]
    return 2.0 * max(values) if values else 1e18
