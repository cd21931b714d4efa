"""The results store: one Parquet file per trial, written atomically, read back as one table.

Files are ``<trials dir>/<study>.<trial number>.parquet``: unique per study and trial number (Optuna assigns
numbers atomically in the shared storage), so sweeper processes on several nodes never overwrite each other,
and a re-write of the same trial replaces its row instead of duplicating it. Each file is written to a hidden
temporary name and renamed into place, so pandas, pyarrow and DuckDB never see a half-written file.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sweeper.outcome import TrialOutcome
from sweeper.space import flatten

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def trial_path(trials_dir: Path, study: str, trial: int | None) -> Path:
    name = _SAFE.sub("_", study)
    if trial is None:  # a single run outside any study
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        return Path(trials_dir) / f"{name}.run-{stamp}-{socket.gethostname()}-{os.getpid()}.parquet"
    return Path(trials_dir) / f"{name}.{int(trial):06d}.parquet"


def _timestamp(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def make_row(outcome: TrialOutcome, *, study: str, trial: int | None, cfg: dict[str, Any],
             objectives: list[tuple[str, str]]) -> dict[str, Any]:
    """The Parquet row of one trial: identity, status, knobs, workload parameters, metrics, fingerprint."""
    row: dict[str, Any] = {
        "study": study,
        "trial": trial,
        "status": outcome.status.value,
        "reason": outcome.reason,
        "message": outcome.message,
        "workload": cfg["workload"]["name"],
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
    for key, value in flatten(cfg.get("distributed") or {}).items():
        row[f"knob.distributed.{key}"] = value
    for key, value in flatten({k: v for k, v in cfg["workload"].items() if k not in ("name", "module")}).items():
        row[f"param.{key}"] = value if not isinstance(value, (list, dict)) else str(value)
    for key, value in outcome.metrics.items():
        if isinstance(value, (bool, int, float, str)) or value is None:
            row[key] = value
    return row


# Types of columns that may be null in one row and set in another, so every file agrees on them (a null-typed
# column in one file would make pyarrow's and pandas' directory readers fail on the next file).
_NULLABLE_TYPES: dict[str, pa.DataType] = {
    "trial": pa.int64(), "throughput": pa.float64(), "peak_mem_bytes": pa.float64(),
    "peak_mem_reserved_bytes": pa.float64(), "gpu_mem_bytes": pa.float64(),
    "started_at": pa.timestamp("us", tz="UTC"), "ended_at": pa.timestamp("us", tz="UTC"),
    "knob.distributed.nproc": pa.int64(), "knob.distributed.replicate_degree": pa.int64(),
    "knob.distributed.param_dtype": pa.string(), "knob.distributed.reduce_dtype": pa.string(),
    "confirm_of": pa.int64(), "baseline": pa.bool_(),
}
_FLOAT_METRICS = {"peak_mem_bytes", "peak_mem_reserved_bytes", "gpu_mem_bytes"}


def value_type(value: Any) -> pa.DataType:
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float):
        return pa.float64()
    return pa.string()


def write_row(path: Path, row: dict[str, Any], types: dict[str, pa.DataType] | None = None) -> Path:
    """Write one row to ``path`` atomically (temporary file in the same folder, then rename).

    ``types`` gives the Arrow type of columns whose value may be None (knobs inactive under a condition).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    hints = {**_NULLABLE_TYPES, **(types or {})}
    arrays, names = [], []
    for key, value in row.items():
        if key in _FLOAT_METRICS and value is not None:
            value = float(value)
        if value is None:
            kind = hints.get(key, pa.string())
        elif key in hints and not (isinstance(value, str) and hints[key] != pa.string()):
            kind = hints[key]
        else:
            kind = value_type(value)
        arrays.append(pa.array([value], type=kind))
        names.append(key)
    pq.write_table(pa.Table.from_arrays(arrays, names=names), tmp)
    os.replace(tmp, path)
    return path


def trial_files(trials_dir: Path) -> list[Path]:
    d = Path(trials_dir)
    return sorted(p for p in d.glob("*.parquet") if not p.name.startswith(".")) if d.is_dir() else []


def read_table(paths: Iterable[Path]) -> pa.Table:
    """All rows of ``paths`` as one table; columns missing from a file are null (schemas unified)."""
    paths = [str(p) for p in paths]
    if not paths:
        return pa.table({})
    schema = pa.unify_schemas([pq.read_schema(p) for p in paths], promote_options="permissive")
    return ds.dataset(paths, schema=schema, format="parquet").to_table()


def read_results(results: Path | str) -> "Any":
    """Every trial row under a results folder (or a trials folder, or one file) as a pandas DataFrame."""
    import pandas as pd

    results = Path(results)
    if results.is_file():
        paths = [results]
    else:
        paths = trial_files(results / "trials") or trial_files(results)
    table = read_table(paths)
    return table.to_pandas() if table.num_columns else pd.DataFrame()


def column_types(param_types: dict[str, type]) -> dict[str, pa.DataType]:
    """Arrow types of the ``knob.*``/``param.*`` columns from the search space's value types."""
    arrow = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}
    out = {}
    for key, kind in param_types.items():
        section, _, name = key.partition(".")
        prefix = {"knobs": "knob.", "workload": "param.", "distributed": "knob.distributed."}.get(section)
        if prefix:
            out[prefix + name] = arrow.get(kind, pa.string())
    return out


_ROW_FIELDS = {"study", "trial", "status", "reason", "message", "workload", "preset", "objectives", "started_at",
               "ended_at", "wall_s", "baseline", "confirm_of"}


def read_outcome(path: Path) -> TrialOutcome | None:
    """The outcome a trial's own row records (None if it has no row): the task's word beats a launcher's."""
    from sweeper.outcome import Status

    if not Path(path).exists():
        return None
    row = pq.read_table(path).to_pylist()[0]
    metrics = {k: v for k, v in row.items()
               if k not in _ROW_FIELDS and not k.startswith(("knob.", "param.")) and v is not None}
    started, ended = row.get("started_at"), row.get("ended_at")
    return TrialOutcome(Status(row["status"]), row.get("reason") or "", row.get("message") or "", metrics,
                        started.timestamp() if started else None, ended.timestamp() if ended else None)
