"""The wall-clock budget: trials cut at the deadline, what cannot end never starts, cut trials measured again.

The costly test workload (tests/faultload/costly.py) sleeps its steps and its "compile", so a trial's length is
known up front whatever the machine's load.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.results import store
from sweeper.sweep.run.scheduler import Scheduler
from sweeper.sweep.run.stop import Stop, StopPolicy
from sweeper.sweep.search.costs import CostModel

from conftest import NO_REMEASURE, ROOT, run_cli

COSTLY = ["hydra.searchpath=[file://tests/faultload/conf]", "+workload=costly", "-m", *NO_REMEASURE]
# A 12 s trial (three 4 s steps): longer than any budget below leaves it, however fast the sweeper's start.
SLOW_TRIAL = ["knobs.batch=1", "knobs.compile=off", "knobs.base_ms=4000", "measure.warmup_steps=1", "measure.steps=2"]
# A 4.5 s trial (three 1.5 s steps): still running when a Ctrl-C sent as it starts lands.
RUNNING_TRIAL = [*SLOW_TRIAL[:2], "knobs.base_ms=1500", *SLOW_TRIAL[3:]]


def _study(results: Path, name: str = "costly") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{results / 'optuna.db'}")


def test_a_trial_longer_than_the_time_left_is_cut_at_the_deadline_and_measured_by_the_next_run(
    results: Path,
) -> None:
    """A 12 s trial under a 10 s budget with 1 s grace: the trial is stopped at budget + grace (counted from the
    command's start), recorded interrupted by the budget (not failed, not counted), the command exits within
    seconds of that, and the same command with time to spare measures that configuration first."""
    args = [*COSTLY, *SLOW_TRIAL, "hydra.sweeper.n_trials=1", "hydra.sweeper.grace_s=1"]
    t0 = time.time()
    proc = run_cli([*args, "hydra.sweeper.timeout_s=10"], results)
    elapsed = time.time() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    df = store.read_results(results)
    assert list(df["status"]) == ["interrupted"] and list(df["reason"]) == ["budget"], df[["status", "reason"]]
    stopped = df["ended_at"].iloc[0].timestamp() - t0
    assert stopped <= 10 + 1 + 1.5, f"stopped {stopped:.1f} s after launch, the budget + grace is 11 s"
    assert elapsed <= 10 + 1 + 8, f"the command took {elapsed:.1f} s for a 10 s budget with 1 s grace"
    cut_level = int(df["knob.level"].iloc[0])
    (trial,) = [t for t in _study(results).trials if t.state != TrialState.WAITING]  # the handbook's start waits
    assert trial.state == TrialState.FAIL and trial.user_attrs["reason"] == "budget"

    proc = run_cli([*args, "hydra.sweeper.timeout_s=120"], results)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = store.read_results(results).sort_values("trial")
    assert list(df["status"]) == ["interrupted", "complete"], df[["trial", "status", "reason"]]
    assert int(df["knob.level"].iloc[1]) == cut_level  # the cut configuration, not a new sample


def test_an_expensive_value_never_measured_does_not_start_when_its_prior_exceeds_the_time_left(
    results: Path,
) -> None:
    """Eager trials take well under 1 s; compiled ones are stated (cost_prior) to cost 500x and 1000x that, which
    no 30 s budget holds (two eager ones fit it on a loaded host too): they are left out before launch (skipped,
    over-budget), and the sweep stops for the budget instead of spending it. With a prior that fits, the same space
    launches a compiled trial (the control: its second trial, the handbook's start, is compiled; two trials are
    enough)."""
    base = [*COSTLY, "knobs.batch=1", "knobs.base_ms=20", "knobs.compile_cost_s=1",
            "hydra.sweeper.params={knobs.level:'choice(1,2)'}", "hydra.sweeper.seed=0"]  # fmt: skip
    prior = "++hydra.sweeper.cost_prior={knobs.compile:{default:500,max:1000}}"
    proc = run_cli([*base, "hydra.sweeper.n_trials=8", "hydra.sweeper.timeout_s=30", prior], results)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = store.read_results(results)
    compiled = df[df["knob.compile"] != "off"]
    assert len(df[df["status"] == "complete"]) >= 2, df[["trial", "status", "reason", "knob.compile"]]
    assert not compiled.empty, "the sampler never proposed a compiled configuration: nothing was tested"
    assert (compiled["status"] == "skipped").all(), compiled[["trial", "status", "reason"]]
    assert compiled["reason"].str.startswith("over-budget:").all()
    assert "budget" in proc.stderr

    control = results.parent / "control"
    prior = "++hydra.sweeper.cost_prior={knobs.compile:{default:2,max:2}}"
    proc = run_cli([*base, "hydra.sweeper.n_trials=2", "hydra.sweeper.timeout_s=60", prior], control)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = store.read_results(control)
    launched = df[(df["knob.compile"] != "off") & (df["status"] == "complete")]
    assert not launched.empty, df[["trial", "status", "reason", "knob.compile"]]


def test_a_ctrl_c_configuration_is_measured_again_by_the_same_command(tmp_path: Path) -> None:
    """Ctrl-C while a trial runs: the trial is interrupted (its own status, not failed); the same command, run
    again, measures that configuration before anything else."""
    results = tmp_path / "results"
    args = [sys.executable, "-m", "sweeper", *COSTLY, *RUNNING_TRIAL, "hydra.sweeper.n_trials=1",
            f"results_dir={results}"]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        _wait_for_row_or_running(results, proc)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 130, (tmp_path / "err").read_text()[-3000:]
    df = store.read_results(results)
    assert list(df["status"]) == ["interrupted"], df[["status", "reason"]]
    level = int(df["knob.level"].iloc[0])
    proc = run_cli([*COSTLY, *RUNNING_TRIAL, "hydra.sweeper.n_trials=1"], results)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = store.read_results(results).sort_values("trial")
    assert list(df["status"]) == ["interrupted", "complete"]
    assert int(df["knob.level"].iloc[1]) == level


def _wait_for_row_or_running(results: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Blocks until the sweep's first trial is RUNNING in its study (read-only SQLite polls)."""
    import contextlib
    import sqlite3

    db = results / "optuna.db"
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if db.exists():
            with contextlib.suppress(sqlite3.Error):
                with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
                    row = con.execute("SELECT count(*) FROM trials t JOIN trial_params p ON p.trial_id = t.trial_id "
                                      "WHERE t.state = 'RUNNING'").fetchone()  # fmt: skip
                if row and row[0]:
                    return
        time.sleep(0.1)
    raise AssertionError("no trial ran")


# ---------------------------------------------------------------------- units: an injected clock, no processes


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class _Node:
    def take(self, free: list) -> object:
        return free.pop(0)

    def release(self, slot: object) -> None:
        pass


def test_the_scheduler_fits_and_stops_by_its_clock() -> None:
    clock = _Clock(1000.0)
    s = Scheduler([0], _Node(), budget_s=100, grace_s=5, started_at=1000.0, clock=clock)
    assert s.fits(60) and not s.fits(60, reserve_s=50) and not s.fits(101)
    assert s.stop_at() == 1105.0
    clock.t = 1099.0
    assert not s.expired() and s.fits(1) and not s.fits(2)
    clock.t = 1100.0
    assert s.expired() and not s.overdue()
    clock.t = 1115.0
    assert s.overdue()
    s.close()
    unlimited = Scheduler([0], _Node(), budget_s=None, grace_s=5, started_at=0.0, clock=clock)
    assert unlimited.fits(1e9) and unlimited.stop_at() is None and not unlimited.expired()
    unlimited.close()


def test_a_trials_window_ends_where_the_reserve_begins_never_before_its_own_predicted_end() -> None:
    clock = _Clock(1000.0)
    s = Scheduler([0], _Node(), budget_s=100, grace_s=5, started_at=1000.0, clock=clock)
    assert s.window_end_at(30.0, 10.0) == 1070.0, "the deadline less the re-measurements' reserve"
    assert s.window_end_at(30.0, 90.0) == 1090.0, "admitted, it may run what it was priced"
    assert s.window_end_at(0.0, 10.0) is None, "nothing kept: the budget's end stops it"
    s.close()
    unlimited = Scheduler([0], _Node(), budget_s=None, grace_s=5, started_at=0.0, clock=clock)
    assert unlimited.window_end_at(30.0) is None
    unlimited.close()


def test_the_stop_policy_keeps_the_first_reason_and_maps_exit_codes() -> None:
    p = StopPolicy()
    assert p.exit_code() == 0 and not p.stopped
    assert p.failures(3, "max_failures=3") is not None and p.nothing_fits() is None
    assert p.reason is Stop.FAILURES and p.exit_code() == 1
    q = StopPolicy()
    q.nothing_fits()
    assert q.reason is Stop.BUDGET and q.exit_code() == 0


def _trial(study: optuna.Study, compile: str, wall_s: float) -> None:
    t = optuna.trial.create_trial(
        params={"knobs.compile": compile},
        distributions={"knobs.compile": optuna.distributions.CategoricalDistribution(["off", "default", "max"])},
        values=[1.0],
        user_attrs={"wall_s": wall_s, "status": "complete"},
    )
    study.add_trial(t)


def test_the_cost_model_uses_measurements_then_rescaled_priors() -> None:
    """Trials that recorded only their wall: a class measured costs its slowest; one never measured, the cheap
    class's median plus (prior - 1) x that median of compile, rescaled by the compiles measured."""
    model = CostModel({"knobs.compile": "off"}, {"knobs.compile": {"default": 4, "max": 40}})
    study = optuna.create_study(direction="maximize")
    assert model.predict(study, {"knobs.compile": "off"}) == 0.0  # nothing measured: the cheap trial starts
    _trial(study, "off", 10.0)
    _trial(study, "off", 12.0)
    assert model.predict(study, {"knobs.compile": "off"}) == 12.0  # the slowest of its class
    assert model.predict(study, {"knobs.compile": "default"}) == pytest.approx(11.0 + 3 * 11.0)
    assert model.predict(study, {"knobs.compile": "max"}) == pytest.approx(11.0 + 39 * 11.0)
    _trial(study, "default", 24.0)  # its compile measured at 13 s where the prior said 33 s: every prior scales
    assert model.predict(study, {"knobs.compile": "default"}) == 24.0
    assert model.predict(study, {"knobs.compile": "max"}) == pytest.approx(11.0 + 39 * 11.0 * 13.0 / 33.0)
    unknown = CostModel({"knobs.compile": "off"}, {})
    assert unknown.predict(study, {"knobs.compile": "max"}) == pytest.approx(24.0)  # the dearest compile measured


def test_a_users_compile_knob_is_priced_by_the_default_prior() -> None:
    """A model whose YAML states no cost_prior (a user's own) still has its ``knobs.compile`` modes priced: on the
    H200 such a ViT-B/16 sweep measured eager at 8.3 s and a cold default compile at 37.6 s, then started
    max-autotune-no-cudagraphs with 130 s left, and the budget cut it after 135 s (2026-12-03). With those two
    measurements the default prior predicts it beyond 135 s; a value of another knob stays unpriced."""
    from sweeper.sweep.config.settings import KnobSweeperConf

    model = CostModel({"knobs.compile": "off"}, KnobSweeperConf().cost_prior)
    study = optuna.create_study(direction="maximize")
    _trial(study, "off", 8.3)
    _trial(study, "default", 37.6)
    assert model.predict(study, {"knobs.compile": "max-autotune-no-cudagraphs"}) > 135
    assert model.predict(study, {"knobs.compile": "reduce-overhead"}) > 37.6


def test_a_repeat_is_predicted_from_its_class_warm_trials() -> None:
    """A re-measurement finds the compile caches warm: the fastest trial of its class, not the cold first one; a
    class never measured falls back to the prior."""
    model = CostModel({"knobs.compile": "off"}, {"knobs.compile": {"default": 4, "max": 40}})
    study = optuna.create_study(direction="maximize")
    _trial(study, "off", 10.0)
    _trial(study, "default", 60.0)  # the cold compile
    _trial(study, "default", 15.0)  # the same mode, its caches warm
    assert model.predict(study, {"knobs.compile": "default"}) == 60.0
    assert model.predict_repeat(study, {"knobs.compile": "default"}) == 15.0
    assert model.predict_repeat(study, {"knobs.compile": "max"}) == model.predict(study, {"knobs.compile": "max"})


def test_interrupts_while_trials_run_are_raised_at_the_loops_checks() -> None:
    """Ctrl-C and SIGTERM inside the loop are noted and raised at its next check, never in the middle of a database
    write (one raised inside a SQLite commit left the write lock held and the settling after it hung); the first
    signal wins, and the handlers in place before are back afterwards."""
    from sweeper.sweep.run.recovery import DeferredInterrupts, Terminated

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with DeferredInterrupts() as interrupts:
        interrupts.check()  # nothing noted: no-op
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)  # still inside "a write": nothing raised here
        with pytest.raises(Terminated):
            interrupts.check()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with DeferredInterrupts() as interrupts:
        signal.raise_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt) as caught:
            interrupts.check()
        assert not isinstance(caught.value, Terminated)


def test_with_a_budget_and_no_n_trials_the_budget_is_the_only_limit() -> None:
    """``n_trials`` unset: with ``timeout_s`` the sweep runs until the budget (a 180 s sweep had stopped at 92 s on
    ten trials, a default stated nowhere); with neither, ten trials."""
    from sweeper.sweep.loop import SweepImpl
    from sweeper.sweep.run.admission import UNLIMITED

    assert SweepImpl(timeout_s=180)._n_trials() >= UNLIMITED
    assert SweepImpl()._n_trials() == 10
    assert SweepImpl(timeout_s=180, n_trials=3)._n_trials() == 3


def test_the_summary_says_why_the_sweep_ended_and_what_of_the_budget_it_used() -> None:
    from sweeper.sweep.config.settings import KnobSweeperConf
    from sweeper.sweep.run.words import why_ended

    clock = _Clock(1000.0)
    s = Scheduler([0], _Node(), budget_s=300, grace_s=5, started_at=1000.0, clock=clock)
    clock.t = 1240.0
    line = why_ended(Stop.BUDGET, KnobSweeperConf(timeout_s=300), s, 10**9)
    assert "s: no trial fits in the 60 s left" in line and "240 s of the 300 s budget used (80%)" in line
    assert "space is exhausted" in why_ended(Stop.EXHAUSTED, KnobSweeperConf(timeout_s=300), s, 10**9)
    clock.t = 1302.0  # the budget's end reached as the last trial ended: the line says whether one was cut
    assert "reached as its last trial ended (none cut)" in why_ended(Stop.BUDGET, KnobSweeperConf(timeout_s=300), s, 9)
    line = why_ended(Stop.BUDGET, KnobSweeperConf(timeout_s=300), s, 9, cut=2)
    assert "2 trials cut by it, recorded as interrupted: the same command measures them again" in line
    assert why_ended(Stop.N_TRIALS, KnobSweeperConf(n_trials=4), s, 4) == "sweep ended: n_trials=4 trials measured"
    s.close()
