"""The cost model against recorded sweeps: each trial of a recorded sweep predicted from the trials before it.

Reads the rows of H200, H100 and CPU default sweeps kept in ``bench/results`` (their knobs, wall and phases), feeds them
one by one to an in-memory study in the order they ran, and before adding each asks the cost model
(``CostModel.predict``, or ``predict_repeat`` for a re-measurement, with ``remeasure.profile_cost`` for a profiled
one) what that trial would cost; prints, per sweep, how many predictions fell within 30 % of the row's ``wall_s`` and
the misses; then, over all, the mean and median of |log(predicted / actual)| (a change that moves no prediction
across the 30 % line still shows there). Rows written before ``graph_ops`` existed get the count of their model's
default configuration (``GRAPH_OPS``, counted on the CPU with ``sweeper.trial.ops``) on their first trial, as a sweep
now records it.
CPU only, a few seconds:

    python bench/cost_rows.py [--json OUT]

A new sweep's rows join ``SWEEPS`` with the ``measure.*`` they ran under; rows that recorded ``graph_ops`` and the
compile cache's counters are replayed with them.

It measures the model on what it was built from: a check that a change does not lose accuracy on real rows, not an
independent claim (those are the device bench's, ``bench/budget_sweep.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.sweep.config.settings import KnobSweeperConf, graph_neutral, priors_per_op  # noqa: E402
from sweeper.sweep.run import remeasure  # noqa: E402
from sweeper.sweep.search.costs import CostModel  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DEFAULT_MEASURE = {"warmup_steps": 5, "steps": 20, "min_time_s": 1.0}
CPU_MEASURE = {**DEFAULT_MEASURE, "min_time_s": 0.0}  # a workload of the user's own, the package's measure.*
# sweep -> (rows, distinct operations of the model's default configuration's eager step, its measure.*)
SWEEPS = {
    "resnet50 2026-12-04": ("h200-2026-12-04T0104-budget-resnet50", 168, DEFAULT_MEASURE),
    "jpeg 2026-12-03": ("h200-2026-12-03T2337-budget-jpeg", 168, DEFAULT_MEASURE),
    "vit 2026-12-04": ("h200-2026-12-04T0057-budget-vit", 110, {**DEFAULT_MEASURE, "steps": 10, "min_time_s": 0.0}),
    "vit 2026-12-05": ("h200-2026-12-05T0414-budget-vit", 110, DEFAULT_MEASURE),
    "gpt 2026-12-05": ("h200-2026-12-05T0426-budget-gpt", 98, {**DEFAULT_MEASURE, "steps": 10}),
    "seg 2026-12-05": ("h200-2026-12-05T0432-budget-seg", 351, DEFAULT_MEASURE),
    "resnet50 2026-12-05 (H100)": ("h100-2026-12-05T1243-budget-resnet50", 168, DEFAULT_MEASURE),
    "jpeg 2026-12-05 (H100)": ("h100-2026-12-05T1252-budget-jpeg", 168, DEFAULT_MEASURE),
    "convnext 2026-12-05 (H100)": ("h100-2026-12-05T1257-budget-convnext", 208, DEFAULT_MEASURE),
    "lstm 2026-12-05 (H100)": ("h100-2026-12-05T1304-budget-lstm", 37, DEFAULT_MEASURE),
    "jpeg 2026-12-05 (H100, 2)": ("h100-2026-12-05T1550-budget-jpeg", 168, DEFAULT_MEASURE),
    "convnext 2026-12-05 (H100, 2)": ("h100-2026-12-05T1559-budget-convnext", 208, DEFAULT_MEASURE),
    "resnet50 2026-12-05 (H100, 2)": ("h100-2026-12-05T1606-budget-resnet50", 168, DEFAULT_MEASURE),
    "seg 2026-12-05 (H100)": ("h100-2026-12-05T1726-budget-seg", 351, DEFAULT_MEASURE),
    "seg 2026-12-05 (H100, 2)": ("h100-2026-12-05T1740-budget-seg", 351, DEFAULT_MEASURE),
    "seg 2026-12-05 (H100, 3)": ("h100-2026-12-05T1750-budget-seg", 351, DEFAULT_MEASURE),
    "lstm 2026-12-05 (H100, 2)": ("h100-2026-12-05T2355-budget-lstm", 37, DEFAULT_MEASURE),
    "seg 2026-12-06 (H100, 4)": ("h100-2026-12-06T0000-budget-seg", 351, DEFAULT_MEASURE),
    "resnet50 2026-12-06 (H100, 3)": ("h100-2026-12-06T0218-budget-resnet50", 166, DEFAULT_MEASURE),
    "lstm 2026-12-06 (H100, 3)": ("h100-2026-12-06T0225-budget-lstm", 37, DEFAULT_MEASURE),
    "convnext 2026-12-06 (H100, 3)": ("h100-2026-12-06T0231-budget-convnext", 208, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 3)": ("h100-2026-12-06T0403-budget-jpeg", 166, DEFAULT_MEASURE),
    "vit 2026-12-06 (H100)": ("h100-2026-12-06T0430-budget-vit", 110, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 4)": ("h100-2026-12-06T0437-budget-jpeg", 166, DEFAULT_MEASURE),
    "gpt 2026-12-06 (H100)": ("h100-2026-12-06T0624-budget-gpt", 98, {**DEFAULT_MEASURE, "steps": 10}),
    "jpeg 2026-12-06 (H100, 5, no handbook start)": ("h100-2026-12-06T0740-budget-jpeg", 166, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 6)": ("h100-2026-12-06T0808-budget-jpeg", 166, DEFAULT_MEASURE),
    "seg 2026-12-06 (H100, 5, no benchmark in the start)": ("h100-2026-12-06T0851-budget-seg", 351, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 7)": ("h100-2026-12-06T0922-budget-jpeg", 166, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 8)": ("h100-2026-12-06T0931-budget-jpeg", 166, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 9)": ("h100-2026-12-06T1143-budget-jpeg", 166, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 10, starts first)": ("h100-2026-12-06T1209-budget-jpeg", 166, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 11, starts first)": ("h100-2026-12-06T1315-budget-jpeg", 166, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 12, workers forked at build)": ("h100-2026-12-06T1721-budget-jpeg", 166, DEFAULT_MEASURE),
    "seg 2026-12-06 (H100, 6, primed)": ("h100-2026-12-06T1959-budget-seg", 351, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 13, primed)": ("h100-2026-12-06T2007-budget-jpeg", 166, DEFAULT_MEASURE),
    "resnet50 2026-12-06 (H100, 4, primed)": ("h100-2026-12-06T2013-budget-resnet50", 166, DEFAULT_MEASURE),
    "jpeg 2026-12-06 (H100, 14, diagnosed steps)": ("h100-2026-12-06T2213-budget-jpeg", 166, DEFAULT_MEASURE),
    "convnext 2026-12-06 (H100, 4, priming unrecorded)": ("h100-2026-12-06T2224-budget-convnext", 208, DEFAULT_MEASURE),
    "jpeg 2026-12-07 (H100, 15, two starts)": ("h100-2026-12-07T0657-budget-jpeg", 166, DEFAULT_MEASURE),
    "jpeg 2026-12-07 (H100, 16, host first)": ("h100-2026-12-07T0829-budget-jpeg", 166, DEFAULT_MEASURE),
    "convnext 2026-12-07 (H100, 5)": ("h100-2026-12-07T0835-budget-convnext", 208, DEFAULT_MEASURE),
    "seg 2026-12-07 (H100, 7)": ("h100-2026-12-07T0843-budget-seg", 351, DEFAULT_MEASURE),
    "resnet50 2026-12-07 (H100, 5)": ("h100-2026-12-07T0849-budget-resnet50", 166, DEFAULT_MEASURE),
    "rec 2026-12-07 (H100)": ("h100-2026-12-07T1134-budget-rec", 86, DEFAULT_MEASURE),
    "resnet50 2026-12-07 (H100, 6)": ("h100-2026-12-07T1141-budget-resnet50", 166, DEFAULT_MEASURE),
    "jpeg 2026-12-07 (H100, 17)": ("h100-2026-12-07T1147-budget-jpeg", 166, DEFAULT_MEASURE),
    "resnet50 2026-12-07 (H100, 7)": ("h100-2026-12-07T1316-budget-resnet50", 166, DEFAULT_MEASURE),
    "rec 2026-12-07 (H100, 2)": ("h100-2026-12-07T1323-budget-rec", 86, DEFAULT_MEASURE),
    "seg 2026-12-07 (H100, 8)": ("h100-2026-12-07T1329-budget-seg", 351, DEFAULT_MEASURE),
    "seg 2026-12-07 (H100, 9)": ("h100-2026-12-07T1529-budget-seg", 351, DEFAULT_MEASURE),
    "resnet50 2026-12-07 (H100, 9)": ("h100-2026-12-07T1538-budget-resnet50", 166, DEFAULT_MEASURE),
    "own audio 2026-12-07 (CPU)": ("cpu-2026-12-07T1835-own-audio", 0, CPU_MEASURE),
    "own audio 2026-12-07 (CPU, 2)": ("cpu-2026-12-07T1838-own-audio", 0, CPU_MEASURE),
    "own audio 2026-12-07 (CPU, 3)": ("cpu-2026-12-07T1846-own-audio", 0, CPU_MEASURE),
    "own audio 2026-12-07 (CPU, 4)": ("cpu-2026-12-07T1956-own-audio", 0, CPU_MEASURE),
    "own audio 2026-12-07 (CPU, 5)": ("cpu-2026-12-07T2000-own-audio", 0, CPU_MEASURE),
    "own audio 2026-12-07 (CPU, 6)": ("cpu-2026-12-07T2007-own-audio", 0, CPU_MEASURE),
    "own text 2026-12-07 (CPU)": ("cpu-2026-12-07T2028-own-text", 0, CPU_MEASURE),
    "own text 2026-12-07 (CPU, 2)": ("cpu-2026-12-07T2031-own-text", 0, CPU_MEASURE),
    "own text 2026-12-07 (CPU, 3)": ("cpu-2026-12-07T2038-own-text", 0, CPU_MEASURE),
    "own seq 2026-12-07 (CPU)": ("cpu-2026-12-07T2041-own-seq", 0, CPU_MEASURE),
    "own seq, expensive undeclared 2026-12-07 (CPU)": ("cpu-2026-12-07T2057-own-seqx", 0, CPU_MEASURE),
    "own seq, expensive undeclared 2026-12-07 (CPU, 2)": ("cpu-2026-12-07T2100-own-seqx", 0, CPU_MEASURE),
    "own tab 2026-12-07 (CPU)": ("cpu-2026-12-07T2219-own-tab", 0, CPU_MEASURE),
    "own tab, cache warmed by hand 2026-12-07 (CPU, AVX2)": ("cpu-2026-12-07T2312-own-tab", 0, CPU_MEASURE),
    "own tab, cache warmed 2026-12-07 (CPU, AVX2)": ("cpu-2026-12-07T2315-own-tab", 0, CPU_MEASURE),
    "own text, bf16 start 2026-12-07 (CPU, AVX2)": ("cpu-2026-12-07T2326-own-text", 0, CPU_MEASURE),
    "own text, fp32 start 2026-12-07 (CPU, AVX2)": ("cpu-2026-12-07T2337-own-text", 0, CPU_MEASURE),
    "own text, window ends at the reserve 2026-12-07 (CPU, AVX2)": ("cpu-2026-12-07T2343-own-text", 0, CPU_MEASURE),
    "own tab, fp32 start 2026-12-07 (CPU, AVX2)": ("cpu-2026-12-07T2348-own-tab", 0, CPU_MEASURE),
}
PHASES = ("setup_s", "compile_s", "first_step_s", "measured_s", "step_ms_mean", "warmup_steps", "warmup_drain_steps",
          "steps_measured", "prof_s", "data_wait_frac", "compiler_s", "prime_s")  # fmt: skip


def _plain(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def replay(rows: pd.DataFrame, ops: int, measure: dict[str, Any]) -> list[dict[str, Any]]:
    """Each complete trial's prediction from the trials before it: [{trial, predicted, actual, repeat}]."""
    s = KnobSweeperConf()
    model = CostModel(
        {"knobs.compile": "off"}, s.cost_prior, priors_per_op(s), measure=measure, neutral=graph_neutral(s)
    )
    study = optuna.create_study(direction="maximize")
    out = []
    for _, r in rows.sort_values("trial").iterrows():
        if r["status"] != "complete" or not r["wall_s"] > 0:
            continue
        params = {"knobs." + c.split(".", 1)[1]: _plain(r[c]) for c in rows.columns if c.startswith("knob.")}
        params = {k: v for k, v in params.items() if v is not None}
        repeat = not pd.isna(r.get("confirm_of"))
        if study.trials:
            phases = model.phases(study, params, repeat=repeat)
            predicted = phases["total"]
            if repeat and not pd.isna(r.get("prof_s", math.nan)):  # profiled: priced as the sweep's admission does
                predicted += remeasure.profile_cost(study, phases.get("step"))
            out.append({"trial": int(r["trial"]), "predicted": round(predicted, 1), "actual": round(r["wall_s"], 1),
                        "repeat": repeat})  # fmt: skip
        attrs = {k: float(r[k]) for k in PHASES if k in r and not pd.isna(r[k])}
        if r.get("graph_ops", math.nan) > 0:
            attrs["graph_ops"] = float(r["graph_ops"])  # the count the sweep made
        elif ops and not study.trials:
            attrs["graph_ops"] = ops  # the count a sweep now makes in its first eager trial
        for counter in ("compile_cache_hits", "compile_cache_misses"):
            if counter in r and not pd.isna(r[counter]):
                attrs[counter] = int(r[counter])
        attrs.update(status="complete", wall_s=float(r["wall_s"]))
        if isinstance(r.get("device"), str):
            attrs["device"] = r["device"]  # on the CPU a loader without workers loads between the steps
        if repeat:
            attrs["confirm_of"] = int(r["confirm_of"])
        dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
        study.add_trial(create_trial(params=params, distributions=dists, values=[float(r["throughput"])],
                                     user_attrs=attrs))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write every prediction here")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    everything = {}
    for name, (stem, ops, measure) in SWEEPS.items():
        preds = replay(pd.read_parquet(RESULTS / f"{stem}-trials.parquet"), ops, measure)
        misses = [p for p in preds if abs(p["predicted"] - p["actual"]) > 0.3 * p["actual"]]
        within = len(preds) - len(misses)
        print(f"{name}: {within}/{len(preds)} predicted within 30 %; misses (trial: predicted / actual s): "
              + (", ".join(f"{m['trial']}: {m['predicted']} / {m['actual']}" for m in misses) or "none"))  # fmt: skip
        everything[name] = preds
    preds = [p for ps in everything.values() for p in ps]
    within = sum(abs(p["predicted"] - p["actual"]) <= 0.3 * p["actual"] for p in preds)
    share = 100 * within / len(preds)
    print(f"all {len(everything)} sweeps: {within}/{len(preds)} predicted within 30 % ({share:.1f} %)")
    logs = sorted(abs(math.log(p["predicted"] / p["actual"])) for p in preds if p["predicted"] > 0 < p["actual"])
    if logs:  # a change that moves no prediction across the 30 % line still shows here
        mean, median = sum(logs) / len(logs), logs[len(logs) // 2]
        print(f"|log(predicted / actual)| over {len(logs)} predictions: mean {mean:.3f}, median {median:.3f}")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
