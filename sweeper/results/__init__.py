"""The row: a trial's outcome, the Parquet results store, compaction, config-key helpers.

Runs in every process that writes or reads rows (the Hydra job writes, the report reads). Imports nothing
from the other ``sweeper`` packages, nor Optuna or torch, so the report can read results without them.
"""

from sweeper.results.outcome import Status, TrialOutcome
from sweeper.results.store import read_results

__all__ = ["Status", "TrialOutcome", "read_results"]
