"""Reading the trial rows: a cached read of the Parquet files (every reader of results, the report first).

Parsing a Parquet footer costs about a millisecond per file, which is most of a report over 10,000 one-row
files. So the rows read once are kept in ``<results>/.report-cache/rows.parquet`` with each file's name, size and
modification time; a later report reads only files that are new or changed (a re-written trial replaces its
file, so its size or mtime changes). Files that vanished because a compaction folded them into a compacted file
(``sweeper.results.store.compact``) just lose their cached rows; any other removal or change re-reads everything.
The cache holds every file's rows; each (study, trial) is read once on the way out (``store.read_once``).
The cache is an optimisation only: if it cannot be written (a read-only copy of the results), the report reads
every file, and ``use_cache=False`` ignores it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.results.readers import first_line, warn_unreadable
from sweeper.results.store import (
    concat, heal_schema, is_compacted, read_file, read_once, read_results, retry_vanished, study_of, trial_files,
)

CACHE_DIR = ".report-cache"
_FILE, _SIZE, _MTIME = "_cache_file", "_cache_size", "_cache_mtime_ns"


# ---------------------------------------------------------------------------------------------------- reading

def _trials_dir(results: Path) -> Path:
    return results / "trials" if trial_files(results / "trials") else results


def _read_files(paths: list[Path], stats: dict[str, os.stat_result]) -> pa.Table | None:
    """The rows of ``paths`` as one table, each row tagged with its file's name, size and mtime."""
    tables, files, names, sizes, mtimes = [], [], [], [], []
    for p in paths:
        t = read_file(p)  # None: not readable Parquet (a warning names it); read again by the next report
        if t is None or not t.num_rows:
            continue
        stat = stats[p.name]
        tables.append(t)
        files.append(p.name)
        names += [p.name] * t.num_rows
        sizes += [stat.st_size] * t.num_rows
        mtimes += [stat.st_mtime_ns] * t.num_rows
    if not tables:
        return None
    table = concat(tables, files).combine_chunks()
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
        except (OSError, pa.ArrowException) as e:
            warn_unreadable(cache_file, f"ignored {cache_file}: not readable Parquet ({first_line(e)}); the rows "
                                        "are read from every row file and the cache is written again")
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
        parts, changed = [t for t in [_read_files(files, stats)] if t is not None], True
    if not parts:
        return pd.DataFrame()
    table = concat(parts).combine_chunks() if len(parts) > 1 else parts[0]
    if new is not None or changed:
        _write_cache(cache_file, table)
    table = read_once(table, table.column(_FILE).to_pylist())
    table = table.drop_columns([_FILE, _SIZE, _MTIME])
    heal_schema(trials, table.schema)  # a stale or corrupt +schema.parquet learns the folder's columns
    return table.to_pandas()


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
