"""Replay a recorded landscape as a lookup table: how many measured configurations (and, where the rows carry
each trial's ``wall_s``, how many seconds of trials) each sampler needs to come within 3 % of the grid's best,
median and p90 over seeds.

    python bench/sampler_efficiency.py tests/fixtures/landscapes/landscape-resnet50-jpeg-h200.parquet [--seeds 10]
        [--samplers staged,staged-nolocal,tpe,random,gp] [--starts]

Each replayed study is built exactly as a sweep builds it: the same parsed search space (from the file's
metadata), the same sampler factory and settings (``sweeper.sweep.search.samplers.make_sampler``, with the
workload's declared ``expensive`` knobs), the same define-by-run sampling with conditions
(``sweeper.sweep.study.trials.sample``) and the same telling (``sweeper.sweep.study.trials.tell``: OOM as a
violated constraint, each trial's cost as its ``wall_s``, a repeated
configuration answered with its earlier value at no cost, as the sweeper does). Every sampler starts as a new
study of the sweeper does, with ``starts=[]``: the workload's defaults first (the baseline, when they are in the
recorded space), then the sampler. ``--starts`` adds a row ``<first sampler>+starts`` that also measures the
workload's ``hydra.sweeper.starts`` recipe (hardware-specific knowledge) after the baseline.

No sampler sees the answer: the lookup table only answers the configurations a sampler asks for.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pyarrow.parquet as pq
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.results.outcome import Status, TrialOutcome  # noqa: E402
from sweeper.sweep.config.space import SearchSpace, build_space  # noqa: E402
from sweeper.sweep.search import samplers  # noqa: E402
from sweeper.sweep.study import trials as studies  # noqa: E402

OBJECTIVES = [("throughput", "maximize")]


@dataclass
class Landscape:
    space: SearchSpace
    defaults: dict[str, Any]  # every sampled key (None: nothing known), as the sweep's config gives them
    lookup: dict[tuple, tuple[float | None, float | None]]  # configuration -> (throughput or None = OOM, wall_s)
    baseline: list[dict[str, Any]]  # the workload's defaults, when the grid holds them
    starts: list[dict[str, Any]]  # the workload's starts recipe, restricted to the recorded space
    expensive: dict[str, Any]
    # configuration -> its share of the window spent waiting for data, where recorded: the sweeper sees it too
    waits: dict[tuple, float] = dataclasses.field(default_factory=dict)


def _plain(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def _workload_sweeper_conf(workload: str) -> dict[str, Any]:
    conf = ROOT / "conf" / "workload" / f"{workload}.yaml"
    if not conf.exists():
        return {}
    return OmegaConf.to_container(OmegaConf.load(conf)).get("hydra", {}).get("sweeper", {}) or {}


def load(path: Path) -> Landscape:
    """The recorded space, its lookup table and what a new study of the workload would measure first. ``starts``
    and ``expensive`` come from the file (as recorded) or, for older files, from the workload's config."""
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[b"knob_sweeper"])
    df = table.to_pandas()
    knob_cols = {k: f"knob.{k.split('.', 1)[1]}" for k in meta["params"]}
    defaults = {k: None for k in knob_cols}
    space = build_space(meta["params"], meta["conditions"], [], defaults)
    lookup: dict[tuple, tuple[float | None, float | None]] = {}
    waits: dict[tuple, float] = {}
    for _, row in df.iterrows():
        key = tuple(_plain(row[knob_cols[k]]) for k in space.params)
        cost = float(row["wall_s"]) if "wall_s" in row and pd.notna(row["wall_s"]) else None
        lookup[key] = (float(row["throughput"]) if row["status"] == "complete" else None, cost)
        if "data_wait_frac" in row and pd.notna(row["data_wait_frac"]):
            waits[key] = float(row["data_wait_frac"])
    baseline = [meta["defaults"]] if meta.get("defaults") else []
    conf = _workload_sweeper_conf(meta["workload"])
    starts = []
    for start in meta["starts"] if meta.get("starts") is not None else conf.get("starts") or []:
        fixed, _outside = space.fix(start, defaults)
        if fixed and fixed not in baseline + starts:
            starts.append(fixed)
    expensive = meta["expensive"] if meta.get("expensive") is not None else conf.get("expensive") or {}
    return Landscape(space, defaults, lookup, baseline, starts, dict(expensive), waits)


@dataclass
class Replay:
    configurations: int | None  # distinct configurations measured until one within the target (None: missed)
    seconds: float | None  # their recorded wall_s summed (None: missed, or the rows carry no cost)


def replay(name: str, seed: int, land: Landscape, target: float, first: list[dict[str, Any]], budget: int) -> Replay:
    """Ask/tell one study against the lookup table until a measured configuration reaches ``target``."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    saved = dict(samplers.STAGED)
    if name == "staged-nolocal":  # the ablation: the staged strategy without its local search (TPE alone there)
        name = "staged"
        samplers.STAGED["polish_every"] = 0
    try:
        sampler = samplers.make_sampler(name, seed, land.space, land.expensive, land.defaults)
    finally:
        samplers.STAGED.clear()
        samplers.STAGED.update(saved)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for params in first:
        study.enqueue_trial(params)
    seen: set[tuple] = set()
    spent = 0.0
    costed = all(c is not None for _v, c in land.lookup.values())
    for _ in range(budget):
        trial = study.ask()
        values = studies.sample(trial, land.space, land.defaults)
        key = tuple(values[k] for k in land.space.params)
        if key not in land.lookup:  # outside the recorded grid (a continuous sampler between grid points)
            studies.tell(study, trial, TrialOutcome(Status.FAILED, "not-recorded"), OBJECTIVES)
            continue
        value, cost = land.lookup[key]
        if key in seen:
            outcome = TrialOutcome(
                Status.SKIPPED, "duplicate:0", metrics={} if value is None else {"throughput": value}
            )
        else:
            spent += cost or 0.0
            status = Status.INFEASIBLE if value is None else Status.COMPLETE
            metrics = {} if value is None else {"throughput": value}
            if value is not None and key in land.waits:
                metrics["data_wait_frac"] = land.waits[key]
            outcome = TrialOutcome(
                status,
                "oom" if value is None else "",
                metrics=metrics,
                started_at=0.0,
                ended_at=cost or 0.0,
            )
        seen.add(key)
        studies.tell(study, trial, outcome, OBJECTIVES)
        if value is not None and value >= target:
            return Replay(len(seen), spent if costed else None)
    return Replay(None, None)


def _median_p90(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[math.ceil(0.9 * len(ordered)) - 1]


def summarize(name: str, runs: list[Replay], size: int) -> dict[str, Any]:
    """Median and p90 over seeds; a missed seed counts as the whole grid plus one (and no time)."""
    counts = [r.configurations if r.configurations is not None else size + 1 for r in runs]
    med, p90 = _median_p90(counts)
    row = {
        "sampler": name,
        "median": med,
        "pct_of_grid": round(100 * med / size, 1),
        "p90": p90,
        "missed": sum(r.configurations is None for r in runs),
        "seeds": len(runs),
    }
    seconds = [r.seconds for r in runs if r.seconds is not None]
    if len(seconds) == len(runs):
        row["median_s"], row["p90_s"] = (float(f"{v:.3g}") for v in _median_p90(seconds))
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("landscape", type=Path)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--samplers", default="staged,staged-nolocal,tpe,random,gp")
    p.add_argument("--starts", action="store_true", help="also replay the first sampler after the starts recipe")
    p.add_argument("--within", type=float, default=0.03, help="fraction below the grid's best that counts")
    p.add_argument("--out", type=Path, help="CSV of the table (default: next to the landscape, .samplers.csv)")
    args = p.parse_args()
    land = load(args.landscape)
    best = max(v for v, _c in land.lookup.values() if v is not None)
    target = (1 - args.within) * best
    size = len(land.lookup)
    total_s = sum(c for _v, c in land.lookup.values() if c is not None)
    print(
        f"landscape {args.landscape.name}: {size} configurations, best {best:.4g}, target >= {target:.4g}"
        + (f", grid measured in {total_s:.0f} s" if total_s else "")
    )
    print(f"every sampler measures first: {land.baseline or 'nothing (the defaults are outside the grid)'}")
    swept = {k: v for k, v in land.expensive.items() if k in land.space.params}
    print(f"expensive knobs (held cheap while screening): {swept or 'none swept in this space'}")
    names = [(n, land.baseline) for n in args.samplers.split(",")]
    if args.starts:
        print(f"+starts also measures: {land.starts}")
        names.append((names[0][0] + "+starts", land.baseline + land.starts))
    print(f"{'sampler':<14} {'median':>7} {'% grid':>7} {'p90':>5} {'missed':>6} {'median s':>9} {'p90 s':>7}")
    warnings.simplefilter("ignore")
    rows = []
    for label, first in names:
        runs = [replay(label.split("+")[0], seed, land, target, first, budget=20 * size) for seed in range(args.seeds)]
        row = summarize(label, runs, size)
        rows.append(row)
        print(
            f"{label:<14} {row['median']:>7.1f} {row['pct_of_grid']:>6.1f}% {row['p90']:>5} {row['missed']:>6} "
            f"{row.get('median_s', '-'):>9} {row.get('p90_s', '-'):>7}",
            flush=True,
        )
    pd.DataFrame(rows).to_csv(args.out or args.landscape.with_suffix(".samplers.csv"), index=False)


if __name__ == "__main__":
    main()
