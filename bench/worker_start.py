"""What a DataLoader of the user's own costs a trial's first step, by how its workers start.

Single trials (``python -m sweeper +workload=zoo_seg ...``, each its own command) of the DeepLabV3 workload of the
user's own (``bench/zoo/zoo_seg.py``: a ``DataLoader`` built with multiprocessing's defaults) with
``knobs.num_workers`` = 0 and N, each N two ways: as the trial runs it now (multiprocessing's default start method
is the platform's, as in the user's own script: fork on Linux before Python 3.14) and as it ran before (the
trial's default left at the "forkserver" it came from; reproduced by a wrapper module that sets it before the
loader is built). Records ``first_step_s``, ``warmup_steps``, ``setup_s`` and ``wall_s``; one JSON line per trial:

    python bench/worker_start.py OUT.jsonl [--workers 12] [--repeats 2] [--smoke]

``--smoke`` runs the CPU's tiny preset (a check of the script, not a measurement of a GPU host), the two cases with
workers only (the one without runs the same code with ``knobs.num_workers=0``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "bench" / "zoo"
# the trial's default start method as it was: "forkserver", inherited from the process the trial came from
WRAPPER = """import multiprocessing
import zoo_seg
from zoo_seg import check  # noqa: F401 - the workload's contract


def build(cfg, device):
    multiprocessing.set_start_method("forkserver", force=True)
    return zoo_seg.build(cfg, device)
"""
KEEP = ("first_step_s", "warmup_steps", "setup_s", "wall_s", "throughput")


def one_trial(workers: int, before: bool, smoke: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["-cd", str(ZOO / "conf"), "+workload=zoo_seg", f"results_dir={tmp}", f"knobs.num_workers={workers}"]
        argv += ["measure.steps=5", "measure.min_time_s=0"] + ([] if smoke else ["preset=none"])
        paths = [str(ZOO), str(ROOT), os.environ.get("PYTHONPATH", "")]
        if before:
            Path(tmp, "zoo_seg_before.py").write_text(WRAPPER)
            argv.append("workload.module=zoo_seg_before")
            paths.insert(0, tmp)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-m", "sweeper", *argv], env=env, cwd=ROOT, capture_output=True,
                              text=True)  # fmt: skip
        files = glob.glob(f"{tmp}/**/*.parquet", recursive=True)
        if proc.returncode != 0 or not files:
            return {"exit": proc.returncode, "stderr": proc.stderr[-1500:]}
        row = pd.concat(pd.read_parquet(f) for f in files).iloc[0]
        out = {k: round(float(row[k]), 3) for k in KEEP if k in row}
        return {"exit": 0, "status": row["status"], **out, "command_s": round(time.time() - t0, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    cases = [(0, False), (args.workers, False), (args.workers, True)][1 if args.smoke else 0 :]
    with args.out.open("a") as out:
        for _ in range(args.repeats):
            for workers, before in cases:
                label = f"{workers} workers" + (", trial default forkserver (before)" if before else "")
                row = {"case": label, "workers": workers, "before": before, **one_trial(workers, before, args.smoke)}
                print(json.dumps(row), flush=True)
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
