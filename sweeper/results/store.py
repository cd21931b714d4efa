"""The results store: one Parquet file per trial, written atomically, read back as one table.

Files are ``<trials dir>/<key>.<trial number>.parquet`` where ``<key>`` (``file_prefix``) names the study and
its storage: unique per study, storage and trial number (Optuna assigns numbers atomically in the shared
storage), so sweeper processes on several nodes never overwrite each other, results of two machines can be
merged into one folder, and a re-write of the same trial replaces its row instead of duplicating it. Each file is
written to a hidden temporary name and renamed into place, so pandas, pyarrow, DuckDB and polars never see a
half-written file.

The folder's schema policy: every column has one type in every file, and ``+schema.parquet`` (zero rows, sorted
before every row file) holds every column of the folder, updated before a row with a new column is written. Readers
that take the first file's schema (pandas, pyarrow, polars) so see every column of every file; DuckDB reads by name
(``union_by_name=true``).

A finished study is compacted (``compact``): its per-trial files are folded into one
``<key>.compacted-<generation>-<stamp>-<host>-<pid>.parquet``, because parsing a Parquet footer per trial is
most of a report's time. A crash or a concurrent compaction can leave a row in two files; readers read each
row once (``readers.read_once``): a per-trial file beats a compacted copy, a later compaction an earlier one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import glob
import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sweeper.results.folder import (  # noqa: F401 - re-exported: the folder's files and columns
    SCHEMA_FILE,
    file_safe,
    folder_schema,
    heal_schema,
    host_name,
    rebuilt_schema,
    trial_files,
    update_schema,
)
from sweeper.results.readers import (  # noqa: F401 - re-exported: the store's reading side
    concat,
    is_compacted,
    read_file,
    read_files,
    read_once,
    read_table,
    retry_vanished,
    study_of,
)
from sweeper.results.procs import pid_alive
from sweeper.results.readers import (
    precedence as _precedence,
)

log = logging.getLogger(__name__)
_LOCK_WARNED: list[bool] = []  # the warning that file locks fail is given once per process


def file_prefix(study: str, uid: str | None = "") -> str:
    """The study's file key: a readable part (letters, digits, ``_``, ``-``; starts with a letter or digit, so no
    reader takes the file for hidden or metadata) and a hash of the exact study name and the study's id (see
    ``study.study_id``), so two studies never share files, whatever characters their names hold, and two storages
    that use one study name (two machines) never overwrite or hide each other's rows when their files are merged."""
    readable = file_safe(study, 60, "study")
    digest = hashlib.sha256(f"{study}\0{uid or ''}".encode()).hexdigest()[:10]
    return f"{readable}-{digest}"


def trial_path(trials_dir: Path, study: str, trial: int | None, uid: str | None = "") -> Path:
    name = file_prefix(study, uid)
    if trial is None:  # a single run outside any study
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        return Path(trials_dir) / f"{name}.run-{stamp}-{host_name()}-{os.getpid()}.parquet"
    return Path(trials_dir) / f"{name}.{int(trial):06d}.parquet"


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
    "data_decoded_pixels_frac": pa.float64(), "data_transfer_dtype": pa.string(), "data_augment_device": pa.string(),
}
_FLOAT_METRICS = {"peak_mem_bytes", "peak_mem_reserved_bytes", "gpu_mem_bytes"}


def value_type(value: Any) -> pa.DataType:
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, dt.datetime):
        return pa.timestamp("us", tz="UTC")
    return pa.string()


def is_disk_full(exc: BaseException) -> bool:
    """An error of a full disk or an exhausted quota (or a file size limit)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def disk_full_in(exc: BaseException) -> BaseException | None:
    """The error of a full disk that ``exc`` is, or wraps at any depth (``__cause__``, ``__context__``, a database
    driver's original error as SQLAlchemy keeps it in ``orig``), else None: Optuna's ``StorageInternalError`` says
    "invalid data in the commit" for SQLite's "database or disk is full", which only its cause tells. Matched on
    the errors' codes (errno, SQLite's SQLITE_FULL, PostgreSQL's disk_full), never on their text."""
    import sqlite3

    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, DiskFull) or is_disk_full(e):
            return e
        if isinstance(e, sqlite3.Error) and getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return e
        if "53100" in (getattr(e, "pgcode", None), getattr(e, "sqlstate", None)):  # psycopg 2 / 3: disk_full
            return e
        orig = getattr(e, "orig", None)
        todo += [e.__cause__, e.__context__, orig if isinstance(orig, BaseException) else None]
    return None


class DiskFull(OSError):
    """Writing ``path`` failed for lack of space: one line says which path, the caller stops cleanly."""

    def __init__(self, path: Path | str, cause: OSError) -> None:
        super().__init__(cause.errno, f"no space left writing {path} ({os.strerror(cause.errno or 0)})")
        self.path = str(path)

    def __str__(self) -> str:
        return str(self.strerror)


def _array(key: str, value: Any, hint: pa.DataType | None) -> pa.Array:
    """One cell as an Arrow array of the column's type when the value fits it, else of the value's own type."""
    if key in _FLOAT_METRICS and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, float) and value != value and hint is not None and not pa.types.is_floating(hint):
        value = None  # NaN (pandas' missing value) in a column of another type: missing
    if hint == pa.string() and isinstance(value, (bool, int, float)):  # e.g. 2 in choice(off, all, 2): text
        value = ("true" if value else "false") if isinstance(value, bool) else str(value)
    if hint is not None and (value is None or not (isinstance(value, str) and hint != pa.string())):
        try:
            if isinstance(value, bool) != pa.types.is_boolean(hint) and value is not None:
                raise pa.ArrowInvalid("bool vs other")
            return pa.array([value], type=hint)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            log.warning("column %s: %r does not fit the column type %s; written as %s", key, value, hint,
                        value_type(value))
    return pa.array([value], type=value_type(value) if value is not None else pa.string())


def write_row(path: Path, row: dict[str, Any], types: dict[str, pa.DataType] | None = None) -> Path:
    """Write one row to ``path`` atomically (temporary file in the same folder, then rename).

    Column types: the folder's (``+schema.parquet``), then ``types`` (the search space's, for knobs that may be
    null), then the value's own. The folder's schema learns the row's columns before the row appears. A full disk
    raises ``DiskFull`` and leaves no partial file.
    """
    path = Path(path)
    folder = folder_schema(path.parent)
    hints = {**_NULLABLE_TYPES, **(types or {}), **{f.name: f.type for f in folder if f.type != pa.null()}}
    arrays = [_array(key, value, hints.get(key)) for key, value in row.items()]
    table = pa.Table.from_arrays(arrays, names=list(row))
    _put(table, path, path.with_name(f".{path.name}.{host_name()}.{os.getpid()}.tmp"))
    return path


def _put(table: pa.Table, path: Path, tmp: Path, durable: bool = False, **write: Any) -> None:
    """Write ``table`` to ``tmp`` and rename it to ``path`` (synced first when ``durable``), after the folder's
    schema learned its columns; a full disk raises ``DiskFull`` and leaves no partial file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        update_schema(path.parent, table.schema)
        pq.write_table(table, tmp, **write)
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if is_disk_full(e):
            raise DiskFull(path, e) from None
        raise


def write_trial(trials_dir: Path, study: str, trial: int | None, uid: str | None, row: dict[str, Any],
                types: dict[str, pa.DataType] | None = None, *, only_if_missing: bool = False) -> Path | None:
    """Write a study trial's row to its own file, so that the folder holds it once, whoever reads it how.

    Under the study's compaction lock: a compaction never runs between the write and the check below. A trial
    whose row a compaction already folded (a live sweeper recording what a dead one's trial did, after a third
    one ended and compacted the study) is folded again at once, so a plain ``pandas.read_parquet`` of the folder
    does not see the old and the new row side by side. ``only_if_missing``: nothing is written (None returned)
    when the trial has a row already, checked under the same lock. Both hold for writers on several hosts only
    where the shared file system's locks work across them (a warning says when locking fails); where they do
    not, a row may be on disk twice until the next compaction, and the project's readers still read it once.
    A fold that fails (a full disk: it rewrites the study) leaves the row written, with a warning; the next
    compaction folds it. A single run outside any study (``trial`` None) gets a file no compaction folds.
    """
    trials_dir, key = Path(trials_dir), file_prefix(study, uid)
    path = trial_path(trials_dir, study, trial, uid)
    if trial is None:
        return write_row(path, row, types)
    with contextlib.ExitStack() as held:
        try:
            trials_dir.mkdir(parents=True, exist_ok=True)
            held.enter_context(_compaction_lock(trials_dir, key))
        except OSError as e:
            if is_disk_full(e):
                raise DiskFull(trials_dir, e) from None
            raise
        if only_if_missing and (path.exists() or _compacted_holds(trials_dir, key, trial)):
            return None
        write_row(path, row, types)
        if _compacted_holds(trials_dir, key, trial):
            try:
                _compact_locked(trials_dir, key)
            except OSError as e:  # the row is written; readers read it once; the next compaction folds it
                log.warning("trial %s of study %s: its earlier row stays beside the new one until the next "
                            "compaction (%s)", trial, study, e)
    return path


def _compacted_holds(trials_dir: Path, key: str, trial: int) -> bool:
    """Whether a compacted file of the study holds the trial (looked at again if one vanished meanwhile: a
    compaction on a host whose lock this one did not see replaced it)."""
    for _ in range(3):
        try:
            return any(pc.any(pc.equal(pq.read_table(p, columns=["trial"]).column("trial"), int(trial))).as_py()
                       for p in _compacted(trials_dir, key))
        except FileNotFoundError:
            continue
        except (OSError, pa.ArrowException):  # an unreadable file: read_once and compaction warn about it
            return False
    return False


# ---------------------------------------------------------------------------------------------------- the folder

def read_results(results: Path | str) -> "Any":
    """Every trial row under a results folder (or a trials folder, or one file) as a pandas DataFrame."""
    import pandas as pd

    results = Path(results)

    def read() -> pa.Table:
        if results.is_file():
            return read_table([results])
        return read_table(trial_files(results / "trials") or trial_files(results))

    table = retry_vanished(read)
    if table.num_columns and not results.is_file():
        heal_schema(results / "trials" if trial_files(results / "trials") else results, table.schema)
    return table.to_pandas() if table.num_columns else pd.DataFrame()


# ---------------------------------------------------------------------------------------------------- compaction

def _study_files(trials_dir: Path, key: str) -> list[Path]:
    return [p for p in trial_files(trials_dir) if study_of(p.name) == key and ".run-" not in p.name]


def compacted_files(trials_dir: Path, study: str, uid: str | None = "") -> list[Path]:
    """The study's compacted files, the one that counts first."""
    return _compacted(trials_dir, file_prefix(study, uid))


def _compacted(trials_dir: Path, key: str) -> list[Path]:
    return sorted((p for p in _study_files(trials_dir, key) if is_compacted(p)),
                  key=lambda p: _precedence(p.name), reverse=True)


@contextlib.contextmanager
def _compaction_lock(trials_dir: Path, key: str) -> Iterator[None]:
    """Processes writing or compacting one study take turns (so they do not write two copies). Where file locks
    do not work (one warning per process says so), they go at once, which loses nothing either (see
    ``compact``)."""
    with open(trials_dir / f".{key}.compact.lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
        except OSError as e:
            if not _LOCK_WARNED:
                _LOCK_WARNED.append(True)
                log.warning("file locks do not work in %s (%s): writers and compactions of a study do not take "
                            "turns, so a row may be on disk twice until the next compaction", trials_dir, e)
        yield


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def compact(trials_dir: Path, study: str, uid: str | None = "") -> Path | None:
    """Fold the study's per-trial files (and earlier compacted files) into one compacted file and return it
    (None: the study has no files). See ``compact_key``."""
    return compact_key(trials_dir, file_prefix(study, uid))


def compact_key(trials_dir: Path, key: str) -> Path | None:
    """Fold the files of one study key into one compacted file. Idempotent: a study already in one compacted file
    is left as it is. Unreadable files are left in place (a warning names them).

    The new file is written, synced and renamed into place before any input is deleted, so a crash at any point
    leaves every row readable (at worst twice, which readers resolve, see ``read_once``). An input is deleted only
    while it is still the file that was read: a trial re-written meanwhile keeps its new file. The sweeper's
    writers (``write_trial``) wait for the lock; a file another writer puts down while compacting stays as it is
    until the next compaction.
    """
    trials_dir = Path(trials_dir)
    if not trials_dir.is_dir():
        return None
    with _compaction_lock(trials_dir, key):
        return _compact_locked(trials_dir, key)


def _remove_leftovers(trials_dir: Path, key: str) -> None:
    """Temporary files of the study that killed processes left (under the study's lock, so none is being
    written): a compaction's, and rows' of dead processes of this host (``.<file>.<host>.<pid>.tmp``)."""
    host = host_name()
    for tmp in trials_dir.glob(f".{glob.escape(key)}.*.tmp"):
        parts = tmp.name.rsplit(".", 3)
        dead = len(parts) == 4 and parts[1] == host and parts[2].isdigit() and not pid_alive(int(parts[2]))
        if ".compacted-" in tmp.name or dead:
            with contextlib.suppress(OSError):
                tmp.unlink()


def _compact_locked(trials_dir: Path, key: str) -> Path | None:
    """``compact_key``'s work, under the study's compaction lock (held by the caller)."""
    _remove_leftovers(trials_dir, key)
    files = _study_files(trials_dir, key)
    if len(files) == 1 and is_compacted(files[0]):
        return files[0]
    read: list[tuple[Path, os.stat_result]] = []
    tables: list[pa.Table] = []
    names: list[str] = []
    for p in files:
        try:
            stat, table = os.stat(p), read_file(p)
        except FileNotFoundError:  # folded meanwhile by a process the lock did not hold back: its file has it
            continue
        if table is None:
            continue
        read.append((p, stat))
        tables.append(table)
        names += [p.name] * table.num_rows
    if not tables or (len(read) == 1 and is_compacted(read[0][0])):
        return read[0][0] if read else None
    table = read_once(concat(tables, [p.name for p, _ in read]), names)
    table = table.take(pc.sort_indices(table, [("trial", "ascending")]))
    generation = 1 + max((_precedence(p.name)[1] for p, _ in read), default=0)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    out = trials_dir / f"{key}.compacted-{generation:06d}-{stamp}-{host_name()}-{os.getpid()}.parquet"
    _put(table, out, out.with_name(f".{out.name}.tmp"), durable=True, compression="zstd")
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
    keys = sorted({s for p in trial_files(trials) if (s := study_of(p.name)) is not None and ".run-" not in p.name})
    return [out for k in keys if (out := compact_key(trials, k)) is not None]
