"""What a trial's setup costs by workload kind, and what preloading torchvision and TorchDynamo in the forkserver
saves it.

Runs single trials (``python -m sweeper +workload=... measure.steps=5``, each its own command: a fresh forkserver)
of the built-in ResNet-50 and of workload modules of the user's own (``bench/zoo``), the latter with the forkserver
preloading torchvision where the module imports it (``sweeper.trial.isolate.SHARED_IMPORTS``, the default) and
without (``SHARED_IMPORTS = ()``), and TorchDynamo where the workload compiles or steps an optimizer
(``isolate.DYNAMO_KNOBS``, the default; with what ``torch.compile`` imports, ``COMPILE_IMPORTS``, where it has a
``compile`` knob) and without (``DYNAMO_KNOBS = ()``: neither). Records each trial's ``setup_s``
(CUDA's start, the module's import in the trial process ``setup_load_s``, the model's build ``setup_build_s``) and
``wall_s``. A first row times ``import torch``, then ``import torchvision``, then ``import torch._dynamo`` in fresh
interpreters. One JSON line per row in OUT:

    python bench/preload_setup.py OUT.jsonl [--repeats 2] [--smoke]

``--smoke`` runs the CPU's tiny presets (a check of the script, not a measurement of a GPU host): three cases, one
of each kind of row (the built-in workload; a module of the user's own with neither preloaded; one with TorchDynamo
preloaded), and each import timed once.
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
# (label, config dir or None for the package's, workload, SHARED_IMPORTS, DYNAMO_KNOBS; None: the default)
CASES = [
    ("resnet50 (built-in)", None, "resnet50", None, None),
    ("zoo_convnext, torchvision and dynamo preloaded", ZOO / "conf", "zoo_convnext", None, None),
    ("zoo_convnext, neither preloaded", ZOO / "conf", "zoo_convnext", (), ()),
    ("zoo_lstm (no torchvision), dynamo preloaded", ZOO / "conf", "zoo_lstm", None, None),
    ("zoo_lstm (no torchvision), dynamo not preloaded", ZOO / "conf", "zoo_lstm", None, ()),
    ("zoo_rec (no torchvision), dynamo preloaded", ZOO / "conf", "zoo_rec", None, None),
    ("zoo_rec (no torchvision), dynamo not preloaded", ZOO / "conf", "zoo_rec", None, ()),
]
SMOKE_CASES = (0, 2, 3)  # the indices in CASES --smoke runs
RUN = """import sys
from sweeper.trial import isolate
shared, dynamo = {shared!r}, {dynamo!r}
if shared is not None:
    isolate.SHARED_IMPORTS = tuple(shared)
if dynamo is not None:
    isolate.DYNAMO_KNOBS = tuple(dynamo)
from sweeper.__main__ import main
sys.argv = ["sweeper"] + {argv!r}
main()
"""


def import_times(runs_each: int = 3) -> dict:
    code = (
        "import time; t = time.perf_counter(); import torch; a = time.perf_counter() - t; "
        "t = time.perf_counter(); import torchvision; b = time.perf_counter() - t; "
        "t = time.perf_counter(); import torch._dynamo; print(a, b, time.perf_counter() - t)"
    )
    runs = []
    for _ in range(runs_each):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        runs.append({"torch_s": round(float(out[0]), 3), "torchvision_after_torch_s": round(float(out[1]), 3)})
    for _ in range(runs_each):  # TorchDynamo alone after torch (torchvision imports it)
        dyn = code.replace("import torchvision", "pass")
        out = subprocess.run([sys.executable, "-c", dyn], capture_output=True, text=True, check=True).stdout.split()
        runs.append({"torch_s": round(float(out[0]), 3), "dynamo_after_torch_s": round(float(out[2]), 3)})
    return {"kind": "imports", "runs": runs}


def one_trial(conf: Path | None, workload: str, shared: tuple | None, dynamo: tuple | None, smoke: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        argv = ([] if conf is None else ["-cd", str(conf)]) + [f"+workload={workload}", f"results_dir={tmp}"]
        argv += ["measure.steps=5", "measure.warmup_steps=2", "measure.min_time_s=0"]
        if not smoke:
            argv += ["preset=none"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ZOO), str(ROOT), os.environ.get("PYTHONPATH", "")])}
        t0 = time.time()
        code = RUN.format(shared=shared, dynamo=dynamo, argv=argv)
        proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
        files = glob.glob(f"{tmp}/**/*.parquet", recursive=True)
        if proc.returncode != 0 or not files:
            return {"exit": proc.returncode, "stderr": proc.stderr[-1500:]}
        row = pd.concat(pd.read_parquet(f) for f in files).iloc[0]
        out = {k: round(float(row[k]), 3) for k in ("setup_s", "setup_load_s", "setup_build_s", "wall_s")}
        return {"exit": 0, "status": row["status"], **out, "command_s": round(time.time() - t0, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    with args.out.open("a") as out:
        out.write(json.dumps(import_times(1 if args.smoke else 3)) + "\n")
        cases = [CASES[i] for i in SMOKE_CASES] if args.smoke else CASES
        for _ in range(args.repeats):
            for label, conf, workload, shared, dynamo in cases:
                row = {"kind": "trial", "case": label, **one_trial(conf, workload, shared, dynamo, args.smoke)}
                print(json.dumps(row), flush=True)
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
