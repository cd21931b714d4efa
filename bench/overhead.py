"""Per-trial overhead of the sweeper: sweep wall time minus the trials' own work, on a trivial workload.

    python bench/overhead.py [--trials 20] [--workload matmul] [--out DIR] [extra overrides...]

Runs a real ``python -m sweeper +workload=<w> -m`` (tiny preset on the CPU) and reads its rows back. A trial's
own work is its ``wall_s`` (setup + warm-up + measured steps, timed inside the trial process). The rest is
overhead: Hydra's launcher and job directory, the forkserver fork, Optuna ask/tell on SQLite, the Parquet row.
Startup (interpreter, imports, forkserver with torch preloaded, study creation) is paid once and shown apart.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--workload", default="matmul")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("extra", nargs="*")
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="overhead-"))
    cmd = [sys.executable, "-m", "sweeper", f"+workload={args.workload}", "-m", f"hydra.sweeper.n_trials={args.trials}",
           "hydra.sweeper.repeat=true", "hydra.sweeper.confirm_top_k=0", "hydra.sweeper.confirm_unstable=false",
           f"results_dir={out}", *args.extra]  # n trials and nothing after them: no re-measurements
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode != 0:
        sys.exit(proc.stderr[-3000:])
    df = pd.read_parquet(out / "trials").sort_values("trial")
    first_start = df["started_at"].min().timestamp()
    last_end = df["ended_at"].max().timestamp()
    work = df["wall_s"].sum()
    startup = first_start - t0
    # From the first trial's start to the last one's end: n trials' own work and the n - 1 gaps between them.
    steady = (last_end - first_start - work) / max(1, len(df) - 1)
    tail = t0 + wall - last_end
    rows = [
        ("trials", f"{len(df)}"),
        ("sweep wall time (s)", f"{wall:.2f}"),
        ("trials' own work, sum (s)", f"{work:.2f}"),
        ("startup before the first trial (s, once)", f"{startup:.2f}"),
        ("overhead per trial between trials (s)", f"{steady:.3f}"),
        ("overhead per trial, startup included (s)", f"{(wall - work) / len(df):.3f}"),
        ("after the last trial: summary, exit (s)", f"{tail:.2f}"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"overhead of `{' '.join(cmd[2:5])} ...` ({args.workload}, {len(df)} trials, results in {out}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    for k, v in rows:
        print(f"  {k:<{width}}  {v:>8}")


if __name__ == "__main__":
    main()
