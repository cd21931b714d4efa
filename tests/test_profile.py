"""Profiled trials (measure.profile_steps): the real CLI writes a gzipped trace and the prof_* columns, the
report shows the section; planted bottlenecks are told apart (on the CPU what it can show; on a GPU, marked
``gpu``); a distributed trial profiles every rank; rows without a profile report as before."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from sweeper.results.outcome import Status
from sweeper.results.read import read_rows
from sweeper.trial import trace_analysis as ta
from workloads.base import DeviceInfo

from conftest import FAULTS, ROOT, run_main, run_report

BOTTLENECK = ["hydra.searchpath=[file://tests/faultload/conf]", "+workload=bottleneck"]
PROF_COLUMNS = [
    "prof_gpu_busy_frac",
    *[f"prof_idle_{c}_frac" for c in ta.IDLE_CAUSES],
    *[f"prof_k_{c}_frac" for c in ta.CLASSES],
    "prof_top_kernels",
    "prof_host_threads",
    "prof_trace",
    "prof_steps",
    "prof_s",
]


def trial_cfg(tmp_path: Path, *overrides: str, device: str = "cpu") -> dict[str, Any]:
    from hydra import compose, initialize_config_dir

    from sweeper.sweep.config.trial_config import as_dict, trial_config

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, f"results_dir={tmp_path / 'results'}"])
    return trial_config(as_dict(cfg), DeviceInfo(device))


def run_in_process(tmp_path: Path, *overrides: str, device: str = "cpu") -> dict[str, Any]:
    """One trial in this process (the real build, window and profile); its metrics."""
    from sweeper.trial.child import run_here

    outcome = run_here(trial_cfg(tmp_path, *overrides, f"device={device}", device=device))
    assert outcome.status == Status.COMPLETE, outcome.message
    return outcome.metrics


def test_a_profiled_single_run_writes_its_trace_columns_and_report_section(results: Path) -> None:
    run_main(["+workload=matmul", "measure.profile_steps=3"], results, check=True)
    row = read_rows(results, False).iloc[0]
    assert [c for c in PROF_COLUMNS if c not in row.index] == []
    assert row["prof_steps"] == 3 and row["prof_device"] == "cpu" and row["prof_s"] > 0
    parts = [row["prof_gpu_busy_frac"], *[row[f"prof_idle_{c}_frac"] for c in ta.IDLE_CAUSES]]
    assert sum(parts) == pytest.approx(1.0) and all(0 <= p <= 1 for p in parts)
    assert row["prof_k_matmul_frac"] > 0.5, row["prof_top_kernels"]
    trace = results / row["prof_trace"]
    assert row["prof_trace"].startswith("traces/matmul-runs/matmul-runs-run-") and trace.name.endswith(".json.gz")
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert {ta.WINDOW_LABEL, ta.INPUT_LABEL} <= {e.get("name") for e in events}
    assert ta.analyse(events, 3)["prof_gpu_busy_frac"] == pytest.approx(row["prof_gpu_busy_frac"])

    run_report([str(results)], check=True)
    md = (results / "report.md").read_text()
    assert "Why the GPU idles (profiled)" in md and row["prof_trace"] in md
    assert "(profile:" in md and "ui.perfetto.dev" in md
    html = (results / "report.html").read_text()
    assert "Where the device" in html and '"barmode":"stack"' in html


def test_rows_without_a_profile_report_as_before(tmp_path: Path) -> None:
    """The committed fixture has no prof_* columns: no section, no '(rule)' mark on its diagnoses."""
    import shutil

    src = ROOT / "tests" / "fixtures" / "report" / "single"
    shutil.copytree(src, tmp_path / "r")
    run_report([str(tmp_path / "r")], check=True)
    md = (tmp_path / "r" / "report.md").read_text()
    assert "Why the GPU idles" not in md and "(rule)" not in md and "(profile:" not in md


def test_profile_steps_zero_adds_nothing_and_a_negative_count_is_refused(tmp_path: Path, results: Path) -> None:
    m = run_in_process(tmp_path, *FAULTS, "measure.profile_steps=0")
    assert not [k for k in m if k.startswith("prof_")] and not (tmp_path / "results" / "traces").exists()
    proc = run_main(["+workload=matmul", "measure.profile_steps=-1"], results)
    assert proc.returncode == 2 and "measure.profile_steps" in proc.stderr + proc.stdout


# ---------------------------------------------------------------- planted bottlenecks, on the CPU


def test_on_the_cpu_a_slow_input_is_input_and_a_sync_shows_in_the_sync_op(tmp_path: Path) -> None:
    slow = run_in_process(tmp_path, *BOTTLENECK, "knobs.kind=input", "knobs.matmuls=0", "knobs.host_ms=20")
    assert slow["prof_idle_input_frac"] > 0.5, slow
    synced = run_in_process(tmp_path, *BOTTLENECK, "knobs.kind=sync", "knobs.host_ms=0")
    assert synced["prof_idle_sync_frac"] > 0, "the time in aten::item appears as sync"
    assert synced["prof_idle_input_frac"] < 0.2
    # Python between its ops is the CPU's launch gap; no sync op runs (input time here is only the label's own
    # cost and the scheduler's on a loaded machine, so it is not asserted)
    tiny = run_in_process(tmp_path, *BOTTLENECK, "knobs.kind=tiny_kernels", "knobs.kernels=2000")
    assert tiny["prof_idle_sync_frac"] == 0 and tiny["prof_idle_launch_frac"] > 0
    assert tiny["prof_k_norm_elementwise_frac"] > 0.3, tiny["prof_top_kernels"]


# ---------------------------------------------------------------- a distributed trial, gloo on the CPU


def test_a_ddp_trial_profiles_every_rank(tmp_path: Path) -> None:
    from sweeper.trial.isolate import run_isolated

    cfg = trial_cfg(
        tmp_path,
        "+workload=transformer_block",
        "distributed.strategy=ddp",
        "distributed.nproc=2",
        "measure.profile_steps=2",
    )
    cfg["trial"]["trace"] = ta.trace_relpath("ddp-study", 4)
    outcome = run_isolated(cfg, 180, tmp_path / "trial.log")
    assert outcome.status == Status.COMPLETE, outcome.message
    m = outcome.metrics
    assert m["prof_trace"] == "traces/ddp-study/ddp-study-000004.rank0.json.gz"
    for rank in (0, 1):
        assert (tmp_path / "results" / f"traces/ddp-study/ddp-study-000004.rank{rank}.json.gz").stat().st_size > 0
    busy = json.loads(m["prof_rank_busy"])
    assert set(busy) == {"0", "1"} and all(0 < v <= 1 for v in busy.values())
    assert m["prof_k_comm_frac"] > 0, "gloo's all-reduce appears in the rank's profile"


# ---------------------------------------------------------------- planted bottlenecks, on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("kind, cause", [("sync", "sync"), ("tiny_kernels", "launch")])
def test_on_a_gpu_a_planted_bottleneck_is_named(tmp_path: Path, kind: str, cause: str) -> None:
    m = run_in_process(tmp_path, *BOTTLENECK, f"knobs.kind={kind}", "preset=none", device="cuda")
    idle = {c: m[f"prof_idle_{c}_frac"] for c in ta.IDLE_CAUSES}
    assert max(idle, key=idle.get) == cause, idle
    assert idle[cause] > 0.5 * sum(idle.values()) and idle["input"] < 0.05, idle


def test_the_profile_check_bench_runs_on_the_cpu(tmp_path: Path) -> None:
    """bench/profile_check.py --smoke: both readings of the same steps and their comparison, as JSON lines."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "bench/profile_check.py", str(tmp_path), "--smoke", "--steps", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "profile_check.jsonl").read_text().splitlines()]
    assert [r["reading"] for r in rows] == ["profile_path", "gpu_checks_mfu_cap", "compare"]
    assert 0 <= rows[0]["matmul_attention_frac"] <= 1 and rows[0]["prof_steps"] == 2
    assert (tmp_path / "traces" / "profile_check.json.gz").stat().st_size > 0


def test_the_window_opens_after_a_first_step_that_refills_the_queue(tmp_path: Path) -> None:
    """capture() runs one step under the profiler before the labelled window (the synchronisation before it emptied
    the GPU's queue): the window holds exactly the requested steps, each after its own input fetch."""
    import torch

    from sweeper.trial.profile import capture

    calls: list[str] = []

    class Work:
        def next_batch(self) -> torch.Tensor:
            calls.append("input")
            return torch.ones(64, 64)

        def step(self, batch: torch.Tensor) -> None:
            calls.append("step")
            (batch @ batch).sum()

    out = capture(Work(), torch.device("cpu"), 3, tmp_path / "t.json.gz")
    assert calls == ["input", "step"] * 4
    events = json.loads(gzip.open(tmp_path / "t.json.gz").read())["traceEvents"]
    labels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    (window,) = [e for e in labels if e["name"] == ta.WINDOW_LABEL]
    steps = [e for e in labels if e["name"].startswith(ta.STEP_LABEL)]
    assert len(steps) == 3 and all(window["ts"] <= e["ts"] for e in steps)
    matmuls = [e for e in events if e.get("ph") == "X" and e.get("name") == "aten::mm"]
    assert len(matmuls) == 4 and sum(e["ts"] < window["ts"] for e in matmuls) == 1, "the first step is before it"
    assert out["prof_steps"] == 3


def test_a_profile_cut_by_the_budget_keeps_the_measured_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-measurement of an H100 JPEG sweep's best (2026-12-06) was cut by the budget at 60 s, its profile still
    running: the window it had measured was lost with it (``interrupted``, no throughput). The trial hands its
    measured window to the sweeper before profiling; cut by the budget while profiling, it is complete with that
    window, marked ``prof_cut``; cut by its own ``trial.timeout_s`` it fails as before (one cut before its window
    ends is interrupted: tests/test_scheduler.py). The sweeper's clock jumps past the deadline once the profile
    hangs (the fault's marker file), so nothing waits for a guessed time."""
    import time
    import types

    from sweeper.trial import isolate
    from tests.faultload.nights import night_config

    quick = ["measure.warmup_steps=1", "measure.steps=5", "measure.min_time_s=0", "measure.count_ops=false",
             f"results_dir={tmp_path / 'results'}"]  # fmt: skip
    isolate.run_isolated(night_config(quick), 600.0, tmp_path / "warm-up.log")  # the forkserver started: torch
    marker = tmp_path / "hanging"
    clock = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    clock.time = lambda: time.time() + (1000.0 if marker.exists() else 0.0)
    monkeypatch.setattr(isolate, "time", clock)
    # steps 1-6 are the warm-up and the window; the profile's first step is the 7th, its second hangs
    hang = [
        *quick,
        "measure.profile_steps=3",
        "knobs.fault=hang",
        "knobs.fault_step=8",
        f"workload.hanging_to={marker}",
    ]
    outcome = isolate.run_isolated(night_config(hang), 600.0, tmp_path / "cut.log", stop_at=time.time() + 60.0)
    assert outcome.status == Status.COMPLETE, (outcome.reason, outcome.message)
    m = outcome.metrics
    assert m["throughput"] > 0 and m["steps_measured"] == 5 and "setup_s" in m and "compile_s" in m
    assert m["prof_cut"] is True and "budget ended" in m["prof_error"] and "prof_trace" not in m
    marker.unlink()
    outcome = isolate.run_isolated(night_config(hang), 60.0, tmp_path / "timeout.log")
    assert outcome.status == Status.FAILED and outcome.reason.startswith("timeout"), (outcome.reason, outcome.message)
