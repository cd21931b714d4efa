"""Small pieces around Hydra's side of a sweep: job returns, command-line overrides, the report cache."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from sweeper.outcome import Status, TrialOutcome

log = logging.getLogger(__name__)


def compact_and_refresh(results_dir: Path, study: str) -> None:
    """At a sweep's end: fold the study's per-trial files into one (``store.compact``: a later report parses one
    file, not one per trial), then this sweep's rows into the report's read cache. Neither may fail the sweep."""
    from sweeper import store

    try:
        store.compact(results_dir / "trials", study)
    except Exception as e:  # noqa: BLE001 - every row stays readable, compacted or not
        log.warning("study %s not compacted: %s", study, e)
    try:
        from sweeper.report.data import read_rows

        read_rows(results_dir)
    except Exception as e:  # noqa: BLE001 - a cache must never fail a sweep
        log.warning("report cache not refreshed: %s", e)


def command_line_params(hydra_overrides: list[str]) -> dict[str, Any]:
    """``hydra.sweeper.params`` entries given on the command line (``hydra.sweeper.params={knobs.x: ...}``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out: dict[str, Any] = {}
    for override in OverridesParser.create().parse_overrides(hydra_overrides):
        key = override.key_or_group.lstrip("+~")
        if key == "hydra.sweeper.params" and isinstance(override.value(), dict):
            out.update(override.value())
    return out


def within(dist: Any, value: Any) -> bool:
    from optuna.distributions import CategoricalDistribution

    if isinstance(dist, CategoricalDistribution):
        return value in dist.choices
    return isinstance(value, (int, float)) and dist.low <= value <= dist.high


def outcome_of(ret: Any) -> TrialOutcome:
    """A launcher's JobReturn (or the exception it raised) -> TrialOutcome."""
    from hydra.core.utils import JobStatus

    now = time.time()
    if isinstance(ret, BaseException):
        return TrialOutcome(Status.FAILED, f"launcher:{type(ret).__name__}", str(ret)[:2000], started_at=now, ended_at=now)
    if ret.status == JobStatus.COMPLETED and isinstance(ret.return_value, dict):
        return TrialOutcome.from_dict(ret.return_value)
    exc = getattr(ret, "_return_value", None)
    name = type(exc).__name__ if isinstance(exc, BaseException) else "unknown"
    return TrialOutcome(Status.FAILED, f"exception:{name}", str(exc)[:2000], started_at=now, ended_at=now)

