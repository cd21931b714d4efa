"""A trial's timeout from what its kind of trial costs (``hydra.sweeper.timeout_factor``).

``trial.timeout_s`` is one number for every trial, sized for the dearest kind (a cold ``torch.compile``). A cheap
trial that goes wrong (measured on the H200: an fp32 ResNet-50 screening trial at batch 1024 with cuDNN autotuning
ran into a 200 s timeout while eager trials took ~15 s) then eats a large share of a wall-clock budget. With
``timeout_factor: F`` a trial's timeout is capped at F times the slowest measured trial of its cost class (the same
values of the ``expensive`` knobs: eager trials are compared with eager ones, compiled with compiled), never below
``timeout_floor_s``, and only once three trials of that class have been measured. The trial that hits it ends as
``failed (timeout)`` with the cap in its message, like any timeout; a row is written and the sweep goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.sweep.attrs import COST_KEY, WARM_KEY

MIN_MEASURED = 3  # trials of a cost class measured before its timeout is derived


def derived_timeout(
    study: optuna.Study,
    values: Mapping[str, Any],
    expensive: Mapping[str, Any],
    timeout_s: float,
    factor: float | None,
    floor_s: float,
) -> float | None:
    """The capped timeout for a trial of ``values``, or None when it keeps ``timeout_s`` (no factor, too few
    measured trials of its class, or a cap that would not be lower)."""
    if not factor:
        return None

    def cls(params: Mapping[str, Any]) -> tuple:
        return tuple(params.get(k, cheap) for k, cheap in sorted(expensive.items()))

    mine = cls(values)
    costs = [
        float(t.user_attrs[COST_KEY])
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.user_attrs.get("status") == "complete"
        and WARM_KEY not in t.user_attrs
        and isinstance(t.user_attrs.get(COST_KEY), (int, float))
        and cls(t.params) == mine
    ]
    if len(costs) < MIN_MEASURED:
        return None
    cap = max(float(floor_s), float(factor) * max(costs))
    return round(cap, 1) if cap < float(timeout_s) else None
