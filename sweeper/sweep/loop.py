"""The sweep behind the Hydra plugin: ask -> check -> fit the budget -> launch -> settle.

Three collaborators do the work; this module only sequences them:

* :class:`~sweeper.sweep.run.scheduler.Scheduler`: slots, running futures, the wall-clock budget and its deadlines;
* :class:`~sweeper.sweep.search.costs.CostModel`: a configuration's predicted seconds: nothing starts that cannot end;
* :class:`~sweeper.sweep.run.settle.Settler`: the one path from an outcome to the row, the study and the console.

A sweep has two phases: the search (until ``n_trials`` counted trials, the budget, the failure budget or an
exhausted space) and the re-measurements (the baseline and the best again on every device, profiled on a GPU, whose
cost the search keeps in reserve; then unstable ones: ``sweeper.sweep.run.remeasure``). Why it stopped is one ``Stop``.
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
from concurrent.futures import wait
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig
from optuna.trial import TrialState

from sweeper.errors import ConfigError
from sweeper.results import store
from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.config.settings import KnobSweeperConf, settings_of
from sweeper.sweep.plan import SweepPlan, prepare
from sweeper.sweep.run import checks, jobs, launch, recovery, remeasure
from sweeper.sweep.run.admission import UNLIMITED, Admission
from sweeper.sweep.run.progress import SweepProgress, log_launches_to
from sweeper.sweep.run.scheduler import Running, Scheduler, Stop, StopPolicy, process_start
from sweeper.sweep.run.settle import Settler
from sweeper.sweep.run.words import DEFAULT_N_TRIALS, costs_error, failure_text, why_ended
from sweeper.sweep.search import dedup, warm
from sweeper.sweep.search.budget import Budget
from sweeper.sweep.search.costs import PREDICTED_KEY, CostModel
from sweeper.sweep.study import trials as studies
from sweeper.sweep.study.attrs import SPENT_KEY
from sweeper.sweep.study.faults import fault_point
from sweeper.trial import gpu
from sweeper.trial import isolate as runner

RECOVER_EVERY_S = 1.0  # how often other processes' dead trials and duplicate waits are looked at
MAX_DUPLICATES_IN_A_ROW = 100  # a space too large to enumerate: the sampler is taken to be stuck
STUCK_AFTER = 5  # an enumerable space: after this many duplicates in a row, an unmeasured configuration is queued
MAX_OVER_BUDGET_IN_A_ROW = 10  # proposals that cannot end within the budget, nothing else fitting: the search ends
NOT_METRICS = (studies.OWNER_KEY, "status", "confirm_of", studies.REASON_KEY, studies.COST_KEY, warm.FROM_KEY,
               remeasure.FOR_KEY, remeasure.PROFILE_KEY, SPENT_KEY, PREDICTED_KEY)  # fmt: skip
Launch = tuple[Any, dict[str, Any], dict[str, Any]]  # (trial, values, launch extras): what _start submits


class SweepImpl:
    def __init__(self, **conf: Any) -> None:
        self.settings: KnobSweeperConf = settings_of(conf)
        self.config: DictConfig | None = None
        self.launcher: Any = None
        self.started_at = process_start()

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config = config
        self.launcher = launch.thread_safe_launcher(hydra_context, task_function, config)

    # ------------------------------------------------------------------ one command

    def sweep(self, arguments: list[str]) -> list[Any]:
        return recovery.guarded(lambda: self._sweep(arguments), lambda: getattr(getattr(self, "plan", None),
                                                                                 "storage_url", ""))  # fmt: skip

    def _sweep(self, arguments: list[str]) -> list[Any]:
        recovery.start_forkserver_here(self.config, launch.may_run_here(self.launcher))  # imports while we start
        try:
            self.budget = Budget(self.settings.timeout_s, self.started_at)  # the one clock of the sweep's budget
            self.plan: SweepPlan = prepare(self.settings, self.config, self.launcher, arguments, self.budget)
        except ConfigError as e:
            from sweeper.sweep.cli import fail

            fail(e)
        s, plan = self.settings, self.plan
        self.policy = StopPolicy()
        self.costs = CostModel(plan.expensive, s.cost_prior, measure=plan.cfg.get("measure"))
        self.scheduler = Scheduler(plan.slots, plan.node, grace_s=s.grace_s, budget=self.budget)
        self.admission = Admission(plan, s, self.costs, self.budget)
        self.waits = dedup.Waiting()  # trials whose configuration another trial is measuring right now
        self.valid_keys, self.enumerated = None, False  # the space's configurations, enumerated at the first duplicate
        self.duplicates_in_a_row = self.over_budget_in_a_row = 0
        self.reserve_s = 0.0
        self.settler = Settler(plan)
        self.settler.recover()
        target = studies.update_target(plan.study, self._n_trials())
        done = sum(1 for t in plan.study.get_trials(deepcopy=False) if studies.is_counted(t) and t.state.is_finished())
        shown = target if target < UNLIMITED else None  # None: the budget is the only limit
        progress = SweepProgress.of(plan, shown, done, s.timeout_s, self.scheduler.time_left)  # says it opened
        self.settler.progress = progress
        if isinstance(plan.study.sampler, optuna.samplers.BaseSampler) and hasattr(plan.study.sampler, "fits"):
            plan.study.sampler.fits = self._fits  # the staged sampler promotes only what fits
        log_launches_to(Path(str(self.config.hydra.sweep.dir)) / "sweep.log")
        results: list[Any] = []
        try:
            with progress, studies.Heartbeat(plan.storage) as heartbeat:
                if not isinstance(plan.study.sampler, optuna.samplers.GridSampler):  # the grid holds them all
                    warm.queue_first(plan, s.warm_start_k, s.baseline_first)
                for params in recovery.requeue_interrupted(plan.study):  # cut by the budget too often
                    progress.note(f"too slow for the budget: cut by it {recovery.MAX_BUDGET_CUTS} times, not "
                                  "measured again: " + " ".join(f"{k}={v}" for k, v in params.items()))  # fmt: skip
                self.waits.heartbeat = heartbeat  # waiting trials beat too: other trials may wait for them
                self.heartbeat = heartbeat
                results += self._run(lambda: studies.counted(plan.study) < target)
                searched = self.policy.reason or Stop.N_TRIALS
                if searched not in (Stop.FAILURES, Stop.INTERRUPTED):
                    self.policy.reason = None  # the re-measurements run on what the search left of the budget
                    results += self._remeasure(target, progress, searched)
                    self.policy.reason = self.policy.reason or searched
                self._say_why(progress)
            progress.summary(plan.study)
        finally:
            self.scheduler.close()
        launch.compact_and_refresh(plan.trials_dir.parent, plan.study_name, plan.study_id)  # nothing of ours runs
        code = self.policy.exit_code()
        if code:
            raise SystemExit(code)
        return results

    def _remeasure(self, target: int, progress: SweepProgress, searched: Stop) -> list[Any]:
        """The baseline and the best again (profiled where asked), each only if it fits what is left; a sweep whose
        search reached its end and whose re-measurements all ran is finished (the next command starts anew)."""
        s, plan = self.settings, self.plan
        if searched in (Stop.N_TRIALS, Stop.EXHAUSTED):
            studies.mark_searched(plan.study, target)
        wanted = remeasure.plan(plan.study, plan.objectives, self.admission.baseline(), s.confirm_top_k,
                                self.admission.profile_k(), s.confirm_unstable)  # fmt: skip
        todo = remeasure.pending(plan.study, wanted, target)
        cost = functools.partial(remeasure.cost_s, plan.study, self.costs, profile_steps=int(s.profile_steps))
        fits = remeasure.that_fit(todo, cost, self.scheduler.fits, len(self.scheduler.slots))
        if len(fits) < len(todo):
            self.policy.stop(Stop.BUDGET)
            self.plan_note(f"budget: {len(todo) - len(fits)} of {len(todo)} re-measurements do not fit the "
                           f"{self._left_text()} left")  # fmt: skip
        remeasure.enqueue(plan.study, fits, target)
        progress.extend(len(fits))
        results = self._run(lambda: remeasure.queued(plan.study))
        if searched in (Stop.N_TRIALS, Stop.EXHAUSTED) and self.policy.reason is None:
            if not remeasure.pending(plan.study, wanted, target):
                studies.mark_finished(plan.study, target)
        return results

    # ------------------------------------------------------------------ the loop of one phase

    def _run(self, more: Any) -> list[Any]:
        """Keep every slot busy while ``more()`` holds and nothing stops the sweep; returns the jobs' returns."""
        results: list[Any] = []
        last_recovery = 0.0
        with self._interruptible() as interrupts:
            while True:
                interrupts.check()
                if time.time() - last_recovery >= RECOVER_EVERY_S:
                    self.settler.recover()  # trials of another process that died (dead pid, stale heartbeat)
                    last_recovery = time.time()
                for trial, values, earlier in self.waits.poll(self.plan.study):
                    self._settle_unlaunched(trial, values, dedup.reuse(earlier, NOT_METRICS))
                blocked = self._start(more)
                if self.scheduler.overdue():
                    self._give_up_running()
                if not self.scheduler.running:
                    if self.policy.stopped or self.scheduler.expired():
                        self.waits.give_up(self.plan.study, studies.REASON_KEY)
                        return results
                    if not more() and not self.waits and not studies.others_running(self.plan.study, self.plan.storage):
                        return results
                    self.scheduler.idle(0.2 if blocked else RECOVER_EVERY_S)
                    continue
                for run, ret in self.scheduler.finished(0.2 if blocked else RECOVER_EVERY_S, interrupts.check):
                    results.append(ret)
                    self._finish(run, ret)
                if studies.failure_budget_spent(self.plan.study, self.plan.max_failures, self.plan.max_failure_rate):
                    if self.policy.stop(Stop.FAILURES):
                        self.plan_note(
                            f"stopping: {studies.failures(self.plan.study)} failed trials reach the failure budget "
                            f"({failure_text(self.plan)}); the workload itself looks broken"
                        )

    def _start(self, more: Any) -> bool:
        """Start trials while a slot is free and something may start; True when a slot is held by another
        sweeper on this node (the caller polls sooner)."""
        while self.scheduler.free and not self.policy.stopped and (self.waits.ready or more()):
            if self.scheduler.expired():
                self.policy.stop(Stop.BUDGET)
                return False
            slot = self.scheduler.take_slot()
            if slot is None:
                return True
            item = self._admit(*self.waits.ready.pop(0), outcome=None) if self.waits.ready else self._next()
            if item is None:
                self.scheduler.give_back(slot)
                continue
            trial, values, extra = item
            self.heartbeat.add(trial._trial_id)
            run = Running(trial, values, slot, self.budget.now(), extra=extra)
            self.scheduler.submit(lambda r=run: self._launch(r), run)
        return False

    def _next(self) -> Launch | None:
        """Ask one trial: a Launch, or None (settled without launching, waiting for a twin, or the sweep stops)."""
        study = self.plan.study
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        sampler = study.sampler
        if not waiting and isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(study):
            if self.policy.stop(Stop.EXHAUSTED):
                self.plan_note("space exhausted: every configuration of the grid has been tried")
            return None
        if not waiting and not self.admission.any_fits():
            if self.policy.stop(Stop.BUDGET):
                self.plan_note(f"budget: no trial fits in the {self._left_text()} left")
            return None
        with warnings.catch_warnings():  # the heartbeat of ask/tell trials is recorded by studies.Heartbeat
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
            trial = studies.ask(study)
        repeat = studies.CONFIRM_KEY in trial.user_attrs
        if not repeat and self._is_surplus(trial):
            trial.set_user_attr(studies.REASON_KEY, Reason.SURPLUS.tag())
            study.tell(trial, state=TrialState.FAIL)
            return None
        values, outcome = checks.sample(self.plan, trial, self._device(), repeat or self.settings.repeat, NOT_METRICS)
        fault_point("sampled")
        if outcome is checks.WAIT:
            self.waits.add(trial, values)
            self.plan_note(f"trial {trial.number} waits: trial {trial.user_attrs.get(dedup.WAITS_KEY)} is measuring "
                           "the same configuration")  # fmt: skip
            return None
        return self._admit(trial, values, outcome)

    def _admit(self, trial: Any, values: dict[str, Any], outcome: TrialOutcome | None) -> Launch | None:
        """The one way to a launch, for a trial just sampled and for a waiter whose twin ended without a result:
        (trial, values, launch extras) when nothing decided it (``outcome`` None) and it is predicted to end in the
        budget; else settled without launching (over budget, or ``outcome``), and None."""
        study, repeat = self.plan.study, studies.CONFIRM_KEY in trial.user_attrs
        profile = bool(trial.user_attrs.get(remeasure.PROFILE_KEY))
        if outcome is None and not self._fits(values, profile, reserve=not repeat, repeat=repeat):
            why, left = self.costs.explain(study, values), self._left_text()
            outcome = TrialOutcome(Status.SKIPPED, Reason.OVER_BUDGET.tag(why),
                                   f"predicted {why} does not end in the {left} left")  # fmt: skip
        if outcome is None:
            self.over_budget_in_a_row = 0
            predicted = round(self.admission.predict(values, profile, repeat), 2)
            with contextlib.suppress(Exception):
                trial.set_user_attr(PREDICTED_KEY, predicted)  # beside its wall time in the row and the summary
            return trial, values, {"profile": profile, PREDICTED_KEY: predicted}
        self.heartbeat.discard(trial._trial_id)  # a waiter beat while it waited
        self._settle_unlaunched(trial, values, outcome)
        return None

    def _settle_unlaunched(self, trial: Any, values: dict[str, Any], outcome: TrialOutcome) -> None:
        """A trial decided without launching (constraint, duplicate, over budget): settled; an exhausted space or a
        sampler that only proposes what cannot end in time stops the search."""
        self.settler.settle(trial._trial_id, trial.number, values, outcome, launched=False)
        if outcome.kind is Reason.OVER_BUDGET:
            self.over_budget_in_a_row += 1
            spare = None if self.policy.stopped else self.admission.queue_spare()
            if spare is not None:  # the rest of the budget goes where it pays
                self.plan_note(f"trial {trial.number} does not fit the {self._left_text()} left; queued {spare}")
                return
            if self.over_budget_in_a_row >= MAX_OVER_BUDGET_IN_A_ROW and self.policy.stop(Stop.BUDGET):
                self.plan_note(f"budget: the last {self.over_budget_in_a_row} proposals cannot end in the "
                               f"{self._left_text()} left")  # fmt: skip
            return
        if outcome.kind is not Reason.DUPLICATE:
            return
        self.duplicates_in_a_row += 1
        if self.policy.stopped:
            return
        if not self.enumerated:
            self.valid_keys, self.enumerated = dedup.valid_keys(self.plan.space, self.plan.defaults), True
        if dedup.exhausted(self.plan.study, self.valid_keys):
            self.policy.stop(Stop.EXHAUSTED)
            self.plan_note(f"space exhausted: all {len(self.valid_keys)} configurations of the search space are "
                           "measured (or cannot run here); widen the space (or hydra.sweeper.repeat=true to measure "
                           "again)")  # fmt: skip
        elif self.duplicates_in_a_row >= MAX_DUPLICATES_IN_A_ROW:
            self.policy.stop(Stop.EXHAUSTED)
            self.plan_note(f"space exhausted: the sampler proposed {self.duplicates_in_a_row} measured "
                           "configurations in a row (widen the space, or try another sampler)")  # fmt: skip
        elif self.valid_keys and self.duplicates_in_a_row % STUCK_AFTER == 0:
            queued = dedup.enqueue_untried(self.plan.study, self.valid_keys)
            if queued:
                self.plan_note(f"the sampler proposed {self.duplicates_in_a_row} measured configurations in a row; "
                               f"queued one of the {queued} not yet measured")  # fmt: skip

    def _finish(self, run: Running, ret: Any) -> None:
        """A launched trial ended: settled from its job's return (or its row, when the job failed around it)."""
        recovery.raise_if_disk_full(ret, self.plan.trials_dir.parent)
        outcome = launch.outcome_of(ret)
        if outcome.status is Status.FAILED and outcome.kind in (Reason.EXCEPTION, Reason.LAUNCHER):
            outcome = self.settler.row_outcome(run.trial.number) or outcome  # it wrote its row: it ran
        with contextlib.suppress(Exception):  # what it cost the budget, for the cost model
            run.trial.set_user_attr(SPENT_KEY, round(self.budget.now() - run.started, 2))
        self.settler.settle(run.trial._trial_id, run.trial.number, run.values, outcome, launched=True)
        self.heartbeat.discard(run.trial._trial_id)
        if outcome.status is not Status.SKIPPED:
            self.duplicates_in_a_row = 0
        self.scheduler.give_back(run.slot)

    def _give_up_running(self) -> None:
        """Past budget + grace + backstop: trials that did not stop themselves are killed and recorded."""
        runner.interrupt_all()
        wait(list(self.scheduler.running), timeout=30)
        for fut, run in list(self.scheduler.running.items()):
            self.scheduler.running.pop(fut)
            with contextlib.suppress(Exception):  # what it ran before the cut: a lower bound for the cost model
                run.trial.set_user_attr(SPENT_KEY, round(self.budget.now() - run.started, 2))
            self.settler.interrupted(run.trial._trial_id, run.trial.number, run.values, "budget",
                                     "the sweep's time budget ended while this trial ran; it runs again")  # fmt: skip
            self.scheduler.give_back(run.slot)
        self.policy.stop(Stop.BUDGET)

    @contextlib.contextmanager
    def _interruptible(self) -> Any:
        """Ctrl-C, SIGTERM or a full disk while trials run: their process groups are killed at once, each running
        trial is settled (interrupted, or what its row says if it ended just before), and trials waiting for a
        twin never ran (surplus, not counted). Signals are raised at the loop's checks (``DeferredInterrupts``)."""
        with recovery.DeferredInterrupts() as interrupts:
            try:
                yield interrupts
                interrupts.check()  # noted as the phase ended: the sweep stops here, not after the next phase
            except (KeyboardInterrupt, store.DiskFull):
                self._settle_interrupted()
                raise

    def _settle_interrupted(self) -> None:
        self.policy.stop(Stop.INTERRUPTED)
        runner.interrupt_all()
        wait(list(self.scheduler.running), timeout=30)
        for run in list(self.scheduler.running.values()):
            self.settler.interrupted(run.trial._trial_id, run.trial.number, run.values, "interrupted",
                                     "the sweep was interrupted while this trial ran; the same command runs it "
                                     "again")  # fmt: skip
        with contextlib.suppress(Exception):
            self.waits.give_up(self.plan.study, studies.REASON_KEY)
        me = studies.owner_id()  # asked but not yet launched (sampling, the device check): never ran
        for t in self.plan.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.user_attrs.get(studies.OWNER_KEY) == me:
                self.settler.interrupted(t._trial_id, t.number, dict(t.params), "interrupted",
                                         "the sweep was interrupted before this trial started; the same command "
                                         "runs it")  # fmt: skip

    # ------------------------------------------------------------------ sampling and checks

    def _fits(self, params: dict[str, Any], profile: bool = False, reserve: bool = True, repeat: bool = False) -> bool:
        """A trial of ``params`` is predicted to end within the budget (``sweeper.sweep.run.admission``)."""
        return self.admission.fits(params, profile, reserve, repeat)

    def _n_trials(self) -> int:
        """``n_trials``; unset: the budget is the only limit where ``timeout_s`` is given, else ``DEFAULT_N_TRIALS``."""
        if self.settings.n_trials is not None:
            return int(self.settings.n_trials)
        return UNLIMITED if self.settings.timeout_s else DEFAULT_N_TRIALS

    def _is_surplus(self, trial: optuna.Trial) -> bool:
        """Another process on the same study got there first: this ask would exceed the target (queued: once asked)."""
        target, trials = self.plan.study.user_attrs.get(studies.TARGET_KEY), self.plan.study.get_trials(deepcopy=False)
        earlier = [
            t for t in trials if t.number < trial.number and t.state != TrialState.WAITING and studies.is_counted(t)
        ]
        return target is not None and len(earlier) >= int(target)

    # ------------------------------------------------------------------ launching

    def _launch(self, run: Running) -> Any:
        """One trial through Hydra's launcher (in a worker thread; returns the JobReturn or the error)."""
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        overrides = jobs.overrides(self.plan, self.settings, run, sweep_dir, self.scheduler.stop_at())
        try:
            return launch.launch_one(self.launcher, overrides, run.trial.number)  # job folder = trial number
        except Exception as e:  # noqa: BLE001 - a launcher error fails this trial, not the sweep
            return e

    def _device(self) -> Any:
        if getattr(self, "_device_info", None) is None:
            self._device_info = gpu.device_info()  # the same description the plan built the defaults with
        return self._device_info

    # ------------------------------------------------------------------ words

    def plan_note(self, text: str) -> None:
        if self.settler.progress is not None:
            self.settler.progress.note(text)

    def _say_why(self, progress: SweepProgress) -> None:
        """Why the sweep ended, the budget it used, and how far the cost model's predictions were from the walls."""
        for line in (why_ended(self.policy.reason, self.settings, self.scheduler, self._n_trials()),
                     costs_error(self.plan.study)):  # fmt: skip
            if line:
                progress.note(line)

    def _left_text(self) -> str:
        left = self.scheduler.time_left()
        return "no limit" if left is None else f"{max(0.0, left):.0f} s"
