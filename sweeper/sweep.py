"""The sweep loop behind the Hydra plugin: ask -> check -> launch through Hydra's launcher -> tell -> record.

A trial's own failure never ends the sweep: every JobReturn is classified into a TrialOutcome and told.
Configurations that break a declared constraint, or that were already measured, never launch.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig, ListConfig, OmegaConf
from optuna.trial import TrialState

from sweeper import gpu, jobs, store, study as st, warm
from sweeper.config import with_values
from sweeper.errors import ConfigError
from sweeper.outcome import Status, TrialOutcome
from sweeper.progress import SweepProgress
from sweeper.prune import make_pruner
from sweeper.slots import Slot, make_slots, slot_overrides
from sweeper.space import check_known, evaluate, override_string, value_types
from sweeper.task import device_check

log = logging.getLogger(__name__)
KNOWN_METRICS = (
    "throughput", "peak_mem_bytes", "peak_mem_reserved_bytes", "step_ms_p50", "step_ms_p10", "step_ms_p90",
    "step_ms_mean", "step_cv", "data_wait_frac", "achieved_tflops", "mfu", "gpu_util_mean", "gpu_util_p10",
    "first_step_s", "setup_s", "compile_s", "measured_s",
    "world_size", "step_ms_p50_rank_min", "comm_frac", "comm_ms_per_step", "launch_s",
)


class SweepImpl:
    def __init__(self, **conf: Any) -> None:
        self.conf = conf
        self.config: DictConfig | None = None
        self.launcher: Any = None
        self.job_idx = 0

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config = config
        self.launcher = jobs.thread_safe_launcher(hydra_context, task_function, config)

    # ------------------------------------------------------------------ setup of one sweep

    def _prepare(self, arguments: list[str]) -> None:
        c = self.conf
        if int(c.get("n_trials", 10)) < 1:
            raise ConfigError("hydra.sweeper.n_trials", f"must be >= 1, got {c.get('n_trials')}",
                              "give the number of trials this command should add")
        if c.get("timeout_s") is not None and float(c["timeout_s"]) <= 0:
            raise ConfigError("hydra.sweeper.timeout_s", f"must be > 0 seconds, got {c['timeout_s']}",
                              "give the time after which no new trial starts, or null for no limit")
        self.cfg, self.space, self.defaults, self.fixed_args = jobs.resolve_space(self.config, c, arguments)
        self.workload = self.cfg["workload"]["name"]
        self.starts = self._parse_starts()
        self.slots = make_slots(self.cfg["trial"].get("resources"), int(c.get("n_jobs") or 1), gpu.device_info().count)
        jobs.check_concurrent(self.launcher, self.config, len(self.slots))
        self.objectives = [(str(o["metric"]), str(o.get("direction", "maximize"))) for o in c["objectives"]]
        self._check_objectives()
        results_dir = Path(self.cfg["results_dir"])
        self.trials_dir = results_dir / "trials"
        data = self.cfg["workload"].get("data")  # resnet50-jpeg(-tiny): synthetic and JPEG trials never share a study
        self.workload_key = (self.workload + (f"-{data}" if data not in (None, "synthetic") else "")
                             + (f"-{self.cfg['preset']}" if self.cfg["preset"] else ""))
        self.study_name = c.get("study_name") or self.workload_key
        self.storage_url = st.storage_url(c.get("storage"), results_dir)
        self.storage = st.make_storage(self.storage_url, c.get("heartbeat_interval"), c.get("grace_period"))
        expensive = OmegaConf.to_container(c["expensive"]) if isinstance(c.get("expensive"), DictConfig) else c.get("expensive")
        sampler = st.make_sampler(str(c.get("sampler", "staged")), c.get("seed"), self.space, expensive or {},
                                  self.defaults, c.get("timeout_s"))
        try:
            self.study = optuna.create_study(
                study_name=self.study_name, storage=self.storage, sampler=sampler, load_if_exists=True,
                directions=[d for _m, d in self.objectives])
        except ValueError as e:
            raise ConfigError("hydra.sweeper.objectives", str(e).splitlines()[0],
                              "use the study's original objectives or a new hydra.sweeper.study_name") from None
        if not self.study.trials:
            self.study.set_user_attr(warm.WORKLOAD_KEY, self.workload_key)
        spec = c.get("warm_start")
        self.warm_sources = warm.resolve(self.storage, OmegaConf.to_container(spec) if isinstance(spec, ListConfig)
                                         else spec, self.study_name, self.workload_key)
        self.max_failures = c.get("max_failures")
        self.max_failure_rate = c.get("max_failure_rate")
        pruner = c.get("pruner") or {"type": "none"}
        self.pruner_conf = OmegaConf.to_container(pruner) if isinstance(pruner, DictConfig) else dict(pruner)
        make_pruner(self.pruner_conf)  # validates
        if self.pruner_conf.get("type", "none") != "none" and self.objectives != [("throughput", "maximize")]:
            raise ConfigError("hydra.sweeper.pruner.type", "pruning needs the single objective throughput:maximize",
                              "set hydra.sweeper.pruner.type=none for this study")
        self.stopped: str | None = None
        self.last_recovery = 0.0
        self.recover_every_s = 1.0

    def _check_objectives(self) -> None:
        import workloads

        module = workloads.load(self.workload, self.cfg["workload"].get("module"))
        known = set(KNOWN_METRICS) | set(getattr(module, "METRICS", ()))
        if not self.objectives:
            raise ConfigError("hydra.sweeper.objectives", "is empty", "name at least one metric, e.g. throughput")
        for i, (metric, direction) in enumerate(self.objectives):
            if metric not in known:
                raise ConfigError(f"hydra.sweeper.objectives[{i}].metric",
                                  f"{metric!r} is not a metric workload {self.workload!r} produces",
                                  f"use one of: {', '.join(sorted(known))}")
            if direction not in ("maximize", "minimize"):
                raise ConfigError(f"hydra.sweeper.objectives[{i}].direction", f"{direction!r} is not a direction",
                                  "use maximize or minimize")

    # ------------------------------------------------------------------ the loop

    def sweep(self, arguments: list[str]) -> list[Any]:
        try:
            self._prepare(arguments)
        except ConfigError as e:
            from sweeper.cli import fail

            fail(e)
        limit = self.conf.get("timeout_s")
        self.deadline = time.time() + float(limit) if limit else None
        self._recover_interrupted()
        target = st.update_target(self.study, int(self.conf.get("n_trials", 10)))
        self._enqueue_first()
        finished = sum(1 for t in self.study.get_trials(deepcopy=False) if st.is_counted(t) and t.state.is_finished())
        progress = SweepProgress(self.study_name, target, self.objectives, finished)
        with progress, st.Heartbeat(self.storage) as heartbeat:
            results = self._run_until(target, progress, heartbeat)
            k = int(self.conf.get("confirm_top_k") or 0)
            if k > 0 and self.stopped not in ("failures", "timeout"):
                self.stopped = None
                extra = self._enqueue_confirmations(k)
                progress.extend(extra)
                results += self._run_until(self._counted() + extra, progress, heartbeat, confirming=True)
        progress.summary(self.study)
        jobs.compact_and_refresh(self.trials_dir.parent, self.study_name)  # none of this sweep's trials runs now
        if self.stopped == "failures":
            raise SystemExit(1)
        return results

    def _run_until(self, target: int, progress: SweepProgress, heartbeat: st.Heartbeat,
                   confirming: bool = False) -> list[Any]:
        """Keep every slot busy until the study holds ``target`` counted trials: no batch barrier."""
        free = list(self.slots)
        running: dict[Future, tuple[optuna.Trial, dict[str, Any], Slot]] = {}
        results: list[Any] = []
        with ThreadPoolExecutor(max_workers=len(self.slots), thread_name_prefix="trial") as pool:
            while True:
                if time.time() - self.last_recovery >= self.recover_every_s:
                    self._recover_interrupted()  # trials of another process that died (dead pid, stale heartbeat)
                while free and not self.stopped and self._counted() < target:
                    item = self._ask_one(target, progress, confirming)
                    if item is None:
                        continue
                    if item is _STOP:
                        break
                    trial, values = item
                    slot = free.pop(0)
                    heartbeat.add(trial._trial_id)
                    fut = pool.submit(self._run_job, trial, values, slot, self.job_idx)
                    self.job_idx += 1
                    running[fut] = (trial, values, slot)
                if not running:
                    # Nothing of ours runs. Trials of other processes may still end interrupted and free places.
                    self._recover_interrupted()
                    if self.stopped or self._counted() >= target and not self._others_running():
                        return results
                    time.sleep(self.recover_every_s if self._counted() >= target else 0)
                    continue
                done, _ = wait(list(running), return_when=FIRST_COMPLETED, timeout=self.recover_every_s)
                for fut in done:
                    trial, values, slot = running.pop(fut)
                    ret = fut.result()
                    results.append(ret)
                    outcome = jobs.outcome_of(ret)
                    if outcome.status is Status.FAILED and outcome.reason.startswith(("exception:", "launcher:")):
                        # The job failed around the task (launcher, logging); if the trial wrote its row, it ran.
                        outcome = store.read_trial_outcome(self.trials_dir, self.study_name, trial.number) or outcome
                    st.tell(self.study, trial, outcome, self.objectives)
                    heartbeat.discard(trial._trial_id)
                    self._record(trial.number, values, outcome, only_if_missing=True)
                    progress.trial_done(trial.number, outcome, values)
                    free.append(slot)
                if self._failure_budget_spent():
                    if not self.stopped:
                        progress.note(f"stopping: {self._failures()} failed trials reach the failure budget "
                                      f"({self._budget_text()}); the workload itself looks broken")
                    self.stopped = "failures"

    def _counted(self) -> int:
        return st.counted(self.study)

    def _failures(self) -> int:
        return st.failures(self.study)

    def _budget_text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in (("max_failures", self.max_failures),
                                                  ("max_failure_rate", self.max_failure_rate)) if v is not None)

    def _failure_budget_spent(self) -> bool:
        return st.failure_budget_spent(self.study, self.max_failures, self.max_failure_rate)

    def _others_running(self) -> bool:
        return st.others_running(self.study, self.storage)

    def _recover_interrupted(self) -> None:
        """Trials whose sweeper died (dead pid on this host, or a stale heartbeat): FAIL (interrupted) + a row.

        Several live processes may do this for the same trial at once; each step tolerates losing that race.
        """
        self.last_recovery = time.time()
        for t in st.orphaned_running(self.study):
            try:
                self.storage.set_trial_user_attr(t._trial_id, st.REASON_KEY, "interrupted")
                self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # another process recovered it first
        if st.heartbeat_enabled(self.storage):
            optuna.storages.fail_stale_trials(self.study)
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            if not st.is_interrupted(t) or store.has_trial(self.trials_dir, self.study_name, t.number):
                continue
            now = time.time()
            outcome = TrialOutcome(Status.FAILED, "interrupted", "the sweeper running this trial died",
                                   started_at=t.datetime_start.timestamp() if t.datetime_start else now, ended_at=now)
            self._record(t.number, t.params, outcome, only_if_missing=True)
            log.warning("trial %d was interrupted (its sweeper died); marked failed", t.number)

    def _enqueue_first(self) -> None:
        """A new study measures the warm-start studies' best first, then the workload's defaults (the baseline the
        report compares against), then the declared ``starts`` (known-good recipes), before the sampler's own
        choices; the warm-start studies' trials join the sampler's history."""
        if self.study.trials or not self.space.params or isinstance(self.study.sampler, optuna.samplers.GridSampler):
            return  # the grid holds every configuration anyway
        best, history = warm.gather(self.storage, self.warm_sources, self.study, self.space, self.defaults,
                                    int(self.conf.get("warm_start_k", 3)))
        enqueued: list[dict[str, Any]] = list(best)  # the earlier studies' best, measured again first
        if self.conf.get("baseline_first", True):
            baseline = self._baseline_params()
            if baseline is not None and baseline not in enqueued:
                enqueued.append(baseline)
        for key, params, dropped in self.starts:
            for name, why in dropped.items():
                log.info("%s.%s is not fixed by the start: %s", key, name, why)
            if params and params not in enqueued:
                enqueued.append(params)
        for params in enqueued:  # several sweepers starting one new study together queue each once
            self.study.enqueue_trial(params, skip_if_exists=True)
        self.study.add_trials(history)  # after the queue: Optuna's skip_if_exists compares with every trial

    def _parse_starts(self) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
        starts = self.conf.get("starts") or []
        if isinstance(starts, (DictConfig, ListConfig)):
            starts = OmegaConf.to_container(starts, resolve=True)
        if not isinstance(starts, list):
            raise ConfigError("hydra.sweeper.starts", f"must be a list of configurations, got {starts!r}",
                              "write it as [{knobs.precision: bf16, knobs.num_workers: 8}]")
        return [self._start_params(i, start) for i, start in enumerate(starts)]

    def _start_params(self, index: int, start: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
        """One ``starts`` entry: its config key, the sampled knobs it fixes, and {key: why} for those it does not
        (pinned, inactive under their condition, outside the space: see ``SearchSpace.fix``)."""
        key = f"hydra.sweeper.starts[{index}]"
        if not isinstance(start, Mapping):
            raise ConfigError(key, f"must be a mapping of config keys to values, got {start!r}",
                              "write it as {knobs.precision: bf16, knobs.num_workers: 8}")
        for name in start:
            check_known(str(name), self.defaults, where=f"{key}.{name}")
        params, dropped = self.space.fix(start, self.defaults)
        return key, params, dropped

    def _baseline_params(self) -> dict[str, Any] | None:
        """The defaults as the sampler would give them (knobs inactive under their condition left out)."""
        values = {k: self.defaults[k] for k in self.space.params if self.defaults.get(k) is not None}
        params, dropped = self.space.fix(values, self.defaults)
        for name, why in dropped.items():
            if "outside" in why:
                log.info("no baseline trial: the default %s=%r is outside its search space", name, values[name])
                return None
        return params

    def _enqueue_confirmations(self, k: int) -> int:
        """Re-measure the k best configurations (repeats give the report a noise estimate)."""
        best = [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.user_attrs.get("status") == "complete"]
        metric, direction = self.objectives[0]
        best.sort(key=lambda t: t.values[0], reverse=direction == "maximize")
        for t in best[:k]:
            self.study.enqueue_trial(t.params, user_attrs={"confirm_of": t.number})
        return min(k, len(best))

    def _ask_one(self, target: int, progress: SweepProgress, confirming: bool) -> Any:
        """Ask one trial; returns (trial, values) to launch, None if it was settled without launching, or _STOP."""
        if self.deadline is not None and time.time() >= self.deadline:
            if not self.stopped:
                progress.note(f"time limit: hydra.sweeper.timeout_s={self.conf.get('timeout_s')} reached; "
                              "running trials finish, no new one starts (run the command again to continue)")
            self.stopped = "timeout"
            return _STOP
        sampler = self.study.sampler
        waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        if not waiting and isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(self.study):
            if not self.stopped:
                progress.note("grid exhausted: every configuration of the space has been tried")
            self.stopped = "grid"
            return _STOP
        with warnings.catch_warnings():  # the heartbeat of ask/tell trials is recorded by st.Heartbeat
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
            trial = self.study.ask()
        trial.set_user_attr(st.OWNER_KEY, st.owner_id())
        if self._is_surplus(trial, target):
            trial.set_user_attr(st.REASON_KEY, "surplus")
            self.study.tell(trial, state=TrialState.FAIL)
            return _STOP
        values, outcome = self._sample(trial, repeat=confirming or "confirm_of" in trial.user_attrs)
        if outcome is None:
            return trial, values
        outcome.started_at = outcome.ended_at = time.time()  # settled before launch: costs no time
        st.tell(self.study, trial, outcome, self.objectives)
        self._record(trial.number, values, outcome)
        progress.trial_done(trial.number, outcome, values)
        return None

    def _is_surplus(self, trial: optuna.Trial, target: int) -> bool:
        """Another process on the same study got there first: this ask would exceed the target."""
        earlier = [t for t in self.study.get_trials(deepcopy=False)
                   if t.number < trial.number and st.is_counted(t)]
        return len(earlier) >= target

    def _sample(self, trial: optuna.Trial, repeat: bool = False) -> tuple[dict[str, Any], TrialOutcome | None]:
        """Define-by-run sampling with declared conditions; then constraints and duplicate checks."""
        values = st.sample(trial, self.space, self.defaults)
        ns = {**self.defaults, **self.space.fixed, **values}
        for expr in self.space.constraints:
            if not evaluate(expr, ns):
                return values, TrialOutcome(Status.SKIPPED, f"invalid:{expr}", f"constraint does not hold: {expr}")
        # The device check runs here, before any launcher job (a SLURM job is never submitted only to be skipped).
        reason = device_check(with_values(self.cfg, {**self.space.fixed, **values}), self._device())
        if reason:
            return values, TrialOutcome(Status.SKIPPED, f"invalid:{reason}", reason)
        key = json.dumps(values, sort_keys=True, default=str)
        trial.set_user_attr("config_key", key)
        if repeat or self.conf.get("repeat", False):
            return values, None
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.user_attrs.get("config_key") == key and t.user_attrs.get("status") == "complete":
                metrics = {k: v for k, v in t.user_attrs.items() if k not in _NOT_METRICS}
                return values, TrialOutcome(Status.SKIPPED, f"duplicate:{t.number}",
                                            f"same configuration as trial {t.number}; its result is reused",
                                            metrics=metrics)
        return values, None

    def _context(self, trial: optuna.Trial, values: dict[str, Any], job_idx: int) -> dict[str, Any]:
        """What the task needs to know of the sweep, passed as one override (no Hydra singletons: thread safe)."""
        types = store.column_types(value_types(self.space), self.defaults)
        return {
            "study": self.study_name, "number": trial.number, "storage": self.storage_url,
            "objectives": [f"{m}:{d}" for m, d in self.objectives],
            "log_dir": str(Path(str(self.config.hydra.sweep.dir)) / str(job_idx)),
            "column_types": {c: str(t) for c, t in types.items()},
            "pruner": dict(self.pruner_conf), "baseline": self._is_baseline(values),
            "confirm_of": trial.user_attrs.get("confirm_of"), "facts": self._facts(),
        }

    def _facts(self) -> dict[str, dict[str, Any]]:
        return store.sweep_facts({**self.space.inactive, **self.space.params}, self.defaults)

    def _device(self) -> Any:
        if getattr(self, "_device_info", None) is None:
            self._device_info = gpu.device_info()  # the same description resolve_space built the defaults with
        return self._device_info

    def _is_baseline(self, values: dict[str, Any]) -> bool:
        """This configuration is the workload's defaults (what a user gets without tuning)."""
        return all(values.get(k) is None or values.get(k) == self.defaults.get(k) for k in self.space.params)

    def _run_job(self, trial: optuna.Trial, values: dict[str, Any], slot: Slot, job_idx: int) -> Any:
        """Launch one trial through Hydra's launcher (runs in a worker thread; returns JobReturn or the error)."""
        sampled = [override_string(k, v) for k, v in {**self.space.fixed, **values}.items()]
        overrides = self.fixed_args + sampled + slot_overrides(slot)
        ctx = {**self._context(trial, values, job_idx), "overrides": overrides}
        context = json.dumps(ctx, separators=(",", ":"), default=str)
        overrides = overrides + [override_string("trial.context", context)]
        try:
            return jobs.launch_one(self.launcher, overrides, job_idx)
        except Exception as e:  # noqa: BLE001 - a launcher error fails this trial, not the sweep
            return e

    def _record(self, number: int, values: dict[str, Any], outcome: TrialOutcome, only_if_missing: bool = False) -> None:
        """The Parquet row for a trial the task could not write itself (never launched, or its job crashed)."""
        path = store.trial_path(self.trials_dir, self.study_name, number)
        if only_if_missing and store.has_trial(self.trials_dir, self.study_name, number):
            return
        cfg = with_values(json.loads(json.dumps(self.cfg, default=str)), {**self.space.fixed, **values})
        row = store.make_row(outcome, study=self.study_name, trial=number, cfg=cfg, objectives=self.objectives)
        row["baseline"] = self._is_baseline(values)
        row.update(store.facts_columns(self._facts()))
        store.write_row(path, row, store.column_types(value_types(self.space), self.defaults))


_STOP = object()
_NOT_METRICS = ("config_key", st.OWNER_KEY, "status", "confirm_of", st.REASON_KEY, st.COST_KEY, warm.FROM_KEY)
