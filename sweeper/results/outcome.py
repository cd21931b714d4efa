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
                reason = f"objective-missing:{metric}"
            elif not math.isfinite(v):
                reason = f"non-finite:{metric}"
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
