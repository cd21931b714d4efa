"""Synthetic trial rows for the report's tests, built with the project's own row code
(``sweeper.results.rows.make_row``) and, where they go to disk, written with its store
(``sweeper.results.store.write_trial``): the columns and types a sweep writes."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pandas as pd

from sweeper.results import store
from sweeper.results.outcome import Status, TrialOutcome
from sweeper.results.rows import make_row

T0 = dt.datetime(2026, 12, 4, tzinfo=dt.timezone.utc).timestamp()


def row(
    study: str,
    trial: int | None,
    knobs: dict[str, Any],
    throughput: float | None,
    *,
    workload: str = "own",
    defaults: dict[str, Any] | None = None,
    status: Status = Status.COMPLETE,
    reason: str = "",
    metrics: dict[str, Any] | None = None,
    unit: str = "samples/s",
    params: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    start: float | None = None,
    module: str = "",
) -> dict[str, Any]:
    """One trial's row. ``throughput`` None: a row without a measurement (a failed trial); ``defaults``: the workload
    defaults the sweeper records (``knob_defaults``), so the report finds the baseline."""
    m: dict[str, Any] = {
        "steps_measured": 50,
        "step_cv": 0.001,
        "cpu_threads": 1,
        "device": "cpu",
        "cpu_model": "Test CPU",
        "torch_version": "2.14.1",
        "loss_finite": True,
    }
    if throughput is not None:
        m.update(throughput=throughput, throughput_unit=unit)
    m.update(metrics or {})
    started = (T0 if start is None else start) + 10.0 * (trial or 0)
    outcome = TrialOutcome(status, reason, "boom" if status is Status.FAILED else "", m, started, started + 1.0)
    cfg = {
        "workload": {"name": workload, **({"module": module} if module else {}), **(params or {})},
        "knobs": dict(knobs),
        "preset": "",
    }
    r = make_row(outcome, study=study, trial=trial, cfg=cfg, objectives=[("throughput", "maximize")])
    if defaults is not None:
        r["knob_defaults"] = json.dumps({f"knob.{k}": v for k, v in defaults.items()})
        r["baseline"] = all(knobs.get(k) == v for k, v in defaults.items())
    r.update(extra or {})
    return r


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows as the report reads them, without a round trip through disk (for many small studies)."""
    df = pd.DataFrame(rows)
    df["started_at"] = pd.to_datetime(df["started_at"], utc=True)
    return df


def write(results: Path, rows: list[dict[str, Any]]) -> Path:
    """The rows under ``results/trials``, one file per trial, as a sweep writes them."""
    for r in rows:
        store.write_trial(Path(results) / "trials", r["study"], r["trial"], None, r)
    return Path(results)
