"""Scale out: parallel pinned trials, several sweeper processes on one study, Hydra launchers, pruning."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from sweeper.sweep.search import dedup
from sweeper.sweep.study.trials import is_counted, is_interrupted

from conftest import NO_REMEASURE, ROOT, run_cli

FAULTS = ["hydra.searchpath=[file://tests/faultload/conf]", "+workload=faults"]
GOOD = ["knobs.fault=none", "hydra.sweeper.params={knobs.fault:none,knobs.work:'range(8,600)'}", *NO_REMEASURE]
PG_URL = os.environ.get("KNOB_SWEEPER_PG_URL")


def _storage_url(kind: str, results: Path) -> str:
    if kind == "journal":
        return f"journal://{results}/optuna.journal"
    if PG_URL is None:
        if os.environ.get("CI"):
            pytest.fail("KNOB_SWEEPER_PG_URL is unset in CI: .ci/run must start PostgreSQL")
        pytest.skip("no PostgreSQL here (set KNOB_SWEEPER_PG_URL, as .ci/run does)")
    return PG_URL


def _storage(url: str):
    from sweeper.sweep.study.trials import make_storage

    return make_storage(url)


def _runs_a_trial(study: str, storage: object, pid: int) -> bool:
    try:
        trials = optuna.load_study(study_name=study, storage=storage).trials
    except KeyError:  # the study is not created yet
        return False
    return any(t.state == TrialState.RUNNING and t.user_attrs.get("owner", "").endswith(f":{pid}") for t in trials)


def test_parallel_trials_are_pinned_to_disjoint_cores(results: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    # Each trial's window lasts >= 2 s (steps wait 400 ms): two slots started together overlap whatever the
    # process start-up jitter of a loaded machine (CPU work alone made windows of ~0.05 s that could miss).
    run_cli([*FAULTS, *GOOD, "-m", "hydra.sweeper.n_trials=4", "trial.resources={cpus:1}", "measure.min_time_s=2",
             "workload.wait_ms=400", "hydra.sweeper.sampler=random", "hydra.sweeper.seed=0"], results, check=True)
    df = pd.read_parquet(results / "trials").sort_values("started_at")
    assert (df["status"] == "complete").all()
    assert set(df["cpu_affinity"]) == {"0", "1"}, "each trial process read back its own single core"
    assert (df["cpu_cores"] == 1).all()
    overlapping = [(a, b) for i, a in df.iterrows() for j, b in df.iterrows()
                   if i < j and a["started_at"] < b["ended_at"] and b["started_at"] < a["ended_at"]]
    assert overlapping, "two trials ran at the same time"
    assert all(a["cpu_affinity"] != b["cpu_affinity"] for a, b in overlapping)


@pytest.mark.parametrize("kind,launcher", [("journal", "basic"), ("postgres", "basic"), ("journal", "joblib")])
def test_three_processes_share_one_study(results: Path, kind: str, launcher: str) -> None:
    url = _storage_url(kind, results)
    study = f"shared-{kind}-{uuid.uuid4().hex[:8]}"
    args = [*FAULTS, *GOOD, "-m", "hydra.sweeper.n_trials=9", f"hydra.sweeper.study_name={study}",
            f"hydra.sweeper.storage={url}", "hydra.sweeper.heartbeat_interval=2", "hydra.sweeper.grace_period=4",
            "measure.min_time_s=1.0", "hydra.sweeper.sampler=random", f"results_dir={results}"]
    # (1 s windows: the three default sweepers take turns on the node's one whole-node slot, so the victim measures
    # a third of the trials, and the loop below must see one of them running.)
    if kind == "journal":
        args = [a for a in args if "heartbeat" not in a and "grace" not in a]
    if launcher == "joblib":
        args += ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    poll = _storage(url)  # one storage for the poll below, its schema made before the sweepers start
    procs = [subprocess.Popen([sys.executable, "-m", "sweeper", *args, f"hydra.sweeper.seed={i}"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(3)]
    # Kill one process while it measures a trial.
    victim = procs[0]
    deadline = time.time() + 120
    while time.time() < deadline and not _runs_a_trial(study, poll, victim.pid):
        time.sleep(0.1)
    victim.send_signal(signal.SIGKILL)
    for p in procs[1:]:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    victim.wait()

    trials = optuna.load_study(study_name=study, storage=_storage(url)).trials
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    assert not [t for t in trials if t.state == TrialState.RUNNING], "the killed process's trial was failed"
    interrupted = [t for t in trials if is_interrupted(t)]
    assert len(interrupted) == 1
    counted = [t for t in trials if is_counted(t)]
    assert len(counted) == 9, "together they ran exactly n_trials"
    df = pd.read_parquet(results / "trials")
    df = df[df["study"] == study]
    assert not df["trial"].duplicated().any()
    duplicates = {t.number for t in trials if str(t.user_attrs.get("reason", "")).startswith("duplicate:")}
    assert set(df["trial"]) == {t.number for t in counted} | {t.number for t in interrupted} | duplicates
    assert df["hostname"].notna().all()


def test_joblib_launcher(results: Path) -> None:
    # A seeded random sampler: the configurations are one fixed sequence (asks are made in order), none drawn twice.
    # Unseeded, two draws of the 592 sizes coincided about once in a hundred runs, and the sweep rightly added a
    # fifth row (the duplicate, skipped) and a fifth trial to measure.
    run_cli([*FAULTS, *GOOD, "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweeper.n_jobs=2",
             "hydra.sweeper.n_trials=4", "storage=journal", "hydra.sweeper.sampler=random", "hydra.sweeper.seed=0"],
            results, check=True)  # fmt: skip
    df = pd.read_parquet(results / "trials")
    assert df["knob.work"].nunique() == 4, df[["trial", "knob.work", "status", "reason"]]
    assert sorted(df["trial"]) == [0, 1, 2, 3]
    assert df["status"].isin(["complete", "skipped"]).all()


def test_submitit_local_launcher(results: Path) -> None:
    """Trials run as submitit jobs; one the device cannot run is skipped by the sweeper before any job exists."""
    run_cli([*FAULTS, "-m", "hydra.sweeper.params={knobs.fault:'choice(none,gpu_only)',knobs.work:16}",
             "hydra.sweeper.sampler=grid", "hydra.sweeper.n_trials=2", "hydra/launcher=submitit_local",
             "hydra.launcher.timeout_min=5", *NO_REMEASURE], results, check=True, timeout=600)
    df = pd.read_parquet(results / "trials").set_index("knob.fault")
    assert df.loc["none", "status"] == "complete"
    gpu_only = (df.loc["gpu_only", "status"], df.loc["gpu_only", "reason"])
    assert gpu_only == ("skipped", "invalid:fault=gpu_only needs a GPU")
    submitted = list((results / "multirun").rglob("*_submitted.pkl"))
    assert len(submitted) == 1, f"one job submitted, for the trial that ran: {submitted}"


def test_isolate_false_applies_env_and_cores_and_refuses_parallel_slots(results: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    run_cli([*FAULTS, "trial.isolate=false", "cpus=[1]", "+env.KNOB_PROBE=seen"], results, check=True)
    row = pd.read_parquet(results / "trials").iloc[0]
    assert row["status"] == "complete"
    assert (row["cpu_affinity"], row["env_probe"]) == ("1", "seen"), "in-process trials get their cores and env too"
    proc = run_cli([*FAULTS, "-m", "trial.isolate=false", "trial.resources={cpus:1}", "hydra.sweeper.n_trials=2"],
                   results)
    assert proc.returncode == 2 and "`trial.isolate`" in proc.stderr, proc.stderr[-2000:]


def test_cuda_connections_knob_reaches_the_isolated_trial_before_cuda_starts(results: Path) -> None:
    """knobs.cuda_connections is CUDA_DEVICE_MAX_CONNECTIONS in the trial process (set by the child before the workload
    is built, so before CUDA starts), winning over a conflicting ``env`` entry; unset, the trial sees none."""
    run_cli([*FAULTS, "+knobs.cuda_connections=32", "+env.CUDA_DEVICE_MAX_CONNECTIONS=4"], results, check=True)
    run_cli([*FAULTS, "knobs.work=9"], results, check=True)
    rows = pd.read_parquet(results / "trials").sort_values("started_at")
    assert list(rows["status"]) == ["complete", "complete"]
    assert rows["queues_probe"].iloc[0] == "32" and pd.isna(rows["queues_probe"].iloc[1])
    assert rows["knob.cuda_connections"].iloc[0] == 32


def test_pruning_stops_every_clearly_worse_trial_and_keeps_the_best(results: Path) -> None:
    """Slow by construction: the defaults (trial 0, measured first) sleep 1 ms a step, every other configuration
    8-20 ms. With the median pruner (one finished trial needed) each slow trial is stopped at its first report
    (0.2 s of measured time), long before its 1 s window; the best runs to the end."""
    run_cli([*FAULTS, "-m", "workload.wait_ms=1", "++hydra.sweeper.params={knobs.fault:none,knobs.work:8,"
             "workload.wait_ms:'choice(1,8,12,16,20)'}", "hydra.sweeper.sampler=random", "hydra.sweeper.seed=0",
             "hydra.sweeper.n_trials=6", "measure.steps=4", "measure.min_time_s=1.0", "measure.max_steps=1000000",
             "hydra.sweeper.pruner.type=median", "hydra.sweeper.pruner.n_startup_trials=1",
             "hydra.sweeper.pruner.n_warmup_steps=0", *NO_REMEASURE], results, check=True)
    df = pd.read_parquet(results / "trials").sort_values("trial")
    best = df.iloc[0]
    assert (best["param.wait_ms"], best["status"]) == (1, "complete") and best["measured_s"] >= 1.0, \
        "the defaults run first and, being the best, are measured to the end"
    slow = df[(df["param.wait_ms"] > 1) & (df["status"] != "skipped")]
    assert len(slow) >= 3, df[["trial", "param.wait_ms", "status"]]
    assert (slow["status"] == "pruned").all(), slow[["trial", "param.wait_ms", "status", "reason"]]
    assert (slow["throughput"] > 0).all(), "a pruned trial keeps the throughput seen so far"
    assert (slow["throughput"] < best["throughput"] / 4).all()


def test_trial_of_a_dead_node_is_failed_after_heartbeat_expiry(results: Path) -> None:
    """A trial asked by a sweeper on another host that stopped beating: a live sweeper fails it once its heartbeat
    is stale (no pid to check across hosts), writes its row, and runs the place again, without first waiting
    dedup.RECENT_S (60 s) for that trial to record its configuration: a stale heartbeat says its sweeper is gone."""
    url = _storage_url("postgres", results)
    study_name = f"stale-{uuid.uuid4().hex[:8]}"
    storage = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=3)
    study = optuna.create_study(study_name=study_name, storage=storage, direction="maximize")
    study.set_user_attr("knob_sweeper:target", 3)
    dead = study.ask()
    dead.suggest_int("knobs.work", 8, 599)
    dead.set_user_attr("owner", "another-node:4242")
    storage.record_heartbeat(dead._trial_id)  # ...and then that node died: no more beats
    t0 = time.time()
    run_cli([*FAULTS, *GOOD, "-m", "hydra.sweeper.n_trials=3", f"hydra.sweeper.study_name={study_name}",
             f"hydra.sweeper.storage={url}", "hydra.sweeper.heartbeat_interval=1", "hydra.sweeper.grace_period=3",
             "hydra.sweeper.sampler=random", "hydra.sweeper.baseline_first=false"], results, check=True)
    assert time.time() - t0 < dedup.RECENT_S, "the sweep waited for the dead node's trial to record its key"
    trials = optuna.load_study(study_name=study_name, storage=url).trials
    assert trials[0].state == TrialState.FAIL and is_interrupted(trials[0])
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert len([t for t in trials if is_counted(t)]) == 3, "the dead node's place was run again"
    df = pd.read_parquet(results / "trials")
    row = df[(df["study"] == study_name) & (df["trial"] == 0)]
    assert len(row) == 1 and row["reason"].item() == "interrupted"

# End-to-end sweeps of real workloads: `python -m pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow


def test_sweepers_opening_a_new_study_at_once_share_its_creators_id(tmp_path: Path) -> None:
    """Three sweepers open one new study together: one creates it and sets its id; the two others, finding it
    without one, wait for that id instead of storing their own (the last writer's id won before, so two of them
    kept different ids, and each looked for rows under its own: a killed sweeper's trial got two rows)."""
    from concurrent.futures import ThreadPoolExecutor

    from sweeper.sweep.study import trials as studies

    url = f"sqlite:///{tmp_path / 's.db'}"
    storage = studies.make_storage(url)
    assert [studies.create_if_missing(storage, "s", ["maximize"]) for _ in range(3)] == [True, False, False]
    opened = [optuna.load_study(study_name="s", storage=url) for _ in range(3)]
    with ThreadPoolExecutor(2) as pool:
        others = [pool.submit(studies.study_id, s, False) for s in opened[1:]]
        mine = studies.study_id(opened[0], True)
        assert [f.result(timeout=30) for f in others] == [mine, mine]
    assert optuna.load_study(study_name="s", storage=url).user_attrs[studies.STUDY_ID_KEY] == mine
    with_trials = optuna.create_study(study_name="made-elsewhere", storage=url)
    with_trials.ask()  # a study made without the sweeper, already used: its first opener gives it an id at once
    t0 = time.monotonic()
    assert studies.study_id(with_trials, False) and time.monotonic() - t0 < 5
