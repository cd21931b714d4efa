"""The benchmark scripts' CPU parts at tiny sizes, so they keep working (numbers are for bench/, not tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import ROOT


def _run(*args: str, timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_overhead_bench(tmp_path: Path) -> None:
    out = _run("bench/overhead.py", "--trials", "3", "--out", str(tmp_path / "r"))
    assert len(pd.read_parquet(tmp_path / "r" / "trials")) == 3
    value = {ln.rsplit(None, 1)[0].strip(): float(ln.rsplit(None, 1)[1]) for ln in out.splitlines()[1:]}
    between = (
        value["sweep wall time (s)"]
        - value["startup before the first trial (s, once)"]
        - value["after the last trial: summary, exit (s)"]
        - value["trials' own work, sum (s)"]
    )
    # 3 trials have 2 gaps between them: the per-trial figure divides by 2, not 3 (the printed values are rounded)
    assert value["overhead per trial between trials (s)"] == pytest.approx(between / 2, abs=0.02)


@pytest.fixture(scope="module")
def seeded_landscape(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """matmul's tiny grid recorded as a record whose study database was lost continues it: a first record of 8
    configurations exported, seeded into a new study, the rest recorded there, both exported together."""
    tmp = tmp_path_factory.mktemp("landscape")
    first, second = tmp / "first", tmp / "second"
    part, full = tmp / "part.parquet", tmp / "full.parquet"
    _run("bench/landscape.py", "record", str(first), "--smoke", "--chunk", "8")
    _run("bench/landscape.py", "export", str(first), str(part), "--smoke")
    seed_out = _run("bench/landscape.py", "seed", str(second), str(part), "--smoke")
    _run("bench/landscape.py", "record", str(second), "--smoke")
    _run("bench/landscape.py", "export", str(second), str(full), "--smoke", "--also", str(part))
    return {"part": part, "full": full, "second": second, "seed_out": seed_out}


def test_landscape_record_export_and_sampler_replay(tmp_path: Path, seeded_landscape: dict) -> None:
    land = tmp_path / "landscape.parquet"
    table = pq.read_table(seeded_landscape["full"])
    assert table.num_rows == 12, "matmul's tiny grid: 4 fp32 + 8 bf16 distinct configurations"
    assert b"knob_sweeper" in table.schema.metadata
    # The replay on planted landscapes (the measured values are CPU noise): one configuration 2x the others.
    df = table.to_pandas()
    meta = json.loads(table.schema.metadata[b"knob_sweeper"])
    is_default = pd.Series(True, index=df.index)
    for key, value in meta["defaults"].items():
        col = "knob." + key.split(".", 1)[1]
        if col in df:
            is_default &= df[col] == value
    assert is_default.sum() == 1 and (df["status"] == "complete").all()
    elsewhere = ~is_default & (df.index == df.index[~is_default][-1])
    for planted, at_defaults in ((is_default, True), (elsewhere, False)):
        column = table.schema.get_field_index("throughput")
        pq.write_table(
            table.set_column(column, "throughput", pa.array(np.where(planted, 2.0, 1.0))).replace_schema_metadata(
                table.schema.metadata
            ),
            land,
        )
        out = _run("bench/sampler_efficiency.py", str(land), "--seeds", "2", "--samplers", "staged,random", "--starts")
        lines = {
            ln.split()[0]: ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0] in ("staged", "random")
        }
        assert set(lines) == {"staged", "random"}
        for name, cols in lines.items():  # sampler, median, % grid, p90, missed, median s, p90 s
            assert int(cols[4]) == 0, f"{name} never found the planted best on a 12-point grid: {out}"
            assert 1 <= float(cols[1]) <= 12 and int(cols[3]) <= 12
            if at_defaults:
                assert float(cols[1]) == 1.0, "every sampler measures the defaults first"
            else:
                assert float(cols[1]) >= 2, "the best is not the defaults: found after them"
    table = pd.read_csv(tmp_path / "landscape.samplers.csv")
    assert list(table["sampler"]) == ["staged", "random", "staged+starts"]
    assert (table["median_s"] > 0).all(), "the recorded rows carry each trial's wall_s: time to within 3 %"


def test_cost_aware_default_beats_tpe_and_random_in_seconds_on_a_recorded_landscape(tmp_path: Path) -> None:
    """tests/fixtures/landscapes/landscape-costly-cpu.parquet: tests/faultload's costly workload recorded on a CPU
    (compile ~2.2 s a trial, eager 0.2-1.3 s). Replayed over 10 seeds, the default strategy reaches within 3 % of the
    best in less trial time than TPE and random, and in fewer configurations than random."""
    land = ROOT / "tests" / "fixtures" / "landscapes" / "landscape-costly-cpu.parquet"
    out_csv = tmp_path / "costly.samplers.csv"
    _run(
        "bench/sampler_efficiency.py",
        str(land),
        "--seeds",
        "10",
        "--samplers",
        "staged,tpe,random",
        "--out",
        str(out_csv),
    )
    table = pd.read_csv(out_csv).set_index("sampler")
    assert (table["missed"] == 0).all()
    assert table.loc["staged", "median_s"] < table.loc["tpe", "median_s"] < table.loc["random", "median_s"]
    assert table.loc["staged", "median"] < table.loc["random", "median"]


def test_landscape_seeded_from_an_earlier_export_measures_only_the_rest(seeded_landscape: dict) -> None:
    """A record whose study database is lost continues from its export: seeded points are not measured again."""
    earlier = pq.read_table(seeded_landscape["part"]).num_rows
    assert 1 <= earlier < 12
    assert f"seeded {earlier} configurations" in seeded_landscape["seed_out"]
    rows = pd.read_parquet(seeded_landscape["second"] / "trials")
    assert (rows["status"] == "complete").sum() == 12 - earlier, "only the configurations not measured before run"
    land = pq.read_table(seeded_landscape["full"]).to_pandas()
    assert len(land) == 12 and land["throughput"].notna().all()


def test_time_to_tuned_runs_a_default_sweep_and_times_it_against_the_landscape(tmp_path: Path) -> None:
    """The checked-in H200 landscape's best is far beyond a tiny CPU sweep: the script must say it was not reached."""
    land = ROOT / "tests" / "fixtures" / "landscapes" / "landscape-resnet50-jpeg-h200.parquet"
    out = _run(
        "bench/time_to_tuned.py",
        "run",
        str(tmp_path / "r"),
        str(land),
        "--timeout-s",
        "120",
        "preset=tiny",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.confirm_top_k=0",  # two trials, nothing after them (tests/conftest.py NO_REMEASURE)
        "hydra.sweeper.confirm_unstable=false",
    )
    table = [ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0].isdigit()]
    assert [int(r[0]) for r in table] == [0, 1], out
    assert "did not reach 95% of the grid's best" in out


def test_gpu_validation_script_smoke(tmp_path: Path) -> None:
    """bench/gpu_validate.py --smoke: every stage the GPU job relies on runs on the CPU at tiny sizes."""
    import json

    _run("bench/gpu_validate.py", str(tmp_path), "--smoke", "--stages", "matmul,accuracy,jpeg", timeout=400)
    rows = [json.loads(line) for line in (tmp_path / "gpu_validate.jsonl").read_text().splitlines()]
    assert not [r for r in rows if r["name"] == "stage-error"], rows
    # The grid's points (on the CPU pin_memory is false only): workers x transfer_dtype, each measured once; a
    # point that repeats a configuration would reuse its measurement (skipped, duplicate).
    stage = [r for r in rows if r["stage"] == "jpeg"]
    jpeg = [r for r in stage if r["status"] == "complete"]
    assert len(jpeg) == len({r["name"] for r in jpeg}) == 4, "workers x transfer_dtype, each measured once"
    assert all(r["status"] == "skipped" and r["reason"].startswith("duplicate:") for r in stage if r not in jpeg)
    assert {r["name"].rsplit("-", 1)[1] for r in jpeg} == {"float32", "uint8"}
    assert {r["warmup_steps"] for r in jpeg} == {1, 10}, "warm-up drains the workers' prefetched batches"
    assert (tmp_path / "jpeg-report.md").read_text().startswith("# Sweep report")
    assert any(r["stage"] == "accuracy" and r["harness_ms"] > 0 for r in rows)


def test_gpu_checks_run_every_gpu_test_and_keep_the_output(tmp_path: Path) -> None:
    """bench/gpu_checks.py --stages gpu_tests: ``pytest -m gpu`` over the whole suite, one row per test (skipped
    here, without a GPU), the log summarised in bench/results/."""
    import json

    _run("bench/gpu_checks.py", str(tmp_path), "--smoke", "--stages", "gpu_tests", timeout=400)
    rows = [json.loads(line) for line in (tmp_path / "gpu_checks.jsonl").read_text().splitlines()]
    tests = {r["name"].split("::")[-1].split("[")[0]: r["outcome"] for r in rows if "::" in r["name"]}
    assert {
        "test_gpu_batches_are_float32_in_the_memory_format",
        "test_pin_memory_and_non_blocking_reach_the_copy",
        "test_precision_decides_where_tf32_rounds_on_the_gpu",
        "test_compile_reduce_overhead_replays_cuda_graphs_and_default_does_not",
    } <= set(tests)
    assert set(tests.values()) == {"skipped"}, "no GPU here"
    assert "test_fp32_baseline_is_pytorchs_own_defaults" not in tests, "only the tests marked gpu"
    summary = next(r for r in rows if r["name"] == "summary")
    assert summary["exit_code"] == 0 and summary["skipped"] >= 8
    assert "-m gpu" in (tmp_path / "gpu_tests.log").read_text()


# End-to-end sweeps of real workloads: `python -m pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow


def test_mfu_cap_splits_kernel_time_by_class(tmp_path: Path) -> None:
    """bench/gpu_checks.py --stages mfu_cap at tiny size: the FLOPs split into GEMM and attention adds up to the
    workload's own count, and the profiled time is split by class (CPU ops here)."""
    _run("bench/gpu_checks.py", str(tmp_path), "--smoke", "--stages", "mfu_cap", timeout=300)
    rows = [json.loads(line) for line in (tmp_path / "gpu_checks.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["stage"] == "mfu_cap")
    assert row["gemm_flops"] > 0 and row["attention_flops"] > 0
    assert row["gemm_flops"] + row["attention_flops"] == pytest.approx(row["flops_per_step"], rel=1e-9)
    assert row["step_ms"] > 0 and sum(row["kernel_ms"].values()) > 0


def test_ceiling_bench_stops_an_overrunning_sweep_and_summarizes_from_rows(tmp_path: Path) -> None:
    """bench/ceiling.py --smoke: a sweep still running ``grace_s`` after its budget is stopped (its running trial
    recorded, the summary still written); --summarize recomputes the same summary from the packed rows."""
    out = tmp_path / "c"
    # Trials whose window lasts 60 s, a 15 s budget and no grace: the sweep is stopped (SIGTERM) while its first
    # trial runs (the sweeper starts its first trial ~6 s after launch on the CI machine).
    _run("bench/ceiling.py", str(out), "--smoke", "--sweep-s", "15", "--grace-s", "0", "measure.min_time_s=60")
    rows = [json.loads(line) for line in (out / "ceiling-synthetic.jsonl").read_text().splitlines()]
    sweep = next(r for r in rows if r["kind"] == "sweep")
    assert sweep["exit"] != 0, "stopped, not finished"
    first = next(r for r in rows if r["kind"] == "summary")
    assert first["statuses"] == {"interrupted": 1} and first["recomputed_from_rows"] is False, "one trial, interrupted"
    _run("bench/pack.py", str(out / "results"), str(tmp_path / "rows.parquet"))
    started = pd.Timestamp(sweep["started"], unit="s", tz="UTC").isoformat()
    _run("bench/ceiling.py", str(out), "--summarize", str(tmp_path / "rows.parquet"), "--started", started)
    again = [json.loads(line) for line in (out / "ceiling-synthetic.jsonl").read_text().splitlines()][-1]
    assert again["recomputed_from_rows"] is True
    assert (again["trials"], again["statuses"], again["curve"]) == (first["trials"], first["statuses"], first["curve"])


def test_decode_strategies_records_a_run_past_its_time_limit_and_goes_on(tmp_path: Path) -> None:
    """bench/decode_strategies.py's single runs: one that outlives its limit (here 0.5 s, shorter than the
    sweeper's imports) becomes an error row instead of ending the other strategies' measurements."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("decode_strategies", ROOT / "bench" / "decode_strategies.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    o = bench.Out(tmp_path)
    bench.tool(o, tmp_path, "stuck", ["preset=tiny"], timeout=0.5)
    (row,) = o.rows
    assert row["name"] == "stuck" and row["error"].startswith("exit 124, no row; timed out after 0.5 s")


def test_decode_strategies_times_the_gpu_paths_two_stages(tmp_path: Path) -> None:
    """The gpu_stages part (CPU smoke: the decoders' CPU backends stand in for their GPU ones) times
    each stage per batch, for each GPU decoder asked for."""
    _run("bench/decode_strategies.py", str(tmp_path), "--smoke", "--parts", "gpu_stages")
    rows = [json.loads(line) for line in (tmp_path / "decode_strategies.jsonl").read_text().splitlines()]
    assert [r["name"] for r in rows] == ["torchvision batch 8", "nvimgcodec batch 8", "nvimgcodec+roi batch 8"]
    for row in rows:
        assert row["part"] == "gpu_stages" and row["decode_ms"] > 0 and row["crop_ms"] > 0 and row["reps"] == 12
        assert row["crop_span_ms"] is None and row["crop_kernel_ms"] is None, "no CUDA events or kernels on the CPU"


def test_baseline_checks_run_the_shipping_defaults_and_the_fp16_init_check(tmp_path: Path) -> None:
    """bench/baseline_checks.py --smoke (parts once in bench/decode_strategies.py): the JPEG workload as it ships
    and at strict fp32, one single run each, then the fp16 trace of default init against zero-initialised residual
    BN; the rows go to baseline_checks.jsonl in decode_strategies.py's row format."""
    _run("bench/baseline_checks.py", str(tmp_path), "--smoke", "--parts", "defaults,fp16")
    assert not (tmp_path / "decode_strategies.jsonl").exists()
    rows = [json.loads(line) for line in (tmp_path / "baseline_checks.jsonl").read_text().splitlines()]
    assert [(r["part"], r["name"]) for r in rows] == [
        ("trials", "jpeg-defaults-fp32"),
        ("trials", "jpeg-defaults-fp32-strict"),
        ("fp16", "zero_init=False"),
        ("fp16", "zero_init=True"),
    ]
    assert all(r["time"] for r in rows)
    for row in rows[:2]:
        assert row["status"] == "complete" and row["throughput"] > 0, row
    default, zero = rows[2], rows[3]
    assert len(default["losses"]) == len(zero["losses"]) == 3 and len(default["scales"]) == 3
    assert not default["first"]["grads_finite"], "default init: fp16 gradients overflow at the starting scale"
    assert zero["scales"] == [65536.0] * 3 and zero["last"]["grads_finite"], "zero-init: every step finite"
    assert set(zero["first"]["max_act"]) == {"layer1", "layer2", "layer3", "layer4", "fc"}


def test_jpeg_ceiling_logs_its_summary_before_measuring_the_best_rows_own_model(tmp_path: Path) -> None:
    """bench/ceiling.py --data jpeg: the summary row is written as soon as the sweep ends, and the best row's own
    model on synthetic data is a row of its own after it, so an outer timeout during that last run (as on the H200
    on 2026-12-01) loses only that row."""
    out = tmp_path / "c"
    _run("bench/ceiling.py", str(out), "--smoke", "--data", "jpeg", "--sweep-s", "15", "--grace-s", "30")
    rows = [json.loads(line) for line in (out / "ceiling-jpeg.jsonl").read_text().splitlines()]
    kinds = [r["kind"] for r in rows]
    assert kinds == ["reference", "sweep", "summary", "own_model"], kinds
    summary, own = rows[2], rows[3]
    assert summary["best"] > 0 and "own_model_synthetic" not in summary
    assert own["best_trial"] == summary["best_trial"] and own["own_model_synthetic"] > 0
    assert own["over_own_model"] == pytest.approx(summary["best"] / own["own_model_synthetic"])


@pytest.mark.parametrize(
    "name", ["landscape-resnet50-jpeg-h200.parquet", "landscape-resnet50-jpeg-h200.partial.parquet"]
)
def test_the_recorded_landscape_names_the_precision_its_rows_ran(name: str) -> None:
    """Until 2026-12-01 10:27 UTC the tool's fp32 turned cuDNN's TF32 off; since then that is ``fp32-strict`` and
    ``fp32`` is PyTorch's default. A checked-in landscape recorded before must not call those rows ``fp32``, and
    bench/landscape.py's spec must sweep what the file holds, so a new record measures the same landscape."""
    import importlib.util

    table = pq.read_table(ROOT / "tests" / "fixtures" / "landscapes" / name)
    meta = json.loads(table.schema.metadata[b"knob_sweeper"])
    rows = table.to_pandas()
    before = rows["started_at"] < pd.Timestamp("2026-12-01T10:27:00Z")
    assert before.all(), "every row of this landscape was recorded before the change"
    assert set(rows["knob.precision"]) == {"fp32-strict", "bf16"}
    assert meta["defaults"]["knobs.precision"] == "fp32-strict"
    spec = importlib.util.spec_from_file_location("landscape", ROOT / "bench" / "landscape.py")
    landscape = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(landscape)
    assert meta["params"]["knobs.precision"] == landscape.GPU["params"]["knobs.precision"]


def test_cpu_costs_time_every_decoder_and_resize_on_one_and_several_processes(tmp_path: Path) -> None:
    _run("bench/cpu_costs.py", str(tmp_path), "--smoke", timeout=200)
    rows = [json.loads(line) for line in (tmp_path / "cpu_costs.jsonl").read_text().splitlines()]
    machine, costs = rows[0], rows[1:]
    assert machine["part"] == "machine" and machine["cpu_count"] >= 1 and machine["torch"]
    variants = {f"{stage}/{lib}" for stage in ("decode", "resize", "pipeline") for lib in ("torchvision", "pil")}
    variants |= {"decode/opencv", "resize/opencv", "resize/torchvision-chw", "resize/torchvision-hwc"}
    variants -= {"resize/torchvision"}
    assert {r["name"] for r in costs} == variants
    for name in variants:  # each measured on 1 and 2 processes, or skipped (OpenCV, where it is not installed)
        rows = [r for r in costs if r["name"] == name]
        skipped = [r for r in rows if "skipped" in r]
        assert [r["procs"] for r in rows if "procs" in r] == [1, 2] or (skipped and "opencv" in name), rows
    for r in costs:
        if "procs" in r:  # every process decoded: a time per image, and the rate summed over the processes
            counts, seconds = r["images"], r["seconds"]
            assert len(counts) == r["procs"] and min(counts) > 0
            assert r["img_s"] == pytest.approx(sum(c / t for c, t in zip(counts, seconds)))
            assert r["ms_per_image"] == pytest.approx(sum(t / c for c, t in zip(counts, seconds)) * 1e3 / r["procs"])


def test_gpu_decode_load_decodes_on_several_threads_at_once(tmp_path: Path) -> None:
    _run(
        "bench/gpu_decode_load.py",
        str(tmp_path),
        "--smoke",
        "--seconds",
        "0.3",
        "--threads",
        "1,2",
        "--decoders",
        "torchvision",
        timeout=200,
    )
    rows = [json.loads(line) for line in (tmp_path / "gpu_decode_load.jsonl").read_text().splitlines()]
    assert [(r["decoder"], r["threads"], r["load"]) for r in rows] == [
        ("torchvision", 1, "none"),
        ("torchvision", 2, "none"),
    ]
    assert all(r["error"] is None and r["decode_img_s"] > 0 for r in rows), rows
    assert [len(r["per_thread"]) for r in rows] == [1, 2]
    assert all(n > 0 for r in rows for n in r["per_thread"]), "every thread decoded in the window"
    assert all(sum(r["per_thread"]) == r["batches"] for r in rows)


def test_cost_rows_predicts_every_recorded_trial_from_the_ones_before_it(tmp_path: Path) -> None:
    """bench/cost_rows.py: one prediction per complete trial of each recorded sweep but its first, each a positive
    number of seconds, a re-measurement priced as a repeat."""
    import runpy

    sweeps = runpy.run_path(str(ROOT / "bench" / "cost_rows.py"), run_name="cost_rows")["SWEEPS"]
    out = _run("bench/cost_rows.py", "--json", str(tmp_path / "p.json"), timeout=120)
    preds = json.loads((tmp_path / "p.json").read_text())
    assert set(preds) == set(sweeps)
    for name, (stem, _ops, _measure) in sweeps.items():
        rows = pd.read_parquet(ROOT / "bench" / "results" / f"{stem}-trials.parquet")
        complete = rows[(rows["status"] == "complete") & (rows["wall_s"] > 0)]
        assert f"{name}:" in out and len(preds[name]) == len(complete) - 1, name
        assert all(p["predicted"] > 0 and p["actual"] > 0 for p in preds[name]), preds[name]
        assert sum(p["repeat"] for p in preds[name]) == complete["confirm_of"].notna().sum(), name


def test_cost_rows_replays_a_rows_own_count() -> None:
    """A sweep's rows that recorded ``graph_ops`` are replayed with their count (DeepLabV3's first compile priced
    from 351 operations), and without one nor a stated count the prior is the eager trial's multiple."""
    import runpy

    replay = runpy.run_path(str(ROOT / "bench" / "cost_rows.py"), run_name="cost_rows")["replay"]
    rows = pd.read_parquet(ROOT / "bench" / "results" / "h200-2026-12-05T0432-budget-seg-trials.parquet")
    measure = {"warmup_steps": 5, "steps": 20, "min_time_s": 1.0}
    counted = rows.assign(graph_ops=[351.0] + [float("nan")] * (len(rows) - 1))
    with_count = replay(counted, 0, measure)[0]["predicted"]
    without = replay(rows, 0, measure)[0]["predicted"]
    # the compile's prior: 0.27 s x 351 operations (95 s) against 3 x the 8.3 s eager trial (25 s)
    assert with_count - without > 60.0, (with_count, without)


def test_preload_setup_bench_runs_each_case_to_a_row(tmp_path: Path) -> None:
    """bench/preload_setup.py --smoke: a single trial of one case of each kind (the built-in ResNet-50; a module of
    the user's own with neither torchvision nor TorchDynamo preloaded; one with them) completes and records its
    setup, split. (Each zoo module trains at its tiny sizes in tests/test_bench_zoo.py.)"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("preload_setup", ROOT / "bench" / "preload_setup.py")
    preload_setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(preload_setup)
    out = tmp_path / "rows.jsonl"
    _run("bench/preload_setup.py", str(out), "--repeats", "1", "--smoke", timeout=400)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    trials = [r for r in rows if r["kind"] == "trial"]
    assert [r["case"] for r in trials] == [preload_setup.CASES[i][0] for i in preload_setup.SMOKE_CASES]
    assert len(trials) == 3 and all(r["status"] == "complete" and r["setup_s"] > 0 for r in trials), trials
    # parts of the whole, each rounded to the millisecond
    assert all(0 <= r["setup_load_s"] + r["setup_build_s"] <= r["setup_s"] + 0.002 for r in trials), trials
    assert [r["kind"] for r in rows].count("imports") == 1


def test_worker_start_bench_runs_each_case_to_a_row(tmp_path: Path) -> None:
    """bench/worker_start.py --smoke: the user's DeepLabV3 with one worker started as now and as before (the trial's
    default start method "forkserver"); each trial completes and records its first step."""
    out = tmp_path / "rows.jsonl"
    _run("bench/worker_start.py", str(out), "--workers", "1", "--repeats", "1", "--smoke", timeout=400)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["workers"], r["before"]) for r in rows] == [(1, False), (1, True)], rows
    assert all(r["status"] == "complete" and r["first_step_s"] > 0 for r in rows), rows
