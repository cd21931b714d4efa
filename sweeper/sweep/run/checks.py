"""A trial's configuration, checked before it may launch: sampled with the declared conditions, then the
constraints, the device, and the study's duplicates."""

from __future__ import annotations

from typing import Any

import optuna

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.config.space import ExpressionError, evaluate
from sweeper.sweep.config.trial_config import with_values
from sweeper.sweep.run.job import CheckFailed, device_check
from sweeper.sweep.search import dedup, failing
from sweeper.sweep.study import trials as studies
from sweeper.sweep.study.attrs import BOOKKEEPING, CONFIG_KEY, WAITS_KEY

WAIT: Any = object()  # another trial measures this configuration now: wait for its result


def sample(
    plan: Any, trial: optuna.Trial, device: Any, repeat: bool, bookkeeping: tuple[str, ...] = BOOKKEEPING
) -> tuple[dict[str, Any], Any]:
    """Define-by-run sampling of ``plan.space`` for ``trial``; returns (values, None) to launch, (values, WAIT), or
    (values, an outcome to settle without launching). ``repeat``: measure even a configuration already measured."""
    try:
        values = studies.sample(trial, plan.space, plan.defaults)
        ns = {**plan.defaults, **plan.space.fixed, **values}
        for expr in plan.space.constraints:
            if not evaluate(expr, ns):
                why = f"constraint does not hold: {expr}"
                return values, TrialOutcome(Status.SKIPPED, Reason.INVALID.tag(expr), why)
    except ExpressionError as e:  # e.g. a division by a sampled zero: this configuration is not launched
        return dict(trial.params), TrialOutcome(Status.SKIPPED, Reason.INVALID.tag(e), f"an expression failed: {e}")
    command = getattr(plan, "command", None)  # the sweep command: its own trials' failures are answers
    blamed = None if repeat else blame(plan, trial, values)
    if blamed is not None:  # a value every trial of this sweep that ran it failed with: not launched again
        return values, blamed
    key = dedup.config_key(values)
    trial.set_user_attr(CONFIG_KEY, key)  # before the device check: a check() that raised is an answer too
    # The device check runs here, before any launcher job (a SLURM job is never submitted only to be skipped).
    try:
        reason = device_check(with_values(plan.cfg, {**plan.space.fixed, **values}), device)
    except CheckFailed as e:  # the workload's check() raised: this trial's failure, unless it was already
        earlier = None if repeat else dedup.find(plan.study, key, trial.number, command)
        return values, dedup.reuse(earlier[1], bookkeeping) if earlier and earlier[0] == "failed" else e.outcome()
    if reason:
        return values, TrialOutcome(Status.SKIPPED, Reason.INVALID.tag(reason), reason)
    if repeat:
        return values, None
    dedup.await_lower_keys(plan.study, trial.number)
    found = dedup.find(plan.study, key, trial.number, command)
    if found is None:
        trial.set_user_attr(WAITS_KEY, -1)  # it measures: twins asked later wait for it
        return values, None
    if found[0] == "running":  # another slot or sweeper measures it now: wait for its result
        trial.set_user_attr(WAITS_KEY, found[1].number)
        return values, WAIT
    return values, dedup.reuse(found[1], bookkeeping)


def blame(plan: Any, trial: optuna.Trial, values: dict[str, Any]) -> TrialOutcome | None:
    """The skip of a proposal holding a value this command's failures blame (``search.failing``), or None; an
    inactive knob (absent from the trial's params) is not a value it runs."""
    active = {k: v for k, v in values.items() if k in trial.params}
    blames = failing.blamed(plan.study.get_trials(deepcopy=False), getattr(plan, "command", None))
    found = failing.blame_of(active, blames)
    return None if found is None else found.outcome()
