"""After the search: the baseline and the best configurations measured again, the profiled ones among them.

Re-measurements give the report a trial-to-trial noise estimate (a speed-up is stated with an interval only where
one exists) and, with ``hydra.sweeper.profile``, a torch.profiler trace of where the GPU's time went in the
baseline and in the best. They are queued in interleaved order (baseline, best, second best, ...), carry
``confirm_of`` (the trial they repeat) and ``remeasure_for`` (the sweep target they belong to, so a killed sweep's
rerun finishes them instead of queueing new ones), and do not count toward ``n_trials``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.sweep import dedup
from sweeper.sweep.study import CONFIRM_KEY, is_interrupted, is_remeasure

FOR_KEY = "remeasure_for"  # trial user attr: the sweep target whose re-measurements it is
PROFILE_KEY = "profile"  # trial user attr: run under torch.profiler after its measured window
PROFILE_PRIOR_S = 15.0  # what profiling adds to a trial before one was profiled (steps, trace export)


@dataclass
class Remeasure:
    params: dict[str, Any]
    of: int  # the trial measured again
    profile: bool


def plan(
    study: optuna.Study,
    objectives: list[tuple[str, str]],
    baseline: dict[str, Any] | None,
    confirm_k: int,
    profile_k: int,
) -> list[Remeasure]:
    """The re-measurements the study's current results call for, best first after the baseline."""
    k = max(confirm_k, profile_k)
    if k <= 0:
        return []
    ranked = _ranked(study, objectives)
    out: list[Remeasure] = []
    if profile_k > 0 and baseline is not None:
        base = next((t for t in ranked if _same(t.params, baseline)), None)
        if base is not None:
            out.append(Remeasure(dict(base.params), base.number, True))
    for i, t in enumerate(ranked[:k]):
        if out and t.number == out[0].of:
            continue  # the baseline is the best: measured again once
        out.append(Remeasure(dict(t.params), t.number, i < profile_k))
    return out


def pending(study: optuna.Study, wanted: list[Remeasure], target: int) -> list[Remeasure]:
    """Those of ``wanted`` that no trial of this target measures, has measured, or waits to measure."""
    done = {
        t.user_attrs.get(CONFIRM_KEY)
        for t in study.get_trials(deepcopy=False)
        if is_remeasure(t) and t.user_attrs.get(FOR_KEY) == target and not is_interrupted(t)
    }
    return [r for r in wanted if r.of not in done]


def enqueue(study: optuna.Study, items: list[Remeasure], target: int) -> None:
    for r in items:
        study.enqueue_trial(r.params, user_attrs={CONFIRM_KEY: r.of, FOR_KEY: target, PROFILE_KEY: r.profile})


def profile_cost(study: optuna.Study) -> float:
    """Seconds profiling added to a trial: the slowest measured (``prof_s``), else ``PROFILE_PRIOR_S``."""
    seen = [
        float(t.user_attrs["prof_s"])
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if isinstance(t.user_attrs.get("prof_s"), (int, float))
    ]
    return max(seen) if seen else PROFILE_PRIOR_S


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
