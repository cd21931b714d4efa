"""What a trial will cost, in wall-clock seconds, before it starts: the scheduler's cost model.

A trial's cost is driven by its *expensive* knobs (``hydra.sweeper.expensive``: a cold ``torch.compile`` is tens of
seconds, ``max-autotune`` minutes, an eager trial seconds). The model groups the study's measured trials by cost
class (their values of the expensive knobs) and predicts:

* a class the study has measured: the slowest of its trials' costs (launch to end as the sweeper saw it:
  ``spent_s``; the launcher's job set-up, the process, setup, compile, warm-up and window) - a new configuration
  of a class is rarely cheaper than the slowest seen so far, and a budget is better kept than filled;
* a class never measured: the cheap class's cost times each expensive value's factor. A factor is measured once a
  class that differs from the cheap one in that knob alone was measured (its cost over the cheap cost); else it is
  the stated prior (``hydra.sweeper.cost_prior``: ``{knobs.compile: {default: 4, max-autotune: 40}}``) rescaled by
  how the priors of the measured values of that knob compared with their measurements (a compile measured at half
  its prior halves every other compile prior). A value without a prior takes the largest factor known for its
  knob; with nothing measured at all, a cheap trial is predicted to fit (it starts, and teaches the model) and
  ``first_trial_s`` stands for its cost in the predictions of the others.

The prediction is what the scheduler compares with the time left (``Scheduler.fits``); ``derived_timeout`` caps a
trial's timeout at a multiple of its class's measured cost (``hydra.sweeper.timeout_factor``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.sweep.attrs import COST_KEY, SPENT_KEY, WARM_KEY

MIN_MEASURED = 3  # trials of a cost class measured before its timeout is derived
FIRST_TRIAL_S = 30.0  # the cheap class's cost before any trial was measured (a process start, a few steps)


class CostModel:
    """Predicts a configuration's wall seconds from the study's measured trials and the stated priors."""

    def __init__(
        self,
        expensive: Mapping[str, Any],
        prior: Mapping[str, Mapping[str, float]] | None = None,
        first_trial_s: float = FIRST_TRIAL_S,
    ) -> None:
        self.expensive = dict(expensive)
        self.prior = {k: {str(v): float(f) for v, f in (vals or {}).items()} for k, vals in (prior or {}).items()}
        self.first_trial_s = float(first_trial_s)

    def cost_class(self, params: Mapping[str, Any]) -> tuple:
        return tuple(params.get(k, cheap) if params.get(k) is not None else cheap for k, cheap in self._order())

    def _order(self) -> list[tuple[str, Any]]:
        return sorted(self.expensive.items())

    def measured(self, study: optuna.Study) -> dict[tuple, list[float]]:
        """Wall seconds of the study's own measured trials, by cost class (warm-start history left out: another
        night's compile cache, another machine)."""
        out: dict[tuple, list[float]] = {}
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)):
            cost = _cost(t)
            if cost is None or WARM_KEY in t.user_attrs or t.user_attrs.get("status") not in _MEASURED:
                continue
            out.setdefault(self.cost_class(t.params), []).append(cost)
        return out

    def predict(self, study: optuna.Study, params: Mapping[str, Any]) -> float:
        """Predicted wall seconds of a trial of ``params``."""
        return self.predict_from(self.measured(study), params)

    def predict_repeat(self, study: optuna.Study, params: Mapping[str, Any]) -> float:
        """Predicted wall seconds of measuring a configuration again: its class's fastest measured trial, since a
        repeat finds the compile caches its class's first (cold) trial filled; a class never measured as
        :meth:`predict`. The re-measurements' reserve rests on it."""
        measured = self.measured(study)
        costs = measured.get(self.cost_class(params))
        return min(costs) if costs else self.predict_from(measured, params)

    def predict_from(self, measured: Mapping[tuple, list[float]], params: Mapping[str, Any]) -> float:
        mine = self.cost_class(params)
        if measured.get(mine):
            return max(measured[mine])
        cheap = tuple(c for _k, c in self._order())
        if mine == cheap and not measured:
            return 0.0  # nothing measured yet: the cheapest kind of trial starts (it is what teaches the model)
        base = max(measured[cheap]) if measured.get(cheap) else self._cheap_estimate(measured)
        factor = 1.0
        for i, (name, cheap_value) in enumerate(self._order()):
            value = mine[i]
            if value != cheap_value:
                factor *= self.factor(measured, i, name, value)
        return base * factor

    def _cheap_estimate(self, measured: Mapping[tuple, list[float]]) -> float:
        """The cheap class's cost when none of it was measured: a measured class divided by its factors."""
        for cls, costs in measured.items():
            factor = 1.0
            for i, (name, cheap_value) in enumerate(self._order()):
                if cls[i] != cheap_value:
                    factor *= self._prior_factor(measured, i, name, cls[i])
            return max(costs) / max(factor, 1e-9)
        return self.first_trial_s

    def factor(self, measured: Mapping[tuple, list[float]], index: int, name: str, value: Any) -> float:
        """What ``name=value`` multiplies the cheap class's cost by: measured where a class differing only in it was
        measured, else its prior rescaled by the knob's measured values."""
        cheap = tuple(c for _k, c in self._order())
        alone = tuple(value if i == index else c for i, c in enumerate(cheap))
        if measured.get(alone) and measured.get(cheap):
            return max(measured[alone]) / max(max(measured[cheap]), 1e-9)
        return self._prior_factor(measured, index, name, value)

    def _prior_factor(self, measured: Mapping[tuple, list[float]], index: int, name: str, value: Any) -> float:
        priors = self.prior.get(name, {})
        cheap = tuple(c for _k, c in self._order())
        scales, known = [], []
        for cls, costs in measured.items():  # classes that differ from the cheap one in this knob alone
            if (
                cls == cheap
                or not measured.get(cheap)
                or any(c != k for i, (c, k) in enumerate(zip(cls, cheap)) if i != index)
            ):
                continue
            seen = max(costs) / max(max(measured[cheap]), 1e-9)
            known.append(seen)
            p = priors.get(str(cls[index]))
            if p:
                scales.append(seen / p)
        scale = math.exp(sum(math.log(max(s, 1e-9)) for s in scales) / len(scales)) if scales else 1.0
        if str(value) in priors:
            return priors[str(value)] * scale
        candidates = [f * scale for f in priors.values()] + known
        return max(candidates) if candidates else 1.0

    def explain(self, study: optuna.Study, params: Mapping[str, Any]) -> str:
        """One phrase: the predicted cost and whether it rests on a measurement or on the prior."""
        measured = self.measured(study)
        seconds = self.predict_from(measured, params)
        basis = "measured" if measured.get(self.cost_class(params)) else "prior"
        return f"{seconds:.0f} s ({basis})"


_MEASURED = ("complete", "infeasible", "failed")  # a failed trial's time was spent too (timeouts above all)


def _cost(t: FrozenTrial) -> float | None:
    """What the trial cost the budget: launch to end as the sweeper saw it (the launcher's composing of the job and
    the process start included), else the trial's own wall time."""
    for key in (SPENT_KEY, COST_KEY):
        cost = t.user_attrs.get(key)
        if isinstance(cost, (int, float)) and cost > 0:
            return float(cost)
    return None


def derived_timeout(
    study: optuna.Study,
    values: Mapping[str, Any],
    expensive: Mapping[str, Any],
    timeout_s: float,
    factor: float | None,
    floor_s: float,
) -> float | None:
    """The capped timeout for a trial of ``values`` (``hydra.sweeper.timeout_factor``), or None when it keeps
    ``timeout_s`` (no factor, fewer than ``MIN_MEASURED`` complete trials of its class, or a cap not lower)."""
    if not factor:
        return None
    model = CostModel(expensive)
    mine = model.cost_class(values)
    costs = [
        float(t.user_attrs[COST_KEY])
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("status") == "complete"
        and WARM_KEY not in t.user_attrs
        and isinstance(t.user_attrs.get(COST_KEY), (int, float))
        and model.cost_class(t.params) == mine
    ]
    if len(costs) < MIN_MEASURED:
        return None
    cap = max(float(floor_s), float(factor) * max(costs))
    return round(cap, 1) if cap < float(timeout_s) else None
