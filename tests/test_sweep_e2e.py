"""End to end through the real CLI: sweeps land as Parquet rows, resume continues numbering, report ranks."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pandas as pd
import pyarrow.parquet as pq
import pytest

from sweeper.results import store

from conftest import NO_REMEASURE, run_cli, run_main, run_report


def rows(results: Path) -> pd.DataFrame:
    return pd.read_parquet(results / "trials").sort_values("trial").reset_index(drop=True)


def configs(df: pd.DataFrame) -> pd.Series:
    """Each row's configuration: all its knob values as one string."""
    knobs = sorted(c for c in df.columns if c.startswith("knob."))
    return df[knobs].map(repr).apply("|".join, axis=1)


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """Rows that count toward n_trials: everything but duplicates (which reuse another trial's measurement)."""
    return df[~df["reason"].fillna("").str.startswith("duplicate:")]


# resnet50 first: the first sweep run in this process starts its forkserver, with that sweep's workload module
# (torchvision for resnet50) imported once there instead of in each trial
@pytest.mark.parametrize("workload", ["resnet50", "transformer_block", "matmul"])
def test_sweep_resume_and_report(results: Path, workload: str) -> None:
    n = {"matmul": 6, "transformer_block": 3}.get(workload, 2)  # a resnet50 trial takes up to ~15 s on the CPU
    run_main([f"+workload={workload}", "-m", f"hydra.sweeper.n_trials={n}", *NO_REMEASURE], results, check=True)
    df = rows(results)
    assert len(measured(df)) == n, "n_trials counts new measurements; a duplicate is an extra, skipped row"
    assert list(df["trial"]) == list(range(len(df)))
    assert set(df["status"]) <= {"complete", "skipped"}
    assert (df["status"] == "complete").sum() >= 1
    complete = df[df["status"] == "complete"]
    assert (complete["throughput"] > 0).all()
    assert (complete["peak_mem_bytes"] > 0).all()
    assert (complete["workload"] == workload).all()
    assert {
        "knob.precision" if workload != "matmul" else "knob.dtype",
        "step_ms_p50",
        "step_ms_p10",
        "step_ms_p90",
        "step_cv",
        "first_step_s",
        "setup_s",
        "hostname",
        "torch_version",
        "cpu_model",
        "started_at",
        "graph_ops",
    } <= set(df.columns)
    compiles = json.loads(df["space"].iloc[0]).get("knob.compile", {}).get("attributes", {}).get("choices", [])
    counted = complete.sort_values("trial")["graph_ops"]
    if set(compiles) - {"off"}:  # a compile to price: the first (eager) trial counts its step's operations, once
        assert counted.iloc[0] >= 1 and counted.notna().sum() == 1, counted.tolist()
    else:  # nothing compiles: nothing is counted (the count's first use costs a second)
        assert counted.isna().all(), counted.tolist()

    # Same command again: the same study continues, trial numbers go on, nothing measured twice.
    first = len(df)
    run_main([f"+workload={workload}", "-m", f"hydra.sweeper.n_trials={n}", *NO_REMEASURE], results, check=True)
    df = rows(results)
    assert list(df["trial"]) == list(range(len(df))) and len(df) >= first + 1
    # 2n new measurements (resnet50's tiny space holds 8 configurations: precision x memory_format x batch_size)
    assert len(measured(df)) == 2 * n
    assert df["study"].nunique() == 1
    study = optuna.load_study(study_name=df["study"][0], storage=f"sqlite:///{results / 'optuna.db'}")
    assert len(study.trials) == len(df)
    assert all(t.state.is_finished() for t in study.trials)
    config = configs(df)
    done = df["status"] == "complete"
    assert not config[done].duplicated().any(), "no configuration was measured twice"
    for i in df.index[df["reason"].fillna("").str.startswith("duplicate:")]:
        first = int(df.loc[i, "reason"].split(":", 1)[1])
        assert df.loc[first, "status"] == "complete" and config[first] == config[i], "reused, not re-measured"
        assert df.loc[i, "throughput"] == df.loc[first, "throughput"], "the earlier measurement is reported"

    report = run_report([str(results)], check=True)
    md = (results / "report.md").read_text()
    assert f"# {workload}" in md and "| 1 |" in md
    assert "throughput" in report.stdout


def test_single_run_writes_one_row(results: Path) -> None:
    proc = run_main(["+workload=matmul", "knobs.dtype=fp32"], results, check=True)
    assert "complete" in proc.stdout
    files = [f for f in (results / "trials").glob("*.parquet") if f.name != store.SCHEMA_FILE]
    assert len(files) == 1, "one row file (beside the folder's zero-row schema file)"
    row = pq.read_table(files[0]).to_pylist()[0]
    assert row["status"] == "complete" and row["knob.dtype"] == "fp32" and row["trial"] is None
    assert row["throughput_unit"] == "TFLOP/s"


def test_conditional_knob_is_null_when_inactive(results: Path) -> None:
    run_main(
        [
            "+workload=matmul",
            "-m",
            "hydra.sweeper.n_trials=8",
            "hydra.sweeper.sampler=random",
            "hydra.sweeper.seed=3",
            *NO_REMEASURE,
        ],
        results,
        check=True,
    )
    df = rows(results)
    fp32 = df[df["knob.dtype"] == "fp32"]
    bf16 = df[df["knob.dtype"] == "bf16"]
    assert len(fp32) and len(bf16)
    assert fp32["knob.bf16_reduced_precision"].isna().all()
    assert bf16["knob.bf16_reduced_precision"].notna().all()


def test_constraint_skips_before_launch(results: Path) -> None:
    run_main(
        [
            "+workload=matmul",
            "-m",
            "hydra.sweeper.n_trials=6",
            "hydra.sweeper.sampler=random",
            "hydra.sweeper.seed=0",
            "+hydra.sweeper.constraints=[\"knobs.dtype != 'fp32'\"]",
            *NO_REMEASURE,
        ],
        results,
        check=True,
    )
    df = rows(results)
    fp32 = df[df["knob.dtype"] == "fp32"]
    assert len(fp32) >= 1, "seed 0 proposes fp32 at least once in 6 draws"
    assert (fp32["status"] == "skipped").all()
    assert fp32["reason"].str.startswith("invalid:").all()
    assert fp32["steps_measured"].isna().all() if "steps_measured" in fp32 else True


def test_multi_objective_pareto(results: Path) -> None:
    run_main(
        [
            "+workload=transformer_block",
            "-m",
            "hydra.sweeper.n_trials=5",
            "hydra.sweeper.sampler=nsgaii",
            "hydra.sweeper.objectives=[{metric:throughput,direction:maximize},{metric:peak_mem_bytes,direction:minimize}]",
            *NO_REMEASURE,
        ],
        results,
        check=True,
    )
    df = rows(results)
    assert (df["objectives"] == "throughput:maximize,peak_mem_bytes:minimize").all()
    study = optuna.load_study(study_name=df["study"][0], storage=f"sqlite:///{results / 'optuna.db'}")
    assert len(study.directions) == 2
    assert len(study.best_trials) >= 1
    run_report([str(results)], check=True)
    marked = _pareto_marks((results / "report.md").read_text())
    # The front computed here from the rows: configurations no other beats on both objectives.
    done = df[df["status"] == "complete"]
    means = done.groupby(configs(done))[["throughput", "peak_mem_bytes"]].mean()
    tp, mem = means["throughput"], means["peak_mem_bytes"]
    front = [k for k, r in means.iterrows()
             if not ((tp >= r["throughput"]) & (mem <= r["peak_mem_bytes"])
                     & ((tp > r["throughput"]) | (mem < r["peak_mem_bytes"]))).any()]
    assert len(marked) == len(means), "every configuration is a row of the ranking"
    assert sum(marked) == len(front) >= 1, (marked, front)


def _pareto_marks(md: str) -> list[bool]:
    """The `pareto` column of the report's first ranking table: whether each configuration is marked `*`."""
    lines = md.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("|") and "| pareto |" in line)
    column = [c.strip() for c in lines[head].split("|")].index("pareto")
    marks = []
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        marks.append([c.strip() for c in line.split("|")][column] == "*")
    return marks


def test_grid_stops_when_exhausted(results: Path) -> None:
    # matmul's tiny space: dtype(2) x transpose_a(2) x transpose_b(2) x two conditional flags(2 x 2) = 32 grid
    # points, of which 4 (fp32) + 8 (bf16) = 12 are distinct configurations once the conditions apply.
    proc = run_main(
        ["+workload=matmul", "-m", "hydra.sweeper.n_trials=50", "hydra.sweeper.sampler=grid", *NO_REMEASURE],
        results,
        check=True,
    )
    df = rows(results)
    assert len(df) <= 32, "stops when the grid is exhausted, not at n_trials=50"
    assert "space exhausted: all 12 configurations" in proc.stderr, "...or as soon as all 12 are measured"
    measured = df[df["status"] == "complete"]
    assert len(measured) == 12
    keys = measured[["knob.dtype", "knob.transpose_a", "knob.transpose_b", "knob.bf16_reduced_precision"]]
    assert not keys.astype(str).duplicated().any()
    dup = df[df["status"] == "skipped"]
    assert dup["reason"].str.startswith("duplicate:").all()


def test_a_sweep_that_may_compile_counts_its_models_operations_in_its_first_eager_trial(results: Path) -> None:
    """The cost model prices a first compile by the model's graph: the baseline (eager) of a space offering compile
    counts its step's distinct operations (``graph_ops``), on the real trial process."""
    space = "hydra.sweeper.params={knobs.compile:'choice(off,default)',knobs.batch_size:'choice(2,4)'}"
    run_main(["+workload=transformer_block", "-m", "hydra.sweeper.n_trials=1", space, *NO_REMEASURE], results,
             check=True)  # fmt: skip
    df = rows(results)
    first = df.sort_values("trial").iloc[0]
    assert first["status"] == "complete" and first["knob.compile"] == "off", df[["trial", "status", "knob.compile"]]
    assert first["graph_ops"] >= 10, first["graph_ops"]


def test_timeout_stops_launching_and_a_rerun_continues(results: Path) -> None:
    """hydra.sweeper.timeout_s is the command's budget: it ends there (exit 0, the reason said), every row is a
    measurement, a trial the budget cut (interrupted) or one left out because it could not end in time (skipped,
    over-budget), and the same command without the limit finishes the study's target (a nightly job can time-box a
    sweep and resume it). Each trial measures for at least 1 s, so 12 of them never fit a 10 s budget, however
    fast the machine."""
    args = ["+workload=matmul", "-m", "hydra.sweeper.n_trials=12", "hydra.sweeper.repeat=true", *NO_REMEASURE,
            "measure.min_time_s=1", "measure.max_steps=100000000"]  # fmt: skip
    first = run_cli([*args, "hydra.sweeper.timeout_s=10", "hydra.sweeper.grace_s=1"], results, check=True)
    said = first.stdout + first.stderr  # the budget ran out, or what was left of it fits no trial
    assert "budget: hydra.sweeper.timeout_s=10 s reached" in said or "s: no trial fits in the" in said, said
    done = rows(results)
    complete = done[done["status"] == "complete"]
    assert 1 <= len(complete) < 12, done[["trial", "status", "reason"]]
    assert done["status"].isin(["complete", "interrupted", "skipped"]).all(), done[["trial", "status", "reason"]]
    assert (done[done["status"] == "interrupted"]["reason"] == "budget").all()
    assert done[done["status"] == "skipped"]["reason"].str.startswith("over-budget:").all()
    run_cli(args, results, check=True)
    final = rows(results)
    assert (final["status"] == "complete").sum() == 12, final[["trial", "status", "reason"]]


def test_one_trial_on_a_new_study_measures_the_baseline(results: Path) -> None:
    run_main(["+workload=matmul", "-m", "hydra.sweeper.n_trials=1", *NO_REMEASURE], results, check=True)
    df = rows(results)
    assert len(df) == 1 and df["baseline"].all() and (df["status"] == "complete").all()


def test_starts_are_measured_after_the_baseline_then_the_sampler_takes_over(results: Path) -> None:
    """hydra.sweeper.starts: a recipe runs right after the baseline. Its keys the space does not sample (inactive
    under a condition: fp16_reduced_precision with bf16) or values outside the space are left to the sampler."""
    start = "[{knobs.dtype:bf16,knobs.transpose_a:true,knobs.fp16_reduced_precision:false,knobs.transpose_b:maybe}]"
    run_main(
        [
            "+workload=matmul",
            "-m",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.seed=0",
            f"hydra.sweeper.starts={start}",
            *NO_REMEASURE,
        ],
        results,
        check=True,
    )
    df = rows(results)
    assert list(df["trial"]) == [0, 1, 2]
    assert df["baseline"].tolist()[0] and not df["baseline"].tolist()[1]
    recipe = df.iloc[1]
    assert (recipe["knob.dtype"], recipe["knob.transpose_a"]) == ("bf16", True)
    assert pd.isna(recipe["knob.fp16_reduced_precision"]), "inactive with bf16: not fixed by the start"
    assert recipe["knob.transpose_b"] in (True, False), "outside the space: the sampler picked it"
    # A second command on the same study does not measure the starts again.
    run_main(
        ["+workload=matmul", "-m", "hydra.sweeper.n_trials=1", f"hydra.sweeper.starts={start}", *NO_REMEASURE],
        results,
        check=True,
    )
    study = optuna.load_study(study_name="matmul-tiny", storage=f"sqlite:///{results / 'optuna.db'}")
    assert sum(1 for t in study.trials if t.system_attrs.get("fixed_params")) == 2, "baseline + the one start"


def test_confirm_top_k_re_measures_the_baseline_and_the_best(results: Path) -> None:
    run_main(
        [
            "+workload=matmul",
            "-m",
            "hydra.sweeper.n_trials=4",
            "hydra.sweeper.repeat=true",
            "hydra.sweeper.confirm_top_k=2",
            "hydra.sweeper.confirm_unstable=false",
            "hydra.sweeper.seed=0",
        ],
        results,
        check=True,
    )
    df = rows(results)
    first, confirms = df.iloc[:4], df.iloc[4:]
    assert list(df["trial"]) == list(range(len(df))), "4 trials, then the confirmations"
    assert confirms["confirm_of"].notna().all() and first["confirm_of"].isna().all()
    best = first[first["status"] == "complete"].nlargest(2, "throughput")["trial"]
    wanted = {0, *best.astype(int)}  # the baseline (trial 0) and the 2 best, each once
    assert list(confirms["confirm_of"].astype(int)) == [0, *(t for t in best.astype(int) if t != 0)], (
        "interleaved: the baseline, then the best"
    )
    assert set(confirms["confirm_of"].astype(int)) == wanted and len(confirms) == len(wanted)
    for _, r in confirms.iterrows():  # the same configuration, measured again
        orig = first[first["trial"] == r["confirm_of"]].iloc[0]
        assert (r["knob.dtype"], r["knob.transpose_a"]) == (orig["knob.dtype"], orig["knob.transpose_a"])
        assert r["status"] == "complete"


# End-to-end sweeps of real workloads: `python -m pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow
