"""``hydra.sweeper.timeout_factor``: a trial far slower than the measured trials of its kind is stopped at a
multiple of their cost instead of ``trial.timeout_s`` (on the H200 a 200 s screening trial ate a 5-minute budget)."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState, create_trial

from sweeper.sweep.config.space import build_space
from sweeper.sweep.search.costs import derived_timeout

from conftest import NO_REMEASURE, run_cli


def test_a_trial_far_slower_than_its_kind_is_stopped_at_the_derived_timeout(results: Path) -> None:
    """By default (``timeout_factor`` 4): a user's sweep with no setting of its own stops a hung trial."""
    starts = "[{knobs.fault:none,knobs.work:16},{knobs.fault:none,knobs.work:64},{knobs.fault:hang,knobs.work:16}]"
    proc = run_cli(
        [
            "hydra.searchpath=[file://tests/faultload/conf]",
            "+workload=faults",
            "-m",
            "hydra.sweeper.params={knobs.fault:'choice(none,hang)',knobs.work:'choice(16,32,64)'}",
            f"hydra.sweeper.starts={starts}",
            "hydra.sweeper.n_trials=4",
            "hydra.sweeper.timeout_floor_s=5",
            "trial.timeout_s=600",
            *NO_REMEASURE,
        ],
        results,
        timeout=400,
        check=True,
    )
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    trials = sorted(study.trials, key=lambda t: t.number)
    assert [t.params.get("knobs.fault") for t in trials] == ["none", "none", "none", "hang"], proc.stdout
    assert [t.user_attrs.get("status") for t in trials[:3]] == ["complete"] * 3
    hang = trials[3]
    assert hang.state == TrialState.FAIL and hang.user_attrs.get("reason") == "timeout"
    slowest = max(t.user_attrs["wall_s"] for t in trials[:3])
    assert hang.user_attrs["wall_s"] < max(5, 4 * slowest) + 15, "stopped near the cap, not at trial.timeout_s=600"


def test_the_cap_compares_a_trial_with_measured_trials_of_its_cost_class() -> None:
    defaults = {"knobs.a": 1, "knobs.compile": "off"}
    space = build_space({"knobs.a": "choice(1,2)", "knobs.compile": "choice(off,default)"}, {}, [], defaults)
    study = optuna.create_study(direction="maximize")
    for a, compile_, cost in [(1, "off", 10.0), (2, "off", 12.0), (1, "off", 8.0), (1, "default", 50.0)]:
        study.add_trial(
            create_trial(
                params={"knobs.a": a, "knobs.compile": compile_},
                distributions=dict(space.params),
                values=[1.0],
                user_attrs={"status": "complete", "wall_s": cost},
            )
        )
    expensive = {"knobs.compile": "off"}
    eager, compiled = {"knobs.a": 2, "knobs.compile": "off"}, {"knobs.a": 2, "knobs.compile": "default"}
    assert derived_timeout(study, eager, expensive, 600, 4, 30) == 48.0, "4 x the slowest eager trial (12 s)"
    assert derived_timeout(study, eager, expensive, 600, 4, 60) == 60.0, "never below the floor"
    assert derived_timeout(study, eager, expensive, 40, 4, 30) is None, "never above trial.timeout_s"
    assert derived_timeout(study, compiled, expensive, 600, 4, 30) is None, "one compiled trial measured: no cap yet"
    assert derived_timeout(study, eager, expensive, 600, None, 30) is None, "off where null"


def test_a_trial_priced_from_measurements_is_capped_at_a_multiple_of_its_own_prediction() -> None:
    """JPEG on an H100 (2026-12-06): a warm compiled trial predicted 25 s hung until the budget cut it at 139 s,
    with two compiled trials measured (no class cap). Its own measured prediction caps it, or what it would cost
    without the declared graph-neutral knobs' warm cache where that is more (here the class's cold compile, 50 s:
    a declared knob that changes the graph after all makes it a cold compile, 5-6x a warm one in the replays, and
    it must not be killed before the model learns that); a prediction resting on the prior (a class never
    measured) does not; the class's cap never kills a trial admitted on a price above half of it."""
    defaults = {"knobs.a": 1, "knobs.compile": "off"}
    params = {"knobs.a": "choice(1,2)", "knobs.compile": "choice(off,default,max)"}
    space = build_space(params, {}, [], defaults)
    study = optuna.create_study(direction="maximize")
    for a, compile_, cost in [(1, "off", 10.0), (2, "off", 12.0), (1, "off", 8.0), (1, "default", 50.0)]:
        config = {"knobs.a": a, "knobs.compile": compile_}
        study.add_trial(create_trial(params=config, distributions=dict(space.params), values=[1.0],
                                     user_attrs={"status": "complete", "wall_s": cost}))  # fmt: skip
    expensive = {"knobs.compile": "off"}
    eager, compiled = {"knobs.a": 2, "knobs.compile": "off"}, {"knobs.a": 2, "knobs.compile": "default"}
    assert derived_timeout(study, compiled, expensive, 600, 4, 30, predicted=25.0) == 200.0, "4 x its cold 50 s"
    assert derived_timeout(study, compiled, expensive, 600, 4, 30, predicted=80.0) == 320.0, "4 x its own 80 s"
    assert derived_timeout(study, eager, expensive, 600, 4, 30, predicted=20.0) == 80.0, "4 x its own 20 s"
    assert derived_timeout(study, eager, expensive, 600, 4, 60, predicted=5.0) == 60.0, "never below the floor"
    assert derived_timeout(study, eager, expensive, 600, 4, 30, predicted=185.0) is None, "4 x 185 s > 600 s"
    assert derived_timeout(study, {"knobs.a": 2, "knobs.compile": "max"}, expensive, 600, 4, 30, predicted=25.0) is None
    assert derived_timeout(study, compiled, expensive, 600, None, 30, predicted=25.0) is None, "off where null"


def _cut(study: optuna.Study, space: object, params: dict, ran_s: float) -> None:
    """A trial of ``params`` the budget cut after ``ran_s`` seconds (as the sweep records it)."""
    study.add_trial(
        create_trial(
            params=params,
            distributions={k: space.params[k] for k in params},  # type: ignore[attr-defined]
            state=TrialState.FAIL,
            user_attrs={"status": "interrupted", "reason": "budget", "wall_s": ran_s, "spent_s": ran_s},
        )
    )


def test_a_configuration_cut_twice_by_the_budget_is_too_slow_for_it_and_its_cost_is_bounded() -> None:
    """A configuration that runs longer than the budget was cut, queued again, measured first by the next command
    and cut again, forever, and its cut runs taught the cost model nothing. Once cut twice it is not queued again,
    and what it ran is a lower bound on its predicted cost (a proposal of it is skipped over budget); once cut, it
    is measured again."""
    from sweeper.sweep.run.recovery import requeue_interrupted
    from sweeper.sweep.search.costs import CostModel
    from sweeper.sweep.study.trials import sample

    defaults = {"knobs.a": 1, "knobs.compile": "off"}
    space = build_space({"knobs.a": "choice(1,2)", "knobs.compile": "choice(off,default)"}, {}, [], defaults)
    study = optuna.create_study(direction="maximize")
    slow, other = {"knobs.a": 2, "knobs.compile": "default"}, {"knobs.a": 1, "knobs.compile": "default"}
    study.add_trial(create_trial(params=defaults, distributions=dict(space.params), values=[1.0],
                                 user_attrs={"status": "complete", "wall_s": 10.0}))  # fmt: skip
    _cut(study, space, slow, 290.0)
    _cut(study, space, other, 120.0)
    requeue_interrupted(study)
    queued = [t.params or t.system_attrs["fixed_params"] for t in study.trials if t.state == TrialState.WAITING]
    assert sorted(q["knobs.a"] for q in queued) == [1, 2], "cut once: measured again"
    for _ in queued:  # the next command measures them first, and the budget cuts them again
        t = study.ask()
        sample(t, space, defaults)
        for key, value in {"status": "interrupted", "reason": "budget", "spent_s": 295.0}.items():
            t.set_user_attr(key, value)
        study.tell(t, state=TrialState.FAIL)
    too_slow = requeue_interrupted(study)
    assert not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)), "cut twice: not queued again"
    assert sorted(too_slow, key=lambda p: p["knobs.a"]) == [other, slow]
    model = CostModel({"knobs.compile": "off"}, {"knobs.compile": {"default": 4}})
    assert model.predict(study, slow) >= 295.0
    assert "the budget cut it" in model.explain(study, slow)


def test_a_configuration_cut_by_the_budget_is_asked_before_other_queued_trials() -> None:
    """The next command measures a cut configuration first, ahead of configurations queued before it (the
    handbook's start, the declared starts)."""
    from sweeper.sweep.run.recovery import requeue_interrupted
    from sweeper.sweep.study.trials import ask

    defaults = {"knobs.a": 1, "knobs.compile": "off"}
    space = build_space({"knobs.a": "choice(1,2)", "knobs.compile": "choice(off,default)"}, {}, [], defaults)
    study = optuna.create_study(direction="maximize")
    _cut(study, space, defaults, 12.0)
    study.enqueue_trial({"knobs.a": 2, "knobs.compile": "default"})  # queued by the command that was cut
    requeue_interrupted(study)
    first = ask(study)
    assert study._storage.get_trial(first._trial_id).system_attrs["fixed_params"] == defaults
