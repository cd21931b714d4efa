"""The sweep loop behind the Hydra plugin: ask -> check -> launch through Hydra's launcher -> tell -> record.

A trial's own failure never ends the sweep: every JobReturn is classified into a TrialOutcome and told.
Configurations that break a declared constraint, or that were already measured, never launch.
"""

from __future__ import annotations

import json
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig
from optuna.trial import TrialState

from sweeper.errors import ConfigError
from sweeper.results import lookup, rows, store
from sweeper.results.keys import override_string, set_dotted
from sweeper.results.outcome import Status, TrialOutcome
from sweeper.sweep import budget, dedup, launch, recovery, warm
from sweeper.sweep import study as studies
from sweeper.sweep.config import with_values
from sweeper.sweep.job import device_check, encode_context
from sweeper.sweep.plan import SweepPlan, prepare
from sweeper.sweep.progress import SweepProgress, log_launches_to
from sweeper.sweep.secrets import mask
from sweeper.sweep.slots import Slot, slot_overrides
from sweeper.sweep.space import ExpressionError, evaluate, sweep_facts, value_types
from sweeper.trial import gpu


class SweepImpl(recovery.Recovery):
    def __init__(self, **conf: Any) -> None:
        self.conf = conf
        self.config: DictConfig | None = None
        self.plan: SweepPlan | None = None  # set by _prepare (see sweeper.sweep.plan)
        self.launcher: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config = config
        self.launcher = launch.thread_safe_launcher(hydra_context, task_function, config)

    # ------------------------------------------------------------------ setup of one sweep

    def _prepare(self, arguments: list[str]) -> None:
        self.plan = prepare(self.conf, self.config, self.launcher, arguments)
        self.valid_keys: Any = _UNKNOWN  # the space's configurations, enumerated at the first duplicate
        self.waits = dedup.Waiting()  # trials whose configuration another trial is measuring right now
        self.duplicates_in_a_row = 0
        self.stopped: str | None = None
        self.last_recovery = 0.0
        self.recover_every_s = 1.0

    # ------------------------------------------------------------------ the loop

    def sweep(self, arguments: list[str]) -> list[Any]:
        try:
            self._prepare(arguments)
        except ConfigError as e:
            from sweeper.sweep.cli import fail

            fail(e)
        isolated = launch.may_run_here(self.launcher) and self.plan.cfg["trial"].get("isolate", True)
        if isolated:
            from sweeper.trial.isolate import preload_workload

            preload_workload(self.plan.cfg)
        return recovery.guarded(self._sweep, self.plan.storage_url, forkserver=isolated)

    def _sweep(self) -> list[Any]:
        limit = self.conf.get("timeout_s")
        self.deadline = time.time() + float(limit) if limit else None
        self._recover_interrupted()
        target = studies.update_target(self.plan.study, int(self.conf.get("n_trials", 10)))
        self._enqueue_first()
        finished = sum(
            1 for t in self.plan.study.get_trials(deepcopy=False) if studies.is_counted(t) and t.state.is_finished()
        )
        progress = SweepProgress(
            self.plan.study_name, target, self.plan.objectives, finished, self.plan.defaults, self.plan.study
        )
        log_launches_to(Path(str(self.config.hydra.sweep.dir)) / "sweep.log")
        with progress, studies.Heartbeat(self.plan.storage) as heartbeat:
            results = self._run_until(target, progress, heartbeat)
            k = int(self.conf.get("confirm_top_k") or 0)
            if k > 0 and self.stopped not in ("failures", "timeout"):
                self.stopped = None
                extra = studies.enqueue_confirmations(self.plan.study, self.plan.objectives, k)
                progress.extend(extra)
                results += self._run_until(self._counted() + extra, progress, heartbeat, confirming=True)
        progress.summary(self.plan.study)
        launch.compact_and_refresh(
            self.plan.trials_dir.parent, self.plan.study_name, self.plan.study_id
        )  # none of this sweep's trials runs now
        if self.stopped == "failures":
            raise SystemExit(1)
        return results

    def _run_until(
        self, target: int, progress: SweepProgress, heartbeat: studies.Heartbeat, confirming: bool = False
    ) -> list[Any]:
        """Keep every slot busy until the study holds ``target`` counted trials: no batch barrier."""
        free = list(self.plan.slots)
        running: dict[Future, tuple[optuna.Trial, dict[str, Any], Slot]] = {}
        results: list[Any] = []
        self.waits.heartbeat = heartbeat  # waiting trials beat too: other trials may wait for them
        with (
            ThreadPoolExecutor(max_workers=len(self.plan.slots), thread_name_prefix="trial") as pool,
            self._interruptible(running),
        ):
            while True:
                if time.time() - self.last_recovery >= self.recover_every_s:
                    self._recover_interrupted()  # trials of another process that died (dead pid, stale heartbeat)
                for trial, values, earlier in self.waits.poll(self.plan.study):
                    self._settle(trial, values, dedup.reuse(earlier, _NOT_METRICS), progress)
                blocked = False
                while free and not self.stopped and (self.waits.ready or self._counted() < target):
                    slot = self.plan.node.take(free)
                    if slot is None:  # another sweeper on this node runs trials on these cores / GPUs
                        blocked = True
                        break
                    item = self.waits.ready.pop(0) if self.waits.ready else self._ask_one(target, progress, confirming)
                    if item is None or item is _STOP:
                        self.plan.node.release(slot)
                        free.insert(0, slot)
                        if item is _STOP:
                            break
                        continue
                    trial, values = item
                    heartbeat.add(trial._trial_id)
                    fut = pool.submit(self._run_job, trial, values, slot, trial.number)  # job folder = trial number
                    running[fut] = (trial, values, slot)
                if not running:
                    # Nothing of ours runs. Trials of other processes may still end interrupted and free places.
                    self._recover_interrupted()
                    if self.stopped:
                        self.waits.give_up(self.plan.study, studies.REASON_KEY)
                    if self.stopped or (self._counted() >= target and not self._others_running() and not self.waits):
                        return results
                    time.sleep(self.recover_every_s if self._counted() >= target else 0.2 if blocked else 0)
                    continue
                poll = 0.2 if blocked else self.recover_every_s  # a blocked slot may be free again soon
                done, _ = wait(list(running), return_when=FIRST_COMPLETED, timeout=poll)
                for fut in done:
                    trial, values, slot = running[fut]
                    ret = fut.result()
                    recovery.raise_if_disk_full(ret, self.plan.trials_dir.parent)  # stays in `running`: settled
                    running.pop(fut)
                    results.append(ret)
                    outcome = launch.outcome_of(ret)
                    if outcome.status is Status.FAILED and outcome.reason.startswith(("exception:", "launcher:")):
                        # The job failed around the task (launcher, logging); if the trial wrote its row, it ran.
                        outcome = (
                            lookup.read_trial_outcome(
                                self.plan.trials_dir, self.plan.study_name, trial.number, self.plan.study_id
                            )
                            or outcome
                        )
                    studies.tell(self.plan.study, trial, outcome, self.plan.objectives)
                    heartbeat.discard(trial._trial_id)
                    self._record(trial.number, values, outcome, only_if_missing=True)
                    progress.trial_done(trial.number, outcome, values, self.plan.study)
                    if outcome.status is not Status.SKIPPED:
                        self.duplicates_in_a_row = 0
                    self.plan.node.release(slot)
                    free.append(slot)
                if self._failure_budget_spent():
                    if not self.stopped:
                        progress.note(
                            f"stopping: {self._failures()} failed trials reach the failure budget "
                            f"({self._budget_text()}); the workload itself looks broken"
                        )
                    self.stopped = "failures"

    def _counted(self) -> int:
        return studies.counted(self.plan.study)

    def _failures(self) -> int:
        return studies.failures(self.plan.study)

    def _budget_text(self) -> str:
        limits = {"max_failures": self.plan.max_failures, "max_failure_rate": self.plan.max_failure_rate}
        return ", ".join(f"{k}={v}" for k, v in limits.items() if v is not None)

    def _failure_budget_spent(self) -> bool:
        return studies.failure_budget_spent(self.plan.study, self.plan.max_failures, self.plan.max_failure_rate)

    def _others_running(self) -> bool:
        return studies.others_running(self.plan.study, self.plan.storage)

    def _enqueue_first(self) -> None:
        if not isinstance(self.plan.study.sampler, optuna.samplers.GridSampler):  # the grid holds them all anyway
            warm.queue_first(self.plan, int(self.conf.get("warm_start_k", 3)), self.conf.get("baseline_first", True))

    def _ask_one(self, target: int, progress: SweepProgress, confirming: bool) -> Any:
        """Ask one trial; returns (trial, values) to launch, None if it was settled without launching, or _STOP."""
        if self.deadline is not None and time.time() >= self.deadline:
            if not self.stopped:
                progress.note(
                    f"time limit: hydra.sweeper.timeout_s={self.conf.get('timeout_s')} reached; "
                    "running trials finish, no new one starts (run the command again to continue)"
                )
            self.stopped = "timeout"
            return _STOP
        sampler = self.plan.study.sampler
        waiting = self.plan.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        if not waiting and isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(self.plan.study):
            if not self.stopped:
                progress.note("grid exhausted: every configuration of the space has been tried")
            self.stopped = "grid"
            return _STOP
        with warnings.catch_warnings():  # the heartbeat of ask/tell trials is recorded by studies.Heartbeat
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
            trial = self.plan.study.ask()
        trial.set_user_attr(studies.OWNER_KEY, studies.owner_id())
        if self._is_surplus(trial, target):
            trial.set_user_attr(studies.REASON_KEY, "surplus")
            self.plan.study.tell(trial, state=TrialState.FAIL)
            return _STOP
        values, outcome = self._sample(trial, repeat=confirming or "confirm_of" in trial.user_attrs)
        if outcome is None:
            return trial, values
        if outcome is _WAIT:
            self.waits.add(trial, values)
            progress.note(
                f"trial {trial.number} waits: trial {trial.user_attrs.get(dedup.WAITS_KEY)} is measuring "
                "the same configuration"
            )
            return None
        self._settle(trial, values, outcome, progress)
        return None

    def _settle(
        self, trial: optuna.Trial, values: dict[str, Any], outcome: TrialOutcome, progress: SweepProgress
    ) -> None:
        """A trial decided without launching (constraint, duplicate): told, recorded, shown; an exhausted space
        stops the sweep (duplicates do not count toward n_trials, so the sampler would be asked forever)."""
        outcome.started_at = outcome.ended_at = time.time()  # settled before launch: costs no time
        studies.tell(self.plan.study, trial, outcome, self.plan.objectives)
        self._record(trial.number, values, outcome)
        progress.trial_done(trial.number, outcome, values, self.plan.study)
        if not outcome.reason.startswith("duplicate:"):
            return
        self.duplicates_in_a_row += 1
        if self.stopped:
            return
        if self.valid_keys is _UNKNOWN:
            self.valid_keys = dedup.valid_keys(self.plan.space, self.plan.defaults)  # None: too large/continuous
        if dedup.exhausted(self.plan.study, self.valid_keys):
            progress.note(
                f"space exhausted: all {len(self.valid_keys)} configurations of the search space are "
                "measured (or cannot run here); widen the space (or hydra.sweeper.repeat=true to "
                "measure again)"
            )
            self.stopped = "exhausted"
        elif self.duplicates_in_a_row >= _MAX_DUPLICATES_IN_A_ROW:
            progress.note(
                f"stopping: the sampler proposed {self.duplicates_in_a_row} measured configurations in a "
                "row; the space looks exhausted (widen it, or try another sampler)"
            )
            self.stopped = "exhausted"
        elif self.valid_keys and self.duplicates_in_a_row % _STUCK_AFTER == 0:
            self._enqueue_untried(progress)

    def _enqueue_untried(self, progress: SweepProgress) -> None:
        """The sampler keeps proposing measured configurations of an enumerable space (TPE on a small grid does):
        the next configuration nobody has measured is queued, so the space is finished instead of abandoned."""
        if self.plan.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return  # something is queued already: it runs next
        todo = dedup.untried(self.plan.study, self.valid_keys)
        if todo:
            progress.note(
                f"the sampler proposed {self.duplicates_in_a_row} measured configurations in a row; "
                f"queued one of the {len(todo)} not yet measured"
            )
            self.plan.study.enqueue_trial(todo[0], skip_if_exists=False)

    def _is_surplus(self, trial: optuna.Trial, target: int) -> bool:
        """Another process on the same study got there first: this ask would exceed the target."""
        earlier = [
            t for t in self.plan.study.get_trials(deepcopy=False) if t.number < trial.number and studies.is_counted(t)
        ]
        return len(earlier) >= target

    def _sample(self, trial: optuna.Trial, repeat: bool = False) -> tuple[dict[str, Any], TrialOutcome | None]:
        """Define-by-run sampling with declared conditions; then constraints and duplicate checks."""
        try:
            values = studies.sample(trial, self.plan.space, self.plan.defaults)
            ns = {**self.plan.defaults, **self.plan.space.fixed, **values}
            for expr in self.plan.space.constraints:
                if not evaluate(expr, ns):
                    return values, TrialOutcome(Status.SKIPPED, f"invalid:{expr}", f"constraint does not hold: {expr}")
        except ExpressionError as e:  # e.g. a division by a sampled zero: this configuration is not launched
            return dict(trial.params), TrialOutcome(Status.SKIPPED, f"invalid:{e}", f"an expression failed: {e}")
        # The device check runs here, before any launcher job (a SLURM job is never submitted only to be skipped).
        reason = device_check(with_values(self.plan.cfg, {**self.plan.space.fixed, **values}), self._device())
        if reason:
            return values, TrialOutcome(Status.SKIPPED, f"invalid:{reason}", reason)
        key = dedup.config_key(values)
        trial.set_user_attr(dedup.KEY, key)
        if repeat or self.conf.get("repeat", False):
            return values, None
        dedup.await_lower_keys(self.plan.study, trial.number)
        found = dedup.find(self.plan.study, key, trial.number)
        if found is None:
            trial.set_user_attr(dedup.WAITS_KEY, -1)  # it measures: twins asked later wait for it
            return values, None
        if found[0] == "running":  # another slot or sweeper measures it now: wait for its result
            trial.set_user_attr(dedup.WAITS_KEY, found[1].number)
            return values, _WAIT
        return values, dedup.reuse(found[1], _NOT_METRICS)

    def _context(self, trial: optuna.Trial, values: dict[str, Any], job_idx: int) -> dict[str, Any]:
        """What the task needs to know of the sweep, passed as one override (no Hydra singletons: thread safe)."""
        types = lookup.column_types(value_types(self.plan.space), self.plan.defaults)
        return {
            "study": self.plan.study_name,
            "study_id": self.plan.study_id,
            "number": trial.number,
            "storage": mask(self.plan.storage_url),  # the trial reveals it from the environment (sweep.secrets)
            "objectives": [f"{m}:{d}" for m, d in self.plan.objectives],
            "log_dir": str(Path(str(self.config.hydra.sweep.dir)) / str(job_idx)),
            "column_types": {c: str(t) for c, t in types.items()},
            "pruner": dict(self.plan.pruner_conf),
            "baseline": self._is_baseline(values),
            "confirm_of": trial.user_attrs.get("confirm_of"),
            "facts": self._facts(),
        }

    def _facts(self) -> dict[str, dict[str, Any]]:
        return sweep_facts({**self.plan.space.inactive, **self.plan.space.params}, self.plan.defaults)

    def _device(self) -> Any:
        if getattr(self, "_device_info", None) is None:
            self._device_info = gpu.device_info()  # the same description the plan built the defaults with
        return self._device_info

    def _is_baseline(self, values: dict[str, Any]) -> bool:
        """This configuration is the workload's defaults (what a user gets without tuning)."""
        return all(values.get(k) is None or values.get(k) == self.plan.defaults.get(k) for k in self.plan.space.params)

    def _run_job(self, trial: optuna.Trial, values: dict[str, Any], slot: Slot, job_idx: int) -> Any:
        """Launch one trial through Hydra's launcher (runs in a worker thread; returns JobReturn or the error)."""
        sampled = [override_string(k, v) for k, v in {**self.plan.space.fixed, **values}.items()]
        overrides = self.plan.fixed_args + sampled + slot_overrides(slot)
        cap = budget.derived_timeout(
            self.plan.study, values, self.plan.expensive, float(self.plan.cfg["trial"]["timeout_s"]),
            self.conf.get("timeout_factor"), float(self.conf.get("timeout_floor_s", 60.0)),
        )  # fmt: skip
        if cap is not None:
            overrides.append(f"trial.timeout_s={cap}")
        context = {**self._context(trial, values, job_idx), "overrides": overrides}
        overrides = overrides + [f"trial.context={encode_context(context)}"]
        try:
            return launch.launch_one(self.launcher, overrides, job_idx)
        except Exception as e:  # noqa: BLE001 - a launcher error fails this trial, not the sweep
            return e

    def _record(
        self, number: int, values: dict[str, Any], outcome: TrialOutcome, only_if_missing: bool = False
    ) -> None:
        """The Parquet row for a trial the task could not write itself (never launched, or its job crashed)."""
        if only_if_missing and lookup.has_trial(self.plan.trials_dir, self.plan.study_name, number, self.plan.study_id):
            return  # (checked again under the study's lock below: this check only spares building the row)
        cfg = json.loads(json.dumps(self.plan.cfg, default=str))
        for key, value in {**self.plan.space.fixed, **values}.items():
            set_dotted(cfg, key, value)
        row = rows.make_row(
            outcome,
            study=self.plan.study_name,
            trial=number,
            cfg=cfg,
            objectives=self.plan.objectives,
            study_id=self.plan.study_id,
        )
        row["baseline"] = self._is_baseline(values)
        row.update(lookup.facts_columns(self._facts()))
        types = lookup.column_types(value_types(self.plan.space), self.plan.defaults)
        store.write_trial(
            self.plan.trials_dir,
            self.plan.study_name,
            number,
            self.plan.study_id,
            row,
            types,
            only_if_missing=only_if_missing,
        )


_STOP = object()
_WAIT: Any = object()
_UNKNOWN = object()
_MAX_DUPLICATES_IN_A_ROW = 100  # a space too large to enumerate: the sampler is taken to be stuck
_STUCK_AFTER = 5  # an enumerable space: after this many duplicates in a row, an unmeasured configuration is queued
_NOT_METRICS = (studies.OWNER_KEY, "status", "confirm_of", studies.REASON_KEY, studies.COST_KEY, warm.FROM_KEY)
