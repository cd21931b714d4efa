"""The sweep loop behind the Hydra plugin: ask -> check -> launch through Hydra's launcher -> tell -> record.

A trial's own failure never ends the sweep: every JobReturn is classified into a TrialOutcome and told.
Configurations that break a declared constraint, or that were already measured, never launch.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig, OmegaConf
from optuna.trial import TrialState

from sweeper import gpu, store, study as st
from sweeper.config import plain as config_plain, preset_params, trial_config
from sweeper.errors import ConfigError
from sweeper.outcome import Status, TrialOutcome
from sweeper.progress import SweepProgress
from sweeper.space import SearchSpace, build_space, evaluate, flatten, override_string, value_types

log = logging.getLogger(__name__)
KNOWN_METRICS = (
    "throughput", "peak_mem_bytes", "peak_mem_reserved_bytes", "step_ms_p50", "step_ms_p10", "step_ms_p90",
    "step_ms_mean", "step_cv", "data_wait_frac", "achieved_tflops", "mfu", "gpu_util_mean", "gpu_util_p10",
    "first_step_s", "setup_s", "compile_s", "measured_s",
)


class SweepImpl:
    def __init__(self, **conf: Any) -> None:
        self.conf = conf
        self.config: DictConfig | None = None
        self.launcher: Any = None
        self.job_idx = 0

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    # ------------------------------------------------------------------ setup of one sweep

    def _prepare(self, arguments: list[str]) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        c = self.conf
        if int(c.get("n_trials", 10)) < 1:
            raise ConfigError("hydra.sweeper.n_trials", f"must be >= 1, got {c.get('n_trials')}",
                              "give the number of trials this command should add")
        plain = config_plain(self.config)
        self.cfg = trial_config(plain, gpu.device_info())
        self.workload = self.cfg["workload"]["name"]
        params = dict(c.get("params") or {})
        params.update(preset_params(self.cfg))
        self.fixed_args: list[str] = []
        for override in OverridesParser.create().parse_overrides(arguments):
            key = override.get_key_element()
            if override.is_sweep_override():
                params[key.lstrip("+~")] = override.input_line.split("=", 1)[1]
            else:
                self.fixed_args.append(override.input_line)
        defaults = flatten({k: v for k, v in self.cfg.items() if k in ("knobs", "workload", "measure", "data")})
        self.space: SearchSpace = build_space(params, dict(c.get("conditions") or {}),
                                              list(c.get("constraints") or []), defaults)
        self.defaults = defaults
        self.objectives = [(str(o["metric"]), str(o.get("direction", "maximize"))) for o in c["objectives"]]
        self._check_objectives()
        results_dir = Path(self.cfg["results_dir"])
        self.trials_dir = results_dir / "trials"
        self.study_name = c.get("study_name") or (self.workload + (f"-{self.cfg['preset']}" if self.cfg["preset"] else ""))
        url = st.storage_url(c.get("storage"), results_dir)
        self.storage = st.make_storage(url, c.get("heartbeat_interval"), c.get("grace_period"))
        sampler = st.make_sampler(str(c.get("sampler", "tpe")), c.get("seed"), self.space, len(self.objectives))
        try:
            self.study = optuna.create_study(
                study_name=self.study_name, storage=self.storage, sampler=sampler, load_if_exists=True,
                directions=[d for _m, d in self.objectives])
        except ValueError as e:
            raise ConfigError("hydra.sweeper.objectives", str(e).splitlines()[0],
                              "use the study's original objectives or a new hydra.sweeper.study_name") from None
        self.n_jobs = max(1, int(c.get("n_jobs") or 1))
        self.max_failures = c.get("max_failures")

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
        self._recover_interrupted()
        target = st.update_target(self.study, int(self.conf.get("n_trials", 10)))
        sampler = self.study.sampler
        progress = SweepProgress(self.study_name, target, self.objectives, self._counted())
        results: list[Any] = []
        with progress:
            while True:
                if self._failure_budget_spent():
                    progress.note(f"stopping: {self._failures()} failed trials reach max_failures="
                                  f"{self.max_failures}; the workload itself looks broken")
                    raise SystemExit(1)
                remaining = target - self._counted()
                if remaining <= 0:
                    break
                if isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(self.study):
                    progress.note("grid exhausted: every configuration of the space has been tried")
                    break
                batch = self._ask_batch(min(self.n_jobs, remaining), target, progress)
                if batch:
                    results.extend(self._launch(batch, progress))
        progress.summary(self.study)
        return results

    def _counted(self) -> int:
        return sum(1 for t in self.study.get_trials(deepcopy=False) if st.is_counted(t))

    def _failures(self) -> int:
        return sum(1 for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                   if st.is_counted(t))

    def _failure_budget_spent(self) -> bool:
        return self.max_failures is not None and self._failures() >= int(self.max_failures)

    def _recover_interrupted(self) -> None:
        """Trials left RUNNING by a killed sweeper on this host: FAIL (interrupted), with a Parquet row."""
        for t in st.orphaned_running(self.study):
            now = time.time()
            outcome = TrialOutcome(Status.FAILED, "interrupted", "the sweeper running this trial was killed",
                                   started_at=t.datetime_start.timestamp() if t.datetime_start else now, ended_at=now)
            self.storage.set_trial_user_attr(t._trial_id, st.REASON_KEY, "interrupted")
            self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            self._record(t.number, t.params, outcome, only_if_missing=True)
            log.warning("trial %d was interrupted (its sweeper died); marked failed", t.number)

    def _ask_batch(self, n: int, target: int, progress: SweepProgress) -> list[tuple[optuna.Trial, dict[str, Any]]]:
        batch = []
        for _ in range(n):
            trial = self.study.ask()
            trial.set_user_attr(st.OWNER_KEY, st.owner_id())
            if self._is_surplus(trial, target):
                trial.set_user_attr(st.REASON_KEY, "surplus")
                self.study.tell(trial, state=TrialState.FAIL)
                break
            values, outcome = self._sample(trial)
            if outcome is not None:  # never launched
                outcome.started_at = outcome.ended_at = time.time()
                st.tell(self.study, trial, outcome, self.objectives)
                self._record(trial.number, values, outcome)
                progress.trial_done(trial.number, outcome, values)
                continue
            batch.append((trial, values))
        return batch

    def _is_surplus(self, trial: optuna.Trial, target: int) -> bool:
        """Another process on the same study got there first: this ask would exceed the target."""
        earlier = [t for t in self.study.get_trials(deepcopy=False)
                   if t.number < trial.number and st.is_counted(t)]
        return len(earlier) >= target

    def _sample(self, trial: optuna.Trial) -> tuple[dict[str, Any], TrialOutcome | None]:
        """Define-by-run sampling with declared conditions; then constraints and duplicate checks."""
        ns = dict(self.defaults)
        ns.update(self.space.fixed)
        values: dict[str, Any] = {}
        for name, dist in self.space.params.items():
            cond = self.space.conditions.get(name)
            if cond is not None and not evaluate(cond, ns):
                values[name] = ns[name] = None
                continue
            values[name] = ns[name] = st.suggest(trial, name, dist)
        for expr in self.space.constraints:
            if not evaluate(expr, ns):
                return values, TrialOutcome(Status.SKIPPED, f"invalid:{expr}", f"constraint does not hold: {expr}")
        key = json.dumps(values, sort_keys=True, default=str)
        trial.set_user_attr("config_key", key)
        if not self.conf.get("repeat", False):
            for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
                if t.user_attrs.get("config_key") == key and t.user_attrs.get("status") == "complete":
                    metrics = {k: v for k, v in t.user_attrs.items() if k not in ("config_key", st.OWNER_KEY)}
                    metrics.pop("status", None)
                    return values, TrialOutcome(Status.SKIPPED, f"duplicate:{t.number}",
                                                f"same configuration as trial {t.number}; its result is reused",
                                                metrics=metrics)
        return values, None

    def _overrides(self, trial: optuna.Trial, values: dict[str, Any]) -> list[str]:
        sampled = [override_string(k, v) for k, v in {**self.space.fixed, **values}.items()]
        return self.fixed_args + sampled + [override_string("trial.study", self.study_name),
                                            override_string("trial.number", trial.number)]

    def _launch(self, batch: list[tuple[optuna.Trial, dict[str, Any]]], progress: SweepProgress) -> list[Any]:
        overrides = [self._overrides(trial, values) for trial, values in batch]
        try:
            returns = self.launcher.launch(overrides, initial_job_idx=self.job_idx)
        except Exception as e:  # noqa: BLE001 - a launcher error fails these trials, not the sweep
            returns = [e] * len(batch)
        self.job_idx += len(batch)
        for (trial, values), ret in zip(batch, returns):
            outcome = _outcome_of(ret)
            st.tell(self.study, trial, outcome, self.objectives)
            self._record(trial.number, values, outcome, only_if_missing=True)
            progress.trial_done(trial.number, outcome, values)
        return list(returns)

    def _record(self, number: int, values: dict[str, Any], outcome: TrialOutcome, only_if_missing: bool = False) -> None:
        """The Parquet row for a trial the task could not write itself (never launched, or its job crashed)."""
        path = store.trial_path(self.trials_dir, self.study_name, number)
        if only_if_missing and path.exists():
            return
        cfg = json.loads(json.dumps(self.cfg, default=str))
        for key, value in {**self.space.fixed, **values}.items():
            *parents, leaf = key.split(".")
            target = cfg
            for part in parents:
                target = target.setdefault(part, {})
            target[leaf] = value
        store.write_row(path, store.make_row(outcome, study=self.study_name, trial=number, cfg=cfg,
                                             objectives=self.objectives),
                        store.column_types(value_types(self.space)))


def _outcome_of(ret: Any) -> TrialOutcome:
    """A launcher's JobReturn (or the exception it raised) -> TrialOutcome."""
    from hydra.core.utils import JobStatus

    now = time.time()
    if isinstance(ret, BaseException):
        return TrialOutcome(Status.FAILED, f"launcher:{type(ret).__name__}", str(ret)[:2000], started_at=now, ended_at=now)
    if ret.status == JobStatus.COMPLETED and isinstance(ret.return_value, dict):
        return TrialOutcome.from_dict(ret.return_value)
    exc = getattr(ret, "_return_value", None)
    name = type(exc).__name__ if isinstance(exc, BaseException) else "unknown"
    return TrialOutcome(Status.FAILED, f"exception:{name}", str(exc)[:2000], started_at=now, ended_at=now)

