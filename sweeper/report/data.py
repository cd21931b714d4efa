"""Reading the trial rows: a cached read of the Parquet files, filters, and the identity of a configuration.

Parsing a Parquet footer costs about a millisecond per file, which is most of a report over 10,000 one-row
files. So the rows read once are kept in ``<results>/.report-cache/rows.parquet`` with each file's name, size and
modification time; a later report reads only files that are new or changed (a re-written trial replaces its
file, so its size or mtime changes). Files that vanished because a compaction folded them into a compacted file
(``sweeper.store.compact``) just lose their cached rows; any other removal or change re-reads everything.
The cache holds every file's rows; each (study, trial) is read once on the way out (``store.read_once``).
The cache is an optimisation only: if it cannot be written (a read-only copy of the results), the report reads
every file, and ``use_cache=False`` ignores it.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.store import concat, is_compacted, read_file, read_once, read_results, retry_vanished, study_of, trial_files

log = logging.getLogger("sweeper.report")
CACHE_DIR = ".report-cache"
_FILE, _SIZE, _MTIME = "_cache_file", "_cache_size", "_cache_mtime_ns"
CONFIG_PREFIXES = ("knob.", "param.")
REQUIRED = ("study", "status", "workload", "started_at")  # what every trial row has; the report needs them


# ---------------------------------------------------------------------------------------------------- reading

def _trials_dir(results: Path) -> Path:
    return results / "trials" if trial_files(results / "trials") else results


def _read_files(paths: list[Path], stats: dict[str, os.stat_result]) -> pa.Table | None:
    """The rows of ``paths`` as one table, each row tagged with its file's name, size and mtime."""
    tables, files, names, sizes, mtimes = [], [], [], [], []
    for p in paths:
        t = read_file(p)  # None: not readable Parquet (a warning names it); cached as a file without rows
        t = t if t is not None else pa.table({})
        st = stats[p.name]
        tables.append(t)
        files.append(p.name)
        names += [p.name] * t.num_rows
        sizes += [st.st_size] * t.num_rows
        mtimes += [st.st_mtime_ns] * t.num_rows
    if not tables or not any(t.num_rows for t in tables):
        return None
    table = concat([t for t in tables if t.num_rows], [f for f, t in zip(files, tables) if t.num_rows]).combine_chunks()
    return (table.append_column(_FILE, pa.array(names, pa.string()))
            .append_column(_SIZE, pa.array(sizes, pa.int64())).append_column(_MTIME, pa.array(mtimes, pa.int64())))


def _folded(gone: set[str], stats: dict[str, os.stat_result]) -> bool:
    """Whether every file that left the cache vanished from a study that has a compacted file now: a compaction
    folded it in, so its rows and columns are in that file."""
    compacted = {study_of(n) for n in stats if is_compacted(n)}
    return all(n not in stats and study_of(n) in compacted for n in gone)


def read_rows(results: Path | str, use_cache: bool = True) -> pd.DataFrame:
    """Every trial row under ``results`` (a results folder, its ``trials/`` folder, or one Parquet file)."""
    results = Path(results)
    if results.is_file() or not use_cache:
        return read_results(results)
    return retry_vanished(lambda: _read_cached(results))


def _read_cached(results: Path) -> pd.DataFrame:
    trials = _trials_dir(results)
    files = trial_files(trials)
    if not files:
        return pd.DataFrame()
    stats = {p.name: p.stat() for p in files}
    cache_file = results / CACHE_DIR / "rows.parquet"
    cached = None
    if cache_file.is_file():
        try:
            cached = pq.read_table(cache_file)
        except (OSError, pa.ArrowException):
            cached = None
    fresh: set[str] = set()
    changed = True
    if cached is not None and _FILE in cached.column_names:
        names = cached.column(_FILE).to_pylist()
        seen = dict(zip(names, zip(cached.column(_SIZE).to_pylist(), cached.column(_MTIME).to_pylist())))
        fresh = {n for n, (size, mtime) in seen.items()
                 if n in stats and stats[n].st_size == size and stats[n].st_mtime_ns == mtime}
        gone = set(seen) - fresh
        if not gone:
            changed = False
        elif _folded(gone, stats):
            cached = cached.filter(pa.array([n in fresh for n in names]))
        else:  # a file was rewritten or removed (rare): read everything again, so no stale column survives
            cached, fresh = None, set()
    else:
        cached = None
    new = _read_files([p for p in files if p.name not in fresh], stats)
    parts = [t for t in (cached, new) if t is not None and t.num_rows]
    if not parts:
        return pd.DataFrame()
    if len(parts) > 1 and _types_differ(parts[0].schema, parts[1].schema):
        # A column changed type since the cache was written: read every file again, so the warning names them.
        parts, changed = [_read_files(files, stats)], True
    table = concat(parts).combine_chunks() if len(parts) > 1 else parts[0]
    if new is not None or changed:
        _write_cache(cache_file, table)
    table = read_once(table, table.column(_FILE).to_pylist())
    return table.drop_columns([_FILE, _SIZE, _MTIME]).to_pandas()


def _types_differ(a: pa.Schema, b: pa.Schema) -> bool:
    return any(f.type != b.field(f.name).type and pa.null() not in (f.type, b.field(f.name).type)
               for f in a if f.name in b.names)


def _write_cache(path: Path, table: pa.Table) -> None:
    try:
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only copy of the results: report without a cache


def load(results: Path | str, workload: str | None = None, studies: list[str] | None = None,
         use_cache: bool = True) -> pd.DataFrame:
    """The rows of ``results``, optionally only one workload and some studies."""
    df = read_rows(results, use_cache)
    if df.empty or any(c not in df.columns for c in REQUIRED):
        return df
    bad = df["status"].isna() | df["workload"].isna()
    if bad.any():  # rows of some other table copied into the folder: not trial rows
        log.warning("skipped %d rows without status or workload (not trial rows of this tool)", int(bad.sum()))
        df = df[~bad]
    if workload:
        df = df[df["workload"] == workload]
    if studies:
        df = df[df["study"].isin(studies)]
    return df.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------- values

def norm(value: Any) -> str:
    """One spelling per value, whatever the Parquet/pandas type: ``true``, ``256`` (not ``256.0``), ``null``."""
    if value is None or value is pd.NA or value is pd.NaT:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "null"
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    return str(value)


def config_columns(df: pd.DataFrame) -> list[str]:
    """Columns that identify a configuration: every knob and workload parameter set in some row (columns of
    other workloads, null throughout, are left out)."""
    return sorted(c for c in df.columns if c.startswith(CONFIG_PREFIXES) and df[c].notna().any())


def _norm_column(s: pd.Series) -> pd.Series:
    codes, uniques = pd.factorize(s.astype(object), use_na_sentinel=True)
    names = np.array([norm(u) for u in uniques] + ["null"], dtype=object)  # code -1 (missing) -> "null"
    return pd.Series(names[codes], index=s.index)


def normalized(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: _norm_column(df[c]) for c in cols}, index=df.index)


def config_keys(normed: pd.DataFrame) -> pd.Series:
    """One string per row naming its configuration (rows with equal knob and parameter values share it)."""
    if normed.shape[1] == 0:
        return pd.Series("", index=normed.index)
    key = normed.iloc[:, 0].astype(object)
    for c in normed.columns[1:]:
        key = key + "\x1f" + normed[c].astype(object)
    return key


def varying(normed: pd.DataFrame) -> list[str]:
    """Columns whose value differs between rows (the swept knobs; constant ones say nothing about a ranking)."""
    return [c for c in normed.columns if normed[c].nunique() > 1]


def short_name(col: str) -> str:
    return col.split(".", 1)[1] if col.startswith(CONFIG_PREFIXES) else col


# ---------------------------------------------------------------------------------------------------- study facts

def objectives_of(df: pd.DataFrame) -> list[tuple[str, str]]:
    """The study's objectives as recorded in the rows (``metric:direction,...``)."""
    spec = next((s for s in df.get("objectives", pd.Series(dtype=object)).dropna() if s), "throughput:maximize")
    return [tuple(part.split(":", 1)) for part in str(spec).split(",")]  # type: ignore[misc]


def status_counts(df: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in df["status"].value_counts().items()} if len(df) else {}


def usable(df: pd.DataFrame) -> pd.DataFrame:
    """Rows measured to the end with a finite loss and a throughput: what rankings and statistics use.

    Skipped duplicates carry a copy of an earlier trial's metrics, so they are not repeats and are left out.
    """
    ok = df[df["status"] == "complete"]
    if "loss_finite" in ok:
        ok = ok[ok["loss_finite"].astype(object).map(lambda v: v is not False and v is not np.False_)]
    ok = ok[pd.to_numeric(ok["throughput"], errors="coerce").gt(0)]
    return ok


def unit_of(df: pd.DataFrame) -> str:
    units = df["throughput_unit"].dropna() if "throughput_unit" in df else pd.Series(dtype=object)
    units = units[units.astype(str) != ""]
    return str(units.iloc[0]) if len(units) else ""


def night_of(df: pd.DataFrame) -> pd.Series:
    """The night of each row: the UTC date (YYYY-MM-DD) it started."""
    started = pd.to_datetime(df["started_at"], utc=True, errors="coerce")
    return started.dt.strftime("%Y-%m-%d").fillna("unknown")


def fingerprint_label(df: pd.DataFrame, column: str) -> pd.Series:
    """The comparison label of each row: ``gpu`` is the GPU name, or ``cpu:<cpu_model>`` for CPU rows."""
    if column == "gpu":
        gpu = df["gpu_name"].astype(object).where(df["gpu_name"].notna(), "") if "gpu_name" in df else ""
        cpu = df["cpu_model"].astype(object).fillna("?") if "cpu_model" in df else "?"
        gpu = pd.Series(gpu, index=df.index).astype(str)
        return gpu.where(gpu != "", "cpu:" + pd.Series(cpu, index=df.index).astype(str))
    return column + "=" + df[column].map(norm)
