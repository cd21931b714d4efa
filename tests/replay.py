"""Replays of recorded landscapes on the CPU: the real staged search, cost model, admission and scheduler, with a
fake clock, against a landscape that answers each configuration with its throughput and its phases' seconds.

A landscape is built from measured facts (an H200's rows, ``DESIGN.md``'s facts, the numbers of a sweep's rows):
knob effects on throughput (multiplicative), and the costs of a trial by phase: process start, setup (eager or
compiled), compile (per mode, cold, or warm when the same configuration ran before: the Inductor cache), warm-up and
the measured window (``measure.*`` applied to the configuration's step time). ``replay`` drives the sweep's
decisions over it as ``SweepImpl`` does with one slot (ask, admit against the budget, run, tell; on a proposal that
does not fit, spend the time where it pays; then the re-measurements that fit) and returns what happened, in
milliseconds of real time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.sweep.config.settings import KnobSweeperConf
from sweeper.sweep.config.space import build_space
from sweeper.sweep.run import remeasure
from sweeper.sweep.run.scheduler import Scheduler
from sweeper.sweep.run.stop import MAX_OVER_BUDGET_IN_A_ROW  # the loop's rule, replayed
from sweeper.sweep.search import samplers, warm
from sweeper.sweep.search.costs import CostModel
from sweeper.sweep.study import trials as st
from sweeper.sweep.study.attrs import COST_KEY, REASON_KEY, SPENT_KEY
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

    def throughput(self, c: dict[str, Any]) -> float:
        v = self.base
        for knob, value in c.items():
            v *= self.factors.get(knob, {}).get(value, 1.0)
        return min(v, self.cap(c)) if self.cap else v

    def best(self) -> float:
        space = build_space(self.params, {}, [], self.defaults)
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
        compile_s = (self.compile_warm if key in ran else self.compile_cold).get(mode, 0.0) if compiled else 0.0
        ran.add(key)
        thr = self.throughput(c)
        step = float(c[self.batch_key]) / thr
        m = self.measure
        steps = int(m.get("steps", 20))
        window = max(steps * step, float(m.get("min_time_s") or 0.0))
        measured = max(steps, round(window / step))
        warmup = int(m.get("warmup_steps", 5))
        setup = self.setup_s[1 if compiled else 0]
        prof = 5 * step + 2.0 if profile else 0.0
        wall = setup + compile_s + step + max(0, warmup - 1) * step + measured * step + prof
        attrs = {
            "setup_s": setup,
            "compile_s": compile_s,
            "first_step_s": compile_s + step,
            "measured_s": measured * step,
            "step_ms_mean": step * 1e3,
            "warmup_steps": warmup,
            "steps_measured": measured,
            "status": "complete",
            COST_KEY: wall,
        }
        if profile:
            attrs["prof_s"] = prof
        return {"attrs": attrs, "throughput": thr, "spent": self.start_s + wall}


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class Event:
    at: float  # seconds after the start
    params: dict[str, Any]
    kind: str  # run | skip
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


def replay(land: Landscape, budget_s: float = 300.0, seed: int = 0, grace_s: float = 5.0) -> Replay:
    """The default sweep of ``land`` under ``budget_s``, as the sweeper decides it, on a fake clock."""
    clock = Clock()
    t0 = clock.t
    settings = KnobSweeperConf(timeout_s=budget_s, seed=seed)
    space = build_space(land.params, {}, [], land.defaults)
    scheduler = Scheduler([0], None, budget_s=budget_s, grace_s=grace_s, started_at=t0, clock=clock)
    budget = getattr(scheduler, "budget", None)
    try:
        sampler = samplers.make_sampler("staged", seed, space, land.expensive, land.defaults, budget_s, budget=budget)
    except TypeError:  # a sampler without the shared clock
        sampler = samplers.make_sampler("staged", seed, space, land.expensive, land.defaults, budget_s)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    try:
        costs = CostModel(land.expensive, settings.cost_prior, measure=land.measure)
    except TypeError:
        costs = CostModel(land.expensive, settings.cost_prior)
    plan = SimpleNamespace(
        study=study,
        space=space,
        defaults=land.defaults,
        objectives=[("throughput", "maximize")],
        cfg={"device": "cuda" if land.device.kind == "cuda" else "cpu", "measure": land.measure},
    )
    admission = _admission(plan, settings, costs, scheduler)
    sampler.fits = lambda p: admission.fits(p)
    baseline = warm.baseline_params(space, land.defaults)
    study.enqueue_trial(baseline)
    try:
        from sweeper.sweep.search.handbook import start_params

        start = start_params(space, land.defaults, baseline, land.device)
        if start:
            study.enqueue_trial(start)
    except ImportError:
        pass
    n_trials = settings.n_trials if settings.n_trials is not None else 10**9
    out = Replay(land, budget_s, study=study)
    ran: set = set()
    over = dups = 0

    def run(trial: Any, values: dict[str, Any], repeat: bool, profile: bool = False) -> None:
        predicted = admission.predict(values, profile, repeat)
        r = land.run(values, ran, profile)
        left = scheduler.time_left()
        clock.t += r["spent"]
        for k, v in {**r["attrs"], SPENT_KEY: r["spent"]}.items():
            trial.set_user_attr(k, v)
        study.tell(trial, r["throughput"])
        out.events.append(
            Event(clock.t - t0 - r["spent"], values, "run", left, predicted, r["spent"], r["throughput"], repeat)
        )

    while st.counted(study) < n_trials:
        if scheduler.expired():
            out.reason = "budget"
            break
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        fits = admission.any_fits() if hasattr(admission, "any_fits") else admission.fits(dict(land.expensive))
        if not waiting and not fits:
            out.reason = "budget: nothing fits"
            break
        trial = study.ask()
        values = st.sample(trial, space, land.defaults)
        repeat = st.CONFIRM_KEY in trial.user_attrs
        key = tuple(sorted((k, repr(v)) for k, v in values.items() if v is not None))
        if not repeat and any(e.kind == "run" and not e.repeat and _key(e.params) == key for e in out.events):
            trial.set_user_attr(REASON_KEY, "duplicate:0")
            study.tell(trial, state=TrialState.PRUNED)
            dups += 1
            if dups >= 100:
                out.reason = "exhausted"
                break
            continue
        dups = 0
        if not admission.fits(values, reserve=not repeat, repeat=repeat):
            left = scheduler.time_left()
            out.events.append(Event(clock.t - t0, values, "skip", left, admission.predict(values, False, repeat)))
            trial.set_user_attr(REASON_KEY, "over-budget:replay")
            trial.set_user_attr("status", "skipped")
            study.tell(trial, state=TrialState.PRUNED)
            over += 1
            if getattr(admission, "queue_spare", None) and admission.queue_spare():
                continue
            if over >= MAX_OVER_BUDGET_IN_A_ROW:
                out.reason = "budget: proposals over budget"
                break
            continue
        over = 0
        run(trial, values, repeat)
    else:
        out.reason = "n_trials"
    # the re-measurements after the search, each if it fits
    profile_k = admission.profile_k()
    wanted = remeasure.plan(study, plan.objectives, baseline, settings.confirm_top_k, profile_k)
    for r in wanted:
        if scheduler.fits(remeasure.cost_s(study, costs, r)):
            study.enqueue_trial(r.params, user_attrs={st.CONFIRM_KEY: r.of, remeasure.PROFILE_KEY: r.profile})
            trial = study.ask()
            run(trial, st.sample(trial, space, land.defaults), True, r.profile)
    out.ended_at = clock.t - t0
    return out


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items() if v is not None))


def _admission(plan: Any, settings: Any, costs: Any, scheduler: Scheduler) -> Any:
    try:
        from sweeper.sweep.run.admission import Admission
    except ImportError:
        return _Before(plan, settings, costs, scheduler)
    return Admission(plan, settings, costs, scheduler.budget)


class _Before:
    """The admission as the sweep loop decided it before ``sweeper.sweep.run.admission`` (no spare spending)."""

    def __init__(self, plan: Any, settings: Any, costs: Any, scheduler: Scheduler) -> None:
        self.plan, self.settings, self.costs, self.scheduler = plan, settings, costs, scheduler

    def predict(self, params: dict[str, Any], profile: bool = False, repeat: bool = False) -> float:
        predict = self.costs.predict_repeat if repeat else self.costs.predict
        return predict(self.plan.study, params) + (remeasure.profile_cost(self.plan.study) if profile else 0.0)

    def fits(self, params: dict[str, Any], profile: bool = False, reserve: bool = True, repeat: bool = False) -> bool:
        return self.scheduler.fits(self.predict(params, profile, repeat), self.reserve() if reserve else 0.0)

    def reserve(self) -> float:
        base = warm.baseline_params(self.plan.space, self.plan.defaults)
        wanted = remeasure.plan(
            self.plan.study, self.plan.objectives, base, self.settings.confirm_top_k, self.profile_k()
        )
        return sum(remeasure.cost_s(self.plan.study, self.costs, r) for r in wanted)

    def profile_k(self) -> int:
        return 1 if self.plan.cfg["device"] == "cuda" else 0


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
