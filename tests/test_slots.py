"""Node-wide resource slots: sweepers on one node never run two trials on the same core at once, and a row says
when another trial shared its cores."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest

from sweeper.sweep.run.slots import NodeSlots, Occupancy, Slot

from conftest import NO_REMEASURE, ROOT, run_cli

FAULTS = ["hydra.searchpath=[file://tests/faultload/conf]", "+workload=faults"]
GOOD = ["knobs.fault=none", "hydra.sweeper.params={knobs.fault:none,knobs.work:'range(8,600)'}"]
PG_URL = os.environ.get("KNOB_SWEEPER_PG_URL")


def _overlapping(df: pd.DataFrame) -> list[tuple[pd.Series, pd.Series]]:
    rows = [r for _, r in df.iterrows()]
    return [
        (a, b)
        for i, a in enumerate(rows)
        for b in rows[i + 1 :]
        if a["started_at"] < b["ended_at"] and b["started_at"] < a["ended_at"]
    ]


def _three_sweepers(results: Path, kind: str, name: str, sweep_args: list[str]) -> pd.DataFrame:
    """Three sweeper processes on one node and one study (journal file or PostgreSQL), each with two slots of one
    pinned core, seeds 0-2; every one must exit 0. Returns the study's rows."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    if kind == "postgres" and PG_URL is None:
        if os.environ.get("CI"):
            pytest.fail("KNOB_SWEEPER_PG_URL is unset in CI: .ci/run must start PostgreSQL")
        pytest.skip("no PostgreSQL here (set KNOB_SWEEPER_PG_URL, as .ci/run does)")
    url = f"journal://{results}/optuna.journal" if kind == "journal" else PG_URL
    if kind == "postgres":  # Optuna's tables, created once: three processes creating them at once collide
        from sweeper.sweep.study.trials import make_storage

        make_storage(url)
    study = f"{name}-{kind}-{uuid.uuid4().hex[:8]}"
    args = [
        *FAULTS,
        *sweep_args,
        f"hydra.sweeper.study_name={study}",
        f"hydra.sweeper.storage={url}",
        "trial.resources={cpus:1}",
        "cpu_threads=1",
        "measure.min_time_s=1.5",
        "trial.timeout_s=300",
        "measure.max_steps=1000000",
        "hydra.sweeper.sampler=random",
        f"results_dir={results}",
        *NO_REMEASURE,
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sweeper", *args, f"hydra.sweeper.seed={i}"],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    df = pd.read_parquet(results / "trials")
    return df[df["study"] == study]


def test_three_sweepers_on_one_node_never_share_a_core(results: Path) -> None:
    # Each process alone would run two trials at once (one per core); three of them would run six on two cores.
    # One storage: the cores are locked in the node's lock folder (sweeper.sweep.run.slots), the same whatever holds
    # the study; sharing one study on each storage is the next test's, whose three sweepers take the same slots.
    df = _three_sweepers(
        results, "journal", "slots", [*GOOD, "-m", "hydra.sweeper.n_trials=9", "hydra.sweeper.repeat=true"]
    )
    assert len(df) == 9 and (df["status"] == "complete").all(), df[["trial", "status", "reason"]]
    owners = df["hostname"].nunique()
    assert owners == 1
    pairs = _overlapping(df)
    assert pairs, "trials ran at once (one per core)"
    assert all(a["cpu_affinity"] != b["cpu_affinity"] for a, b in pairs), "no two trials on one core at once"
    assert not df["node_shared"].any(), df[["trial", "cpu_affinity", "node_shared_with"]]


@pytest.mark.parametrize("kind", ["journal", "postgres"])
def test_three_sweepers_measure_each_configuration_once(results: Path, kind: str) -> None:
    """Three sweepers on one node and one study, each with two pinned slots, over a space of three configurations
    (no ``repeat``): each configuration is measured exactly once, never twice at the same time; a process that
    asks one another is measuring waits for it and reuses its result (``skipped``, ``duplicate:<trial>``)."""
    space = "hydra.sweeper.params={knobs.fault:none,knobs.work:'choice(16,32,64)'}"
    df = _three_sweepers(results, kind, "once", ["knobs.fault=none", "-m", space, "hydra.sweeper.n_trials=3"])
    measured = df[df["status"] == "complete"]
    assert sorted(measured["knob.work"]) == [16, 32, 64], df[["trial", "status", "reason", "knob.work"]]
    others = df[df["status"] != "complete"]
    assert (others["status"] == "skipped").all() and others["reason"].str.startswith("duplicate:").all(), others
    # Whether two of the three trials overlapped depends on timing; that none shared a core does not: each row
    # says whether another trial held its cores (node_shared), and overlapping rows name different cores.
    assert not df["node_shared"].any(), df[["trial", "cpu_affinity", "node_shared_with"]]
    assert all(a["cpu_affinity"] != b["cpu_affinity"] for a, b in _overlapping(measured)), "no core shared"


def test_unpinned_trials_at_once_are_flagged_as_sharing(results: Path) -> None:
    """n_jobs=2 without trial.resources: two trials at once on the same cores, which both rows say."""
    run_cli(
        [
            *FAULTS,
            *GOOD,
            "-m",
            "hydra.sweeper.n_jobs=2",
            "hydra.sweeper.n_trials=4",
            "measure.min_time_s=1.5",
            "trial.timeout_s=300",
            "measure.max_steps=1000000",
            "hydra.sweeper.repeat=true",
            "hydra.sweeper.sampler=random",
            *NO_REMEASURE,
        ],
        results,
        check=True,
    )
    df = pd.read_parquet(results / "trials")
    pairs = _overlapping(df)
    assert pairs
    for a, b in pairs:
        assert a["node_shared"] and b["node_shared"]
        assert f"#{b['trial']}" in a["node_shared_with"] and f"#{a['trial']}" in b["node_shared_with"]
    alone = set(df["trial"]) - {r["trial"] for pair in pairs for r in pair}
    assert not df[df["trial"].isin(alone)]["node_shared"].any()


def test_a_slot_is_held_until_released_or_its_process_dies(tmp_path: Path) -> None:
    slots = [Slot(0, None, (0,)), Slot(1, None, (1,))]
    mine, theirs = NodeSlots(tmp_path, slots, 0), NodeSlots(tmp_path, slots, 0)
    free = list(slots)
    assert mine.take(free) == slots[0] and free == [slots[1]]
    assert theirs.take([slots[0]]) is None, "core 0 is held by the other sweeper"
    # Another process holding core 1 until it is killed: the kernel drops its lock.
    code = (
        "import sys, time; sys.path.insert(0, %r); from sweeper.sweep.run.slots import NodeSlots, Slot; "
        "n = NodeSlots(%r, [Slot(1, None, (1,))], 0); assert n.take([Slot(1, None, (1,))]); print('held', "
        "flush=True); time.sleep(60)" % (str(ROOT), str(tmp_path))
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert theirs.take([slots[1]]) is None
    finally:
        holder.kill()
        holder.wait()
    assert theirs.take([slots[1]]) == slots[1]
    mine.release(slots[0])
    assert mine.take([slots[0]]) is None, "released with the other sweeper waiting: its turn"
    assert theirs.take([slots[0]]) == slots[0]
    theirs.release(slots[0])
    assert theirs.take([slots[0]]) == slots[0], "nobody waits: taken again at once"


def test_occupancy_names_the_trials_that_shared_a_core(tmp_path: Path) -> None:
    with Occupancy(tmp_path, ["cpu-0"], "a", 1) as a:
        with Occupancy(tmp_path, ["cpu-1"], "b", 2) as b, Occupancy(tmp_path, ["cpu-0", "cpu-1"], "c", 3) as c:
            pass
        assert b.shared_with(c.start + 1) == ["c#3"] and c.shared_with(c.start + 1) == ["a#1", "b#2"]
        assert a.shared_with(a.start + 10) == ["c#3"]
    with Occupancy(tmp_path, ["cpu-0"], "d", 4) as d:
        assert d.shared_with(d.start + 1) == [], "trials that ended before it started are not counted"


def test_sharing_is_judged_on_the_trials_own_runs_as_their_rows_say(tmp_path: Path) -> None:
    """A record stays open a few milliseconds past its trial's row (launch, then the row written), so records of
    trials one after another on one core could touch where their rows do not. Each record now holds its run as its
    row says: a first run 10-20 s and a second 20.2-30 s share nothing; a third run 19.9-25 s overlaps both."""
    for trial, run in ((1, (10.0, 20.0)), (2, (20.2, 30.0)), (3, (19.9, 25.0))):
        with Occupancy(tmp_path, ["cpu-0"], "s", trial) as occupancy:
            occupancy.ran(*run)
    judged = {}
    for trial, run in ((1, (10.0, 20.0)), (2, (20.2, 30.0)), (3, (19.9, 25.0))):
        occupancy = Occupancy(tmp_path, ["cpu-0"], "s", trial)
        occupancy.me["id"] = f"judge-{trial}"
        occupancy.ran(*run)
        judged[trial] = [w for w in occupancy.shared_with(run[1]) if w != f"s#{trial}"]
    assert judged == {1: ["s#3"], 2: ["s#3"], 3: ["s#1", "s#2"]}, judged


def test_an_unusable_lock_dir_is_bad_input(results: Path, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    proc = run_cli([*FAULTS, *GOOD, "-m", f"trial.lock_dir={tmp_path / 'a-file'}"], results)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: `trial.lock_dir`: "), proc.stderr
    assert lines[0].endswith("give a writable folder, the same for every sweeper on the node")
    assert not (results / "trials").exists(), "before any trial"
