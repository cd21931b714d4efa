"""A sweep learns from its failures: a configuration that failed by the workload's own answer is not run again
in the same command, and a knob value every trial of which failed is blamed and no longer launched
(``sweeper.sweep.search.failing``, ``dedup.failed_answer``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from sweeper.sweep.search import dedup, failing
from sweeper.sweep.study.trials import owner_id

from conftest import run_main

SPACE = {
    "knobs.precision": CategoricalDistribution(["fp32", "bf16"]),
    "knobs.compile": CategoricalDistribution(["off", "default"]),
    "knobs.batch_size": CategoricalDistribution([32, 64, 128]),
}
DEFAULTS = {"knobs.precision": "fp32", "knobs.compile": "off", "knobs.batch_size": 64}


def _study(*trials: tuple, owner: str | None = None, command: str = "", **extra: Any) -> optuna.Study:
    """A study of finished trials, each (changed values, status, reason[, error]), asked by ``owner`` (this
    process) in the sweep command ``command`` (``THIS``); ``extra``: more user attributes of each."""
    study = optuna.create_study(direction="maximize")
    for changed, status, reason, *error in trials:
        params = {**DEFAULTS, **changed}
        attrs = {"owner": owner or owner_id(), "command": command or THIS, "status": status, "reason": reason,
                 "config_key": dedup.config_key(params), **extra}  # fmt: skip
        if error:
            attrs["failed_with"] = error[0]
        states = {"complete": TrialState.COMPLETE, "infeasible": TrialState.COMPLETE}
        state = states.get(status, TrialState.FAIL)  # failed, interrupted
        value = 0.0 if status == "infeasible" else 100.0 if status == "complete" else None
        study.add_trial(optuna.trial.create_trial(
            state=state, value=value, params=params, distributions=SPACE, user_attrs=attrs))  # fmt: skip
    return study


THIS = "c0ffee"  # the sweep command that asked these trials (SweepPlan.command)
RAISED = "exception:RuntimeError"


def _blamed(study: optuna.Study, command: str | None = THIS) -> list[tuple[str, Any]]:
    return [(b.knob, b.value) for b in failing.blamed(study.get_trials(deepcopy=False), command)]


def test_the_one_value_two_failures_share_and_no_measurement_ran_is_blamed() -> None:
    study = _study(
        ({}, "complete", ""),
        ({"knobs.precision": "bf16", "knobs.compile": "default", "knobs.batch_size": 128}, "failed", RAISED),
        ({"knobs.precision": "bf16", "knobs.batch_size": 32}, "failed", RAISED),
    )
    assert _blamed(study) == [("knobs.precision", "bf16")]
    blame = failing.blamed(study.get_trials(deepcopy=False), THIS)[0]
    assert blame.trials == (1, 2)
    assert failing.blame_of({**DEFAULTS, "knobs.precision": "bf16"}, [blame]) is blame
    assert failing.blame_of(DEFAULTS, [blame]) is None


def test_two_values_every_failure_shares_blame_neither_until_a_trial_separates_them() -> None:
    both = {"knobs.precision": "bf16", "knobs.compile": "default"}
    failures = [({**both, "knobs.batch_size": b}, "failed", RAISED) for b in (128, 32)]
    assert _blamed(_study(({}, "complete", ""), *failures)) == [], "bf16 or compile: not told apart"
    separated = _study(({}, "complete", ""), *failures, ({"knobs.compile": "default"}, "complete", ""))
    assert _blamed(separated) == [("knobs.precision", "bf16")], "compile ran: bf16 is what fails"


def test_what_blames_nothing() -> None:
    bf16 = [({"knobs.precision": "bf16", "knobs.batch_size": b}, "failed", RAISED) for b in (32, 128)]
    assert _blamed(_study(({}, "complete", ""), bf16[0])) == [], "one failure blames nothing"
    assert _blamed(_study(({}, "complete", ""), *bf16, ({"knobs.precision": "bf16"}, "complete", ""))) == [], (
        "a value that was measured once is not blamed"
    )
    crashes = [(c, "failed", "exit:3") for c, _s, _r in bf16]
    assert _blamed(_study(({}, "complete", ""), *crashes)) == [], "a crash may pass: not the workload's answer"
    mixed = [(bf16[0][0], "failed", RAISED), (bf16[1][0], "failed", "exception:ValueError")]
    assert _blamed(_study(({}, "complete", ""), *mixed)) == [], "two kinds of failure are two causes"
    assert _blamed(_study(({}, "complete", ""), *bf16), command="beef") == [], "another command's failures"
    assert _blamed(_study(({}, "complete", ""), *bf16), command=None) == []
    assert _blamed(_study(({}, "complete", ""), *bf16, owner="elsewhere:1", command="beef")) == [], "another process's"


def test_nothing_is_blamed_before_anything_was_measured() -> None:
    """A workload that fails everywhere is broken as a whole: the failure budget's case, not a value's."""
    failures = [({"knobs.precision": p, "knobs.batch_size": b}, "failed", RAISED) for p, b in
                (("fp32", 32), ("bf16", 64), ("fp32", 128), ("bf16", 32))]  # fmt: skip
    assert _blamed(_study(*failures)) == []
    measured = _blamed(_study(({}, "complete", ""), *failures))  # the defaults ran: fp32 and batch 64 work
    assert measured == [("knobs.batch_size", 32), ("knobs.precision", "bf16")], "then the rule applies"


def test_one_exception_type_with_two_messages_is_two_causes() -> None:
    """bf16 raises one RuntimeError, compile another: the batch size both failures ran is not blamed."""
    study = _study(
        ({"knobs.batch_size": 32}, "complete", ""),
        ({"knobs.precision": "bf16", "knobs.batch_size": 128}, "failed", RAISED, "dtypes do not match"),
        ({"knobs.compile": "default", "knobs.batch_size": 128}, "failed", RAISED, "no compiled path"),
    )
    assert _blamed(study) == []
    study.add_trial(optuna.trial.create_trial(
        state=TrialState.FAIL, params={**DEFAULTS, "knobs.precision": "bf16", "knobs.batch_size": 32},
        distributions=SPACE, user_attrs={"owner": owner_id(), "command": THIS, "status": "failed", "reason": RAISED,
                                         "failed_with": "dtypes do not match"}))  # fmt: skip
    blames = failing.blamed(study.get_trials(deepcopy=False), THIS)
    assert [(b.knob, b.value, b.error) for b in blames] == [("knobs.precision", "bf16", "dtypes do not match")]
    assert "dtypes do not match" in blames[0].outcome().message and "dtypes do not match" in blames[0].left_out()


def test_one_error_at_two_step_counts_or_batch_sizes_is_one_cause() -> None:
    """The error's numbers are masked: a loss that diverged after 12 or after 30 measured steps, one shape
    mismatch at two batch sizes."""
    nan = [({"knobs.precision": "bf16", "knobs.batch_size": b}, "failed", "nonfinite",
            f"loss is not finite after {n} measured steps") for b, n in ((32, 12), (128, 30))]  # fmt: skip
    assert _blamed(_study(({}, "complete", ""), *nan)) == [("knobs.precision", "bf16")]
    shapes = [({"knobs.compile": "default", "knobs.batch_size": b}, "failed", RAISED,
               f"shape '[{b}, 8]' is invalid for input of size {b * 7.5}") for b in (32, 128)]  # fmt: skip
    assert _blamed(_study(({}, "complete", ""), *shapes)) == [("knobs.compile", "default")]


def test_a_configuration_that_raised_in_this_command_is_its_own_answer() -> None:
    bf16 = {**DEFAULTS, "knobs.precision": "bf16"}
    study = _study(({"knobs.precision": "bf16"}, "failed", RAISED))
    key = dedup.config_key(bf16)
    found = dedup.find(study, key, 99, THIS)
    assert found is not None and found[0] == "failed" and found[1].number == 0
    outcome = dedup.reuse(found[1])
    assert outcome.status.value == "skipped" and outcome.reason == "duplicate:0" and not outcome.metrics
    assert "failed (exception:RuntimeError) in this sweep" in outcome.message
    assert dedup.find(study, key, 99, None) is None, "no command's start: a failure is asked again"
    assert dedup.find(study, key, 99, "beef") is None, "another command's failure: asked again"
    crashed = _study(({"knobs.precision": "bf16"}, "failed", "signal:SIGSEGV"))
    assert dedup.find(crashed, key, 99, THIS) is None, "a crash may pass: measured again"
    assert dedup.untried(study, {key}, THIS) == [] and dedup.exhausted(study, {key}, THIS)
    assert dedup.untried(study, {key}) == [bf16], "without the command's start it is untried"
    assert dedup.exhausted(study, set(), THIS), "every configuration left out: nothing is left to answer"
    assert not dedup.exhausted(study, None, THIS), "a space never enumerated is never exhausted"


def test_a_queued_trial_is_the_command_s_that_pops_it() -> None:
    """A trial queued before this command began (a retry or spare plan a killed command left waiting) is this
    command's once its ask pops it: its failure by the workload's answer is not run again by this command; the
    command is written with the owner in the same ask, on a new trial too."""
    from sweeper.sweep.study import trials as studies

    bf16 = {**DEFAULTS, "knobs.precision": "bf16"}
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial(bf16)  # numbered 0, before the command's first ask
    trial = studies.ask(study, THIS)
    assert trial.number == 0 and trial.user_attrs["command"] == THIS and trial.user_attrs["owner"] == owner_id()
    for name, value in (("status", "failed"), ("reason", RAISED), ("config_key", dedup.config_key(bf16))):
        trial.set_user_attr(name, value)
    for name, value in bf16.items():
        trial.suggest_categorical(name, SPACE[name].choices)
    study.tell(trial, state=TrialState.FAIL)
    found = dedup.find(study, dedup.config_key(bf16), 99, THIS)
    assert found is not None and found[0] == "failed" and found[1].number == 0
    assert dedup.find(study, dedup.config_key(bf16), 99, "beef") is None, "the next command asks it again"
    assert studies.ask(study, THIS).user_attrs["command"] == THIS, "a new trial: the command in the same write"


def test_the_next_command_on_the_study_runs_a_failed_configuration_again(results: Path) -> None:
    """Two commands on one study in one process: the first command's failure by the workload's answer is its own
    (run once, then the space is exhausted); the second command asks it again (its code may have changed)."""
    space = "hydra.sweeper.params={knobs.fault:'choice(none,raise)',knobs.work:'choice(16)'}"
    args = [*FAULTS, space, "-m", "hydra.sweeper.n_trials=6", "hydra.sweeper.confirm_top_k=0"]
    for _ in range(2):
        proc = run_main(args, results)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "the search space is exhausted" in proc.stderr
    df = pd.read_parquet(results / "trials")
    failed = df[df["status"] == "failed"]
    assert len(failed) == 2 and set(failed["knob.fault"]) == {"raise"}, df[["trial", "status", "reason"]]


def test_a_configuration_that_crashed_or_hung_twice_in_this_command_has_its_answer() -> None:
    """A crash or a hang may pass: run again once; the second such failure in the command is the answer (a hang
    costs the trial's whole timeout each time). An earlier command's, another process's, or a budget's cut are
    not."""
    bf16 = {**DEFAULTS, "knobs.precision": "bf16"}
    key = dedup.config_key(bf16)
    once = _study(({"knobs.precision": "bf16"}, "failed", "timeout"))
    assert dedup.find(once, key, 99, THIS) is None and dedup.untried(once, {key}, THIS) == [bf16]
    for first, second in (("timeout", "timeout"), ("signal:SIGKILL", "stalled"), ("exit:3", "timeout")):
        twice = _study(({"knobs.precision": "bf16"}, "failed", first), ({"knobs.precision": "bf16"}, "failed", second))
        found = dedup.find(twice, key, 99, THIS)
        assert found is not None and found[0] == "failed" and found[1].number == 1, (first, second)
        assert f"failed again ({second}) in this sweep: not run again" in dedup.reuse(found[1]).message
        assert dedup.exhausted(twice, {key}, THIS) and dedup.untried(twice, {key}, THIS) == []
        assert dedup.find(twice, key, 99, "beef") is None, "another command's"
    theirs = _study(*[({"knobs.precision": "bf16"}, "failed", "timeout")] * 2, owner="elsewhere:1:1", command="beef")
    assert dedup.find(theirs, key, 99, THIS) is None, "another process's hangs: its own command's"
    cut = _study(*[({"knobs.precision": "bf16"}, "interrupted", "budget")] * 2)
    assert dedup.find(cut, key, 99, THIS) is None, "the budget's cut is no answer"
    beside = _study(*[({"knobs.precision": "bf16"}, "failed", "signal:SIGKILL")] * 2, node_shared=True)
    assert dedup.find(beside, key, 99, THIS) is None, "beside another trial: its doing, maybe; run again"


def test_a_sweep_runs_a_crashing_configuration_twice_not_again_and_again(results: Path) -> None:
    """Half the space exits without a result (``knobs.fault=exit``, a crash); the samplers leave failed trials
    out and propose it again. It runs twice, the second crash is its answer, and the sweep ends exhausted."""
    space = "hydra.sweeper.params={knobs.fault:'choice(none,exit)',knobs.work:'choice(16)'}"
    proc = run_main([*FAULTS, space, "-m", "hydra.sweeper.n_trials=12", "hydra.sweeper.confirm_top_k=0"], results)
    df = pd.read_parquet(results / "trials").sort_values("trial")
    failed = df[df["status"] == "failed"]
    assert len(failed) == 2 and set(failed["knob.fault"]) == {"exit"}, df[["trial", "status", "reason"]]
    assert proc.returncode == 0 and "the search space is exhausted" in proc.stderr, proc.stderr[-3000:]


def test_out_of_memory_is_an_answer_unless_another_trial_shared_the_device() -> None:
    key = dedup.config_key({**DEFAULTS, "knobs.batch_size": 128})
    alone = _study(({"knobs.batch_size": 128}, "infeasible", "oom"), node_shared=False)
    found = dedup.find(alone, key, 99, THIS)
    assert found is not None and found[0] == "failed"
    assert "was infeasible (oom) in this sweep" in dedup.reuse(found[1]).message
    shared = _study(({"knobs.batch_size": 128}, "infeasible", "oom"), node_shared=True)
    assert dedup.find(shared, key, 99, THIS) is None, "beside another trial: measured again"


FAULTS = ["hydra.searchpath=[file://tests/faultload/conf]", "+workload=faults"]


def test_a_sweep_stops_launching_a_value_that_always_raises(results: Path) -> None:
    """Half the space raises (``knobs.fault=raise``); Optuna's samplers leave failed trials out, so without the
    rule they propose it again and again, each a launch. With it: two failures (different work sizes) blame the
    value, the rest of the space is measured, and the sweep ends exhausted, not on its failure budget."""
    space = "hydra.sweeper.params={knobs.fault:'choice(none,raise)',knobs.work:'choice(16,24,32,48,64)'}"
    proc = run_main([*FAULTS, space, "-m", "hydra.sweeper.n_trials=30", "hydra.sweeper.confirm_top_k=0"], results)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_parquet(results / "trials").sort_values("trial")
    failed = df[df["status"] == "failed"]
    assert len(failed) == 2 and set(failed["knob.fault"]) == {"raise"}, df[["trial", "status", "reason"]]
    assert failed["knob.work"].nunique() == 2
    measured = df[(df["status"] == "complete") & (df["confirm_of"].isna())]
    assert set(measured["knob.work"]) == {16, 24, 32, 48, 64} and set(measured["knob.fault"]) == {"none"}
    skipped = df[df["reason"].str.startswith("fails:")]
    assert (skipped["reason"] == "fails:knobs.fault=raise").all() and (skipped["knob.fault"] == "raise").all()
    assert "the search space is exhausted" in proc.stderr
    ran = df[(df["status"] == "complete") & (df["predicted_wall_s"] > 0)]
    assert f" of {len(ran)} trials' predicted wall times" in proc.stderr, "the cost model's error: complete trials"
    assert "left out: knobs.fault=raise, which failed in every trial that ran it" in proc.stderr, "the summary says"


def test_a_configuration_whose_check_raised_is_not_checked_again(results: Path) -> None:
    """``check()`` raising is the workload's answer too: each such configuration fails once, then the value that
    all of them share is left out; the rest of the space is measured."""
    space = "hydra.sweeper.params={knobs.fault:'choice(none,check_raise)',knobs.work:'choice(16,32,48)'}"
    proc = run_main([*FAULTS, space, "-m", "hydra.sweeper.n_trials=20", "hydra.sweeper.confirm_top_k=0"], results)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_parquet(results / "trials").sort_values("trial")
    failed = df[df["status"] == "failed"]
    assert set(failed["reason"]) == {"check"} and failed["knob.work"].is_unique, df[["trial", "status", "reason"]]
    assert len(failed) == 2, "two failures blame the value; none is run twice"
    measured = df[df["status"] == "complete"]
    assert set(measured["knob.work"]) == {16, 32, 48} and set(measured["knob.fault"]) == {"none"}


def test_a_proposal_or_a_waiter_is_checked_against_the_blamed_values() -> None:
    """``checks.blame``: what a sampled proposal and a waiter whose twin crashed both pass before launching; a knob
    the trial did not sample (inactive) is not a value it runs."""
    from types import SimpleNamespace

    from sweeper.sweep.run import checks

    bf16 = [({"knobs.precision": "bf16", "knobs.batch_size": b}, "failed", RAISED) for b in (32, 128)]
    study = _study(({}, "complete", ""), *bf16)
    plan = SimpleNamespace(study=study, command=THIS)
    proposal = study.trials[1]
    outcome = checks.blame(plan, proposal, dict(proposal.params))
    assert outcome is not None and outcome.reason == "fails:knobs.precision=bf16"
    inactive = SimpleNamespace(params={k: v for k, v in proposal.params.items() if k != "knobs.precision"})
    assert checks.blame(plan, inactive, dict(proposal.params)) is None
    assert checks.blame(SimpleNamespace(study=study, command=None), proposal, dict(proposal.params)) is None
