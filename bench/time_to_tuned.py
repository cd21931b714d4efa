"""Time to a tuned configuration: a default sweep against a recorded landscape's best.

    python bench/time_to_tuned.py run RESULTS_DIR LANDSCAPE.parquet [--timeout-s 600] [OVERRIDE ...]
    python bench/time_to_tuned.py analyse RESULTS_DIR|ROWS.parquet LANDSCAPE.parquet --started 2026-11-29T13:11:39Z

``run`` starts ``python -m sweeper +workload=<the landscape's workload> workload.data=jpeg -m`` with the defaults
(n_trials, measurement, sampler, starts), stopped from starting new trials after ``--timeout-s``, then analyses.
``analyse`` reads the sweep's rows: for each trial in order of its end, the wall time since the command started,
its throughput and the best so far as a fraction of the landscape's best; then the time the sweep first reached
``--within`` (default 95 %) of it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def analyse(results: Path, landscape: Path, started: float, within: float = 0.95) -> float | None:
    """Print the table; return the seconds from the command's start to the first trial at ``within`` x best."""
    from sweeper.report.data import read_rows

    best = float(pd.read_parquet(landscape)["throughput"].max())
    df = read_rows(results) if results.is_dir() else pd.read_parquet(results)  # a results folder, or saved rows
    df = df[df["started_at"] >= pd.Timestamp(started, unit="s", tz="UTC")].sort_values("ended_at")  # this command's
    if df.empty:
        print(f"no trial of {results} started after the command did: nothing to time")
        return None
    print(f"landscape best {best:.0f}; target {within:.0%} of it = {within * best:.0f}")
    print(f"{'trial':>5} {'ended s':>8} {'status':<9} {'throughput':>10} {'best so far':>11} {'of grid best':>12}")
    so_far, reached = 0.0, None
    for _, r in df.iterrows():
        t = r["ended_at"].timestamp() - started
        if r["status"] == "complete" and pd.notna(r["throughput"]):
            so_far = max(so_far, float(r["throughput"]))
        if reached is None and so_far >= within * best:
            reached = t
        print(f"{int(r['trial']):>5} {t:>8.1f} {r['status']:<9} {r['throughput']:>10.0f} {so_far:>11.0f} "
              f"{so_far / best:>11.1%}")
    total = df["ended_at"].max().timestamp() - started
    print(f"reached {within:.0%} of the grid's best after {reached:.0f} s" if reached is not None
          else f"did not reach {within:.0%} of the grid's best in {total:.0f} s")
    return reached


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["run", "analyse"])
    p.add_argument("results", type=Path)
    p.add_argument("landscape", type=Path)
    p.add_argument("--timeout-s", type=float, default=600.0, help="run: no new trial starts after this")
    p.add_argument("--started", help="analyse: when the sweep command started (ISO 8601, UTC)")
    p.add_argument("--within", type=float, default=0.95)
    p.add_argument("overrides", nargs="*", help="run: extra overrides (e.g. preset=tiny for a CPU check)")
    args = p.parse_intermixed_args()
    if args.action == "run":
        workload = json.loads(pq.read_schema(args.landscape).metadata[b"knob_sweeper"])["workload"]
        started = time.time()
        cmd = [sys.executable, "-m", "sweeper", f"+workload={workload}", "workload.data=jpeg", "-m",
               f"results_dir={args.results}", f"hydra.sweeper.timeout_s={args.timeout_s}", *args.overrides]
        if subprocess.run(cmd, cwd=ROOT, check=False).returncode != 0:
            print("the sweep exited with an error; timing the trials it finished")
    else:
        if not args.started:
            p.error("analyse needs --started")
        started = datetime.fromisoformat(args.started.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()
    analyse(args.results, args.landscape, started, args.within)


if __name__ == "__main__":
    main()
