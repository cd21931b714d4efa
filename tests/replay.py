"""Replays of recorded landscapes on the CPU: the real staged search, cost model, admission and scheduler, with a
fake clock, against a landscape that answers each configuration with its throughput and its phases' seconds.

A landscape is built from measured facts (an H200's rows, ``DESIGN.md``'s facts, the numbers of a sweep's rows):
knob effects on throughput (multiplicative), and the costs of a trial by phase: process start, setup (eager or
compiled), compile (per mode, cold, or warm when the same configuration ran before, or one that differs from it only
in knobs measured to leave the compiled graph unchanged: the Inductor cache), warm-up (``measure.warmup_steps``; a
DataLoader's buffer of ``buffered`` steps makes it ``buffered + 2`` steps, then a drain of ``4 x buffered + 8`` steps,
the cap of ``sweeper/trial/measure.py``'s ``_drain`` that a pipeline keeping up runs to, as the H200 recorded it) and
the measured window (``measure.*`` applied to the configuration's step time). ``replay`` drives the sweep's
decisions over it as ``SweepImpl`` does with one slot (ask, admit against the budget, run, tell; on a proposal that
does not fit, spend the time where it pays; then the re-measurements that fit) and returns what happened, in
milliseconds of real time.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.config.settings import KnobSweeperConf, graph_neutral, priors_per_op
from sweeper.sweep.config.space import build_space
from sweeper.sweep.run import remeasure
from sweeper.sweep.run.admission import Admission
from sweeper.sweep.run.scheduler import Scheduler
from sweeper.sweep.run.stop import Act, Action, Decision, Ended, StopPolicy  # the loop's rules, replayed
from sweeper.sweep.search import samplers, warm
from sweeper.sweep.search.costs import CostModel
from sweeper.sweep.search.handbook import start_params
from sweeper.sweep.study import trials as st
from sweeper.sweep.study.attrs import (
    CONFIRM_KEY,
    COST_KEY,
    PREDICTED_KEY,
    PROFILE_KEY,
    REASON_KEY,
    SPENT_KEY,
    STATUS_KEY,
)
from workloads.base import DeviceInfo

H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", count=1, compute_capability=(9, 0))


@dataclass
class Landscape:
    """A workload's recorded landscape: its space, throughput model and phase costs."""

    name: str
    params: dict[str, str]
    defaults: dict[str, Any]
    expensive: dict[str, Any]
    measure: dict[str, Any]
    base: float  # throughput at the defaults
    factors: dict[str, dict[Any, float]]  # knob -> value -> multiplier (1 when missing)
    batch_key: str
    start_s: float
    setup_s: tuple[float, float]  # eager, compiled
    compile_cold: dict[str, float]  # mode -> seconds
    compile_warm: dict[str, float]
    cap: Any = None  # (config) -> a throughput ceiling (the input pipeline), or None
    device: DeviceInfo = H200
    neutral: frozenset[str] = frozenset()  # knobs measured to leave the compiled graph (and its cache) unchanged
    buffered: Any = None  # (config) -> the steps a DataLoader prefetches (its workers x prefetch factor), or None
    graph_ops: int | None = None  # distinct operations of the eager step (sweeper.trial.ops), recorded by eager trials
    # (config) -> what its first step pays beyond a step and any compile, eager or compiled (cuDNN's benchmark);
    # where given, compiled trials record their compilers' seconds (``compiler_s``) apart from it
    first_step: Any = None
    # (config, compile seconds, cache warm) -> (compilers' seconds, first-step excess, priming seconds) of a compiled
    # trial that primes cuDNN's benchmark beside its compile (workloads.prime), None where it does not
    prime: Any = None
    # (config) -> (warm-up steps, drain steps), where the host's differ from the DataLoader buffer's rule below
    warmup: Any = None
    conditions: dict[str, str] = field(default_factory=dict)  # the workload's ``conditions`` (knob -> expression)
    starts: list[dict[str, Any]] = field(default_factory=list)  # the workload's ``starts``, before the handbook's

    def throughput(self, c: dict[str, Any]) -> float:
        v = self.base
        for knob, value in c.items():
            v *= self.factors.get(knob, {}).get(value, 1.0)
        return min(v, self.cap(c)) if self.cap else v

    def best(self) -> float:
        space = build_space(self.params, self.conditions, [], self.defaults)
        keys = list(space.params)
        import itertools

        combos = itertools.product(*(space.params[k].choices for k in keys))
        return max(self.throughput({**self.defaults, **dict(zip(keys, c))}) for c in combos)

    def run(self, c: dict[str, Any], ran: set, profile: bool = False) -> dict[str, Any]:
        """The attributes a trial of ``c`` records, its throughput and its wall (the sweeper's spent_s)."""
        c = {**self.defaults, **{k: v for k, v in c.items() if v is not None}}
        mode = str(c.get("knobs.compile", "off"))
        key = tuple(sorted((k, repr(v)) for k, v in c.items()))
        compiled = mode != "off"
        cached = self._cached(key, ran)
        compile_s = (self.compile_warm if cached else self.compile_cold).get(mode, 0.0)
        compile_s = compile_s if compiled else 0.0
        ran.add(key)
        thr = self.throughput(c)
        fed = self.cap(c) if self.cap else math.inf  # what the input pipeline feeds: the step waits for the rest
        step = float(c[self.batch_key]) / thr
        m = self.measure
        steps = int(m.get("steps", 20))
        window = max(steps * step, float(m.get("min_time_s") or 0.0))
        measured = max(steps, round(window / step))
        buffered = int(self.buffered(c)) if self.buffered else 0
        warmup = max(int(m.get("warmup_steps", 5)), buffered + 2 if buffered else 0)
        drain = 4 * buffered + 8 if buffered else 0
        if self.warmup:
            warmup, drain = self.warmup(c)
        setup = self.setup_s[1 if compiled else 0]
        prof = 5 * step + 2.0 if profile else 0.0
        init = float(self.first_step(c)) if self.first_step else 0.0
        primed = self.prime(c, compile_s, cached) if self.prime and compiled else None
        compiler, excess, prime_s = primed if primed else (compile_s, compile_s + init, None)
        wall = setup + excess + step + max(0, warmup - 1 + drain) * step + measured * step + prof
        attrs = {
            "setup_s": setup,
            "compile_s": excess,
            "first_step_s": excess + step,
            "measured_s": measured * step,
            "step_ms_mean": step * 1e3,
            "warmup_steps": warmup,
            "warmup_drain_steps": drain,
            "steps_measured": measured,
            "data_wait_frac": max(0.0, 1.0 - thr / self._uncapped(c)) if fed <= thr else 0.0,
            "status": "complete",
            COST_KEY: wall,
        }
        if self.device.kind == "cuda":  # the GPU busy but while the step waits for its data (99 %: the H100 JPEG
            attrs["gpu_util_mean"] = 99.0 * (1.0 - attrs["data_wait_frac"])  # sweeps' busiest steps, 2026-12-06)
        if profile:
            attrs["prof_s"] = prof
        if self.first_step:
            attrs["compiler_s"] = compiler
        if prime_s is not None:
            attrs["prime_s"] = prime_s
        if self.graph_ops and not compiled:
            attrs["graph_ops"] = self.graph_ops
        return {"attrs": attrs, "throughput": thr, "spent": self.start_s + wall}

    def _uncapped(self, c: dict[str, Any]) -> float:
        """The model's own speed, without the input pipeline's cap."""
        return dataclasses.replace(self, cap=None).throughput(c)

    def _cached(self, key: tuple, ran: set) -> bool:
        """Whether the compile cache is warm for ``key``: it ran, or one that differs only in neutral knobs."""
        mine = dict(key)
        return any({k for k in set(mine) | set(dict(r)) if mine.get(k) != dict(r).get(k)} <= self.neutral for r in ran)


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class Event:
    at: float  # seconds after the start
    params: dict[str, Any]
    kind: str  # run | skip | cut (stopped by the budget before its end)
    left: float
    predicted: float | None = None
    actual: float | None = None
    throughput: float | None = None
    repeat: bool = False


@dataclass
class Replay:
    landscape: Landscape
    budget_s: float
    events: list[Event] = field(default_factory=list)
    ended_at: float = 0.0
    reason: str = ""
    study: Any = None

    def ran(self) -> list[Event]:
        return [e for e in self.events if e.kind == "run"]

    def best(self) -> float:
        return max(e.throughput or 0.0 for e in self.ran())

    def compiled(self) -> list[Event]:
        return [e for e in self.ran() if str(e.params.get("knobs.compile", "off")) != "off"]

    def within(self, tolerance: float = 0.3) -> float:
        """The share of trials whose prediction is within ``tolerance`` of their actual wall."""
        pairs = [(e.predicted, e.actual) for e in self.ran() if e.predicted and e.actual]
        return sum(1 for p, a in pairs if abs(p - a) <= tolerance * a) / max(1, len(pairs))


@dataclass
class _Sweep:
    """What one replayed sweep holds: the study and its decision makers, on one fake clock."""

    land: Landscape
    clock: Clock
    t0: float
    space: Any
    study: optuna.Study
    scheduler: Scheduler
    costs: CostModel
    admission: Admission
    policy: StopPolicy
    out: Replay
    ran: set = field(default_factory=set)

    def run(self, trial: Any, values: dict[str, Any], repeat: bool, profile: bool = False) -> None:
        """Launch: the landscape answers, the clock moves by what the trial spent, the study is told; a trial still
        running when the sweep stops it (``Scheduler.stop_at`` with what it must leave, ``Admission.keep_s``) is cut
        there, ``interrupted`` by the budget (its compile did not reach the cache)."""
        predicted = self.admission.predict(values, profile, repeat)
        trial.set_user_attr(PREDICTED_KEY, round(predicted, 2))  # as the sweep records it at launch
        stop = self.scheduler.stop_at(self.admission.keep_s(values, repeat), predicted)
        ran = set(self.ran)
        r = self.land.run(values, self.ran, profile)
        left = self.scheduler.time_left()
        at = self.clock.t - self.t0
        if stop is not None and self.clock.t + r["spent"] > stop:
            spent = max(0.0, stop - self.clock.t)
            self.clock.t, self.ran = max(stop, self.clock.t), ran
            attrs = {STATUS_KEY: "interrupted", REASON_KEY: "budget", COST_KEY: spent, SPENT_KEY: spent}
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            self.study.tell(trial, state=TrialState.FAIL)
            self.out.events.append(Event(at, values, "cut", left, predicted, spent, None, repeat))
            return
        self.clock.t += r["spent"]
        for k, v in {**r["attrs"], SPENT_KEY: r["spent"]}.items():
            trial.set_user_attr(k, v)
        self.study.tell(trial, r["throughput"])
        self.out.events.append(Event(at, values, "run", left, predicted, r["spent"], r["throughput"], repeat))

    def skip(self, trial: Any, outcome: TrialOutcome) -> bool:
        """Settle without launching, as the sweep does; True when the stop policy ends the search."""
        trial.set_user_attr(REASON_KEY, outcome.reason)
        trial.set_user_attr(STATUS_KEY, outcome.status.value)
        self.study.tell(trial, state=TrialState.PRUNED)
        return self.obey(self.policy.settled(outcome, launched=False, trial=trial.number))

    def obey(self, decision: Decision) -> bool:
        """Do what the policy decides (spare-time work is queued by the real admission); True: the phase ends."""
        if isinstance(decision, Action):
            result = self.admission.queue_spare() if decision.act in (Act.QUEUE_SPARE, Act.QUEUE_STUCK) else 0
            decision = self.policy.done(decision, result)
        return isinstance(decision, Ended)


def replay(land: Landscape, budget_s: float = 300.0, seed: int = 0, grace_s: float = 5.0) -> Replay:
    """The default sweep of ``land`` under ``budget_s``, as the sweeper decides it, on a fake clock."""
    sweep, baseline = _open(land, budget_s, seed, grace_s)
    while not _search_step(sweep):
        pass
    sweep.out.reason = sweep.policy.ended().value
    _remeasure(sweep, baseline)
    sweep.out.ended_at = sweep.clock.t - sweep.t0
    return sweep.out


def _open(land: Landscape, budget_s: float, seed: int, grace_s: float) -> tuple[_Sweep, dict[str, Any]]:
    """The study with the real staged sampler, cost model, admission, scheduler and stop policy on one fake clock;
    the baseline, the workload's starts and the handbook's start queued first, as the sweep queues them."""
    clock = Clock()
    settings = KnobSweeperConf(timeout_s=budget_s, seed=seed)
    space = build_space(land.params, land.conditions, [], land.defaults)
    scheduler = Scheduler([0], None, budget_s=budget_s, grace_s=grace_s, started_at=clock.t, clock=clock)
    sampler = samplers.make_sampler(
        "staged", seed, space, land.expensive, land.defaults, budget_s, budget=scheduler.budget
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    costs = CostModel(
        land.expensive,
        settings.cost_prior,
        priors_per_op(settings),
        measure=land.measure,
        neutral=graph_neutral(settings),
    )
    plan = SimpleNamespace(
        study=study,
        space=space,
        defaults=land.defaults,
        objectives=[("throughput", "maximize")],
        cfg={"device": "cuda" if land.device.kind == "cuda" else "cpu", "measure": land.measure},
    )
    admission = Admission(plan, settings, costs, scheduler.budget)
    sampler.fits = lambda p: admission.fits(p)
    sampler.neutral = graph_neutral(settings)
    baseline = warm.baseline_params(space, land.defaults)
    study.enqueue_trial(baseline)
    start = start_params(space, land.defaults, baseline, land.device)
    starts = [space.fix(s, land.defaults)[0] for s in land.starts]
    plan.handbook, plan.starts = start, [("starts", p, {}) for p in starts]
    sampler.deferred = warm.deferred_start(plan)  # the sweep loop's wiring: proposed by the sampler, not queued
    sampler.handbook = dict(start or {})  # ... and a knob a diagnosed step wakes takes its values
    for params in starts + ([] if sampler.deferred else [start]):
        if params:
            study.enqueue_trial(params)
    policy = StopPolicy(scheduler.budget)  # a space never enumerated: 100 duplicates in a row end it
    sweep = _Sweep(
        land, clock, clock.t, space, study, scheduler, costs, admission, policy, Replay(land, budget_s, study=study)
    )
    return sweep, baseline


def _search_step(sweep: _Sweep) -> bool:
    """One ask -> check -> fit -> launch -> settle of the search; True when the search ends."""
    study, admission, policy = sweep.study, sweep.admission, sweep.policy
    if policy.stopped or sweep.obey(policy.deadline()):
        return True
    if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)) and not admission.any_fits():
        return sweep.obey(policy.nothing_fits())
    trial = study.ask()
    values = st.sample(trial, sweep.space, sweep.land.defaults)
    repeat = CONFIRM_KEY in trial.user_attrs
    key = _key(values)
    if not repeat and any(e.kind == "run" and not e.repeat and _key(e.params) == key for e in sweep.out.events):
        return sweep.skip(trial, TrialOutcome(Status.SKIPPED, Reason.DUPLICATE.tag(0)))
    if not admission.fits(values, reserve=not repeat, repeat=repeat):
        left = sweep.scheduler.time_left()
        predicted = admission.predict(values, False, repeat)
        sweep.out.events.append(Event(sweep.clock.t - sweep.t0, values, "skip", left, predicted))
        return sweep.skip(trial, TrialOutcome(Status.SKIPPED, Reason.OVER_BUDGET.tag("replay")))
    policy.fitted()
    sweep.run(trial, values, repeat)
    policy.settled(TrialOutcome(Status.COMPLETE), launched=True, trial=trial.number)
    return False


def _remeasure(sweep: _Sweep, baseline: dict[str, Any]) -> None:
    """The re-measurements after the search, each if it fits what is left."""
    settings = KnobSweeperConf()
    wanted = remeasure.plan(
        sweep.study, [("throughput", "maximize")], baseline, settings.confirm_top_k, sweep.admission.profile_k()
    )
    for r in wanted:
        if sweep.scheduler.fits(remeasure.cost_s(sweep.study, sweep.costs, r)):
            sweep.study.enqueue_trial(r.params, user_attrs={CONFIRM_KEY: r.of, PROFILE_KEY: r.profile})
            trial = sweep.study.ask()
            sweep.run(trial, st.sample(trial, sweep.space, sweep.land.defaults), True, r.profile)


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items() if v is not None))


def justified(out: Replay, tolerance: float = 0.3) -> list[Event]:
    """Over-budget skips that were wrong: the configuration's actual cost, and the actual cost of the
    re-measurements after the search (the baseline's and the best's, warm), fit the time left with ``tolerance``
    to spare."""
    wrong = []
    land = out.landscape
    for e in out.events:
        if e.kind != "skip":
            continue
        runs = [x for x in out.ran() if x.at < e.at]
        ran = {_key({**land.defaults, **x.params}) for x in runs}
        cost = land.run(e.params, set(ran), False)["spent"]
        base = runs[0].params if runs else land.defaults
        best = max(runs, key=lambda x: x.throughput or 0.0).params if runs else land.defaults
        reserve = sum(
            land.run(p, {_key({**land.defaults, **p})}, land.device.kind == "cuda")["spent"]
            for p in ({_key(base): base, _key(best): best}).values()
        )
        if (1 + tolerance) * cost <= e.left - reserve:
            wrong.append(e)
    return wrong


def finite(x: float) -> bool:
    return math.isfinite(x)
