"""The sweep's one wall-clock budget and its one clock, shared by the scheduler, the cost model's reserve and the
staged sampler's screen (``hydra.sweeper.timeout_s``, counted from the command's start).

Every reading of "how long has this command run" and "how much is left" goes through one :class:`Budget`, so a
test hands a fake clock to all of them at once (``Budget(300, started_at=0.0, clock=fake)``) and moves time without
sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Budget:
    """``budget_s`` seconds (None: no limit) from ``started_at`` on ``clock`` (unix seconds, ``time.time``)."""

    def __init__(
        self, budget_s: float | None, started_at: float | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.clock = clock
        self.started_at = float(clock() if started_at is None else started_at)
        self.budget_s = float(budget_s) if budget_s else None
        self.deadline = self.started_at + self.budget_s if self.budget_s else None

    def now(self) -> float:
        return float(self.clock())

    def elapsed(self) -> float:
        """Seconds since the command started."""
        return self.now() - self.started_at

    def time_left(self) -> float | None:
        """Seconds until the budget ends (negative past it); None without a budget."""
        return None if self.deadline is None else self.deadline - self.now()

    def expired(self) -> bool:
        left = self.time_left()
        return left is not None and left <= 0

    def fits(self, predicted_s: float, reserve_s: float = 0.0) -> bool:
        """A trial predicted to take ``predicted_s`` ends before the budget, ``reserve_s`` kept for later."""
        left = self.time_left()
        return left is None or predicted_s <= left - reserve_s

    def used_share(self) -> float | None:
        """The share of the budget used so far (None without a budget)."""
        return None if self.budget_s is None else self.elapsed() / self.budget_s
