"""One trial's row looked up again, by (study, trial), in its own file or a compacted study file; the Parquet
column types of a study's knobs (as the workload's YAML declares them); the sweep facts every row records (the
report reads only Parquet). Used by the sweep loop, its recovery and the Hydra job.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sweeper.results.outcome import TrialOutcome
from sweeper.results.store import _compacted, file_prefix, read_file, trial_path

_PREFIXES = {"knobs": "knob.", "workload": "param.", "distributed": "knob.distributed."}
_ARROW = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}


def column_of(key: str) -> str | None:
    """The row column of a dotted config key (``knobs.x`` -> ``knob.x``, ``workload.x`` -> ``param.x``), or None."""
    section, _, name = key.partition(".")
    prefix = _PREFIXES.get(section)
    return prefix + name if prefix else None


def column_types(param_types: dict[str, type], defaults: dict[str, Any] | None = None) -> dict[str, pa.DataType]:
    """Arrow types of the ``knob.*``/``param.*`` columns, as the workload's YAML declares them: the type of each
    default (flat dotted keys), and for a knob whose default is null (or a swept one) its search space's value type
    (``param_types``, from ``space.value_types``). A column null in one row then has the same type in every file."""
    declared = {k: type(v) for k, v in (defaults or {}).items() if isinstance(v, (bool, int, float, str))}
    out = {}
    for key, kind in {**declared, **param_types}.items():
        if (col := column_of(key)) is not None:
            out[col] = _ARROW.get(kind, pa.string())
    return out


def facts_columns(facts: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The ``space`` and ``knob_defaults`` columns (JSON text) of ``sweep_facts``; empty for none."""
    import json

    return {name: json.dumps(facts[name], sort_keys=True) for name in ("space", "knob_defaults") if name in facts}


_ROW_FIELDS = {"study", "study_id", "trial", "status", "reason", "message", "workload", "preset", "objectives",
               "started_at", "ended_at", "wall_s", "baseline", "confirm_of", "space", "knob_defaults"}


def _compacted_row(trials_dir: Path, key: str, trial: int, columns: list[str] | None = None) -> dict | None:
    """The row of ``trial`` in the study's compacted files (the one that counts first). Looks again while the
    set of compacted files changes (another process compacting), so a row moving between files is not missed."""
    wanted = pc.field("trial") == trial
    seen: list[Path] | None = None
    while (files := _compacted(trials_dir, key)) != seen:
        seen = files
        try:
            for p in files:
                try:
                    table = pq.read_table(p, columns=columns, filters=wanted)
                except (pa.ArrowException, OSError) as e:
                    if isinstance(e, FileNotFoundError):
                        raise
                    continue  # unreadable: read_file warns where it matters
                if table.num_rows:
                    return table.to_pylist()[0]
        except FileNotFoundError:
            continue
    return None


def has_trial(trials_dir: Path, study: str, trial: int, uid: str | None = "") -> bool:
    """Whether a row of the trial is stored: its own file, or a compacted file of the study."""
    return (trial_path(trials_dir, study, trial, uid).exists()
            or _compacted_row(trials_dir, file_prefix(study, uid), trial, ["trial"]) is not None)


def read_trial_outcome(trials_dir: Path, study: str, trial: int, uid: str | None = "") -> TrialOutcome | None:
    """The outcome a trial's own row records (None if it has no readable row): the task's word beats a
    launcher's, and a row written just before a crash is what the study is told on resume."""
    from sweeper.results.outcome import Status

    path = trial_path(trials_dir, study, trial, uid)
    row: dict | None = None
    if path.exists():
        with contextlib.suppress(FileNotFoundError):
            table = read_file(path)
            row = table.to_pylist()[0] if table is not None and table.num_rows else None
    if row is None:
        row = _compacted_row(trials_dir, file_prefix(study, uid), trial)
    if row is None:
        return None
    metrics = {k: v for k, v in row.items()
               if k not in _ROW_FIELDS and not k.startswith(("knob.", "param.")) and v is not None}
    started, ended = row.get("started_at"), row.get("ended_at")
    return TrialOutcome(Status(row["status"]), row.get("reason") or "", row.get("message") or "", metrics,
                        started.timestamp() if started else None, ended.timestamp() if ended else None)
