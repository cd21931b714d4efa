"""Trials cut short: by the budget's end (past its grace and the backstop) or by Ctrl-C, SIGTERM or a full disk.
Each is settled ``interrupted`` (measured again by the same command), never counted; why the phase stops is the
stop policy's (``sweeper.sweep.run.stop``)."""

from __future__ import annotations

import contextlib
from concurrent.futures import wait
from typing import Any

from optuna.trial import TrialState

from sweeper.results.outcome import Reason
from sweeper.sweep.study import optuna_private as private
from sweeper.sweep.study import trials as studies
from sweeper.sweep.study.attrs import OWNER_KEY, SPENT_KEY
from sweeper.trial import isolate as runner

BUDGET_ENDED = "the sweep's time budget ended while this trial ran; it runs again"
RAN = "the sweep was interrupted while this trial ran; the same command runs it again"
ASKED = "the sweep was interrupted before this trial started; the same command runs it"


def give_up_running(scheduler: Any, settler: Any, budget: Any) -> int:
    """Past budget + grace + backstop: trials that did not stop themselves are killed and recorded, their slots
    given back; how many."""
    runner.interrupt_all()
    n = len(scheduler.running)
    wait(list(scheduler.running), timeout=30)
    for fut, run in list(scheduler.running.items()):
        scheduler.running.pop(fut)
        with contextlib.suppress(Exception):  # what it ran before the cut: a lower bound for the cost model
            run.trial.set_user_attr(SPENT_KEY, round(budget.now() - run.started, 2))
        settler.interrupted(private.trial_id(run.trial), run.trial.number, run.values, Reason.BUDGET, BUDGET_ENDED)
        scheduler.give_back(run.slot)
    return n


def settle_interrupted(scheduler: Any, settler: Any, waits: Any, study: Any) -> None:
    """Ctrl-C, SIGTERM or a full disk: running trials' process groups are killed at once and each is settled
    (interrupted, or what its row says if it ended just before); trials waiting for a twin, and those this process
    asked but had not launched (sampling, the device check), never ran."""
    runner.interrupt_all()
    wait(list(scheduler.running), timeout=30)
    for run in list(scheduler.running.values()):
        settler.interrupted(private.trial_id(run.trial), run.trial.number, run.values, Reason.INTERRUPTED, RAN)
    with contextlib.suppress(Exception):
        waits.give_up(study)
    me = studies.owner_id()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.user_attrs.get(OWNER_KEY) == me:
            settler.interrupted(private.trial_id(t), t.number, dict(t.params), Reason.INTERRUPTED, ASKED)
