"""Values that would switch the budget off, leak a password, rename a row or rank nonsense, refused or masked.

* every number that reaches the budget or a time limit is finite (NaN compares false everywhere: ``grace_s=nan``
  turned the budget's end off, ``timeout_s=nan`` skipped every proposal);
* every wait on opening a storage is bounded by the budget and said (a journal lock left by a killed process);
* a storage password is masked in everything printed, however the URL arrived, and no driver text holding part of
  it is echoed;
* a workload's own metrics never take the row's identity or the sweeper's own columns and attributes, and its
  ``samples_per_step`` / ``flops_per_step`` are finite and > 0;
* ``node_shared`` sees trials of sweepers that do not share a lock folder.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import torch

from sweeper.errors import ConfigError
from sweeper.results import rows
from sweeper.results.outcome import Status, TrialOutcome
from sweeper.sweep.config import schema, secrets
from sweeper.sweep.config.settings import KnobSweeperConf, check_sweeper
from sweeper.sweep.run import slots
from sweeper.sweep.study import trials as studies
from workloads.base import Workload

from conftest import FAULTS, NO_REMEASURE, run_cli, run_main

# ---------------------------------------------------------------------------------------------------- the budget


@pytest.mark.parametrize("key", ["timeout_s", "grace_s"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_budget_is_one_line_naming_the_key(tmp_path: Path, key: str, value: str) -> None:
    proc = run_main([*FAULTS, "-m", f"hydra.sweeper.{key}={value}"], tmp_path / "results")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().count("\n") == 0 and f"hydra.sweeper.{key}" in proc.stderr, proc.stderr
    assert "finite" in proc.stderr
    assert not (tmp_path / "results" / "trials").exists(), "nothing ran"


@pytest.mark.parametrize("key", ["timeout_s", "grace_s", "timeout_factor", "timeout_floor_s"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_every_budget_number_of_the_sweeper_is_finite(key: str, value: float) -> None:
    import dataclasses

    conf = dataclasses.asdict(KnobSweeperConf())
    conf[key] = value
    with pytest.raises(ConfigError, match=f"hydra.sweeper.{key}") as e:
        check_sweeper(conf)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "node, key",
    [("trial", "timeout_s"), ("measure", "min_time_s"), ("measure", "stall_s"), ("measure", "rel_precision")],
)
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_every_time_limit_of_a_trial_is_finite(node: str, key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"{node}.{key}"):
        schema.validate({node: {key: value}})


def test_a_cost_prior_is_finite() -> None:
    from sweeper.sweep.plan import _check_cost_prior

    with pytest.raises(ConfigError, match="hydra.sweeper.cost_prior.knobs.compile.default"):
        _check_cost_prior({"knobs.compile": {"default": math.inf}}, {"knobs.compile": "off"})


# ---------------------------------------------------------------------------------------------------- the journal


def _legacy_lock(path: Path) -> Path:
    """The lock Optuna's own ``JournalFileSymlinkLock`` leaves when its process is killed mid-write: a link to the
    journal, naming no holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.symlink(str(path), str(path) + ".lock")
    return Path(str(path) + ".lock")


class FakeClock:
    def __init__(self) -> None:
        self.now = time.time()
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def test_a_dead_holders_journal_lock_is_broken_at_once(tmp_path: Path) -> None:
    from sweeper.sweep.study import journal

    path = tmp_path / "optuna.journal"
    path.touch()
    dead = f"{journal.TAG}{os.uname().nodename}:{2**22 + 12345}:1.0"  # no such pid (above pid_max's default)
    os.symlink(dead, str(path) + ".lock")
    clock = FakeClock()
    lock = journal.OwnedLock(str(path), deadline=None, clock=clock, sleep=clock.sleep)
    assert lock.acquire()
    assert clock.slept == 0.0
    assert os.readlink(str(path) + ".lock") == lock.tag
    lock.release()
    assert not os.path.lexists(str(path) + ".lock")


def test_a_killed_but_unreaped_holders_journal_lock_is_broken_at_once(tmp_path: Path) -> None:
    """A sweeper killed inside a write stays a zombie until its parent reaps it (a test harness, a CI runner or a
    launcher that waits on its other children first): its pid and start time still read as a process's, and a
    liveness check by those alone waited Optuna's 30 s grace period for it."""
    import psutil

    from sweeper.sweep.study import journal

    path = tmp_path / "optuna.journal"
    path.touch()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, left unreaped: a zombie
    assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE
    try:
        started = round(psutil.Process(child.pid).create_time(), 2)
        os.symlink(f"{journal.TAG}{os.uname().nodename}:{child.pid}:{started}", str(path) + ".lock")
        clock = FakeClock()
        lock = journal.OwnedLock(str(path), deadline=None, clock=clock, sleep=clock.sleep)
        assert lock.acquire()
        assert clock.slept == 0.0, "a zombie holder is dead: its lock is broken without a wait"
        lock.release()
    finally:
        child.wait()


def test_an_unknown_journal_lock_is_waited_for_until_the_budget_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from sweeper.sweep.study import journal

    path = tmp_path / "optuna.journal"
    _legacy_lock(path)
    clock = FakeClock()
    lock = journal.OwnedLock(str(path), deadline=clock.now + 7.0, clock=clock, sleep=clock.sleep)
    with caplog.at_level("WARNING", logger="sweeper.sweep.study.journal"):
        assert lock.acquire()
    assert 7.0 <= clock.slept < 7.5, "waited until the budget's end, not Optuna's 30 s"
    said = [r.getMessage() for r in caplog.records]
    assert any("waiting for the journal lock" in m and "optuna.journal.lock" in m for m in said), said
    assert any("broken (at the budget's end)" in m for m in said), said
    lock.release()


def test_a_journal_lock_older_than_the_grace_period_is_broken_without_a_wait(tmp_path: Path) -> None:
    from sweeper.sweep.study import journal

    path = tmp_path / "optuna.journal"
    link = _legacy_lock(path)
    old = time.time() - 60
    os.utime(link, (old, old), follow_symlinks=False)
    clock = FakeClock()
    assert journal.OwnedLock(str(path), clock=clock, sleep=clock.sleep).acquire()
    assert clock.slept == 0.0


def test_a_lock_file_of_optunas_open_lock_is_waited_for_too(tmp_path: Path) -> None:
    from sweeper.sweep.study import journal

    path = tmp_path / "optuna.journal"
    path.touch()
    Path(str(path) + ".lock").touch()  # JournalFileOpenLock's: a plain file
    clock = FakeClock()
    assert journal.OwnedLock(str(path), deadline=clock.now + 2, clock=clock, sleep=clock.sleep).acquire()
    assert 2.0 <= clock.slept < 2.5


def test_a_release_never_removes_another_holders_lock(tmp_path: Path) -> None:
    from sweeper.sweep.study import journal

    path = tmp_path / "optuna.journal"
    path.touch()
    lock = journal.OwnedLock(str(path))
    assert lock.acquire()
    os.unlink(str(path) + ".lock")  # broken by another process, which took it
    os.symlink("someone-else", str(path) + ".lock")
    lock.release()
    assert os.readlink(str(path) + ".lock") == "someone-else"


def test_a_stale_journal_lock_holds_no_command_past_its_budget(tmp_path: Path) -> None:
    """A SIGKILL during a journal write left Optuna's lock: the next command used to wait 30 s in silence, past
    its budget. Its wait now ends with its budget, and says what it waits for."""
    results = tmp_path / "results"
    journal_path = results / "optuna.journal"
    _legacy_lock(journal_path)
    timeout_s, grace_s = 10, 2
    args = [*FAULTS, "-m", "hydra.sweeper.n_trials=1", "hydra.sweeper.sampler=random", *NO_REMEASURE,
            f"hydra.sweeper.storage=journal://{journal_path}", f"hydra.sweeper.timeout_s={timeout_s}",
            f"hydra.sweeper.grace_s={grace_s}"]  # fmt: skip
    t0 = time.time()
    proc = run_cli(args, results, timeout=120)
    elapsed = time.time() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert elapsed < timeout_s + grace_s + 5, f"{elapsed:.1f} s\n{proc.stderr[-3000:]}"
    said = [line for line in (proc.stderr + proc.stdout).splitlines() if "optuna.journal.lock held by" in line]
    assert said, proc.stderr[-3000:]  # "waiting for the journal lock ... held by ...", or (the budget spent
    # starting, on a loaded machine) "journal lock ... held by ...: broken (at the budget's end)"


def _returns_within(seconds: float, call) -> BaseException | None:
    """What ``call()`` raised (None if nothing), asserting it returned within ``seconds`` (a thread: a wait that
    never ends leaves the test, not the process, waiting)."""
    import threading

    out: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            out.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"still waiting after {seconds} s"
    return out[0]


def test_a_postgresql_server_that_never_answers_is_waited_for_within_the_budget() -> None:
    import socket

    with socket.socket() as server:  # accepts connections (the kernel's backlog) and never says a word
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"postgresql+psycopg://knob@127.0.0.1:{server.getsockname()[1]}/nodb"
        error = _returns_within(20, lambda: studies.make_storage(url, deadline=time.time() + 3))
    assert isinstance(error, ConfigError) and "timeout" in str(error), error


def test_a_busy_sqlite_database_is_waited_for_within_the_budget(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import sqlite3

    db = tmp_path / "optuna.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE x (y)")
    holder.execute("BEGIN EXCLUSIVE")  # another process's long write
    try:
        t0 = time.time()
        error = _returns_within(30, lambda: studies.make_storage(f"sqlite:///{db}", deadline=time.time() + 3))
        assert isinstance(error, ConfigError) and "locked" in str(error), error
        assert time.time() - t0 < 15
        said = [r.getMessage() for r in caplog.records]
        assert any("waiting for a busy SQLite database" in m for m in said), said
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# ---------------------------------------------------------------------------------------------------- secrets


def test_a_password_in_ones_own_yaml_is_masked_by_cfg_hydra(tmp_path: Path) -> None:
    site = tmp_path / "conf" / "site"
    site.mkdir(parents=True)
    url = "postgresql+psycopg://knob:Yaml-Secret-77@127.0.0.1:9/nodb"
    (site / "secret.yaml").write_text(f"# @package _global_\nhydra:\n  sweeper:\n    storage: {url}\n")
    args = [f"hydra.searchpath=[file://tests/faultload/conf,file://{tmp_path / 'conf'}]", *FAULTS[1:], "+site=secret"]
    for flags in (["--cfg", "hydra"], ["--cfg", "all"]):
        proc = run_main([*flags, *args], tmp_path / "results")
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = proc.stdout + proc.stderr
        assert "Yaml-Secret-77" not in out and "knob:***@127.0.0.1:9" in out, out[-3000:]


def test_a_masked_url_never_replaces_the_real_one() -> None:
    """The command line's URL, masked by ``hide_argv``, reaches the sweeper masked: taken for a password in a
    YAML file, it used to replace the real URL its trials read back (a pruner's reports then failed to log in)."""
    real = "postgresql+psycopg://knob:Real-Pw-5@db.example/sweeps"
    saved = os.environ.get(secrets.ENV)
    try:
        masked = secrets.hide_argv([f"hydra.sweeper.storage={real}"])[0].split("=", 1)[1].strip("'")
        assert secrets.hide_config_password(masked) == []
        assert secrets.reveal(masked) == real
    finally:
        os.environ.pop(secrets.ENV, None) if saved is None else os.environ.__setitem__(secrets.ENV, saved)


@pytest.mark.parametrize("password", ["p@ss:TAILSECRET99", "ab:cd@WHOLE-TAIL-7"])
def test_no_driver_text_with_part_of_an_unencoded_password_is_shown(password: str) -> None:
    url = f"postgresql+psycopg://knob:{password}@127.0.0.1:55432/nodb"
    with pytest.raises(ConfigError) as e:
        studies.make_storage(url)
    text = str(e.value)
    assert "\n" not in text and "knob:***@" in text, text
    parts = {password[i : i + 4] for i in range(len(password) - 3)}
    assert not any(p in text for p in parts), text


def test_a_log_line_holds_no_piece_of_a_password_cut_by_the_parser() -> None:
    url = "postgresql+psycopg://knob:p@ss:TAILSECRET99@127.0.0.1:55432/nodb"
    line = secrets.scrub("invalid literal for int() with base 10: 'TAILSECRET99@127.0.0.1:55432'", url)
    assert "TAILSECRET99" not in line


# ---------------------------------------------------------------------------------------------------- metrics


def _work(extra: dict | None = None, samples: float = 4.0, flops: float | None = None) -> Workload:
    x = torch.ones(8, 8)
    return Workload(step=lambda _b: x @ x, samples_per_step=samples, flops_per_step=flops,
                    extra_metrics=lambda: dict(extra or {}))  # fmt: skip


def _measure(work: Workload) -> dict:
    from sweeper.trial.measure import measure

    return measure(work, torch.device("cpu"), warmup_steps=1, steps=2)


@pytest.mark.parametrize(
    "name",
    ["trial", "study", "study_id", "status", "throughput", "started_at", "confirm_of", "owner", "warm_start_from",
     "hostname", "knob.batch_size", "step_ms_p50"],
)  # fmt: skip
def test_a_workload_metric_named_like_the_sweepers_own_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"'{name}'") as e:
        _measure(_work({name: 7}))
    assert "\n" not in str(e.value) and "rename it" in str(e.value)


def test_a_workload_metric_of_its_own_name_is_kept() -> None:
    assert _measure(_work({"accuracy": 0.5}))["accuracy"] == 0.5


def test_a_row_keeps_its_identity_and_optuna_its_attributes_whatever_the_metrics() -> None:
    """Behind the trial's refusal: a row and a trial's attributes never take their identity from a metric."""
    outcome = TrialOutcome(Status.COMPLETE, metrics={"throughput": 5.0, "trial": 0, "study": "other",
                                                     "status": "failed", "confirm_of": 3, "owner": "x:1"},
                           started_at=1.0, ended_at=2.0)  # fmt: skip
    cfg = {"workload": {"name": "matmul"}, "knobs": {}}
    row = rows.make_row(outcome, study="mine", trial=4, cfg=cfg, objectives=[("throughput", "maximize")])
    assert (row["study"], row["trial"], row["status"]) == ("mine", 4, "complete")
    study = optuna.create_study(directions=["maximize"])
    trial = studies.ask(study)
    studies.tell(study, trial, outcome, [("throughput", "maximize")])
    attrs = study.trials[0].user_attrs
    assert "confirm_of" not in attrs and attrs["owner"] == studies.owner_id() and attrs["status"] == "complete"
    assert studies.is_counted(study.trials[0])


def test_the_reserved_names_cover_the_sweepers_attributes() -> None:
    """Every bookkeeping attribute the sweeper writes on a trial (``attrs.BOOKKEEPING``) is refused as a metric and
    never told as one: a metric named ``config_key`` (missing here before) overwrote the trial's configuration key,
    and its configuration no longer found its duplicates."""
    from sweeper.sweep.study import attrs

    assert [k for k in attrs.BOOKKEEPING if k not in rows.SWEEPER_ATTRIBUTES] == []
    assert all(rows.reserved(k) for k in attrs.BOOKKEEPING)


@pytest.mark.parametrize("field, value", [("samples", -3.0), ("samples", 0.0), ("samples", math.nan),
                                          ("samples", math.inf), ("flops", -1e9), ("flops", math.inf)])  # fmt: skip
def test_a_workload_number_that_would_rank_nonsense_is_refused(field: str, value: float) -> None:
    work = _work(samples=value) if field == "samples" else _work(flops=value)
    with pytest.raises(ValueError, match="samples_per_step" if field == "samples" else "flops_per_step"):
        _measure(work)


# ---------------------------------------------------------------------------------------------------- the node


def test_trials_of_sweepers_with_different_lock_folders_see_each_other(tmp_path: Path) -> None:
    with slots.Occupancy(tmp_path / "locks-a", ["cpu-0"], "study-a", 0) as first:
        with slots.Occupancy(tmp_path / "locks-b", ["cpu-0", "cpu-1"], "study-b", 0) as second:
            pass
        assert first.shared_with(second.start + 1) == ["study-b#0"]
    assert second.shared_with(time.time()) == ["study-a#0"]


def test_a_numpy_count_of_samples_is_a_number() -> None:
    import numpy as np

    assert _measure(_work(samples=np.int64(4)))["throughput"] > 0
