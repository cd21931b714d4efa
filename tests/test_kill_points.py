"""A sweeper killed (SIGKILL) at every write/tell boundary loses nothing and holds nobody up.

``KNOB_SWEEPER_KILL_AT`` (sweeper/sweep/study/faults.py) makes the sweeper kill itself at a named boundary. After each
kill: every trial the study finished has exactly one row, with the matching status; no row belongs to a trial the
study does not have; and the same command, run again, ends with nothing RUNNING, without waiting on the dead
sweeper's trials.

One study per storage takes the kills in turn (a command killed at each point, in the order a resumed sweep reaches
them, the next command continuing the same study), so a storage sees each of its boundaries for the cost of one
command. SQLite, the default storage, takes every point; the journal and PostgreSQL take the points after which the
storage holds what no sweep that runs on leaves in it (``CHAIN``'s ``every_storage``). The commands are forked from
one process that has imported the sweeper (``tests/preloaded.py``): each is a process of its own, killed as one.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.results import store
from tests.preloaded import Preloaded

from conftest import FAULTS

PG_URL = os.environ.get("KNOB_SWEEPER_PG_URL")
ARGS = [
    *FAULTS,
    "-m",
    "hydra.sweeper.n_trials=10",
    "hydra.sweeper.params={knobs.fault:none,knobs.work:'choice(8,16,24,32,40,48)'}",
    "hydra.sweeper.sampler=random",
    "hydra.sweeper.seed=3",
    "hydra.sweeper.confirm_top_k=2",  # the baseline and the two best again: the re-measure phase's kill points too
    "hydra.sweeper.confirm_unstable=false",
    "hydra.sweeper.starts=[{knobs.work:8}]",
]
STATE_OF = {
    "complete": TrialState.COMPLETE,
    "infeasible": TrialState.COMPLETE,
    "skipped": TrialState.PRUNED,
    "pruned": TrialState.PRUNED,
    "failed": TrialState.FAIL,
    "interrupted": TrialState.FAIL,
}


def _storage(kind: str, results: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{results / 'optuna.db'}"
    if kind == "journal":
        return f"journal://{results}/optuna.journal"
    if PG_URL is None:
        if os.environ.get("CI"):
            pytest.fail("KNOB_SWEEPER_PG_URL is unset in CI: .ci/run must start PostgreSQL")
        pytest.skip("no PostgreSQL here (set KNOB_SWEEPER_PG_URL, as .ci/run does)")
    return PG_URL


def _load(url: str, name: str) -> optuna.Study:
    if url.startswith("journal://"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(url[len("journal://") :])))
    return optuna.load_study(study_name=name, storage=url)


def _check_one_truth(results: Path, url: str, name: str, running_ok: bool) -> None:
    study = _load(url, name)
    df = store.read_results(results) if (results / "trials").is_dir() else None
    rows = {} if df is None or df.empty else {int(r["trial"]): r for _, r in df[df["study"] == name].iterrows()}
    if df is not None and not df.empty:
        assert not df[df["study"] == name]["trial"].duplicated().any(), "a row written twice"
    numbers = {t.number for t in study.trials}
    assert set(rows) <= numbers, f"rows of trials the study lacks: {set(rows) - numbers}"
    for t in study.trials:
        if t.state == TrialState.WAITING:
            assert t.number not in rows, f"trial {t.number} is queued but has a row"
        elif t.state == TrialState.RUNNING:
            assert running_ok, f"trial {t.number} still RUNNING"
        else:
            assert t.number in rows, f"trial {t.number} ({t.state.name}) has no row"
            status = rows[t.number]["status"]
            assert STATE_OF[status] == t.state, f"trial {t.number}: row {status}, study {t.state.name}"


# The commands, in the order the continuing study reaches their points: (KNOB_SWEEPER_KILL_AT,
# KNOB_SWEEPER_INTERRUPT_AT, every_storage), each killed (SIGKILL) at its point. Six configurations and n_trials=10:
# counted trials never reach the target, so every command searches until each configuration is measured and a
# proposal repeats one (the 7th distinct proposal at the latest): every command from ``skip-row`` on reaches a
# duplicate, and ``remeasure`` the end of the search. The interrupt points get a Ctrl-C (SIGINT) as the command's first
# trial is sampled; that trial waits 400 ms a step (``SLOW``), so the Ctrl-C finds it running (one that ends within the
# loop's one-second wait is settled from its own row).
#
# every_storage: a kill there leaves the storage holding what it never holds when the sweep runs on (a trial RUNNING
# for a dead sweeper, with or without its row, a queue cut short), which each storage's own code then serves to the
# next command's recovery (SQL on SQLite and PostgreSQL, whose lock and connection waits differ; the journal's log
# replay and its lock): every storage takes these. A ``-told`` point is passed once the storage's call has returned:
# the storage holds what the same command, not killed, goes on from, and the next command's recovery reads it as it
# reads any told trial (the told trial's requeue, its row already written). What that point tests is the sweeper's own
# bookkeeping after the tell (no second row, the requeue, the next trial), the same on every storage: SQLite alone
# takes them. Without them the next command passes the same storage calls: after ``orphan-row`` the ``requeued``
# command tells the recovered trial and requeues it, after ``interrupted-row`` the ``row`` command does.
CHAIN = [
    ("queued:1", None, True),  # the new study's first trials: the baseline queued, the start not
    ("asked:1", None, True),  # the queue finished, the baseline taken: a RUNNING trial without params
    ("orphan-row:1", None, True),  # it is recovered: its interrupted row written, the study not told
    ("orphan-told:1", None, False),  # ... and told
    ("requeued:1", None, True),  # the baseline it had taken queued again (from the queue's record: it has no params)
    ("sampled:1", None, True),  # the baseline taken and sampled, not launched
    ("interrupted-row:1", "sampled:1", True),  # recovered and queued again; taken, launched, Ctrl-C: its row written
    ("interrupted-told:1", "sampled:1", False),  # ... and the next time told
    ("row:1", None, True),  # launched: the trial wrote its row, the study not told
    ("told:1", None, False),  # recovered from its row; the next trial told
    ("skip-row:1", None, True),  # a duplicate's row, not told
    ("skip-told:1", None, False),  # recovered from its row; the next duplicate told
    ("remeasure:1", None, True),  # the search ended (exhausted): one of the re-measurements queued
]
SLOW = ["workload.wait_ms=400"]  # the interrupted commands' trials: 6 steps of 400 ms, well past the loop's wait


@pytest.fixture
def preloaded() -> Iterator[Preloaded]:
    server = Preloaded()
    yield server
    server.close()


@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgres"])
def test_a_kill_at_each_boundary_loses_nothing_and_the_rerun_does_not_wait(
    tmp_path: Path, kind: str, preloaded: Preloaded
) -> None:
    run_cli = preloaded.run_cli  # python -m sweeper's process, forked with its imports done
    results = tmp_path / "results"
    url = _storage(kind, results)
    # unique per run: PostgreSQL outlives the test, and tmp_path's name repeats from one pytest run to the next
    name = f"kill-chain-{kind}-{uuid.uuid4().hex[:8]}"
    args = [*ARGS, f"hydra.sweeper.storage={url}", f"hydra.sweeper.study_name={name}"]
    limit = 45.0
    chain = [(kill, interrupt) for kill, interrupt, every_storage in CHAIN if every_storage or kind == "sqlite"]
    for kill, interrupt in chain:
        env = {"KNOB_SWEEPER_KILL_AT": kill, **({"KNOB_SWEEPER_INTERRUPT_AT": interrupt} if interrupt else {})}
        t0 = time.time()
        killed = run_cli(args + (SLOW if interrupt else []), results, env=env)
        assert killed.returncode == -9, f"not killed at {kill}: exit {killed.returncode}\n{killed.stderr[-3000:]}"
        _check_one_truth(results, url, name, running_ok=True)
        if kill == chain[0][0]:
            # The first command ends before any trial or wait: what a start costs on this machine now. A wait on
            # a dead trial (60 s on SQLite, for ever on PostgreSQL) exceeds a start's cost by far more than this.
            limit = max(limit, 2 * (time.time() - t0) + 15)
        _assert_no_wait(url, name, t0, killed.stderr, limit)

    # Every configuration is measured: the command's first duplicate ends the search. A Ctrl-C noted as that
    # duplicate is settled stops the command there (exit 130), not after the re-measurements.
    t0 = time.time()
    stopped = run_cli(args, results, env={"KNOB_SWEEPER_INTERRUPT_AT": "skip-told:1"})
    assert stopped.returncode == 130, f"the Ctrl-C was not the command's end\n{stopped.stderr[-3000:]}"
    assert "sweep done" not in stopped.stderr
    _check_one_truth(results, url, name, running_ok=False)
    _assert_no_wait(url, name, t0, stopped.stderr, limit)

    t0 = time.time()
    again = run_cli(args, results, check=True)
    _check_one_truth(results, url, name, running_ok=False)
    _assert_no_wait(url, name, t0, again.stderr, limit)
    study = _load(url, name)
    assert not [t for t in study.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    measured = {t.params.get("knobs.work") for t in study.trials if t.user_attrs.get("status") == "complete"}
    assert measured == {8, 16, 24, 32, 40, 48}, "the rerun finished the sweep: every configuration measured"
    confirms = [t for t in study.trials if t.state == TrialState.COMPLETE and "confirm_of" in t.user_attrs]
    assert len(confirms) >= 2, "the re-measurements cut by the kills ran"


def _assert_no_wait(url: str, name: str, t0: float, stderr: str, limit: float = 45.0) -> None:
    """The command since ``t0`` spent its time in its trials or starting, not waiting on a dead sweeper's trial."""
    elapsed = time.time() - t0
    study = _load(url, name)
    walls = sum(float(t.user_attrs.get("wall_s", 0.0)) for t in study.trials if t.datetime_start and
                t.datetime_start.timestamp() >= t0)  # fmt: skip
    idle = elapsed - walls
    assert idle < limit, f"the command spent {idle:.0f} s outside its trials: it waited\n{stderr[-3000:]}"
