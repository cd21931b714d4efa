"""Nights for the nightly gate's tests: studies of the faults workload measured for real, trials interleaved.

Each study is one night. ``measure_nights`` measures every study's trials in isolated trial processes (the
sweeper's own ``run_isolated``, each trial a fresh process pinned to one core with one thread) and writes their
Parquet rows as the sweep's task does. The studies' trials are interleaved (A B C A B C ...), as a benchmark
harness interleaves A/B runs, so load that other processes put on a shared CI machine falls on every night alike
instead of on whichever night ran while it lasted.
"""

from __future__ import annotations

import calendar
import json
import os
import time
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

from sweeper.results import rows, store
from sweeper.sweep.config.trial_config import as_dict, trial_config
from sweeper.trial.isolate import run_isolated
from workloads.base import DeviceInfo

ROOT = Path(__file__).resolve().parents[2]


def night_config(overrides: list[str]) -> dict[str, Any]:
    """The trial config of the faults workload on the CPU with ``overrides`` (Hydra's own composition)."""
    args = [
        f"hydra.searchpath=[file://{ROOT}/tests/faultload/conf]",
        "+workload=faults",
        "device=cpu",
        "cpu_threads=1",
        "trial.timeout_s=600",
        *overrides,
    ]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("config", overrides=args)
    return trial_config(as_dict(cfg), DeviceInfo(kind="cpu"), args)


def measure_nights(
    results: Path, nights: dict[str, dict[str, Any]], repeats: int, cfg: dict[str, Any], day: str | None = None
) -> None:
    """Measure ``repeats`` trials of ``cfg`` per night, interleaved; ``nights`` maps a study name to its ``plant``
    (``{"slowdown": 0.1}``). ``day`` (YYYY-MM-DD) shifts the rows' times onto that UTC date."""
    trials = Path(results) / "trials"
    core = sorted(os.sched_getaffinity(0))[-1]
    shift = 0.0 if day is None else calendar.timegm(time.strptime(day, "%Y-%m-%d")) + 3600 - time.time()
    # The first trial process starts the forkserver (torch imported): not a night's trial.
    run_isolated({**cfg, "plant": {}}, 600.0, Path(results) / "logs" / "warm-up.log")
    for number in range(repeats):
        for study, plant in nights.items():
            tcfg = json.loads(json.dumps(cfg))
            tcfg["plant"] = dict(plant)
            tcfg["cpus"] = [core]
            tcfg["trial"]["context"] = json.dumps({"number": number})
            outcome = run_isolated(
                tcfg, float(tcfg["trial"]["timeout_s"]), Path(results) / "logs" / f"{study}.{number}.log"
            )
            if outcome.started_at is not None:
                outcome.started_at += shift
                outcome.ended_at += shift
            row = rows.make_row(outcome, study=study, trial=number, cfg=tcfg, objectives=[("throughput", "maximize")])
            row["baseline"] = True
            store.write_row(store.trial_path(trials, study, number), row)
