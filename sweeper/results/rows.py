"""The Parquet row of one trial: what the sweeper and the trial write (``make_row``), column by column.

Identity (study, study_id, trial), status, reason, message, the workload (and ``workload_module``, a user's own
module) and preset, ``knob.*`` (the knobs, and the distributed settings of a distributed trial only),
``param.*`` (the workload's parameters), the objectives, times, and every scalar metric of the outcome. The store
(``sweeper.results.store``) gives the columns their types and writes the file.
"""

from __future__ import annotations

import datetime as dt
import socket
from typing import Any

from sweeper.results.keys import flatten
from sweeper.results.outcome import TrialOutcome


def _timestamp(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def make_row(outcome: TrialOutcome, *, study: str, trial: int | None, cfg: dict[str, Any],
             objectives: list[tuple[str, str]], study_id: str | None = "") -> dict[str, Any]:
    """The Parquet row of one trial: identity, status, knobs, workload parameters, metrics, fingerprint."""
    row: dict[str, Any] = {
        "study": study,
        "study_id": study_id or "",
        "trial": trial,
        "status": outcome.status.value,
        "reason": outcome.reason,
        "message": outcome.message,
        "workload": cfg["workload"]["name"],
        "workload_module": cfg["workload"].get("module") or "",  # a user's own module, for the report's recipe
        "preset": cfg.get("preset") or "",
        "throughput": None,
        "throughput_unit": "",
        "peak_mem_bytes": None,
        "objectives": ",".join(f"{m}:{d}" for m, d in objectives),
        "started_at": _timestamp(outcome.started_at),
        "ended_at": _timestamp(outcome.ended_at),
        "wall_s": outcome.wall_s,
        "hostname": socket.gethostname(),  # replaced by the trial's own fingerprint when it ran
    }
    for key, value in flatten(cfg.get("knobs") or {}).items():
        row[f"knob.{key}"] = value
    distributed = cfg.get("distributed") or {}
    if (distributed.get("strategy") or "none") != "none":  # a block the trial never used leaves no columns
        for key, value in flatten(distributed).items():
            row[f"knob.distributed.{key}"] = value
    for key, value in flatten({k: v for k, v in cfg["workload"].items() if k not in ("name", "module")}).items():
        row[f"param.{key}"] = value if not isinstance(value, (list, dict)) else str(value)
    for key, value in outcome.metrics.items():
        if isinstance(value, (bool, int, float, str)) or value is None:
            row[key] = value
    return row
