"""A sweeper killed (SIGKILL) at every write/tell boundary loses nothing and holds nobody up.

``KNOB_SWEEPER_KILL_AT`` (sweeper/sweep/faults.py) makes the sweeper kill itself at a named boundary. After each
kill: every trial the study finished has exactly one row, with the matching status; no row belongs to a trial the
study does not have; and the same command, run again, ends with nothing RUNNING, without waiting on the dead
sweeper's trials.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.results import store

from conftest import FAULTS, run_cli

PG_URL = os.environ.get("KNOB_SWEEPER_PG_URL")
ARGS = [
    *FAULTS,
    "-m",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.params={knobs.fault:none,knobs.work:'choice(8,16,24,32,40,48)'}",
    "hydra.sweeper.sampler=random",
    "hydra.sweeper.seed=3",
    "hydra.sweeper.confirm_top_k=1",  # the baseline and the best again: the re-measure phase's kill points too
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


POINTS = ["queued:1", "asked:2", "sampled:2", "row:1", "told:2", "row:4", "remeasure:1"]


@pytest.mark.parametrize(
    "kind,point",
    [("sqlite", p) for p in POINTS] + [("journal", "asked:2"), ("journal", "row:2")]
    + [("postgres", "asked:2"), ("postgres", "row:2")],
)  # fmt: skip
def test_a_kill_at_each_boundary_loses_nothing_and_the_rerun_does_not_wait(
    tmp_path: Path, kind: str, point: str
) -> None:
    results = tmp_path / "results"
    url = _storage(kind, results)
    # unique per run: PostgreSQL outlives the test, and tmp_path's name repeats from one pytest run to the next
    name = f"kill-{point.replace(':', '-')}-{uuid.uuid4().hex[:8]}"
    args = [*ARGS, f"hydra.sweeper.storage={url}", f"hydra.sweeper.study_name={name}"]
    killed = run_cli(args, results, env={"KNOB_SWEEPER_KILL_AT": point})
    assert killed.returncode == -9, f"not killed at {point}: exit {killed.returncode}\n{killed.stderr[-2000:]}"
    _check_one_truth(results, url, name, running_ok=True)

    t0 = time.time()
    again = run_cli(args, results, check=True)
    elapsed = time.time() - t0
    _check_one_truth(results, url, name, running_ok=False)
    study = _load(url, name)
    assert not [t for t in study.trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    counted = [t for t in study.trials if t.state == TrialState.COMPLETE and "confirm_of" not in t.user_attrs]
    assert len({t.params.get("knobs.work") for t in counted}) >= 3, "the rerun finished the sweep's trials"
    walls = sum(float(t.user_attrs.get("wall_s", 0.0)) for t in study.trials if t.datetime_start and
                t.datetime_start.timestamp() >= t0)  # fmt: skip
    idle = elapsed - walls
    assert idle < 45, f"the rerun spent {idle:.0f} s outside its trials: it waited\n{again.stderr}"
