"""Reading trial rows back, whatever is on disk: corrupt files, mixed column types, a row in two files.

* A file that is not readable Parquet (truncated by a crash, half copied, not Parquet at all) is skipped with one
  warning naming it (``read_file``); every other file's rows are still read.
* Files whose columns disagree in type (rows written before types were validated, results merged from other
  versions) are read together (``concat``): types that widen (int -> float, null -> anything) widen; types that
  do not (bool vs string) become text, with one warning naming the column and the files.
* A row present in several files is read once (``read_once``): its identity is the study's file key (study name
  and study id, see ``store.file_prefix``) and the trial number, so rows of two storages that share a study name
  (results merged from two machines) never hide each other.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.results.poll import poll

log = logging.getLogger("sweeper.store")
_T = TypeVar("_T")

# A study's files: per-trial ``<key>.<trial>.parquet``, compacted ``<key>.compacted-<gen>-<tag>.parquet`` and
# single runs ``<key>.run-<tag>.parquet`` (tags hold no dot, so the key is unambiguous even with dots in it).
_STUDY_FILE = re.compile(
    r"(?P<study>.+)\.(?:(?P<trial>\d+)|compacted-(?P<gen>\d+)-(?P<tag>[A-Za-z0-9_-]+)|run-[A-Za-z0-9_-]+)\.parquet")


def study_of(name: str) -> str | None:
    """The study key (``store.file_prefix``) of a per-trial, compacted or single-run file name; None otherwise."""
    m = _STUDY_FILE.fullmatch(name)
    return m["study"] if m else None


def is_compacted(name: str | Path) -> bool:
    m = _STUDY_FILE.fullmatch(Path(name).name)
    return bool(m and m["gen"])


def precedence(name: str) -> tuple[int, int, str]:
    """Which copy of a row counts: any plain file, then the later compaction (generation, then its time stamp)."""
    m = _STUDY_FILE.fullmatch(name)
    return (0, int(m["gen"]), m["tag"]) if m and m["gen"] else (1, 0, "")


_WARNED: set[tuple[str, int, int]] = set()  # (path, size, mtime) of the unreadable files warned about


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def warn_unreadable(path: Path | str, message: str) -> None:
    """Log ``message`` about the unreadable file ``path`` once per process (while the file stays as it is), however
    many readers meet it: a sweep reads its folder several times."""
    try:
        st = Path(path).stat()
        key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    except OSError:
        key = (str(path), -1, -1)
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning("%s", message)


def read_file(path: Path | str) -> pa.Table | None:
    """The rows of one Parquet file, or None (one warning naming it) when it is not readable Parquet.

    ``FileNotFoundError`` is raised: a file that vanished was folded by a compaction (see ``retry_vanished``)."""
    try:
        with open(path, "rb") as f:
            return pq.ParquetFile(f).read(use_threads=False)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException, ValueError) as e:
        warn_unreadable(path, f"skipped {path}: not a readable Parquet file ({first_line(e)})")
        return None


def read_schema(path: Path | str) -> pa.Schema | None:
    """The columns of one Parquet file (its footer only), or None (one warning naming it) when not readable."""
    try:
        return pq.read_schema(path)
    except FileNotFoundError:
        return None  # folded by a compaction meanwhile: its columns are in the compacted file
    except (OSError, pa.ArrowException, ValueError) as e:
        warn_unreadable(path, f"skipped {path}: not a readable Parquet file ({first_line(e)})")
        return None


def unify(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """Every column of ``schemas``, in order of first appearance, each with one type: the widened one, or
    string where types do not widen (as ``concat`` reads them); a column that is null everywhere stays null."""
    seen: dict[str, list[pa.DataType]] = {}
    for schema in schemas:
        for f in schema:
            kinds = seen.setdefault(f.name, [])
            if f.type != pa.null() and f.type not in kinds:
                kinds.append(f.type)
    return pa.schema([(name, kinds[0] if len(kinds) == 1 else _target_type(kinds) if kinds else pa.null())
                      for name, kinds in seen.items()])


def _target_type(types: list[pa.DataType]) -> pa.DataType:
    """One type for a column seen with ``types``: the widened type, or string when they do not widen."""
    try:
        return pa.unify_schemas([pa.schema([("c", t)]) for t in types], promote_options="permissive").field("c").type
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pa.string()


def _as_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    try:
        return column.cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # nested types: their Python text
        return pa.chunked_array([pa.array([None if v is None else str(v) for v in column.to_pylist()], pa.string())])


def concat(tables: Sequence[pa.Table], names: Sequence[str] | None = None) -> pa.Table:
    """``tables`` as one table: columns missing from a table are null; a column whose types disagree takes the
    widened type, or string (with one warning naming the column and the files of each type)."""
    tables = list(tables)
    if not tables:
        return pa.table({})
    seen: dict[str, dict[pa.DataType, list[int]]] = {}
    for i, t in enumerate(tables):
        for field in t.schema:
            seen.setdefault(field.name, {}).setdefault(field.type, []).append(i)
    targets: dict[str, pa.DataType] = {}
    for col, by_type in seen.items():
        kinds = [k for k in by_type if k != pa.null()]
        if len(kinds) > 1:
            target = _target_type(kinds)
            targets[col] = target
            if target == pa.string() and not all(k == pa.string() for k in kinds):
                where = "; ".join(f"{k}: " + ", ".join(str(names[i]) if names else f"table {i}" for i in idx[:3])
                                  + (f" and {len(idx) - 3} more" if len(idx) > 3 else "")
                                  for k, idx in by_type.items())
                log.warning("column %s has different types in different files (%s): read as text", col, where)
    if targets:
        fixed = []
        for t in tables:
            for col, target in targets.items():
                if col in t.column_names and t.schema.field(col).type != target:
                    i = t.column_names.index(col)
                    column = _as_text(t.column(i)) if target == pa.string() else t.column(i).cast(target)
                    t = t.set_column(i, pa.field(col, target), column)
            fixed.append(t)
        tables = fixed
    return pa.concat_tables(tables, promote_options="permissive")


def read_files(paths: Iterable[Path | str]) -> tuple[pa.Table, list[str]]:
    """The rows of ``paths`` (unreadable files skipped with a warning) and, per row, its file's name."""
    tables, names, per_row = [], [], []
    for p in paths:
        t = read_file(p)
        if t is None:
            continue
        tables.append(t)
        names.append(str(p))
        per_row += [Path(p).name] * t.num_rows
    return concat(tables, names), per_row


def read_table(paths: Iterable[Path | str]) -> pa.Table:
    """All rows of ``paths`` as one table (see ``concat``), each row once (``read_once``)."""
    table, files = read_files(paths)
    return read_once(table, files)


def read_once(table: pa.Table, files: Sequence[str]) -> pa.Table:
    """``table`` (rows read from ``files``, one file name per row) with each row once.

    A row's identity is (study key of its file, trial). Rows of plain files (per-trial or any other) are all
    kept; a row of a compacted file is dropped when a plain file or a later compacted file holds the same
    identity. Rows without a trial number are all kept.
    """
    compacted = {f for f in set(files) if is_compacted(f)}
    if not compacted or "trial" not in table.column_names:
        return table
    import numpy as np
    import pandas as pd

    rank = {f: i for i, f in enumerate(sorted(set(files), key=precedence))}
    rows = pd.DataFrame({"key": [study_of(f) or f for f in files], "trial": table.column("trial").to_pandas(),
                         "rank": [rank[f] for f in files], "compacted": [f in compacted for f in files]})
    rows = rows[rows["trial"].notna()].sort_values("rank", ascending=False, kind="stable")
    superseded = rows.index[rows.duplicated(["key", "trial"]).to_numpy() & rows["compacted"].to_numpy()]
    keep = np.ones(table.num_rows, dtype=bool)
    keep[superseded] = False
    return table if keep.all() else table.filter(pa.array(keep))


def retry_vanished(
    read: Callable[[], _T],
    patience_s: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> _T:
    """``read()``, again while files vanish under it: a file listed by one attempt can be gone before it is read
    (a compaction folded it into a new file, which the next attempt lists). Gives up after ``patience_s``, raising
    the last attempt's ``FileNotFoundError``."""
    done: list[_T] = []
    vanished: list[FileNotFoundError] = []

    def attempt() -> bool:
        try:
            done.append(read())
        except FileNotFoundError as e:
            vanished[:] = [e]
            return False
        return True

    if not poll(attempt, patience_s, 0.01, clock=clock, sleep=sleep):
        raise vanished[0]
    return done[0]
