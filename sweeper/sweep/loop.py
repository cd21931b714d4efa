"""The sweep behind the Hydra plugin: ask -> check -> fit the budget -> launch -> settle.

:class:`SweepImpl` is what the plugin hands over to; each command is one :class:`Sweep`, which only sequences its
collaborators:

* :class:`~sweeper.sweep.run.scheduler.Scheduler`: slots, running futures, the wall-clock budget and its deadlines;
* :class:`~sweeper.sweep.search.costs.CostModel` through :class:`~sweeper.sweep.run.admission.Admission`: a
  configuration's predicted seconds: nothing starts that cannot end;
* :class:`~sweeper.sweep.run.settle.Settler`: the one path from an outcome to the row, the study and the console;
* :class:`~sweeper.sweep.run.stop.StopPolicy`: every stop rule and streak; the loop reports events and does what it
  decides (:meth:`Sweep._obey`).

A sweep has two phases: the search (until ``n_trials`` counted trials, the budget, the failure budget or an
exhausted space) and the re-measurements (the baseline and the best again on every device, profiled on a GPU, whose
cost the search keeps in reserve; then unstable ones: ``sweeper.sweep.run.remeasure``), each with its own policy.
Why the sweep stopped is one ``Stop``: the re-measurements', else the search's.
"""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig
from optuna.trial import TrialState

from sweeper.errors import ConfigError
from sweeper.results import store
from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.config.settings import KnobSweeperConf, graph_neutral, priors_per_op, settings_of
from sweeper.sweep.config.trial_config import knob_class, load_workload
from sweeper.sweep.plan import SweepPlan, prepare
from sweeper.sweep.run import checks, cut, jobs, launch, recovery, remeasure
from sweeper.sweep.run.admission import UNLIMITED, Admission
from sweeper.sweep.run.progress import SweepProgress, log_launches_to
from sweeper.sweep.run.scheduler import Running, Scheduler, process_start
from sweeper.sweep.run.settle import Settler
from sweeper.sweep.run.stop import Act, Action, Configurations, Decision, Ended, Stop, StopPolicy, left_text
from sweeper.sweep.run.words import DEFAULT_N_TRIALS, costs_error, failure_text, why_ended
from sweeper.sweep.search import dedup, failing, warm
from sweeper.sweep.search.budget import Budget
from sweeper.sweep.search.costs import CostModel
from sweeper.sweep.study import optuna_private as private
from sweeper.sweep.study import trials as studies
from sweeper.sweep.study.attrs import (
    CONFIRM_KEY,
    PREDICTED_KEY,
    PROFILE_KEY,
    REASON_KEY,
    SPENT_KEY,
    TARGET_KEY,
    WAITS_KEY,
)
from sweeper.sweep.study.faults import fault_point
from sweeper.trial import gpu, warm_cache

RECOVER_EVERY_S = 1.0  # how often other processes' dead trials and duplicate waits are looked at
Launch = tuple[Any, dict[str, Any], dict[str, Any]]  # (trial, values, launch extras): what _start submits
LaunchOne = Callable[[list[str], int], Any]  # (overrides, trial number) -> the job's return


class SweepImpl:
    """What the Hydra plugin hands over to: the sweeper's settings and Hydra's launcher; a command is a
    :class:`Sweep`."""

    def __init__(self, **conf: Any) -> None:
        self.settings: KnobSweeperConf = settings_of(conf)
        self.config: DictConfig | None = None
        self.launcher: Any = None
        self.started_at = process_start()
        self.plan: SweepPlan | None = None  # the command's plan, once prepared

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        self.config = config
        self.launcher = launch.thread_safe_launcher(hydra_context, task_function, config)

    def sweep(self, arguments: list[str]) -> list[Any]:
        return recovery.guarded(lambda: self._sweep(arguments), lambda: self.plan.storage_url if self.plan else "")

    def _sweep(self, arguments: list[str]) -> list[Any]:
        assert self.config is not None, "setup() comes first"
        recovery.start_forkserver_here(self.config, launch.may_run_here(self.launcher))  # imports while we start
        budget = Budget(self.settings.timeout_s, self.started_at)  # the one clock of the sweep's budget
        try:
            self.plan = prepare(self.settings, self.config, self.launcher, arguments, budget)
        except ConfigError as e:
            from sweeper.sweep.cli import fail

            fail(e)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        one = functools.partial(launch.launch_one, self.launcher)
        sweep = Sweep(self.plan, self.settings, budget, self._n_trials(), one, sweep_dir)
        log_launches_to(sweep_dir / "sweep.log")
        return sweep.run()

    def _n_trials(self) -> int:
        """``n_trials``; unset: the budget is the only limit where ``timeout_s`` is given, else ``DEFAULT_N_TRIALS``."""
        if self.settings.n_trials is not None:
            return int(self.settings.n_trials)
        return UNLIMITED if self.settings.timeout_s else DEFAULT_N_TRIALS


class Sweep:
    """One command's sweep of ``plan``: opened here (dead sweepers' trials recovered, the target set, the study's
    opening said); :meth:`run` searches, then re-measures. ``launch_one(overrides, number)`` runs one trial's job
    (in a slot's thread) and returns its return; ``sweep_dir``: Hydra's folder of the jobs."""

    def __init__(
        self,
        plan: SweepPlan,
        settings: KnobSweeperConf,
        budget: Budget,
        n_trials: int,
        launch_one: LaunchOne,
        sweep_dir: Path,
    ) -> None:
        s = settings
        self.plan, self.settings, self.budget, self.n_trials = plan, settings, budget, n_trials
        self.launch_one, self.sweep_dir = launch_one, sweep_dir
        self.costs = CostModel(
            plan.expensive, s.cost_prior, priors_per_op(s), measure=plan.cfg["measure"], neutral=graph_neutral(s)
        )
        self.scheduler = Scheduler(plan.slots, plan.node, grace_s=s.grace_s, budget=budget)
        self.admission = Admission(plan, s, self.costs, budget)
        # enumerated at a duplicate; this command's failures by the workload's answer are answers (plan.command)
        self.configurations = Configurations(plan.study, plan.space, plan.defaults, plan.command)
        self.policy = StopPolicy(budget, self.configurations)  # the search's; the re-measurements get their own
        self.heartbeat = studies.Heartbeat(plan.storage)
        self.waits = dedup.Waiting(plan.command)  # trials whose configuration another trial is measuring right now
        self.cut = 0  # trials the budget's end stopped (the summary's last line counts them)
        self.waits.heartbeat = self.heartbeat  # waiting trials beat too: other trials may wait for them
        self.device = gpu.device_info()  # the same description the plan built the defaults with
        self.settler = Settler(plan)
        self.settler.recover()
        self.target = studies.update_target(plan.study, n_trials)
        done = sum(1 for t in plan.study.get_trials(deepcopy=False) if studies.is_counted(t) and t.state.is_finished())
        shown = self.target if self.target < UNLIMITED else None  # None: the budget is the only limit
        self.progress = SweepProgress.of(plan, shown, done, s.timeout_s, self.scheduler.time_left)  # says it opened
        self.settler.progress = self.progress
        sampler = plan.study.sampler
        if isinstance(sampler, optuna.samplers.BaseSampler) and hasattr(sampler, "fits"):
            sampler.fits = self.admission.fits  # the staged sampler promotes only what fits
            sampler.neutral = graph_neutral(s)  # ... and knows which knobs leave a compiled graph as it is
            sampler.deferred = warm.deferred_start(plan, s.baseline_first)  # ... and proposes the handbook's start
            sampler.handbook = dict(plan.rules or {})  # ... whose values a knob a diagnosed step wakes takes

    # ------------------------------------------------------------------ the command: two phases

    def run(self) -> list[Any]:
        """The search, then the re-measurements (unless the search spent the failure budget or was interrupted);
        why it ended said; the study's rows compacted; exit 1 on the failure budget."""
        results: list[Any] = []
        plan = self.plan  # a CPU sweep's fresh compile cache, warmed beside its first trials
        knobs = knob_class(load_workload(plan.cfg["workload"]))
        warmer = warm_cache.start(plan.cfg, plan.space, plan.defaults, knobs)
        try:
            with self.progress, self.heartbeat:
                self._queue_first()
                results += self._phase(lambda: studies.counted(self.plan.study) < self.target)
                searched, remeasuring = self.policy.ended(), self.policy.remeasure()
                if remeasuring is not None:  # on what the search left of the budget
                    self.policy = remeasuring
                    results += self._remeasure(searched)
                self._say_why()
            self.progress.summary(self.plan.study)
        finally:
            warm_cache.stop(warmer)
            self.scheduler.close()
        launch.compact_and_refresh(self.plan.trials_dir.parent, self.plan.study_name, self.plan.study_id)
        code = self.policy.exit_code()
        if code:
            raise SystemExit(code)
        return results

    def _queue_first(self) -> None:
        """Earlier studies' best and the handbook's start first (a grid holds them all); trials interrupted before
        are queued again, except those the budget cut too often (said here)."""
        plan, s = self.plan, self.settings
        if not isinstance(plan.study.sampler, optuna.samplers.GridSampler):
            warm.queue_first(plan, s.warm_start_k, s.baseline_first)
            warm.queue_deferred(plan, s.baseline_first)  # one an earlier command left to the staged sampler
        for params in recovery.requeue_interrupted(plan.study):  # cut by the budget too often
            said = " ".join(f"{k}={v}" for k, v in params.items())
            self.progress.note(
                f"too slow for the budget: cut by it {recovery.MAX_BUDGET_CUTS} times, not measured again: {said}"
            )

    def _remeasure(self, searched: Stop) -> list[Any]:
        """The baseline and the best again (profiled where asked), each only if it fits what is left; a sweep whose
        search reached its end and whose re-measurements all ran is finished (the next command starts anew)."""
        s, plan, target = self.settings, self.plan, self.target
        if searched.searched:
            studies.mark_searched(plan.study, target)
        baseline, profile_k = self.admission.baseline(), self.admission.profile_k()
        wanted = remeasure.plan(plan.study, plan.objectives, baseline, s.confirm_top_k, profile_k, s.confirm_unstable)
        todo = remeasure.pending(plan.study, wanted, target)
        cost = functools.partial(remeasure.cost_s, plan.study, self.costs, profile_steps=int(s.profile_steps))
        fits = remeasure.that_fit(todo, cost, self.scheduler.fits, len(self.scheduler.slots))
        self._obey(self.policy.remeasures_fit(len(fits), len(todo)))
        remeasure.enqueue(plan.study, fits, target)
        self.progress.extend(len(fits))
        results = self._phase(lambda: remeasure.queued(plan.study))
        if searched.searched and not self.policy.stopped and not remeasure.pending(plan.study, wanted, target):
            studies.mark_finished(plan.study, target)
        return results

    # ------------------------------------------------------------------ one phase

    def _phase(self, more: Callable[[], bool]) -> list[Any]:
        """Keep every slot busy while ``more()`` holds and the policy has not stopped the phase; the jobs' returns."""
        results: list[Any] = []
        last_recovery = 0.0
        study = self.plan.study
        with self._interruptible() as interrupts:
            while True:
                interrupts.check()
                if time.time() - last_recovery >= RECOVER_EVERY_S:
                    self.settler.recover()  # trials of another process that died (dead pid, stale heartbeat)
                    last_recovery = time.time()
                for trial, values, earlier in self.waits.poll(study):
                    self._settle_unlaunched(trial, values, dedup.reuse(earlier))
                blocked = self._start(more)
                if self.scheduler.overdue():  # past budget + grace + backstop: trials that did not stop
                    self.cut += cut.give_up_running(self.scheduler, self.settler, self.budget)
                    self._obey(self.policy.deadline())
                period = 0.2 if blocked else RECOVER_EVERY_S
                if not self.scheduler.running:
                    if self.policy.stopped or self.scheduler.expired():
                        self.waits.give_up(study)
                        return results
                    if not more() and not self.waits and not studies.others_running(study, self.plan.storage):
                        return results
                    self.scheduler.idle(period)
                    continue
                for run, ret in self.scheduler.finished(period, interrupts.check):
                    results.append(ret)
                    self._finish(run, ret)
                if studies.failure_budget_spent(study, self.plan.max_failures, self.plan.max_failure_rate):
                    self._obey(self.policy.failures(studies.failures(study), failure_text(self.plan)))

    def _start(self, more: Callable[[], bool]) -> bool:
        """Start trials while a slot is free and something may start; True when a slot is held by another
        sweeper on this node (the caller polls sooner)."""
        while self.scheduler.free and not self.policy.stopped and (self.waits.ready or more()):
            if self._obey(self.policy.deadline()):
                return False
            slot = self.scheduler.take_slot()
            if slot is None:
                return True
            item = self._admit_ready(*self.waits.ready.pop(0)) if self.waits.ready else self._next()
            if item is None:
                self.scheduler.give_back(slot)
                continue
            trial, values, extra = item
            self.heartbeat.add(private.trial_id(trial))
            run = Running(trial, values, slot, self.budget.now(), extra=extra)
            self.scheduler.submit(lambda r=run: self._launch(r), run)
        return False

    # ------------------------------------------------------------------ ask -> check -> fit the budget

    def _admit_ready(self, trial: Any, values: dict[str, Any]) -> Launch | None:
        """A waiter whose twin failed otherwise (a crash, a hang) measures, unless its value was blamed meanwhile."""
        return self._admit(trial, values, outcome=checks.blame(self.plan, trial, values))

    def _next(self) -> Launch | None:
        """Ask one trial, check it, fit it to the budget: a Launch, or None (settled without launching, waiting
        for a twin, or the phase stops)."""
        if not self._may_ask():
            return None
        trial = self._ask()
        if trial is None:
            return None
        repeat = CONFIRM_KEY in trial.user_attrs or self.settings.repeat
        values, outcome = checks.sample(self.plan, trial, self.device, repeat)
        fault_point("sampled")
        if outcome is checks.WAIT:
            self.waits.add(trial, values)
            twin = trial.user_attrs.get(WAITS_KEY)
            self.progress.note(f"trial {trial.number} waits: trial {twin} is measuring the same configuration")
            return None
        return self._admit(trial, values, outcome)

    def _may_ask(self) -> bool:
        """Something is queued, or the sampler may propose something new that fits; else the policy says why not."""
        study = self.plan.study
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return True
        sampler = study.sampler
        if isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(study):
            self._obey(self.policy.grid_exhausted())
            return False
        if not self.admission.any_fits():
            self._obey(self.policy.nothing_fits())
            return False
        return True

    def _ask(self) -> Any:
        """A new trial of the study (its owner in the same write), or None when another process on the study
        reached the target first (this one is failed as surplus: it never ran)."""
        study = self.plan.study
        with warnings.catch_warnings():  # the heartbeat of ask/tell trials is recorded by studies.Heartbeat
            warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
            trial = studies.ask(study, self.plan.command)
        if CONFIRM_KEY not in trial.user_attrs and self._is_surplus(trial):
            trial.set_user_attr(REASON_KEY, Reason.SURPLUS.tag())
            study.tell(trial, state=TrialState.FAIL)
            return None
        return trial

    def _is_surplus(self, trial: optuna.Trial) -> bool:
        """Another process on the same study got there first: this ask would exceed the target (queued: once asked)."""
        study = self.plan.study
        target, trials = study.user_attrs.get(TARGET_KEY), study.get_trials(deepcopy=False)
        earlier = [
            t for t in trials if t.number < trial.number and t.state != TrialState.WAITING and studies.is_counted(t)
        ]
        return target is not None and len(earlier) >= int(target)

    def _admit(self, trial: Any, values: dict[str, Any], outcome: TrialOutcome | None) -> Launch | None:
        """The one way to a launch, for a trial just sampled and for a waiter whose twin ended without a result:
        (trial, values, launch extras) when nothing decided it (``outcome`` None) and it is predicted to end in the
        budget; else settled without launching (over budget, or ``outcome``), and None."""
        study, repeat = self.plan.study, CONFIRM_KEY in trial.user_attrs
        profile = bool(trial.user_attrs.get(PROFILE_KEY))
        if outcome is None and not self.admission.fits(values, profile, reserve=not repeat, repeat=repeat):
            why, left = self.costs.explain(study, values), left_text(self.budget)
            message = f"predicted {why} does not end in the {left} left"
            outcome = TrialOutcome(Status.SKIPPED, Reason.OVER_BUDGET.tag(why), message)
        if outcome is None:
            self.policy.fitted()
            predicted = round(self.admission.predict(values, profile, repeat), 2)
            with contextlib.suppress(Exception):
                trial.set_user_attr(PREDICTED_KEY, predicted)  # beside its wall time in the row and the summary
            keep = self.admission.keep_s(values, repeat)  # a guessed price may not spend the re-measurements' time
            reserve = 0.0 if repeat else self.admission.reserve()  # its window ends where their reserve begins
            extra = {"profile": profile, PREDICTED_KEY: predicted, "keep_s": keep, "reserve_s": reserve}
            return trial, values, extra
        self.heartbeat.discard(private.trial_id(trial))  # a waiter beat while it waited
        self._settle_unlaunched(trial, values, outcome)
        return None

    # ------------------------------------------------------------------ launch -> settle

    def _launch(self, run: Running) -> Any:
        """One trial through Hydra's launcher (in a worker thread; returns the JobReturn or the error)."""
        predicted = run.extra.get(PREDICTED_KEY) or 0.0
        stop_at = self.scheduler.stop_at(run.extra.get("keep_s") or 0.0, predicted)
        run.extra["end_at"] = self.scheduler.window_end_at(run.extra.get("reserve_s") or 0.0, predicted)
        overrides = jobs.overrides(self.plan, self.settings, run, self.sweep_dir, stop_at)
        try:
            return self.launch_one(overrides, run.trial.number)  # job folder = trial number
        except Exception as e:  # noqa: BLE001 - a launcher error fails this trial, not the sweep
            return e

    def _settle_unlaunched(self, trial: Any, values: dict[str, Any], outcome: TrialOutcome) -> None:
        """A trial decided without launching (constraint, duplicate, over budget): settled, and told to the policy
        (an exhausted space, or proposals that only repeat or cannot end in time, stop the phase)."""
        self.settler.settle(private.trial_id(trial), trial.number, values, outcome, launched=False)
        self._obey(self.policy.settled(outcome, launched=False, trial=trial.number))

    def _finish(self, run: Running, ret: Any) -> None:
        """A launched trial ended: settled from its job's return (or its row, when the job failed around it)."""
        recovery.raise_if_disk_full(ret, self.plan.trials_dir.parent)
        outcome = launch.outcome_of(ret)
        if outcome.status is Status.FAILED and outcome.kind in (Reason.EXCEPTION, Reason.LAUNCHER):
            outcome = self.settler.row_outcome(run.trial.number) or outcome  # it wrote its row: it ran
        with contextlib.suppress(Exception):  # what it cost the budget, for the cost model
            run.trial.set_user_attr(SPENT_KEY, round(self.budget.now() - run.started, 2))
        self.settler.settle(private.trial_id(run.trial), run.trial.number, run.values, outcome, launched=True)
        self.cut += outcome.status is Status.INTERRUPTED and outcome.kind is Reason.BUDGET
        self.heartbeat.discard(private.trial_id(run.trial))
        self._obey(self.policy.settled(outcome, launched=True, trial=run.trial.number))
        self.scheduler.give_back(run.slot)

    def _obey(self, decision: Decision) -> bool:
        """Do what the policy decided: queue what it asks for (handing back what was queued), print its note.
        True when the phase stops."""
        while isinstance(decision, Action):
            decision = self.policy.done(decision, self._queue(decision.act))
        if decision is not None and decision.note:
            self.progress.note(decision.note)
        return isinstance(decision, Ended)

    def _queue(self, act: Act) -> Any:
        if act in (Act.QUEUE_SPARE, Act.QUEUE_STUCK):
            return self.admission.queue_spare()  # the rest of the budget goes where it pays
        if act is Act.QUEUE_REPEAT:
            return self.admission.queue_repeat()  # the space measured: the rest separates the top configurations
        return self.configurations.queue_untried()

    # ------------------------------------------------------------------ Ctrl-C, SIGTERM, a full disk

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
                self._obey(self.policy.interrupted())
                cut.settle_interrupted(self.scheduler, self.settler, self.waits, self.plan.study)
                raise

    # ------------------------------------------------------------------ words

    def _say_why(self) -> None:
        """Why the sweep ended, the budget it used, and how far the cost model's predictions were from the walls."""
        why = why_ended(self.policy.ended(), self.settings, self.scheduler, self.n_trials, self.cut)
        blames = failing.blamed(self.plan.study.get_trials(deepcopy=False), self.plan.command)
        for line in (why, costs_error(self.plan.study), *(b.left_out() for b in blames)):
            if line:
                self.progress.note(line)
