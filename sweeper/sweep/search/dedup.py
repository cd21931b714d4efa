"""Duplicate configurations: a configuration the study has measured, or is measuring, is not launched again.

A trial is identified by its ``config_key`` (the sampled values as canonical JSON, a user attribute of the Optuna
trial). Found among COMPLETE trials, the earlier result is reused (``skipped``, ``duplicate:<trial>``, told PRUNED:
it is no measurement, so it neither counts toward ``n_trials`` nor enters importance as an ordinary result).
Found among RUNNING trials (this sweeper's other slots, or another process on the same study), the trial waits
for that one instead of measuring the same configuration at the same time. A discrete space whose every valid
configuration is measured is exhausted: the sweep says so and stops.

A configuration that failed in this sweep command by the workload's own answer (:func:`failed_answer`: an
exception its code raised, a non-finite loss, out of memory) is not launched again by the same command either: the
same code gives the same answer (``skipped``, ``duplicate:<trial>``, no metrics). One that crashed or hung (a
signal, an exit without a result, past its timeout, stalled) may pass and is run again, once: a second such failure
in the command is its answer (:func:`answered`; a hang costs the trial's whole timeout each time). The next command
may run it again: its code may have changed since.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.results.poll import poll
from sweeper.sweep.config.space import SearchSpace, evaluate
from sweeper.sweep.study import optuna_private as private
from sweeper.sweep.study.attrs import (
    BOOKKEEPING,
    COMMAND_KEY,
    NODE_SHARED_KEY,
    OWNER_KEY,
    REASON_KEY,
    UNOWNED_S,
    WAITS_KEY,
    Owner,
    owner_state,
    reason_of,
    status_of,
)
from sweeper.sweep.study.attrs import CONFIG_KEY as KEY

UNDECIDED_S = 120.0  # the longest a trial waits for lower-numbered ones of live sweepers to record their configuration
RECENT_S = 60.0  # a trial of another host without a configuration older than this is taken for dead, not undecided
MAX_ENUMERATED = 5_000  # spaces larger than this are not enumerated (~1 s on a 2-core machine; never exhausted)
ANSWERS = (Reason.EXCEPTION, Reason.NONFINITE, Reason.CHECK)  # failures the workload's own code gives
MAY_PASS = (Reason.SIGNAL, Reason.EXIT, Reason.TIMEOUT, Reason.STALLED)  # crashes and hangs: run again ...
AGAIN = 1  # ... this many times in one command; the next such failure of the configuration is its answer


def config_key(values: dict[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, default=str)


def is_duplicate(t: FrozenTrial) -> bool:
    return reason_of(t) is Reason.DUPLICATE


def measured(t: FrozenTrial) -> bool:
    """A COMPLETE trial that measured its configuration (not one that reused another's result)."""
    return t.state == TrialState.COMPLETE and status_of(t) is Status.COMPLETE


def measuring(t: FrozenTrial) -> bool:
    """A running trial that decided to measure its configuration (``WAITS_KEY`` -1: it waits for nobody)."""
    return t.state == TrialState.RUNNING and t.user_attrs.get(WAITS_KEY) == -1


def failed_answer(t: FrozenTrial, command: str | None) -> bool:
    """``t`` is a trial the sweep command ``command`` asked (None: no command's) whose failure is the workload's
    answer for its configuration: an exception its code raised (in its ``check()`` too), a non-finite loss, or
    out of memory on a device no other trial shared. Not a crash, a hang or a budget's cut: those may pass
    (:func:`answered`)."""
    status = status_of(t)
    if status is Status.INFEASIBLE:
        answer = not t.user_attrs.get(NODE_SHARED_KEY)
    else:
        answer = status is Status.FAILED and reason_of(t) in ANSWERS
    return answer and _this_command(t, command)


def _this_command(t: FrozenTrial, command: str | None) -> bool:
    """``t`` was asked by the sweep command ``command`` (its id, written when it asked the trial: a queued trial
    is the command's that popped it, whoever queued it); None: no command's. An id, not a clock: a wall clock
    may step back (a daylight-saving fall-back repeats an hour of Optuna's naive local ``datetime_start``), and
    a process may run several commands."""
    return command is not None and t.user_attrs.get(COMMAND_KEY) == command


def _may_pass(t: FrozenTrial) -> bool:
    """A crash or a hang (``MAY_PASS``) alone on its node: run again, ``AGAIN`` times in a command."""
    return status_of(t) is Status.FAILED and reason_of(t) in MAY_PASS and not t.user_attrs.get(NODE_SHARED_KEY)


def answered(trials: list[FrozenTrial], command: str | None) -> dict[str, FrozenTrial]:
    """Configuration key -> the trial of the sweep command ``command`` whose failure is its answer: the first
    that failed by the workload's answer (:func:`failed_answer`), or the crash or hang (``MAY_PASS``) that
    followed ``AGAIN`` such failures of it, each on a node no other trial shared (beside one, the kernel's OOM
    killer or a stall may be the other's doing). A DataLoader worker killed by the host's memory, a compile that
    hangs: the same configuration run a third time in one command spends its timeout again for the same end."""
    out: dict[str, FrozenTrial] = {}
    again: dict[str, int] = {}
    for t in sorted(trials, key=lambda t: t.number):
        key = t.user_attrs.get(KEY)
        if key is None or key in out or t.state != TrialState.FAIL and status_of(t) is not Status.INFEASIBLE:
            continue
        if failed_answer(t, command):
            out[key] = t
        elif _may_pass(t) and _this_command(t, command):
            again[key] = again.get(key, 0) + 1
            if again[key] > AGAIN:
                out[key] = t
    return out


def find(study: optuna.Study, key: str, number: int, command: str | None = None) -> tuple[str, FrozenTrial] | None:
    """The trial whose result ``number`` should take: ("complete", t) for a measured one, ("failed", t) for one of
    the sweep command ``command`` whose failure answers it (:func:`answered`),
    ("running", t) for a running one it must wait for; None when it must be measured.

    It waits for a running twin that decided to measure, whatever its number (an enqueued trial, numbered when it
    was queued, may be asked after a higher-numbered twin started), else for the lowest-numbered running twin
    below ``number``, measuring or itself waiting (two sweepers asking the same configuration at once: the higher
    number waits, never both). A trial only ever waits for one that waits for nobody or has a lower number, so
    waits never form a cycle. The order needs no clock: numbers come from the storage, the decision is stored.

    A waiting trial counts: when the trial it waits for fails, the lowest-numbered waiter measures and every
    higher one keeps waiting for it, in whichever process each polls and in whichever order."""
    decided = lower = None
    twins = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.FAIL))
        if t.number != number and t.user_attrs.get(KEY) == key
    ]
    failed = answered(twins, command).get(key)
    for t in twins:
        if measured(t):
            return "complete", t
        if measuring(t):
            decided = t if decided is None or t.number < decided.number else decided
        elif t.state == TrialState.RUNNING and t.number < number:
            lower = t if lower is None or t.number < lower.number else lower
    if failed is not None:
        return "failed", failed
    running = decided or lower
    return ("running", running) if running is not None else None


def _sweeper_alive(t: FrozenTrial, now: datetime.datetime, recent_s: float) -> bool:
    """Whether the sweeper that asked ``t`` may still record its configuration: its process, on this host
    (:func:`owner_state`; not this process, whose asks are one at a time). Elsewhere, or before the trial names its
    sweeper, only while ``t`` is younger than ``recent_s``."""
    if OWNER_KEY not in t.user_attrs:  # asked by a sweeper killed before it wrote its owner (milliseconds)
        limit = min(UNOWNED_S, recent_s)
        return t.datetime_start is not None and (now - t.datetime_start).total_seconds() < limit
    state = owner_state(t) if t.datetime_start is not None else Owner.UNKNOWN
    if state is Owner.UNKNOWN:
        return t.datetime_start is not None and (now - t.datetime_start).total_seconds() < recent_s
    return state is Owner.ALIVE


def await_lower_keys(
    study: optuna.Study, number: int, *, recent_s: float = RECENT_S, timeout: float = UNDECIDED_S
) -> None:
    """Waits until every running trial numbered below ``number`` has recorded its configuration (``KEY``), or its
    sweeper is gone.

    :func:`find` lets the lower number measure and the higher one wait. A trial records its key some time after it
    is asked (sampling, which a model-based sampler makes slow; the device check, which starts CUDA), so a higher
    trial in another process could look before the lower one's key exists, find nothing, and measure the same
    configuration at the same time. So it waits as long as the lower trial's sweeper lives (a process of this
    host), or ``recent_s`` from that trial's start where its life cannot be seen (another host), and never once
    its heartbeat is stale; at most ``timeout`` seconds in all (a live sweeper stuck before its key; the loop does
    nothing else meanwhile). Lower numbers never wait for higher ones here, so this cannot deadlock.
    """

    def all_decided() -> bool:
        now = datetime.datetime.now()
        stale = private.stale_trial_ids(study)  # their sweeper is gone, wherever it ran: nobody waits for them
        return not any(
            t.number < number
            and KEY not in t.user_attrs
            and private.trial_id(t) not in stale
            and _sweeper_alive(t, now, recent_s)
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        )

    poll(all_decided, timeout, 0.05, max_interval_s=1.0)


def valid_keys(space: SearchSpace, defaults: dict[str, Any]) -> set[str] | None:
    """Every configuration the space can give (conditions and constraints applied), as keys; None when the space
    is continuous or larger than ``MAX_ENUMERATED`` before conditions."""
    if space.size() is None or space.size() > MAX_ENUMERATED:
        return None
    grid = space.grid()
    names = list(space.params)
    keys: set[str] = set()

    def walk(i: int, ns: dict[str, Any], values: dict[str, Any]) -> None:
        if i == len(names):
            if all(evaluate(expr, ns) for expr in space.constraints):
                keys.add(config_key(values))
            return
        name = names[i]
        cond = space.conditions.get(name)
        options = [None] if cond is not None and not evaluate(cond, ns) else grid[name]
        for value in options:
            walk(i + 1, {**ns, name: value}, {**values, name: value})

    walk(0, {**defaults, **space.fixed}, {})
    return keys


def settled(t: FrozenTrial) -> bool:
    """The configuration's answer is known from ``t`` alone: measured, out of memory, or not runnable on this
    device (a failure answers it only in the command that saw it: :func:`answered_keys`)."""
    status = status_of(t)
    over_budget = reason_of(t) is Reason.OVER_BUDGET  # it may fit another night
    skipped = status is Status.SKIPPED and not is_duplicate(t) and not over_budget
    return measured(t) or status is Status.INFEASIBLE or skipped


_ENDED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def answered_keys(trials: list[FrozenTrial], command: str | None = None) -> set[str]:
    """The configurations whose answer the study holds: :func:`settled` by a trial, or by a failure of the sweep
    command ``command`` (:func:`answered`; None: no command's)."""
    ended = [t for t in trials if t.state in _ENDED]
    return {t.user_attrs.get(KEY) for t in ended if settled(t)} | set(answered(ended, command))


def exhausted(study: optuna.Study, keys: set[str] | None, command: str | None = None) -> bool:
    """Every valid configuration of the space has its answer in the study (``command``: :func:`answered_keys`'s);
    None: a space never enumerated (an empty set: nothing left to answer)."""
    if keys is None:
        return False
    return keys <= answered_keys(study.get_trials(deepcopy=False), command)


def untried(study: optuna.Study, keys: set[str] | None, command: str | None = None) -> list[dict[str, Any]]:
    """The valid configurations (as sampler params: inactive knobs left out) that no trial of the study has
    answered (``command``: :func:`answered_keys`'s) or is measuring, in a fixed order; empty when the space is
    not enumerated."""
    if not keys:
        return []
    trials = study.get_trials(deepcopy=False)
    seen = answered_keys(trials, command) | {t.user_attrs.get(KEY) for t in trials if t.state == TrialState.RUNNING}
    return [{k: v for k, v in json.loads(key).items() if v is not None} for key in sorted(keys - seen)]


def reuse(t: FrozenTrial, bookkeeping: tuple[str, ...] = BOOKKEEPING) -> TrialOutcome:
    """The outcome of a trial whose configuration ``t`` measured: skipped, with ``t``'s metrics (its user
    attributes but the ``bookkeeping`` ones); or whose configuration ``t`` failed in this sweep command: skipped,
    no metrics."""
    if not measured(t):
        verb = "was infeasible" if status_of(t) is Status.INFEASIBLE else "failed"
        verb += " again" if reason_of(t) in MAY_PASS else ""
        said = f"{verb} ({t.user_attrs.get(REASON_KEY)})"
        return TrialOutcome(
            Status.SKIPPED,
            Reason.DUPLICATE.tag(t.number),
            f"same configuration as trial {t.number}, which {said} in this sweep: not run again",
        )
    metrics = {k: v for k, v in t.user_attrs.items() if k not in (KEY, WAITS_KEY, *bookkeeping)}
    return TrialOutcome(
        Status.SKIPPED,
        Reason.DUPLICATE.tag(t.number),
        f"same configuration as trial {t.number}; its result is reused",
        metrics=metrics,
    )


class Waiting:
    """Trials (asked, RUNNING in Optuna) waiting for a running trial of the same configuration to end.

    Other trials may wait for a waiting one (:func:`find`), so a waiting trial has a heartbeat like a measuring
    one (``heartbeat``: the sweep's ``studies.Heartbeat``, set when the sweep starts): if this process dies, its
    waiting trials go stale and are failed by another process, instead of holding that process's waiters forever.
    """

    def __init__(self, command: str | None = None) -> None:
        self.command = command  # the sweep command's id (:func:`find`'s)
        self.waiting: list[tuple[Any, dict[str, Any]]] = []
        self.ready: list[tuple[Any, dict[str, Any]]] = []  # the other one ended without a result: measure these
        self.heartbeat: Any = None

    def __bool__(self) -> bool:
        return bool(self.waiting or self.ready)

    def add(self, trial: Any, values: dict[str, Any]) -> None:
        self.waiting.append((trial, values))
        if self.heartbeat is not None:
            self.heartbeat.add(private.trial_id(trial))

    def _beat_off(self, trial: Any) -> None:
        if self.heartbeat is not None:
            self.heartbeat.discard(private.trial_id(trial))

    def poll(self, study: optuna.Study) -> list[tuple[Any, dict[str, Any], FrozenTrial]]:
        """Trials whose awaited one ended: (trial, values, its trial) to settle as duplicates (measured, or failed
        by the workload's answer); those whose awaited trial failed otherwise move to ``ready`` (launch them when a
        slot frees)."""
        still, settled = [], []
        for trial, values in self.waiting:
            found = find(study, trial.user_attrs[KEY], trial.number, self.command)
            if found is not None and found[0] == "running":
                if found[1].number != trial.user_attrs.get(WAITS_KEY):  # it waited for one that failed
                    trial.set_user_attr(WAITS_KEY, found[1].number)
                still.append((trial, values))
                continue
            if found is None:
                trial.set_user_attr(WAITS_KEY, -1)  # it measures: later twins wait for it
                self.ready.append((trial, values))  # keeps its heartbeat: it is launched next
            else:
                self._beat_off(trial)
                settled.append((trial, values, found[1]))
        self.waiting = still
        return settled

    def give_up(self, study: optuna.Study, reason_key: str = REASON_KEY) -> None:
        """The sweep stops with trials still waiting: they never ran and do not count (``surplus``)."""
        for trial, _values in self.waiting + self.ready:
            self._beat_off(trial)
            trial.set_user_attr(reason_key, Reason.SURPLUS.tag())
            study.tell(trial, state=TrialState.FAIL)
        self.waiting, self.ready = [], []


def enqueue_untried(study: optuna.Study, keys: set[str] | None, command: str | None = None) -> int:
    """The sampler keeps proposing measured configurations of an enumerable space (TPE on a small grid does): the
    next configuration nobody has measured is queued, so the space is finished instead of abandoned. Returns how
    many were left untried (0: nothing queued)."""
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        return 0  # something is queued already: it runs next
    todo = untried(study, keys, command)
    if todo:
        study.enqueue_trial(todo[0], skip_if_exists=False)
    return len(todo)
