"""The sweep summary's closing lines: why the sweep ended and how well the cost model predicted its trials."""

from __future__ import annotations

import statistics
from typing import Any

import optuna

from sweeper.sweep.run.stop import Stop
from sweeper.sweep.study import trials

DEFAULT_N_TRIALS = 10  # counted trials of a command that gives neither n_trials nor timeout_s
WITHIN = 0.3  # a prediction within this fraction of the actual wall counts as right in the summary


def why_ended(reason: Stop | None, settings: Any, scheduler: Any, n_trials: int, cut: int = 0) -> str:
    """One line: why the sweep ended, and how much of its budget it used (``cut``: the trials the budget's end
    stopped in this command)."""
    left = scheduler.time_left()
    used = ""
    if settings.timeout_s:
        budget_s = float(settings.timeout_s)
        spent = budget_s - (left or 0.0)
        used = f"; {spent:.0f} s of the {budget_s:g} s budget used ({spent / budget_s:.0%})"
    if reason is Stop.BUDGET:
        budget = f"budget: hydra.sweeper.timeout_s={settings.timeout_s:g} s"
        if scheduler.expired() and cut:
            return (
                f"sweep ended: {budget} reached; {cut} trial{'s' * (cut != 1)} cut by it, recorded as interrupted: "
                f"the same command measures {'them' if cut != 1 else 'it'} again{used}"
            )
        if scheduler.expired():
            return f"sweep ended: {budget} reached as its last trial ended (none cut){used}"
        stopped = (
            f"; {cut} trial{'s' * (cut != 1)} priced by the prior alone stopped before the re-measurements' time, "
            f"recorded as interrupted"
            if cut
            else ""
        )
        return (
            f"sweep ended: {budget}: no trial fits in the {max(0.0, left or 0.0):.0f} s left (nor a promotion, "
            f"an untried neighbour or a repeat of the best); the same command goes on{stopped}{used}"
        )
    if reason is Stop.N_TRIALS or reason is None:
        return f"sweep ended: n_trials={n_trials} trials measured{used}"
    if reason is Stop.EXHAUSTED:
        return f"sweep ended: the search space is exhausted{used}"
    if reason is Stop.FAILURES:
        return f"sweep ended: the failure budget is spent{used}"
    return f"sweep ended: interrupted{used}"


def costs_error(study: optuna.Study) -> str | None:
    """How far the predicted wall times (at launch) were from the actual ones, over this study's launched trials
    that ran to their end (a failed, out-of-memory or cut trial ended early: its wall is not the run predicted)."""
    errors = [(predicted - actual) / actual for predicted, actual in trials.priced(study)]
    if not errors:
        return None
    within = sum(1 for e in errors if abs(e) <= WITHIN)
    return (
        f"cost model: {within} of {len(errors)} trials' predicted wall times within ±{WITHIN:.0%} of the actual "
        f"(median error {statistics.median(errors):+.0%}, worst {max(errors, key=abs):+.0%})"
    )


def failure_text(plan: Any) -> str:
    limits = {"max_failures": plan.max_failures, "max_failure_rate": plan.max_failure_rate}
    return ", ".join(f"{k}={v}" for k, v in limits.items() if v is not None)
