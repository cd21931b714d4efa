"""Distributed trials on 2 gloo ranks (CPU, tiny presets): knobs reach the wrapped module, a failing rank ends
the whole trial cleanly (right outcome, in time, no process left), and a CLI sweep writes one row per trial.

Trials run through the real runner (forkserver child = the launcher's agent, real ranks, real gloo).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest
import torch
import torch.distributed.fsdp  # noqa: F401  (imported once here, not in each forked rank)

from sweeper.results.outcome import Status, TrialOutcome
from workloads import parallel
from workloads.base import DeviceInfo

from conftest import NO_REMEASURE, ROOT, run_main


def trial_cfg(*overrides: str) -> dict[str, Any]:
    """The trial config the CLI would build for these overrides (Hydra compose + preset, on the CPU)."""
    from hydra import compose, initialize_config_dir

    from sweeper.sweep.config.trial_config import as_dict, trial_config

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return trial_config(as_dict(cfg), DeviceInfo("cpu"))


def run_trial(tmp_path: Path, *overrides: str, timeout_s: float = 90, env: dict[str, str] | None = None
              ) -> tuple[TrialOutcome, float]:
    """Run one isolated trial (the real runner); returns its outcome and its wall time in seconds."""
    from sweeper.trial.isolate import run_isolated

    cfg = trial_cfg(*overrides, f"results_dir={tmp_path / 'results'}")
    cfg["env"] = {**cfg.get("env", {}), **(env or {})}
    t0 = time.monotonic()
    outcome = run_isolated(cfg, timeout_s, tmp_path / "trial.log")
    return outcome, time.monotonic() - t0


def leftover_descendants() -> list[psutil.Process]:
    """Live processes below this test's direct children (the forkserver and resource tracker stay; trials go)."""
    me = os.getpid()
    out = []
    for p in psutil.Process(me).children(recursive=True):
        try:
            if p.ppid() != me and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


DDP = ("distributed.strategy=ddp", "distributed.nproc=2")
FSDP = ("distributed.strategy=fsdp", "distributed.nproc=2")
RANK_FAULTS = "+workload.module=tests.faultload.rank_faults"  # the env test hooks plant a fault on one rank


# ---------------------------------------------------------------- knobs reach the wrapped module

def test_ddp_knobs_reach_the_reducer(tmp_path: Path) -> None:
    outcome, _ = run_trial(tmp_path, "+workload=resnet50", *DDP, "distributed.bucket_cap_mb=1",
                           "distributed.static_graph=true", "distributed.gradient_as_bucket_view=true",
                           "distributed.comm_hook=bf16", "measure.count_ops=true")
    assert outcome.status == Status.COMPLETE, outcome.message
    m = outcome.metrics
    assert m["world_size"] == 2
    assert m["graph_ops"] != m["graph_ops"], "ranks do not count their step (a refused count would desync them)"
    # Read back from the DDP module and its reducer's logging data, not from the config.
    assert m["ddp_bucket_cap_bytes"] == 2**20
    assert m["ddp_num_buckets"] >= 20, "ResNet-50's ~94 MB of gradients in 1 MiB buckets (25 MiB gives ~5)"
    assert m["ddp_static_graph"] is True and m["ddp_gradient_as_bucket_view"] is True
    assert m["ddp_find_unused_parameters"] is False
    assert m["ddp_comm_hook"] == "bf16_compress_hook"
    assert m["throughput"] > 0 and m["peak_mem_bytes"] > 0
    assert m["step_ms_p50"] >= m["step_ms_p50_rank_min"] > 0
    assert 0 < m["comm_frac"] <= 1 and m["comm_ms_per_step"] > 0


@pytest.mark.parametrize("sharding, extra, mesh, shard_frac, reshard", [
    ("FULL_SHARD", (), "2", 0.5, True),
    ("SHARD_GRAD_OP", (), "2", 0.5, False),
    ("NO_SHARD", (), "2x1", 1.0, False),
    ("HYBRID_SHARD", ("distributed.replicate_degree=2",), "2x1", 1.0, True),
])
def test_fsdp_sharding_reaches_the_module(tmp_path: Path, sharding: str, extra: tuple[str, ...], mesh: str,
                                          shard_frac: float, reshard: bool) -> None:
    outcome, _ = run_trial(tmp_path, "+workload=transformer_block", *FSDP, f"distributed.sharding={sharding}",
                           "distributed.param_dtype=bf16", "distributed.reduce_dtype=fp32", *extra)
    assert outcome.status == Status.COMPLETE, outcome.message
    m = outcome.metrics
    assert m["world_size"] == 2
    assert m["fsdp_mesh"] == mesh
    assert m["fsdp_shard_frac"] == pytest.approx(shard_frac)  # DTensor local numel / full numel
    assert m["fsdp_modules"] == 3, "each of the 2 layers, then the root"
    assert m["fsdp_reshard_after_forward"] is reshard
    assert (m["fsdp_param_dtype"], m["fsdp_reduce_dtype"]) == ("bfloat16", "float32")
    assert m["throughput"] > 0 and 0 < m["comm_frac"] <= 1


def _params_sharded_after_forward(sharding: str) -> dict[str, Any]:
    """In each rank: wrap a 2-layer stack, run one forward, report whether the layers' params are sharded."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from workloads.transformer_block import Stack

    dist.init_process_group("gloo")
    try:
        model = Stack(16, 2, 2)
        model = parallel.wrap(model, {"strategy": "fsdp", "sharding": sharding}, torch.device("cpu"),
                              blocks=list(model.layers))
        x = torch.randn(2, 4, 16)
        before = isinstance(model.layers[0].fc.weight, DTensor)
        loss = model(x).sum()
        after = isinstance(model.layers[0].fc.weight, DTensor)
        loss.backward()
        return {"before": before, "after_forward": after,
                "local_rows": model.layers[0].fc.weight.to_local().shape[0]}
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("sharding, resharded", [("FULL_SHARD", True), ("SHARD_GRAD_OP", False)])
def test_reshard_after_forward_is_what_the_layers_do(sharding: str, resharded: bool) -> None:
    from sweeper.trial.ranks import launch

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)}
    try:  # the launcher's agent (this test process) installs its own handlers
        results = launch(_params_sharded_after_forward, (sharding,), 2)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert sorted(results) == [0, 1]
    for r in results.values():
        assert r["before"] is True  # sharded DTensor parameters at rest
        assert r["after_forward"] is resharded  # FULL_SHARD frees the gathered layer; SHARD_GRAD_OP keeps it
        assert r["local_rows"] == 64 // 2  # fc: 4*16 output rows, half on each rank


# ---------------------------------------------------------------- one rank fails: the trial ends, whole and on time

@pytest.mark.parametrize("kind, status, reason, text", [
    ("oom", Status.INFEASIBLE, "oom", "can't allocate memory"),
    ("raise", Status.FAILED, "exception:ValueError", "planted fault on rank 1"),
    ("exit", Status.FAILED, "exception:RankExited", "without a Python exception"),
])
def test_one_rank_failing_fails_the_trial_cleanly(tmp_path: Path, kind: str, status: Status, reason: str,
                                                  text: str) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    outcome, wall = run_trial(tmp_path, "+workload=transformer_block", RANK_FAULTS, *DDP, timeout_s=90,
                              env={"SWEEPER_TEST_RANK_FAULT": f"1:{kind}", "SWEEPER_TEST_PID_DIR": str(pids)})
    assert (outcome.status, outcome.reason) == (status, reason), outcome.message
    assert "rank 1 of 2" in outcome.message and text in outcome.message
    assert wall < 60, "the other rank was stopped, not waited for"
    ranks = [json.loads(p.read_text()) for p in sorted(pids.glob("rank*.json"))]
    assert len(ranks) == 2
    assert all(r["pgid"] == r["ppid"] for r in ranks), "ranks stay in the trial's process group"
    assert not [r["pid"] for r in ranks if alive(r["pid"])]
    assert not leftover_descendants()


def test_rank_stuck_in_a_collective_fails_at_the_process_group_timeout(tmp_path: Path) -> None:
    # Rank 1 sleeps at its third step; rank 0 waits in DDP's all-reduce until distributed.timeout_s.
    outcome, wall = run_trial(tmp_path, "+workload=transformer_block", RANK_FAULTS, *DDP, "distributed.timeout_s=3",
                              timeout_s=90, env={"SWEEPER_TEST_RANK_FAULT": "1:hang"})
    assert outcome.status == Status.FAILED and outcome.reason.startswith("exception:"), outcome.reason
    assert "rank 0 of 2" in outcome.message and "Timed out" in outcome.message
    assert wall < 45, "ended by the 3 s collective timeout, long before the 90 s trial timeout"
    assert not leftover_descendants()


def test_trial_timeout_kills_every_rank(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    outcome, wall = run_trial(tmp_path, "+workload=transformer_block", RANK_FAULTS, *FSDP, "distributed.timeout_s=600",
                              timeout_s=15, env={"SWEEPER_TEST_RANK_FAULT": "1:hang",
                                                 "SWEEPER_TEST_PID_DIR": str(pids)})
    assert (outcome.status, outcome.reason) == (Status.FAILED, "timeout")
    assert wall < 30
    ranks = [json.loads(p.read_text()) for p in sorted(pids.glob("rank*.json"))]
    assert len(ranks) == 2, "both ranks had started before the timeout"
    time.sleep(0.5)  # the kernel delivers the group's SIGKILL
    assert not [r["pid"] for r in ranks if alive(r["pid"])]
    assert not leftover_descendants()


def test_a_profile_cut_by_the_budget_keeps_the_ranks_measured_window(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """As a single-process trial does (tests/test_profile.py): two DDP ranks measure their window, then profile;
    one hangs in its second profiled step, the sweep's budget ends, and the trial is complete with both ranks'
    window merged (their throughputs summed), marked ``prof_cut``. The sweeper's clock jumps past the budget once
    the rank hangs (its marker file, made once the agent handed the window over): no guessed wait."""
    import types

    from sweeper.trial import isolate

    marker = tmp_path / "hanging"
    clock = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    clock.time = lambda: time.time() + (1000.0 if marker.exists() else 0.0)
    monkeypatch.setattr(isolate, "time", clock)
    cfg = trial_cfg("+workload=transformer_block", RANK_FAULTS, *DDP, "measure.profile_steps=3",
                    f"results_dir={tmp_path / 'results'}")
    # the preset's fixed window, then the ranks' communication profile (its steps), then the trial's profile: its
    # unrecorded first step, its first recorded one, and its second, where rank 1 hangs
    window = int(cfg["measure"]["warmup_steps"]) + int(cfg["measure"]["steps"])
    hang = window + int(cfg["distributed"]["comm_profile_steps"]) + 3
    fault = {"SWEEPER_TEST_RANK_FAULT": f"1:hang@{hang}", "SWEEPER_TEST_HANG_MARKER": str(marker)}
    cfg["env"] = {**cfg.get("env", {}), **fault}
    outcome = isolate.run_isolated(cfg, 600.0, tmp_path / "trial.log", stop_at=time.time() + 60.0)
    assert outcome.status == Status.COMPLETE, (outcome.reason, outcome.message)
    m = outcome.metrics
    assert m["world_size"] == 2 and m["steps_measured"] == cfg["measure"]["steps"] and m["throughput"] > 0
    assert m["launch_s"] >= 0
    assert m["prof_cut"] is True and "budget ended" in m["prof_error"] and "prof_trace" not in m
    assert not leftover_descendants(), "every rank ended with the trial"


def test_workload_that_never_wraps_fails_with_the_reason(tmp_path: Path) -> None:
    outcome, _ = run_trial(tmp_path, "+workload=matmul", *DDP)
    assert outcome.status == Status.FAILED
    assert "does not support distributed.strategy=ddp" in outcome.message


# ---------------------------------------------------------------- configuration rules (no processes)

def test_check_skips_what_this_machine_cannot_run() -> None:
    cpu, one_gpu = DeviceInfo("cpu"), DeviceInfo("cuda", "H200", count=1)

    def cfg(device: str = "cpu", **dist: Any) -> dict[str, Any]:
        return {"device": device, "distributed": dist}

    assert parallel.check(cfg(strategy="none"), cpu) is None
    assert parallel.check(cfg(strategy="ddp", nproc=2), cpu) is None
    assert "needs 2 GPUs, 1 visible" in parallel.check(cfg("cuda", strategy="ddp", nproc=2), one_gpu)
    assert parallel.check(cfg("cuda", strategy="ddp"), one_gpu) is None  # nproc null: one per GPU
    assert "needs a GPU" in parallel.check(cfg(strategy="fsdp", cpu_offload=True), cpu)
    assert "does not divide" in parallel.check(cfg(strategy="fsdp", nproc=2, sharding="HYBRID_SHARD",
                                                   replicate_degree=3), cpu)
    assert "sharding must be one of" in parallel.check(cfg(strategy="fsdp", sharding="ZERO3"), cpu)
    assert "not a distributed setting" in parallel.check(cfg(strategy="ddp", bucket_mb=5), cpu)


def test_sharding_names_map_to_mesh_and_resharding() -> None:
    assert parallel.fsdp_layout("FULL_SHARD", 8) == ((8,), True)
    assert parallel.fsdp_layout("SHARD_GRAD_OP", 8) == ((8,), False)
    assert parallel.fsdp_layout("NO_SHARD", 8) == ((8, 1), False)
    assert parallel.fsdp_layout("HYBRID_SHARD", 8) == ((2, 4), True)
    assert parallel.fsdp_layout("HYBRID_SHARD", 8, replicate_degree=4) == ((4, 2), True)
    assert [parallel.default_replicas(n) for n in (1, 2, 4, 6, 16)] == [1, 1, 2, 2, 4]
    assert parallel.resolve_nproc(parallel.settings({"strategy": "ddp"}), "cpu", 0) == 1
    assert parallel.resolve_nproc(parallel.settings({"strategy": "ddp"}), "cuda", 4) == 4


# ---------------------------------------------------------------- end to end through the CLI

def test_cli_sweep_of_ddp_trials_writes_one_row_per_trial(results: Path) -> None:
    # repeat=true: both trials are measured even when the sampler proposes one configuration twice
    run_main(["+workload=transformer_block", "-m", "hydra.sweeper.n_trials=2", "hydra.sweeper.repeat=true", *DDP,
             *NO_REMEASURE], results, check=True)
    df = pd.read_parquet(results / "trials").sort_values("trial")
    assert list(df["trial"]) == [0, 1]
    assert (df["status"] == "complete").all(), df[["status", "reason", "message"]].to_string()
    assert (df["world_size"] == 2).all()
    assert (df["throughput"] > 0).all()
    assert (df["step_ms_p50"] >= df["step_ms_p50_rank_min"]).all()
    assert df["comm_frac"].between(0, 1).all()


def test_the_merged_row_warms_up_and_drains_as_long_as_the_slowest_rank() -> None:
    """The row of a distributed trial prices its warm-up by its slowest rank: each rank drains its own DataLoader,
    and the trial waited for the last one. Rank 1 here drained 12 steps after rank 0's 3 and counted the graph."""
    from sweeper.trial.rank_metrics import merge

    def rank(r: int, drain: int, ops: float) -> dict[str, Any]:
        return {"rank": r, "step_ms_p50": 10.0 + r, "step_ms_p10": 9.0, "step_ms_p90": 11.0, "step_ms_mean": 10.0,
                "step_cv": 0.01, "throughput": 100.0, "peak_mem_bytes": 1, "steps_measured": 20, "warmup_steps": 5,
                "warmup_drain_steps": drain, "measured_s": 0.2, "first_step_s": 1.0, "setup_s": 2.0, "compile_s": 0.0,
                "graph_breaks": 0, "graph_ops": ops, "loss_finite": True, "rank_started_at": 0.0}

    row = merge({0: rank(0, 3, float("nan")), 1: rank(1, 12, 98.0)})
    assert row["warmup_drain_steps"] == 12 and row["warmup_steps"] == 5
    assert row["graph_ops"] == 98.0
