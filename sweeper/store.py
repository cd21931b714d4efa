"""The results store: one Parquet file per trial, written atomically, read back as one table.

Files are ``<trials dir>/<study>.<trial number>.parquet``: unique per study and trial number (Optuna assigns
numbers atomically in the shared storage), so sweeper processes on several nodes never overwrite each other,
and a re-write of the same trial replaces its row instead of duplicating it. Each file is written to a hidden
temporary name and renamed into place, so pandas, pyarrow and DuckDB never see a half-written file.

A finished study is compacted (``compact``): its per-trial files are folded into one
``<study>.compacted-<generation>-<stamp>-<host>-<pid>.parquet``, because parsing a Parquet footer per trial is
most of a report's time. A crash or a concurrent compaction can leave a row in two files; readers read each
(study, trial) once (``read_once``): a per-trial file beats a compacted copy, a later compaction an earlier one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sweeper.outcome import TrialOutcome
from sweeper.space import flatten

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# A study's files: per-trial ``<study>.<trial>.parquet`` and compacted ``<study>.compacted-<gen>-<tag>.parquet``
# (the tag has no dot, so the study part is unambiguous even when a study name holds dots).
_STUDY_FILE = re.compile(r"(?P<study>.+)\.(?:(?P<trial>\d+)|compacted-(?P<gen>\d+)-(?P<tag>[A-Za-z0-9_-]+))\.parquet")
_T = TypeVar("_T")


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
    # metrics of the JPEG pipeline that are null in some rows (knob columns get their types from the workload's
    # YAML via column_types, never from a list here)
    "data_decoded_pixels_frac": pa.float64(), "data_transfer_dtype": pa.string(),
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
    """All rows of ``paths`` as one table; columns missing from a file are null (schemas unified); a (study, trial)
    held by several of them is read once (``read_once``)."""
    paths = [str(p) for p in paths]
    if not paths:
        return pa.table({})
    schema = pa.unify_schemas([pq.read_schema(p) for p in paths], promote_options="permissive")
    dataset = ds.dataset(paths, schema=schema, format="parquet")
    if not any(is_compacted(p) for p in paths):
        return dataset.to_table()
    tables = [(Path(f.path).name, f.to_table(schema=schema)) for f in dataset.get_fragments()]
    return read_once(pa.concat_tables([t for _, t in tables]), [n for n, t in tables for _ in range(t.num_rows)])


def read_results(results: Path | str) -> "Any":
    """Every trial row under a results folder (or a trials folder, or one file) as a pandas DataFrame."""
    import pandas as pd

    results = Path(results)

    def read() -> pa.Table:
        if results.is_file():
            return read_table([results])
        return read_table(trial_files(results / "trials") or trial_files(results))

    table = retry_vanished(read)
    return table.to_pandas() if table.num_columns else pd.DataFrame()


def retry_vanished(read: Callable[[], _T], patience_s: float = 30.0) -> _T:
    """``read()``, again while files vanish under it: a file listed by one attempt can be gone before it is read
    (a compaction folded it into a new file, which the next attempt lists). Gives up after ``patience_s``."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return read()
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


# ---------------------------------------------------------------------------------------------------- compaction

def study_of(name: str) -> str | None:
    """The (file-name safe) study of a per-trial or compacted file name; None for any other file."""
    m = _STUDY_FILE.fullmatch(name)
    return m["study"] if m else None


def is_compacted(name: str | Path) -> bool:
    m = _STUDY_FILE.fullmatch(Path(name).name)
    return bool(m and m["gen"])


def _precedence(name: str) -> tuple[int, int, str]:
    """Which copy of a (study, trial) row counts: any plain file, then the later compaction (generation, then
    the time stamp that starts the tag, for two compactions of one generation)."""
    m = _STUDY_FILE.fullmatch(name)
    return (0, int(m["gen"]), m["tag"]) if m and m["gen"] else (1, 0, "")


def read_once(table: pa.Table, files: Sequence[str]) -> pa.Table:
    """``table`` (rows read from ``files``, one file name per row) with each (study, trial) once.

    Rows of plain files (per-trial or any other) are all kept; a row of a compacted file is dropped when a plain
    file or a later compacted file holds the same (study, trial). Rows without a trial number are all kept.
    """
    compacted = {f for f in set(files) if is_compacted(f)}
    if not compacted or not {"study", "trial"} <= set(table.column_names):
        return table
    import numpy as np
    import pandas as pd

    rank = {f: i for i, f in enumerate(sorted(set(files), key=_precedence))}
    rows = pd.DataFrame({"study": table.column("study").to_pandas(), "trial": table.column("trial").to_pandas(),
                         "rank": [rank[f] for f in files], "compacted": [f in compacted for f in files]})
    rows = rows[rows["trial"].notna()].sort_values("rank", ascending=False, kind="stable")
    superseded = rows.index[rows.duplicated(["study", "trial"]).to_numpy() & rows["compacted"].to_numpy()]
    keep = np.ones(table.num_rows, dtype=bool)
    keep[superseded] = False
    return table if keep.all() else table.filter(pa.array(keep))


def _study_files(trials_dir: Path, study: str) -> list[Path]:
    name = _SAFE.sub("_", study)
    return [p for p in trial_files(trials_dir) if study_of(p.name) == name]


def compacted_files(trials_dir: Path, study: str) -> list[Path]:
    """The study's compacted files, the one that counts first."""
    return sorted((p for p in _study_files(trials_dir, study) if is_compacted(p)),
                  key=lambda p: _precedence(p.name), reverse=True)


@contextlib.contextmanager
def _compaction_lock(trials_dir: Path, study: str) -> Iterator[None]:
    """Processes compacting one study take turns (so they do not write two copies). Where file locks do not
    work, they compact at once, which loses nothing either (see ``compact``)."""
    with open(trials_dir / f".{_SAFE.sub('_', study)}.compact.lock", "a") as f:
        with contextlib.suppress(OSError):
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compact(trials_dir: Path, study: str) -> Path | None:
    """Fold the study's per-trial files (and earlier compacted files) into one compacted file and return it
    (None: the study has no files). Idempotent: a study already in one compacted file is left as it is.

    The new file is written, synced and renamed into place before any input is deleted, so a crash at any point
    leaves every row readable (at worst twice, which readers resolve, see ``read_once``). An input is deleted only
    while it is still the file that was read: a trial re-written meanwhile keeps its new file. A file written
    while compacting (a trial of another process) stays as it is until the next compaction.
    """
    trials_dir = Path(trials_dir)
    if not trials_dir.is_dir():
        return None
    with _compaction_lock(trials_dir, study):
        files = _study_files(trials_dir, study)
        if len(files) == 1 and is_compacted(files[0]):
            return files[0]
        read: list[tuple[Path, os.stat_result]] = []
        tables: list[pa.Table] = []
        names: list[str] = []
        for p in files:
            try:
                with open(p, "rb") as f:
                    stat, table = os.fstat(f.fileno()), pq.ParquetFile(f).read(use_threads=False)
            except FileNotFoundError:  # folded meanwhile by a process the lock did not hold back: its file has it
                continue
            read.append((p, stat))
            tables.append(table)
            names += [p.name] * table.num_rows
        if not tables:
            return None
        table = read_once(pa.concat_tables(tables, promote_options="permissive"), names)
        table = table.take(pc.sort_indices(table, [("trial", "ascending")]))
        generation = 1 + max((_precedence(p.name)[1] for p, _ in read), default=0)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        host = re.sub(r"[^A-Za-z0-9_-]+", "_", socket.gethostname())
        out = trials_dir / f"{_SAFE.sub('_', study)}.compacted-{generation:06d}-{stamp}-{host}-{os.getpid()}.parquet"
        tmp = out.with_name(f".{out.name}.tmp")
        pq.write_table(table, tmp, compression="zstd")
        _fsync(tmp)
        os.replace(tmp, out)
        _fsync(trials_dir)  # the new file is durable before any row's other copy goes
        for p, stat in read:
            with contextlib.suppress(FileNotFoundError):
                now = os.stat(p)
                if (now.st_ino, now.st_size, now.st_mtime_ns) == (stat.st_ino, stat.st_size, stat.st_mtime_ns):
                    os.unlink(p)
        return out


def compact_all(results: Path | str) -> list[Path]:
    """Compact every study under a results folder (or its trials folder): results of sweeps that ended before
    compaction existed, or were killed. Safe while sweeps still run on them."""
    trials = Path(results) / "trials" if (Path(results) / "trials").is_dir() else Path(results)
    studies = sorted({s for p in trial_files(trials) if (s := study_of(p.name)) is not None})
    return [out for s in studies if (out := compact(trials, s)) is not None]


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


def sweep_facts(distributions: dict[str, Any], defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the report needs of the sweep, recorded in every row (the report reads only Parquet): ``space``, the
    search space as ``{column: Optuna distribution as JSON data}`` (importance uses each knob's real
    distribution), and ``knob_defaults``, the workload's defaults as ``{column: value}`` (the baseline, labels).
    Plain data, so it travels inside the trial's JSON context; ``facts_columns`` makes the row's two columns."""
    import json

    from optuna.distributions import distribution_to_json

    space = {col: json.loads(distribution_to_json(d)) for k, d in distributions.items()
             if (col := column_of(k)) is not None}
    base = {col: v for k, v in defaults.items()
            if (col := column_of(k)) is not None and (v is None or isinstance(v, (bool, int, float, str)))}
    return {"space": space, "knob_defaults": base}


def facts_columns(facts: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The ``space`` and ``knob_defaults`` columns (JSON text) of ``sweep_facts``; empty for none."""
    import json

    return {name: json.dumps(facts[name], sort_keys=True) for name in ("space", "knob_defaults") if name in facts}


_ROW_FIELDS = {"study", "trial", "status", "reason", "message", "workload", "preset", "objectives", "started_at",
               "ended_at", "wall_s", "baseline", "confirm_of", "space", "knob_defaults"}


def _compacted_row(trials_dir: Path, study: str, trial: int, columns: list[str] | None = None) -> dict | None:
    """The row of (study, trial) in the study's compacted files (the one that counts first). Looks again while the
    set of compacted files changes (another process compacting), so a row moving between files is not missed."""
    wanted = (pc.field("study") == study) & (pc.field("trial") == trial)
    seen: list[Path] | None = None
    while (files := compacted_files(trials_dir, study)) != seen:
        seen = files
        try:
            for p in files:
                table = pq.read_table(p, columns=columns, filters=wanted)
                if table.num_rows:
                    return table.to_pylist()[0]
        except FileNotFoundError:
            continue
    return None


def has_trial(trials_dir: Path, study: str, trial: int) -> bool:
    """Whether a row of the trial is stored: its own file, or a compacted file of the study."""
    return (trial_path(trials_dir, study, trial).exists()
            or _compacted_row(trials_dir, study, trial, ["trial"]) is not None)


def read_trial_outcome(trials_dir: Path, study: str, trial: int) -> TrialOutcome | None:
    """The outcome a trial's own row records (None if it has no row): the task's word beats a launcher's."""
    from sweeper.outcome import Status

    try:
        row: dict | None = pq.read_table(trial_path(trials_dir, study, trial)).to_pylist()[0]
    except FileNotFoundError:
        row = _compacted_row(trials_dir, study, trial)
    if row is None:
        return None
    metrics = {k: v for k, v in row.items()
               if k not in _ROW_FIELDS and not k.startswith(("knob.", "param.")) and v is not None}
    started, ended = row.get("started_at"), row.get("ended_at")
    return TrialOutcome(Status(row["status"]), row.get("reason") or "", row.get("message") or "", metrics,
                        started.timestamp() if started else None, ended.timestamp() if ended else None)
