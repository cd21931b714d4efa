"""The trial outcome: the one record that every later stage reads.

The child process produces it, the sweeper tells Optuna from it, the results store turns it into
a Parquet row, the progress line prints it. Nothing downstream re-derives a status.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any


class Status(str, enum.Enum):
    """What became of a trial. The value is what lands in the Parquet ``status`` column."""

    COMPLETE = "complete"  # measured; objectives told to Optuna
    FAILED = "failed"  # exception, signal, timeout, non-finite loss
    INFEASIBLE = "infeasible"  # out of memory: a violated constraint for the sampler
    PRUNED = "pruned"  # stopped early by the pruner
    SKIPPED = "skipped"  # never launched: impossible combination, a duplicate of a measured one, over budget
    INTERRUPTED = "interrupted"  # stopped by Ctrl-C, SIGTERM, the budget or its sweeper's death: measured again


class Reason(str, enum.Enum):
    """Why a trial ended as it did: the tag before the first ``:`` of :attr:`TrialOutcome.reason` (the Parquet
    ``reason`` column keeps the whole text, e.g. ``over-budget:compile=default:58s``). Code decides on this type,
    never on the text: ``outcome.kind is Reason.DUPLICATE``."""

    OOM = "oom"  # out of memory (status infeasible)
    NONFINITE = "nonfinite"  # the loss went NaN/inf
    NON_FINITE = "non-finite"  # non-finite:<objective>: an objective is not a finite number
    OBJECTIVE_MISSING = "objective-missing"  # objective-missing:<objective>
    TIMEOUT = "timeout"  # past trial.timeout_s
    STALLED = "stalled"  # no progress for measure.stall_s
    SIGNAL = "signal"  # signal:SIGSEGV: the trial process was killed by a signal
    EXIT = "exit"  # exit:<code>: the trial process exited without a result
    EXCEPTION = "exception"  # exception:<type>: raised in the trial (or around its job)
    LAUNCHER = "launcher"  # launcher:<type>: Hydra's launcher failed the job
    CHECK = "check"  # the workload's own check() refused or raised
    INVALID = "invalid"  # invalid:<why>: a constraint, the device, a declared condition
    DUPLICATE = "duplicate"  # duplicate:<trial>: the study measured (or measures) this configuration
    FAILS = "fails"  # fails:<knob>=<value>: every trial of this sweep that ran that value failed (search.failing)
    OVER_BUDGET = "over-budget"  # over-budget:<why>: predicted not to end in the time left
    PRUNED = "pruned"  # stopped early by the pruner
    SURPLUS = "surplus"  # another process on the study reached the target first: never ran
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM, or its sweeper died
    BUDGET = "budget"  # the sweep's budget ended while it ran (or, priced by a guess, its reserve began)
    FORKSERVER = "forkserver"  # the forkserver starting trials was killed from outside
    NONE = ""  # no reason recorded (a complete trial), or a tag this version does not know

    @classmethod
    def of(cls, text: object) -> "Reason":
        """The kind of a reason text (a row's ``reason``, a trial's attribute); unknown tags are ``NONE``."""
        head = str(text or "").partition(":")[0]
        try:
            return cls(head)
        except ValueError:
            return cls.NONE

    def tag(self, detail: object = None) -> str:
        """The reason text: ``<kind>`` or ``<kind>:<detail>``."""
        return self.value if detail is None else f"{self.value}:{detail}"


@dataclasses.dataclass
class TrialOutcome:
    """Status, reason and measurements of one trial.

    ``reason`` is a short machine-readable tag (``oom``, ``nonfinite`` (loss), ``non-finite:<objective>``,
    ``timeout``, ``signal:SIGSEGV``, ``exception:ValueError``, ``invalid:<why>``, ``duplicate:<trial>``,
    ``over-budget:<why>``; for status interrupted: ``interrupted`` or ``budget``); ``message`` is
    the human text (exception message and the last traceback lines).
    """

    status: Status
    reason: str = ""
    message: str = ""
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    started_at: float | None = None  # unix seconds
    ended_at: float | None = None

    @property
    def kind(self) -> Reason:
        """The typed reason (:class:`Reason`) of ``reason``."""
        return Reason.of(self.reason)

    @property
    def detail(self) -> str:
        """What ``reason`` says after its kind (``duplicate:3`` -> ``3``); empty when nothing."""
        return str(self.reason or "").partition(":")[2]

    @property
    def wall_s(self) -> float:
        if self.started_at is None or self.ended_at is None:
            return 0.0
        return self.ended_at - self.started_at

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrialOutcome":
        d = dict(d)
        d["status"] = Status(d["status"])
        return cls(**d)

    def checked(self, objectives: list[tuple[str, str]]) -> "TrialOutcome":
        """This outcome, failed when it says complete but an objective is not a finite number (an ``inf``
        throughput of a step timed at zero, a NaN): reason ``non-finite:<metric>`` (``objective-missing:<metric>``
        when absent). Optuna, the Parquet row and every reader then agree that nothing can rank it; the measured
        metrics are kept."""
        if self.status is not Status.COMPLETE:
            return self
        for metric, _direction in objectives:
            v = self.metrics.get(metric)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                reason = Reason.OBJECTIVE_MISSING.tag(metric)
            elif not math.isfinite(v):
                reason = Reason.NON_FINITE.tag(metric)
            else:
                continue
            message = f"objective {metric} is {v!r}, not a finite number: the trial cannot be ranked"
            return dataclasses.replace(self, status=Status.FAILED, reason=reason, message=message)
        return self

    def objective_values(self, objectives: list[tuple[str, str]]) -> list[float] | None:
        """Values of the named objective metrics, or None when one is missing or not finite."""
        values = []
        for metric, _direction in objectives:
            v = self.metrics.get(metric)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                return None
            values.append(float(v))
        return values
