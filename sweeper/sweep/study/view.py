"""A study's trials read once for one decision: the budget's admission asks the cost model and the re-measurement
plan dozens of times per proposal, each reading every trial; on a storage that is a database (SQLite by default,
PostgreSQL) each read is a query of milliseconds, and a decision over a proposal that does not fit took seconds of
the budget. Within one decision nothing is written, so one read serves it.
"""

from __future__ import annotations

import copy
from collections.abc import Container
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState


class StudyView:
    """``study`` with its trials as they stood when the view was made; every other attribute is the study's own
    (writes go to the study: a view is for reading, and made again after a write)."""

    def __init__(self, study: optuna.Study) -> None:
        self._study = study
        self._trials = study.get_trials(deepcopy=False)

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        trials = [t for t in self._trials if states is None or t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)
