"""A knob value the sweep's own failures blame: no proposal with it is launched again in this sweep command.

A search sampler learns nothing from a failed trial (Optuna's samplers leave FAIL trials out), so a value that
makes the workload raise (a precision its model cannot run, a compile mode its graph breaks) is proposed again
and again, each time at a launch's cost (a compile's, on a GPU). The rule, from the trials of this sweep command
alone (``dedup.failed_answer``: the workload's own exception or non-finite loss, not a crash or a hang):

* nothing is blamed before some configuration was measured (a workload that fails everywhere is broken as a
  whole: the failure budget's case, not a value's);
* the failures of one cause (their reason, ``exception:RuntimeError``, and the first line of their error, its
  numbers masked) are grouped; a value ``knob=v`` is blamed when at least ``MIN_FAILURES`` of them ran it, no trial
  that ran it measured anything (complete, or pruned after its steps), and it is the only such never-working value
  those failures all share (two candidates, say ``bf16`` and ``compile=default`` in every failure so far, blame
  neither until a trial separates them);
* a proposal holding a blamed value is ``skipped`` (``fails:<knob>=<value>``), told PRUNED (TPE ranks it below
  every measured configuration, so it proposes elsewhere), counted like a duplicate by the stop rules.

The next command runs it again (its code may have changed).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.search.dedup import failed_answer, measured
from sweeper.sweep.study.attrs import FAILED_WITH_KEY, REASON_KEY, status_of

MIN_FAILURES = 2  # one failure blames nothing: a value and its trial's other values are not told apart


@dataclasses.dataclass(frozen=True)
class Blame:
    knob: str
    value: Any
    trials: tuple[int, ...]  # the failed trials that ran it
    kind: str  # their reason, e.g. exception:RuntimeError
    error: str = ""  # the first line of their error

    def outcome(self) -> TrialOutcome:
        """A proposal holding it: skipped, saying which trials failed with it and how."""
        numbers = ", ".join(str(n) for n in self.trials)
        said = f"{self.kind}: {self.error}" if self.error else self.kind
        return TrialOutcome(
            Status.SKIPPED,
            Reason.FAILS.tag(f"{self.knob}={self.value}"),
            f"{self.knob}={self.value} failed in every trial of this sweep that ran it (trials {numbers}, {said}):"
            " not run again in this sweep",
        )

    def left_out(self) -> str:
        """The sweep summary's line: what the search left out, and why."""
        numbers = ", ".join(str(n) for n in self.trials)
        return (
            f"left out: {self.knob}={self.value}, which failed in every trial that ran it (trials {numbers}: "
            f"{self.kind}{': ' + self.error if self.error else ''}; the first one's trial.log has the traceback)"
        )


def _worked(t: FrozenTrial) -> bool:
    """It ran its measured steps: a measurement, or pruned by the pruner after some."""
    return measured(t) or (t.state == TrialState.PRUNED and status_of(t) is Status.PRUNED)


def _cause(t: FrozenTrial) -> tuple[str, str]:
    """A failure's cause: its reason and its error's first line with the numbers masked (``loss is not finite
    after 12 measured steps`` and ``... after 30 ...`` are one cause; so are one shape mismatch at two batch
    sizes)."""
    return str(t.user_attrs.get(REASON_KEY)), re.sub(r"\d+(\.\d+)?", "#", str(t.user_attrs.get(FAILED_WITH_KEY) or ""))


def blamed(trials: Iterable[FrozenTrial], command: str | None) -> list[Blame]:
    """The values this sweep command's failures blame (the module's rule), in knob order."""
    failed: dict[tuple[str, str], list[FrozenTrial]] = {}
    ran: set[tuple[str, str]] = set()
    for t in trials:
        if _worked(t):
            ran.update((k, repr(v)) for k, v in t.params.items())
        elif t.state == TrialState.FAIL and failed_answer(t, command):
            failed.setdefault(_cause(t), []).append(t)
    if not ran:  # nothing measured yet: the failures do not tell a value apart from the workload
        return []
    found: dict[tuple[str, str], Blame] = {}
    for (kind, _error), group in failed.items():
        error = str(group[0].user_attrs.get(FAILED_WITH_KEY) or "")  # as the first one said it
        for knob, value in {(k, v) for t in group for k, v in t.params.items() if (k, repr(v)) not in ran}:
            runs = [t for t in group if knob in t.params and t.params[knob] == value]
            if len(runs) < MIN_FAILURES:
                continue
            shared = set.intersection(*({(k, repr(v)) for k, v in t.params.items()} for t in runs)) - ran
            if shared == {(knob, repr(value))}:
                numbers = tuple(t.number for t in runs)
                found.setdefault((knob, repr(value)), Blame(knob, value, numbers, kind, error))
    return sorted(found.values(), key=lambda b: (b.knob, repr(b.value)))


def blame_of(values: dict[str, Any], blames: list[Blame]) -> Blame | None:
    """The first blamed value among a proposal's active ``values`` (an inactive knob left out), or None."""
    return next((b for b in blames if b.knob in values and values[b.knob] == b.value), None)
