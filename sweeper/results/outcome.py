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

    ``reason`` is a short machine-readable tag (``oom``, ``nonfinite``, ``timeout``, ``signal:SIGSEGV``,
    ``exception:ValueError``, ``invalid:<why>``, ``duplicate:<trial>``, ``over-budget:<why>``; for status
    interrupted: ``interrupted`` or ``budget``); ``message`` is
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

    def objective_values(self, objectives: list[tuple[str, str]]) -> list[float] | None:
        """Values of the named objective metrics, or None when one is missing or not finite."""
        values = []
        for metric, _direction in objectives:
            v = self.metrics.get(metric)
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                return None
            values.append(float(v))
        return values
