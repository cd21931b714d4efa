"""Replay a recorded landscape as a lookup table: how many measured configurations each sampler needs to come
within 3 % of the grid's best, median over seeds.

    python bench/sampler_efficiency.py bench/data/landscape-h200.parquet [--seeds 20] [--samplers tpe,random,gp]

Each replayed study is built exactly as a sweep builds it: the same parsed search space (from the file's
metadata), the same sampler factory and settings (``sweeper.sweep.study.make_sampler``), the same define-by-run
sampling with conditions (``sweeper.sweep.study.sample``) and the same telling (``sweeper.sweep.study.tell``: OOM as a violated
constraint, a repeated configuration answered with its earlier value at no cost, as the sweeper does). The cost
counted is the number of distinct configurations measured. ``default`` is what a new study of the sweeper does:
the workload's defaults first (when they are in the space), then the workload's ``hydra.sweeper.starts`` (its
known-good recipe, the part of it inside the recorded space), then TPE. ``tpe`` is TPE alone.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pyarrow.parquet as pq
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.sweep import study as studies  # noqa: E402
from sweeper.results.outcome import Status, TrialOutcome  # noqa: E402
from sweeper.sweep.space import SearchSpace, build_space  # noqa: E402


def _plain(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def load(path: Path) -> tuple[SearchSpace, dict[tuple, float | None], list[dict[str, Any]]]:
    """The space, {configuration: throughput (None = out of memory)} and what a new study measures first: the
    defaults (the baseline) and the workload's starts, each restricted to the recorded space."""
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"knob_sweeper"])
    df = table.to_pandas()
    knob_cols = {k: f"knob.{k.split('.', 1)[1]}" for k in meta["params"]}
    defaults = {k: None for k in knob_cols}
    space = build_space(meta["params"], meta["conditions"], [], defaults)
    lookup: dict[tuple, float | None] = {}
    for _, row in df.iterrows():
        key = tuple(_plain(row[knob_cols[k]]) for k in space.params)
        lookup[key] = float(row["throughput"]) if row["status"] == "complete" else None
    first = [meta["defaults"]] if meta.get("defaults") else []
    starts = meta.get("starts")
    if starts is None:  # exported before the file carried them: the workload's current ones
        conf = ROOT / "conf" / "workload" / f"{meta['workload']}.yaml"
        starts = OmegaConf.to_container(OmegaConf.load(conf)).get("hydra", {}).get("sweeper", {}).get("starts") or []
    for start in starts:
        fixed, _outside = space.fix(start, defaults)
        if fixed and fixed not in first:
            first.append(fixed)
    return space, lookup, first


def replay(name: str, seed: int, space: SearchSpace, lookup: dict[tuple, float | None], target: float,
           first: list[dict[str, Any]], budget: int) -> int | None:
    """Measured configurations until one reaches ``target`` (None if the budget of asks runs out)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    sampler = studies.make_sampler("tpe" if name == "default" else name, seed, space)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    if name == "default":
        for params in first:
            study.enqueue_trial(params)
    seen: dict[tuple, float | None] = {}
    for _ in range(budget):
        trial = study.ask()
        values = studies.sample(trial, space, {})
        key = tuple(values[k] for k in space.params)
        if key not in lookup:  # outside the recorded grid (a continuous sampler between grid points)
            studies.tell(study, trial, TrialOutcome(Status.FAILED, "not-recorded"), [("throughput", "maximize")])
            continue
        value = lookup[key]
        if key in seen:
            outcome = TrialOutcome(Status.SKIPPED, "duplicate:0", metrics={} if value is None else {"throughput": value})
        elif value is None:
            outcome = TrialOutcome(Status.INFEASIBLE, "oom")
        else:
            outcome = TrialOutcome(Status.COMPLETE, metrics={"throughput": value})
        seen[key] = value
        studies.tell(study, trial, outcome, [("throughput", "maximize")])
        if value is not None and value >= target:
            return len(seen)
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("landscape", type=Path)
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--samplers", default="default,tpe,random,gp")
    p.add_argument("--within", type=float, default=0.03, help="fraction below the grid's best that counts")
    args = p.parse_args()
    space, lookup, first = load(args.landscape)
    best = max(v for v in lookup.values() if v is not None)
    target = (1 - args.within) * best
    size = len(lookup)
    print(f"landscape {args.landscape.name}: {size} configurations, best {best:.4g}, target >= {target:.4g}")
    print(f"default measures first: {first}")
    print(f"{'sampler':<10} {'median':>8} {'% of grid':>10} {'p90':>6} {'missed':>7}")
    warnings.simplefilter("ignore")
    rows = []
    for name in args.samplers.split(","):
        counts = [replay(name, seed, space, lookup, target, first, budget=20 * size) for seed in range(args.seeds)]
        hits = sorted(c for c in counts if c is not None)
        missed = len(counts) - len(hits)
        med = statistics.median(hits + [size + 1] * missed) if counts else math.nan
        p90 = sorted(hits + [size + 1] * missed)[int(0.9 * (len(counts) - 1))]
        rows.append({"sampler": name, "median": med, "pct_of_grid": 100 * med / size, "p90": p90, "missed": missed})
        print(f"{name:<10} {med:>8.1f} {100 * med / size:>9.1f}% {p90:>6} {missed:>7}")
    pd.DataFrame(rows).to_csv(args.landscape.with_suffix(".samplers.csv"), index=False)


if __name__ == "__main__":
    main()
