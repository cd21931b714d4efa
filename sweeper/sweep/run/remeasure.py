"""After the search: the baseline and the best configurations measured again, the profiled ones among them, and
the configurations whose step times were unstable.

Re-measurements give the report a trial-to-trial noise estimate (a speed-up is stated with an interval only where
one exists) and, with ``hydra.sweeper.profile``, a torch.profiler trace of where the GPU's time went in the
baseline and in the best. The baseline and the ``max(confirm_top_k, profile)`` best run on every device (the CPU
too, ``confirm_top_k`` 1 by default), queued in interleaved order (baseline, best, second best, ...); the search
keeps their predicted cost in reserve. With ``confirm_unstable``, every other configuration whose measurement was
flagged ``step_unstable`` (``sweeper.trial.stability``) follows, best first, once, on what the budget has left.
They carry ``confirm_of`` (the trial they repeat) and ``remeasure_for`` (the sweep target they belong to, so a
killed sweep's rerun finishes them instead of queueing new ones), and do not count toward ``n_trials``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.sweep.search import dedup
from sweeper.sweep.search.costs import CostModel
from sweeper.sweep.study.attrs import (
    CONFIRM_KEY,
    PROFILE_CUT_KEY,
    PROFILE_KEY,
    PROFILE_S_KEY,
    PROFILE_STEPS_KEY,
    STEP_MS_KEY,
    UNSTABLE_KEY,
)
from sweeper.sweep.study.attrs import REMEASURE_FOR_KEY as FOR_KEY
from sweeper.sweep.study.faults import fault_point
from sweeper.sweep.study.trials import is_interrupted, is_remeasure

PROFILE_PRIOR_S = 15.0  # what profiling adds to a trial before one was profiled (steps, trace export)
# The trace's export and analysis, beside the profiled steps, before one was profiled: the most measured, rounded
# up. A ResNet-50's 5 profiled steps and their trace took 1.6 s in all on the H200 (docs/measurements/budget.md),
# 1.7 s on an H100 (0.8-0.9 s of steps); a ViT-B/16's 2.8 s on the H200 (0.9 s of steps), 2026-12-05. At 5 s, the
# profiled re-measurement of a 5 s baseline was predicted 11.7 s for 7.0 s.
PROFILE_EXPORT_S = 2.0
PROFILE_STEPS = 5  # hydra.sweeper.profile_steps's default


@dataclass
class Remeasure:
    params: dict[str, Any]
    of: int  # the trial measured again
    profile: bool
    unstable: bool = False  # queued because its step times were unstable (not kept in the search's reserve)


def plan(
    study: optuna.Study,
    objectives: list[tuple[str, str]],
    baseline: dict[str, Any] | None,
    confirm_k: int,
    profile_k: int,
    unstable: bool = False,
) -> list[Remeasure]:
    """The re-measurements the study's current results call for: the baseline, then the best ``max(confirm_k,
    profile_k)`` (the baseline and the first ``profile_k`` profiled), then with ``unstable`` every other
    configuration whose first measurement was flagged ``step_unstable``, best first."""
    k = max(confirm_k, profile_k)
    ranked = _ranked(study, objectives)
    out: list[Remeasure] = []
    if k > 0 and baseline is not None:
        base = next((t for t in ranked if _same(t.params, baseline)), None)
        if base is not None:
            out.append(Remeasure(dict(base.params), base.number, profile_k > 0))
    for i, t in enumerate(ranked[:k] if k > 0 else []):
        if out and t.number == out[0].of:
            continue  # the baseline is the best: measured again once
        out.append(Remeasure(dict(t.params), t.number, i < profile_k))
    if unstable:
        queued = {r.of for r in out}
        out += [
            Remeasure(dict(t.params), t.number, False, True)
            for t in ranked
            if t.user_attrs.get(UNSTABLE_KEY) and t.number not in queued
        ]
    return out


def pending(study: optuna.Study, wanted: list[Remeasure], target: int) -> list[Remeasure]:
    """Those of ``wanted`` that no trial of this target measures, has measured, or waits to measure (an unstable
    configuration: no trial of any target; it is measured again once)."""
    mine, ever = set(), set()
    for t in study.get_trials(deepcopy=False):
        if is_remeasure(t) and not is_interrupted(t):
            ever.add(t.user_attrs.get(CONFIRM_KEY))
            if t.user_attrs.get(FOR_KEY) == target:
                mine.add(t.user_attrs.get(CONFIRM_KEY))
    return [r for r in wanted if r.of not in (ever if r.unstable else mine)]


def cost_s(study: optuna.Study, costs: CostModel, r: Remeasure, profile_steps: int = PROFILE_STEPS) -> float:
    """Predicted seconds of measuring ``r`` again: a repeat's (its compile cache warm) and its profiling's."""
    phases = costs.phases(study, r.params, repeat=True)
    return phases["total"] + (profile_cost(study, phases.get("step"), profile_steps) if r.profile else 0.0)


def that_fit(
    todo: list[Remeasure], cost_s: Callable[[Remeasure], float], fits: Callable[[float], bool], slots: int
) -> list[Remeasure]:
    """Those of ``todo`` predicted to end within the budget (``fits(seconds)``), taken in order: each starts after
    those taken before it, spread over ``slots``, so a long queue is cut where the budget ends."""
    queued_s, out = 0.0, []
    for r in todo:
        cost = cost_s(r)
        if fits(queued_s / max(1, slots) + cost):
            out.append(r)
            queued_s += cost
    return out


def queued(study: optuna.Study) -> bool:
    """Re-measurements wait in the queue (other queued trials, the handbook's start or ``starts`` a target reached
    before they ran, wait for the next command's search)."""
    return any(is_remeasure(t) for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def enqueue(study: optuna.Study, items: list[Remeasure], target: int) -> None:
    for r in items:
        study.enqueue_trial(r.params, user_attrs={CONFIRM_KEY: r.of, FOR_KEY: target, PROFILE_KEY: r.profile})
        fault_point("remeasure")  # a kill here leaves part of them queued: the next command queues the rest


def profile_cost(study: optuna.Study, step_s: float | None = None, steps: int = PROFILE_STEPS) -> float:
    """Seconds profiling adds to a trial: ``steps`` of its predicted step time ``step_s`` (and the one step the
    profile runs before its window) and the trace's export, the most a profiled trial spent beyond its own steps
    (``prof_s`` less its recorded steps of its ``step_ms_mean``; none profiled: ``PROFILE_EXPORT_S``); without a step
    time, the slowest profile measured, else ``PROFILE_PRIOR_S``. A profile's steps are the trial's own: the
    baseline's slow steps priced every later profile (a JPEG baseline's 5.9 s for a best stepping 5x faster, which
    then did not fit the time left). A profile the budget cut (``prof_cut``) prices none."""
    profiled = [
        t.user_attrs
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if isinstance(t.user_attrs.get(PROFILE_S_KEY), (int, float)) and not t.user_attrs.get(PROFILE_CUT_KEY)
    ]
    if step_s is None:
        return max((float(a[PROFILE_S_KEY]) for a in profiled), default=PROFILE_PRIOR_S)
    exports = []
    for a in profiled:
        ms, ran = a.get(STEP_MS_KEY), a.get(PROFILE_STEPS_KEY)
        ran = float(ran) if isinstance(ran, (int, float)) and ran > 0 else float(steps)
        if isinstance(ms, (int, float)) and ms > 0:
            exports.append(float(a[PROFILE_S_KEY]) - (ran + 1) * float(ms) / 1e3)
        else:  # a profile with no step time: all of it
            exports.append(float(a[PROFILE_S_KEY]))
    export = max(exports, default=PROFILE_EXPORT_S)
    return (steps + 1) * step_s + max(0.0, export)


def _ranked(study: optuna.Study, objectives: list[tuple[str, str]]) -> list[FrozenTrial]:
    """Measured configurations by the first objective, best first, each once (its first measurement)."""
    sign = 1.0 if objectives[0][1] == "maximize" else -1.0
    best: dict[str, FrozenTrial] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if not dedup.measured(t) or is_remeasure(t) or not t.values or not math.isfinite(t.values[0]):
            continue
        key = dedup.config_key(dict(t.params))
        if key not in best:
            best[key] = t
    return sorted(best.values(), key=lambda t: (-sign * t.values[0], t.number))


def _same(params: dict[str, Any], baseline: dict[str, Any]) -> bool:
    return dedup.config_key(dict(params)) == dedup.config_key(dict(baseline))
