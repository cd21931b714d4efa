"""Declarative sweeps of PyTorch performance knobs: Hydra configs -> Optuna trials -> Parquet rows -> reports."""

from sweeper.errors import ConfigError
from sweeper.results.outcome import Status, TrialOutcome
from sweeper.results.store import read_results

__all__ = ["ConfigError", "Status", "TrialOutcome", "read_results"]
