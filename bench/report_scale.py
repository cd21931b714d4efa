"""How long the report takes over 10,000 (or 100,000) trial rows: ``python bench/report_scale.py [--rows N]``.

The rows are built from real recorded sweeps (tests/fixtures/report/*): every row keeps a real row's measured
values, and gets ``study`` (``scale-<k>``), ``trial`` (a fresh number) and a numeric knob, ``knob.batch_size``,
that takes a NEW value in every trial of its study (1, 2, ..., as ``range(1, N)`` or an integer ``interval`` knob
samples), recorded in the rows' ``space`` as an IntDistribution. So every row of a study is a distinct
configuration: ranking, intervals, importance and marginals run over 1,000 configurations per study at 10,000
rows, not over a few hundred repeated ones. Each row is written as its own Parquet file with
``sweeper.results.store.write_row`` (as the sweeper writes them). Then it times, in this process:

- read (cold): every Parquet file parsed, the report's cache written;
- read (cached): the second read, served by ``<results>/.report-cache`` (only new files are parsed);
- analyse + blocks: statistics, importance and tables for every study;
- Markdown, HTML: rendering (the HTML embeds plotly.js);
- and the whole CLI (``python -m sweeper.report``), in a subprocess, cold and cached.

Then the results as they look after the sweeps ended: every study compacted (``sweeper.results.store.compact`` per
study, one file per study instead of one per trial), timed as "compaction"; the read with the cache written before
compaction (what a sweep's end does), the cold read, and the whole CLI again, cold and cached. ``--compacted-only``
writes each study as one compacted file directly (for 100,000 rows, where 100,000 small files would take most of
an hour to write on a 2-core machine) and times only that part.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("single", "nights", "compare")  # matmul sweeps: one workload, so each study is one report section


def replicate(out: Path, rows: int, studies: int, compacted_only: bool = False) -> int:
    """Write ``rows`` rows under ``out/trials`` from the recorded rows; returns the source row count. Per trial one
    file, or (``compacted_only``) one compacted file per study as ``store.compact`` writes it."""
    from optuna.distributions import IntDistribution, distribution_to_json

    from sweeper.results.store import trial_path, write_row

    tables = [pq.read_table(ROOT / "tests" / "fixtures" / "report" / s / "trials" / "rows.parquet") for s in SOURCES]
    table = pa.concat_tables(tables, promote_options="permissive")
    types = {f.name: f.type for f in table.schema}
    types["knob.batch_size"] = pa.int64()
    types["space"] = pa.string()
    source = table.to_pylist()
    per_study = -(-rows // studies)
    space = json.dumps({"knob.batch_size": distribution_to_json(IntDistribution(1, per_study))})
    batches: dict[str, list[dict]] = {}
    for i in range(rows):
        row = dict(source[i % len(source)])
        study, trial = f"scale-{i // per_study}", i % per_study
        row.update({"study": study, "trial": trial, "knob.batch_size": trial + 1, "space": space,
                    "baseline": False})
        if compacted_only:
            batches.setdefault(study, []).append(row)
        else:
            write_row(trial_path(out / "trials", study, trial), row, types)
    schema = pa.schema([pa.field(n, t) for n, t in types.items()])
    for study, batch in batches.items():
        path = out / "trials" / f"{study}.compacted-000001-scale-bench-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(batch, schema=schema), path, compression="zstd")
    return len(source)


def timed(label: str, fn, results: list[tuple[str, float]]):
    t0 = time.perf_counter()
    value = fn()
    results.append((label, time.perf_counter() - t0))
    return value


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10_000)
    p.add_argument("--studies", type=int, default=10, help="studies the rows are spread over (report sections)")
    p.add_argument("--keep", action="store_true", help="keep the generated results folder")
    p.add_argument("--compacted-only", action="store_true",
                   help="write one compacted file per study and time only the compacted read (for 100,000 rows)")
    args = p.parse_args()

    from rich.console import Console
    from rich.table import Table

    from sweeper.report.build import build
    from sweeper.report.data import read_rows
    from sweeper.report.html import to_html
    from sweeper.report.render import to_markdown
    from sweeper.results.store import compact_all

    tmp = Path(tempfile.mkdtemp(prefix="report-scale-"))
    results = tmp / "results"
    t0 = time.perf_counter()
    n_source = replicate(results, args.rows, args.studies, args.compacted_only)
    write_s = time.perf_counter() - t0
    files = len(list((results / "trials").glob("*.parquet")))
    print(f"{args.rows} rows, {-(-args.rows // args.studies)} distinct configurations per study, measured values of "
          f"{n_source} real recorded rows (tests/fixtures/report/: {', '.join(SOURCES)}), {args.studies} studies; "
          f"written as {files} Parquet files in {write_s:.1f} s (not timed below). Load average: "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")

    times: list[tuple[str, float]] = []

    def cli(label: str) -> bool:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "sweeper.report", str(results), "--top", "5"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "160"},
        )
        times.append((label, time.perf_counter() - t0))
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
        return proc.returncode == 0

    if args.compacted_only:
        return _compacted_only(results, times, cli, tmp, args.keep)
    df = timed("read (cold: parse every file, write cache)", lambda: read_rows(results), times)
    timed("read (cached)", lambda: read_rows(results), times)
    report = timed("analyse + blocks", lambda: build(df, source=str(results)), times)
    md = timed("render Markdown", lambda: to_markdown(report.blocks, "report.html"), times)
    page = timed("render HTML", lambda: to_html(report.blocks, "scale"), times)
    analyse_render = sum(s for _, s in times[2:])
    in_process = times[0][1] + analyse_render
    shutil.rmtree(results / ".report-cache")
    if not (cli("CLI end to end (cold)") and cli("CLI end to end (cached)")):
        return 1

    timed(f"compaction ({files} files -> one per study)", lambda: compact_all(results), times)
    timed("read (compacted, cache of the files before)", lambda: read_rows(results), times)
    shutil.rmtree(results / ".report-cache")
    compacted = timed("read (compacted, cold)", lambda: read_rows(results), times)
    if not compacted[df.columns].equals(df):
        print("the compacted rows differ from the per-trial rows", file=sys.stderr)
        return 1
    in_process_compacted = times[-1][1] + analyse_render
    shutil.rmtree(results / ".report-cache")
    if not (cli("CLI end to end (compacted, cold)") and cli("CLI end to end (compacted, cached)")):
        return 1

    table = Table(title=f"report over {len(df)} rows, {len(report.analyses)} (workload, study) sections")
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for label, s in times:
        table.add_row(label, f"{s:.2f}")
    table.add_row("in process, cold (read + analyse + render)", f"{in_process:.2f}")
    table.add_row("in process, compacted, cold (read + analyse + render)", f"{in_process_compacted:.2f}")
    Console().print(table)
    print(f"Markdown {len(md) / 1e3:.0f} kB, HTML {len(page) / 1e6:.1f} MB (plotly.js inline is ~4.8 MB)")
    if args.keep:
        print(f"kept {results}")
    else:
        shutil.rmtree(tmp)
    return 0


def _compacted_only(results: Path, times: list, cli, tmp: Path, keep: bool) -> int:
    from rich.console import Console
    from rich.table import Table

    from sweeper.report.build import build
    from sweeper.report.data import read_rows
    from sweeper.report.html import to_html
    from sweeper.report.render import to_markdown

    df = timed("read (compacted, cold)", lambda: read_rows(results), times)
    report = timed("analyse + blocks", lambda: build(df, source=str(results)), times)
    timed("render Markdown", lambda: to_markdown(report.blocks, "report.html"), times)
    timed("render HTML", lambda: to_html(report.blocks, "scale"), times)
    in_process = sum(s for _, s in times)
    shutil.rmtree(results / ".report-cache")
    if not (cli("CLI end to end (compacted, cold)") and cli("CLI end to end (compacted, cached)")):
        return 1
    table = Table(title=f"report over {len(df)} rows, {len(report.analyses)} (workload, study) sections")
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    for label, s in times:
        table.add_row(label, f"{s:.2f}")
    table.add_row("in process, compacted, cold (read + analyse + render)", f"{in_process:.2f}")
    Console().print(table)
    if not keep:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
