"""Duplicate configurations: not counted toward n_trials, not COMPLETE in Optuna, never measured twice at once
(also by two sweepers on one study), an exhausted space stops the sweep; the progress bar shows the study's best."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.trial import TrialState

from sweeper.results.outcome import Status, TrialOutcome
from sweeper.sweep.config.space import build_space
from sweeper.sweep.run.progress import SweepProgress
from sweeper.sweep.search import dedup

from conftest import NO_REMEASURE, ROOT, run_main

FAULTS = [
    "hydra.searchpath=[file://tests/faultload/conf]",
    "+workload=faults",
    "knobs.fault=none",
    "trial.timeout_s=300",
    *NO_REMEASURE,
]
ONE_CONFIG = "hydra.sweeper.params={knobs.fault:none,knobs.work:'choice(16)'}"


def _study(results: Path, name: str, url: str | None = None) -> optuna.Study:
    from sweeper.sweep.study.trials import make_storage

    return optuna.load_study(study_name=name, storage=make_storage(url or f"sqlite:///{results / 'optuna.db'}"))


def test_valid_keys_apply_conditions_and_constraints() -> None:
    params = {"knobs.dtype": "choice(fp32, bf16)", "knobs.a": "choice(false, true)", "knobs.b": "choice(true, false)"}
    defaults = {"knobs.dtype": "bf16", "knobs.a": False, "knobs.b": True}
    space = build_space(params, {"knobs.b": "knobs.dtype == 'bf16'"}, [], defaults)
    assert len(dedup.valid_keys(space, defaults)) == 2 + 4  # fp32: b inactive; bf16: a x b
    space = build_space(params, {"knobs.b": "knobs.dtype == 'bf16'"}, ["not knobs.a"], defaults)
    assert len(dedup.valid_keys(space, defaults)) == 1 + 2


def test_duplicates_do_not_count_and_an_exhausted_space_stops(results: Path) -> None:
    """matmul's tiny space has 12 configurations: n_trials=30 with random sampling measures each exactly once,
    says the space is exhausted and stops; n_trials=3 first gives 3 new measurements (duplicates are extra)."""
    args = ["+workload=matmul", "-m", "hydra.sweeper.sampler=random", "hydra.sweeper.seed=3", *NO_REMEASURE]
    run_main([*args, "hydra.sweeper.n_trials=3"], results, check=True)
    assert (pd.read_parquet(results / "trials")["status"] == "complete").sum() == 3
    proc = run_main([*args, "hydra.sweeper.n_trials=30"], results, check=True)
    assert "space exhausted: all 12 configurations" in proc.stderr
    df = pd.read_parquet(results / "trials")
    complete = df[df["status"] == "complete"]
    assert len(complete) == 12
    knobs = complete[[c for c in df.columns if c.startswith("knob.")]].astype(str)
    assert not knobs.duplicated().any()
    dups = df[df["status"] != "complete"]
    assert len(dups) > 0 and dups["reason"].str.startswith("duplicate:").all()
    study = _study(results, "matmul-tiny")
    assert study.metric_names == ["throughput"]
    for t in study.trials:  # one COMPLETE trial per measurement; a reused result is PRUNED
        assert t.state == (TrialState.PRUNED if dedup.is_duplicate(t) else TrialState.COMPLETE), t.number


def test_a_running_identical_configuration_is_waited_for_in_one_sweep(results: Path) -> None:
    """Two slots, one configuration: the second slot's ask must wait for the first's result, not measure it too."""
    proc = run_main(
        [*FAULTS, ONE_CONFIG, "-m", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2", "measure.min_time_s=1.0"],
        results,
        check=True,
    )
    df = pd.read_parquet(results / "trials")
    assert (df["status"] == "complete").sum() == 1, (df[["trial", "status", "reason"]], proc.stderr)
    assert list(df[df["status"] == "skipped"]["reason"]) == ["duplicate:0"], (
        df[["trial", "status", "reason"]],
        proc.stderr,
    )
    assert "trial 1 waits: trial 0 is measuring the same configuration" in proc.stderr
    assert "space exhausted" in proc.stderr


def test_a_waiter_whose_twin_crashes_is_launched_and_measured(results: Path) -> None:
    """Two slots, one configuration whose process exits without a result (a crash may pass): trial 1 waits for
    trial 0; trial 0 fails, so trial 1 is launched (the waiter's launch path, not the sampler's) and fails on its
    own. The sweep ends normally with both rows."""
    fails = "hydra.sweeper.params={knobs.fault:exit,knobs.work:'choice(16)'}"
    proc = run_main([*FAULTS, fails, "-m", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2"], results, check=True)
    assert "trial 1 waits: trial 0 is measuring the same configuration" in proc.stderr
    df = pd.read_parquet(results / "trials").sort_values("trial")
    assert list(df["trial"]) == [0, 1] and list(df["status"]) == ["failed", "failed"], df[["trial", "status"]]
    assert list(df["reason"]) == ["exit:3"] * 2, (df[["trial", "status", "reason"]], proc.stderr)


def test_a_waiter_whose_twin_raises_takes_that_answer(results: Path) -> None:
    """Two slots, one configuration whose workload raises: the same code gives the same answer, so trial 1, which
    waited for trial 0, is not launched once trial 0 failed: it is skipped as its duplicate, saying why."""
    fails = "hydra.sweeper.params={knobs.fault:raise,knobs.work:'choice(16)'}"
    proc = run_main([*FAULTS, fails, "-m", "hydra.sweeper.n_trials=2", "hydra.sweeper.n_jobs=2"], results, check=True)
    assert "trial 1 waits: trial 0 is measuring the same configuration" in proc.stderr
    df = pd.read_parquet(results / "trials").sort_values("trial")
    assert list(df["status"])[:2] == ["failed", "skipped"], (df[["trial", "status", "reason"]], proc.stderr)
    assert list(df["reason"])[:2] == ["exception:ValueError", "duplicate:0"]
    assert "which failed (exception:ValueError) in this sweep: not run again" in df.iloc[1]["message"]
    assert (df["status"] == "failed").sum() == 1, "the failing configuration ran once"


def test_a_configuration_running_in_another_sweeper_is_not_launched_again(results: Path, tmp_path: Path) -> None:
    """Two sweepers on one journal study: the second asks the configuration the first is measuring; it waits and
    reuses the result (concurrent sweepers once measured identical configurations twice). The first sweeper's
    trial is held running (``workload.hold_until``) until the second says it waits for it; each sweeper has its
    own node lock folder, so the second does not wait for the first's slot instead."""
    url = f"journal://{results}/optuna.journal"
    release = tmp_path / "release"
    args = [
        *FAULTS,
        ONE_CONFIG,
        "-m",
        "hydra.sweeper.n_trials=1",
        f"hydra.sweeper.storage={url}",
        "hydra.sweeper.study_name=shared",
        f"workload.hold_until={release}",
        f"results_dir={results}",
    ]

    def start(name: str) -> subprocess.Popen:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "KNOB_SWEEPER_LOCK_DIR": str(tmp_path / name)}
        return subprocess.Popen([sys.executable, "-m", "sweeper", *args], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip

    first = start("first-locks")
    second = None
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # the first sweeper's trial is running (and keyed)
            try:
                trials = _study(results, "shared", url).trials
            except KeyError:
                trials = []
            if any(t.state == TrialState.RUNNING and dedup.KEY in t.user_attrs for t in trials):
                break
            assert first.poll() is None, first.communicate()[1]
            time.sleep(0.2)
        else:
            raise AssertionError("the first sweeper never started its trial")
        second = start("second-locks")
        said = []
        for line in second.stderr:  # until the second sweeper says it waits for the first's trial
            said.append(line)
            if "trial 1 waits: trial 0 is measuring the same configuration" in line:
                break
        else:
            raise AssertionError("the second sweeper never waited:\n" + "".join(said))
        release.touch()
        assert first.wait(timeout=120) == 0, first.communicate()[1]
        rest = second.communicate(timeout=120)[1]
        assert second.returncode == 0, "".join(said) + rest
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    df = pd.read_parquet(results / "trials")
    assert list(df.sort_values("trial")["status"]) == ["complete", "skipped"]
    assert df.sort_values("trial")["reason"].iloc[1] == "duplicate:0"


def test_progress_bar_shows_the_studys_best_not_only_this_commands() -> None:
    study = optuna.create_study(direction="maximize")
    for value in (5.0, 9.0):  # measured by an earlier command
        t = study.ask()
        t.set_user_attr("throughput", value)
        t.set_user_attr("status", "complete")
        t.set_user_attr("throughput_unit", "samples/s")
        study.tell(t, value)
    progress = SweepProgress("s", 4, [("throughput", "maximize")], 2, {}, study)
    assert progress.progress.tasks[0].description == "study best 9.00 samples/s (trial 1)", "the trial lines' units"
    t = study.ask()
    t.set_user_attr("throughput", 3.0)
    t.set_user_attr("status", "complete")
    study.tell(t, 3.0)
    progress.trial_done(2, TrialOutcome(Status.COMPLETE, metrics={"throughput": 3.0}), {}, study)
    assert progress.progress.tasks[0].description == "study best 9.00 samples/s (trial 1)"


def test_a_higher_trial_waits_for_a_lower_one_to_record_its_configuration(tmp_path: Path) -> None:
    """Two sweepers ask the same configuration at once; the lower-numbered trial records its configuration key
    later than the higher one looks (seen in CI with PostgreSQL: both measured). The higher one waits until the
    lower one's key exists, then finds it running and waits for its result instead of measuring too."""
    import threading

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    low, high = study.ask(), study.ask()
    key = dedup.config_key({"work": 32})
    high.set_user_attr(dedup.KEY, key)
    assert dedup.find(study, key, high.number) is None, "before the lower key exists, nothing is found: the race"
    late = threading.Timer(0.5, lambda: low.set_user_attr(dedup.KEY, key))
    late.start()
    try:
        dedup.await_lower_keys(study, high.number)
    finally:
        late.join()
    found = dedup.find(study, key, high.number)
    assert found is not None and found[0] == "running" and found[1].number == low.number
    assert dedup.find(study, key, low.number) is None, "the lower number measures: it never waits for a higher one"


def test_waiting_for_lower_keys_follows_the_other_sweepers_life(tmp_path: Path) -> None:
    """A lower trial without its configuration yet is waited for as long as its sweeper lives: past any fixed
    bound while that process runs on this host (a slow sampler or the device check's CUDA start: before, a 10 s
    bound let the higher trial measure the same configuration); not at all when that process is dead, is this
    one (its asks are one at a time), or started after the trial (a dead sweeper's pid taken by another); and
    ``recent_s`` from its start where its sweeper cannot be seen (another host). The dead and the reused-pid ones
    are the orphans recovery finds (``study.orphaned_running``)."""
    import threading

    from sweeper.sweep.study import trials as studies

    def owner(pid: int) -> str:
        return f"{socket.gethostname()}:{pid}"

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # another live sweeper
    try:
        study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
        key = dedup.config_key({"work": 32})
        low, high = study.ask(), study.ask()
        high.set_user_attr(dedup.KEY, key)
        low.set_user_attr(studies.OWNER_KEY, owner(other.pid))
        late = threading.Timer(1.0, lambda: low.set_user_attr(dedup.KEY, key))
        t0 = time.monotonic()
        late.start()
        try:
            dedup.await_lower_keys(study, high.number, recent_s=0.1, timeout=20)
        finally:
            late.join()
        assert time.monotonic() - t0 >= 1.0, "a live sweeper's trial was waited for past recent_s"
        assert dedup.find(study, key, high.number)[1].number == low.number

        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        gone, mine, reused = study.ask(), study.ask(), study.ask()
        gone.set_user_attr(studies.OWNER_KEY, owner(dead.pid))
        mine.set_user_attr(studies.OWNER_KEY, studies.owner_id())
        _age(tmp_path / "s.db", START_AN_HOUR_EARLIER, reused.number)  # before the process now holding its pid
        newer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # started after `reused`
        try:
            reused.set_user_attr(studies.OWNER_KEY, owner(newer.pid))
            last = study.ask()
            t0 = time.monotonic()
            dedup.await_lower_keys(study, last.number, recent_s=0.1, timeout=20)
            assert time.monotonic() - t0 < 1.0, "none of the three was waited for"
            # the same reading of the owner finds the orphans to recover: a dead sweeper's trial, also when its pid
            # now belongs to a newer process (before, that trial stayed RUNNING and the sweep waited for it)
            orphans = {t.number for t in studies.orphaned_running(study)}
            assert orphans == {gone.number, reused.number}, orphans
        finally:
            newer.kill()
            newer.wait()
        elsewhere, last = study.ask(), study.ask()
        elsewhere.set_user_attr(studies.OWNER_KEY, "elsewhere:1")
        t0 = time.monotonic()
        dedup.await_lower_keys(study, last.number, recent_s=2.0, timeout=20)
        assert 1.0 < time.monotonic() - t0 < 8, "another host's trial: waited for until recent_s from its start"
    finally:
        other.kill()
        other.wait()


def test_an_enqueued_trial_asked_late_waits_for_a_running_twin(tmp_path: Path) -> None:
    """Trial 0 is enqueued (WAITING) while another sweeper's trial 1 of the same configuration is asked and
    measures; trial 0 is asked afterwards. It waits for trial 1, though its number is lower: a trial that decided
    to measure is waited for whatever its number (before, only lower numbers were waited for, and both measured)."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    key = dedup.config_key({"work": 32})
    study.enqueue_trial({"work": 32})
    measuring = optuna.Trial(study, study._storage.create_new_trial(study._study_id))  # asked before the pop
    measuring.set_user_attr(dedup.KEY, key)
    assert dedup.find(study, key, measuring.number) is None
    measuring.set_user_attr(dedup.WAITS_KEY, -1)  # what the sweeper records when a trial goes on to measure
    queued = study.ask()
    assert queued.number < measuring.number
    queued.set_user_attr(dedup.KEY, key)
    dedup.await_lower_keys(study, queued.number)
    found = dedup.find(study, key, queued.number)
    assert found is not None and found[0] == "running" and found[1].number == measuring.number


def test_when_the_awaited_trial_fails_only_the_lowest_waiter_measures(tmp_path: Path) -> None:
    """Trials 1 and 2 (two sweepers: two Waiting lists) wait for trial 0, which fails. Whichever polls first, only
    trial 1 measures; trial 2 waits for trial 1, and so does a trial asked in between, then both take trial 1's
    result. (Before, a waiter ignored the other waiters: here both became ready and measured one configuration.)"""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    key = dedup.config_key({"work": 32})
    first, low, high = study.ask(), study.ask(), study.ask()
    for t in (first, low, high):
        t.set_user_attr(dedup.KEY, key)
    lists = {}
    for t in (low, high):
        assert dedup.find(study, key, t.number)[1].number == first.number
        t.set_user_attr(dedup.WAITS_KEY, first.number)
        lists[t.number] = dedup.Waiting()
        lists[t.number].add(t, {"work": 32})
    study.tell(first, state=TrialState.FAIL)
    late = study.ask()  # asked after the failure, before either waiter polled
    late.set_user_attr(dedup.KEY, key)
    found = dedup.find(study, key, late.number)
    assert found is not None and found == ("running", found[1]) and found[1].number == low.number
    assert lists[high.number].poll(study) == [] and not lists[high.number].ready, "the higher waiter polls first"
    assert high.user_attrs[dedup.WAITS_KEY] == low.number, "it now waits for the lower waiter"
    assert lists[low.number].poll(study) == [] and [t for t, _ in lists[low.number].ready] == [low]
    low.set_user_attr(dedup.WAITS_KEY, -1)  # launched: it measures
    low.set_user_attr("status", "complete")
    study.tell(low, 5.0)
    (settled,) = lists[high.number].poll(study)
    assert settled[0] is high and settled[2].number == low.number, "the higher one takes the lower one's result"
    assert dedup.find(study, key, late.number)[0] == "complete"


def _waiting_on_the_first(storage: Any) -> tuple[optuna.Study, str, Any, Any]:
    """A study on ``storage`` whose trial 1 waits for trial 0, both of one configuration: (study, key, first,
    waiter)."""
    study = optuna.create_study(storage=storage, study_name="s")
    key = dedup.config_key({"work": 32})
    first, waiter = study.ask(), study.ask()
    for t in (first, waiter):
        t.set_user_attr(dedup.KEY, key)
    waiter.set_user_attr(dedup.WAITS_KEY, first.number)
    return study, key, first, waiter


def test_a_waiting_trial_of_a_dead_sweeper_goes_stale_and_holds_nobody(tmp_path: Path) -> None:
    """Other trials may wait for a waiting trial, so it beats like a measuring one: when its sweeper dies (no more
    beats) it goes stale, another process fails it, and a trial of the same configuration measures instead of
    waiting for it forever. (Before, a waiting trial had no heartbeat: Optuna never finds it stale.)"""
    from sweeper.sweep.study import trials as studies

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=1, grace_period=1)
    study, key, first, waiter = _waiting_on_the_first(storage)
    waits = dedup.Waiting()
    with studies.Heartbeat(storage) as heartbeat:  # the waiter's sweeper, alive
        waits.heartbeat = heartbeat
        waits.add(waiter, {"work": 32})
        assert waiter._trial_id in heartbeat.ids
    study.tell(first, state=TrialState.FAIL)  # the measuring trial fails; the waiter's sweeper is gone
    late = study.ask()
    late.set_user_attr(dedup.KEY, key)
    assert dedup.find(study, key, late.number)[1].number == waiter.number, "a live-looking waiter is waited for"
    _age(tmp_path / "s.db", LAST_BEAT_AN_HOUR_AGO, waiter._trial_id)  # the database's clock moved, no sleep
    optuna.storages.fail_stale_trials(study)
    assert study.get_trials(deepcopy=False)[waiter.number].state == TrialState.FAIL
    assert dedup.find(study, key, late.number) is None, "the dead waiter holds nobody: the late trial measures"


def test_a_settled_waiter_stops_beating(tmp_path: Path) -> None:
    from sweeper.sweep.study import trials as studies

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}", heartbeat_interval=60)
    study, _key, first, waiter = _waiting_on_the_first(storage)
    waits = dedup.Waiting()
    with studies.Heartbeat(storage) as heartbeat:
        waits.heartbeat = heartbeat
        waits.add(waiter, {"work": 32})
        first.set_user_attr("status", "complete")
        study.tell(first, 1.0)
        (settled,) = waits.poll(study)
        assert settled[0] is waiter and waiter._trial_id not in heartbeat.ids


START_AN_HOUR_EARLIER = "UPDATE trials SET datetime_start = datetime(datetime_start, '-1 hour') WHERE number = ?"
LAST_BEAT_AN_HOUR_AGO = "UPDATE trial_heartbeats SET heartbeat = datetime('now', '-1 hour') WHERE trial_id = ?"


def _age(db: Path, statement: str, key: int) -> None:
    """Moves a trial's recorded time back in the study's SQLite database (what a sleep would do, at once)."""
    import sqlite3

    with sqlite3.connect(db) as con:
        assert con.execute(statement, (key,)).rowcount == 1
