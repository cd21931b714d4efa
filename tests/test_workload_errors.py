"""A workload's own code failing in the sweeper's process: its ``check()`` raising, its module not importing, its
name taken by a standard-library module. One line each, naming the key and the file; a trial's failure never ends
the sweep."""

from __future__ import annotations

from pathlib import Path

import optuna

from sweeper.results.store import read_results

from conftest import FAULTS, NO_REMEASURE, run_main


def test_a_check_that_raises_fails_its_trial_and_the_sweep_goes_on(results: Path) -> None:
    """``check()`` raising ended the sweep with a 40-line traceback and left the trial RUNNING; now that trial is
    failed (reason ``check``, one line naming the exception and where it was raised) and the sweep goes on."""
    space = "hydra.sweeper.params={knobs.fault:'choice(check_raise,gpu_only)',knobs.work:16}"
    proc = run_main([*FAULTS, "-m", space, "hydra.sweeper.sampler=grid", *NO_REMEASURE], results)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    df = read_results(results).set_index("knob.fault")
    assert df.loc["gpu_only", "status"] == "skipped"  # the sweep went on past the failed check
    assert (df.loc["check_raise", "status"], df.loc["check_raise", "reason"]) == ("failed", "check")
    message = df.loc["check_raise", "message"]
    assert "\n" not in message and "RuntimeError: planted failure in check()" in message
    assert "tests/faultload/faults.py:" in message
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    assert sorted(t.state.name for t in study.trials) == ["FAIL", "PRUNED"]  # none left RUNNING (skipped: pruned)
