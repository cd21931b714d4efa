"""The sweep loop itself (``sweeper.sweep.loop.Sweep``), in this process, on a fake clock: a real plan (composed by
Hydra, a SQLite study in a temporary folder), real admission, scheduler, settler and stop policy; only the job is
a stand-in that returns its outcome at once and moves the fake clock by the trial's wall time. Each trial goes
ask -> check -> fit the budget -> launch -> settle, and the sweep stops for the reason its policy recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.utils import JobReturn, JobStatus

from sweeper.results.outcome import Status, TrialOutcome
from sweeper.sweep.config.settings import settings_of
from sweeper.sweep.loop import Sweep
from sweeper.sweep.plan import prepare
from sweeper.sweep.run import checks
from sweeper.sweep.run.stop import Stop
from sweeper.sweep.search.budget import Budget
from sweeper.sweep.study import trials as studies

QUIET = [  # no queued starts, no re-measurements: every trial is the sampler's
    "hydra.sweeper.baseline_first=false",
    "hydra.sweeper.handbook_start=false",
    "hydra.sweeper.confirm_top_k=0",
    "hydra.sweeper.confirm_unstable=false",
    "hydra.sweeper.sampler=random",
    "hydra.sweeper.seed=1",
]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _sweep(
    tmp_path: Path, overrides: list[str], clock: Clock, job: Any, seen: list[tuple], arguments: tuple = ()
) -> Sweep:
    """A Sweep of the matmul workload (its tiny preset on the CPU) with ``overrides``, its budget on ``clock``."""
    from sweeper.__main__ import _conf_dir, register_plugin

    register_plugin()
    with initialize_config_dir(_conf_dir(), version_base=None):
        config = compose(
            "config",
            overrides=["+workload=matmul", f"results_dir={tmp_path / 'results'}", *overrides],
            return_hydra_config=True,
        )
    settings = settings_of(config.hydra.sweeper)
    budget = Budget(settings.timeout_s, started_at=0.0, clock=clock)
    plan = prepare(settings, config, None, list(arguments), budget)
    sweep = Sweep(plan, settings, budget, int(settings.n_trials or 10), job, tmp_path / "jobs")
    fits, settle = sweep.admission.fits, sweep.settler.settle

    def fit(values: dict[str, Any], *args: Any, **kwargs: Any) -> bool:
        seen.append(("fit",))
        return fits(values, *args, **kwargs)

    def settled(trial_id: int, number: int, values: dict[str, Any], outcome: TrialOutcome, **kw: Any) -> None:
        seen.append(("settle", number, outcome.status.value))
        settle(trial_id, number, values, outcome, **kw)

    sweep.admission.fits, sweep.settler.settle = fit, settled  # type: ignore[method-assign]
    return sweep


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """What the loop did, in order: the real ask and check, recorded on their way through."""
    out: list[tuple] = []
    ask, sample = studies.ask, checks.sample

    def asked(study: Any, command: Any = None) -> Any:
        trial = ask(study, command)
        out.append(("ask", trial.number))
        return trial

    def checked(plan: Any, trial: Any, *args: Any) -> Any:
        out.append(("check", trial.number))
        return sample(plan, trial, *args)

    monkeypatch.setattr(studies, "ask", asked)
    monkeypatch.setattr(checks, "sample", checked)
    return out


def _job(clock: Clock, seen: list[tuple], wall_s: float) -> Any:
    """The stand-in for Hydra's launcher: the trial 'runs' ``wall_s`` on the fake clock and completes."""

    def job(overrides: list[str], number: int) -> JobReturn:
        seen.append(("launch", number, clock.t))
        clock.t += wall_s
        outcome = TrialOutcome(Status.COMPLETE, metrics={"throughput": 100.0 + number}, started_at=0.0, ended_at=1.0)
        ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
        ret.return_value = outcome.to_dict()
        return ret

    return job


def _per_trial(seen: list[tuple]) -> list[list[str]]:
    """What the loop did, one list per asked trial."""
    out: list[list[str]] = []
    for step in seen:
        if step[0] == "ask":
            out.append([])
        out[-1].append(step[0])
    return out


def test_each_trial_goes_ask_check_fit_launch_settle_until_n_trials(
    tmp_path: Path, seen: list[tuple], capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    sweep = _sweep(tmp_path, ["hydra.sweeper.n_trials=3", *QUIET], clock, _job(clock, seen, 2.0), seen)
    sweep.run()
    trials = _per_trial(seen)
    measured = [t for t in trials if t == ["ask", "check", "fit", "launch", "settle"]]
    duplicates = [t for t in trials if t == ["ask", "check", "settle"]]  # the random sampler may repeat itself
    assert len(measured) == 3 and len(measured) + len(duplicates) == len(trials), seen
    assert sweep.policy.ended() is Stop.N_TRIALS and sweep.policy.exit_code() == 0
    assert studies.counted(sweep.plan.study) == 3 and clock.t == 6.0
    assert "sweep ended: n_trials=3 trials measured" in capsys.readouterr().err


def test_the_budget_s_end_stops_the_search_before_the_next_launch(tmp_path: Path, seen: list[tuple]) -> None:
    """Trials of 40 s on a 100 s budget: the cost model learns their walls; nothing launches past the budget, and
    the search stops on it (the policy's ``Stop.BUDGET``), however many trials ``n_trials`` asks for."""
    clock = Clock()
    overrides = ["hydra.sweeper.n_trials=50", "hydra.sweeper.timeout_s=100", *QUIET]
    sweep = _sweep(tmp_path, overrides, clock, _job(clock, seen, 40.0), seen)
    sweep.run()
    launches = [s[2] for s in seen if s[0] == "launch"]
    assert launches and all(t < 100.0 for t in launches), seen
    assert sweep.policy.ended() is Stop.BUDGET and sweep.policy.exit_code() == 0
    assert studies.counted(sweep.plan.study) == len(launches) < 50


def test_duplicates_of_a_small_space_end_the_search_as_exhausted(
    tmp_path: Path, seen: list[tuple], capsys: pytest.CaptureFixture[str]
) -> None:
    """Two configurations, ten trials asked for: once both are measured, a proposal is a duplicate (asked,
    checked, settled: never fitted nor launched), and the enumerated space ends the search."""
    clock = Clock()
    fixed = ("knobs.dtype=choice(fp32)", "knobs.transpose_b=choice(false)")  # transpose_a left: false or true
    sweep = _sweep(tmp_path, ["hydra.sweeper.n_trials=10", *QUIET], clock, _job(clock, seen, 1.0), seen, fixed)
    sweep.run()
    assert len([s for s in seen if s[0] == "launch"]) == 2, seen
    duplicates = [s for s in seen if s[0] == "settle" and s[2] == "skipped"]
    assert duplicates, seen
    first = seen.index(("settle", duplicates[0][1], "skipped"))
    assert [s[0] for s in seen[first - 2 : first + 1]] == ["ask", "check", "settle"]
    assert sweep.policy.ended() is Stop.EXHAUSTED
    assert "space exhausted: all 2 configurations of the search space are measured" in capsys.readouterr().err


def test_a_small_space_measured_within_a_budget_spends_the_time_left_on_repeats_of_its_best(
    tmp_path: Path, seen: list[tuple], capsys: pytest.CaptureFixture[str]
) -> None:
    """The same two configurations under a 100 s budget alone (no ``n_trials``): once both are measured, each
    proposal is a duplicate, and the time left goes to repeats of the two (what separates them in the report),
    each up to its bound; then the exhausted space ends the search, well within the budget."""
    from sweeper.sweep.study.attrs import CONFIRM_KEY

    clock = Clock()
    fixed = ("knobs.dtype=choice(fp32)", "knobs.transpose_b=choice(false)")
    sweep = _sweep(tmp_path, ["hydra.sweeper.timeout_s=100", *QUIET], clock, _job(clock, seen, 1.0), seen, fixed)
    sweep.run()
    trials = sweep.plan.study.get_trials(deepcopy=False)
    repeats = [t for t in trials if t.user_attrs.get(CONFIRM_KEY) is not None and t.user_attrs.get("wall_s")]
    firsts = {t.number for t in trials if CONFIRM_KEY not in t.user_attrs and t.user_attrs.get("wall_s")}
    assert len(firsts) == 2 and {t.user_attrs[CONFIRM_KEY] for t in repeats} == firsts, seen
    assert sweep.policy.ended() is Stop.EXHAUSTED and clock.t < 100.0
    err = capsys.readouterr().err
    assert "every configuration is measured" in err and "queued a repeat of trial" in err, err
    assert "space exhausted: all 2 configurations of the search space are measured" in err


def test_a_trial_that_overran_the_budget_meets_the_deadline_before_the_next_ask(
    tmp_path: Path, seen: list[tuple], capsys: pytest.CaptureFixture[str]
) -> None:
    """The first trial, predicted cheap, takes 110 s of a 100 s budget: the next start meets the budget's end
    (``StopPolicy.deadline``): nothing is asked again, and the summary says the budget was reached."""
    clock = Clock()
    overrides = ["hydra.sweeper.n_trials=5", "hydra.sweeper.timeout_s=100", *QUIET]
    sweep = _sweep(tmp_path, overrides, clock, _job(clock, seen, 110.0), seen)  # not past grace + backstop
    sweep.run()
    assert [s[0] for s in seen] == ["ask", "check", "fit", "launch", "settle"], seen
    assert sweep.policy.ended() is Stop.BUDGET
    err = capsys.readouterr().err
    assert "budget: hydra.sweeper.timeout_s=100 s reached" in err and "no trial fits" not in err, err


def test_the_re_measurements_that_fit_run_when_others_do_not(
    tmp_path: Path, seen: list[tuple], capsys: pytest.CaptureFixture[str]
) -> None:
    """Two trials (the baseline, 5 s; then one of 40 s, the best) on a 65 s budget leave 20 s: the baseline's
    repeat (about 5 s) fits, the best's (about 40 s) does not. The one that fits is measured; the sweep ends on the
    budget and says which did not fit."""
    clock = Clock()
    baseline: list[list[str]] = []

    def job(overrides: list[str], number: int) -> JobReturn:
        seen.append(("launch", number, clock.t))
        knobs = sorted(o for o in overrides if o.startswith("knobs."))
        baseline.extend([knobs] if number == 0 else [])
        first = knobs == baseline[0]  # the baseline, or its repeat
        wall, step_s, setup_s = (5.0, 0.1, 1.0) if first else (40.0, 1.0, 10.0)
        clock.t += wall
        metrics = {
            "throughput": 100.0 if first else 200.0,
            "setup_s": setup_s,
            "first_step_s": step_s,
            "measured_s": 20 * step_s,
            "steps_measured": 20,
            "step_ms_mean": step_s * 1e3,
            "warmup_steps": 5,
        }
        outcome = TrialOutcome(Status.COMPLETE, metrics=metrics, started_at=0.0, ended_at=wall)
        ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
        ret.return_value = outcome.to_dict()
        return ret

    overrides = [
        *QUIET,
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.timeout_s=65",
        "hydra.sweeper.baseline_first=true",
        "hydra.sweeper.confirm_top_k=1",
    ]
    sweep = _sweep(tmp_path, overrides, clock, job, seen)
    sweep.run()
    launched = [s[1] for s in seen if s[0] == "launch"]
    assert launched == [0, 1, 2], seen
    repeat = sweep.plan.study.trials[2]
    assert repeat.user_attrs.get("confirm_of") == 0, repeat.user_attrs
    assert sweep.policy.ended() is Stop.BUDGET
    err = " ".join(capsys.readouterr().err.split())
    assert "budget: 1 of 2 re-measurements do not fit the 20 s left; measuring the 1 that fit" in err, err
    assert clock.t == 50.0, "within the budget: the best's repeat (40 s) was not started"


def test_the_handbooks_picks_are_for_the_device_the_trials_run_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a host with a GPU, trials asked to run on the CPU get the CPU's picks (no side-stream copy, which a CPU
    trial refuses); on the GPU they get the GPU's. The picks reach the staged sampler whether or not the handbook's
    start is measured (a knob a diagnosed step wakes takes them)."""
    from workloads.base import DeviceInfo

    h100 = DeviceInfo(kind="cuda", name="NVIDIA H100", count=1, compute_capability=(9, 0), memory_bytes=80 << 30)
    monkeypatch.setattr("sweeper.trial.gpu.device_info", lambda: h100)
    jpeg = ["+workload=resnet50", "workload.data=jpeg", "preset=tiny", f"results_dir={tmp_path / 'results'}"]
    picks = {}
    for device, handbook in (("cpu", "true"), ("cuda", "true"), ("cuda", "false")):
        from sweeper.__main__ import _conf_dir, register_plugin

        register_plugin()
        with initialize_config_dir(_conf_dir(), version_base=None):
            overrides = [*jpeg, f"device={device}", f"hydra.sweeper.handbook_start={handbook}"]
            config = compose("config", overrides=overrides, return_hydra_config=True)
        settings = settings_of(config.hydra.sweeper)
        plan = prepare(settings, config, None, [], Budget(None))
        sweep = Sweep(plan, settings, Budget(None), 10, None, tmp_path / "jobs")
        assert plan.rules is not None and sweep.plan.study.sampler.handbook == plan.rules
        assert (plan.handbook is None) == (handbook == "false")
        picks[device] = plan.rules.get("knobs.device_prefetch")
    assert picks == {"cpu": False, "cuda": True}


def test_a_trial_that_must_leave_time_to_others_is_stopped_before_the_budgets_end(
    tmp_path: Path, seen: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admission's ``keep_s`` (the re-measurements' reserve, for a trial priced by a guess) reaches the trial
    as an earlier stop: the budget's end less that and the grace; a trial keeping nothing stops at the budget's
    end and its grace."""
    from sweeper.sweep.run import jobs

    stops: list[float | None] = []
    real = jobs.overrides

    def recorded(plan: Any, settings: Any, run: Any, sweep_dir: Path, stop_at: float | None) -> list[str]:
        stops.append(stop_at)
        return real(plan, settings, run, sweep_dir, stop_at)

    monkeypatch.setattr(jobs, "overrides", recorded)
    ends = []
    for keep in (30.0, 0.0):
        clock = Clock()
        overrides = ["hydra.sweeper.n_trials=2", "hydra.sweeper.timeout_s=100", *QUIET]
        sweep = _sweep(tmp_path / str(keep), overrides, clock, _job(clock, seen, 1.0), seen)
        monkeypatch.setattr(sweep.admission, "keep_s", lambda values, repeat=False, keep=keep: keep)
        sweep.run()
        ends.append(100.0 - keep - float(sweep.settings.grace_s) if keep else 100.0 + float(sweep.settings.grace_s))
    assert stops == [ends[0], ends[0], ends[1], ends[1]], stops


@pytest.mark.parametrize(("preset", "expected"), [("none", {"knobs.compile": "off"}), ("tiny", {})])
def test_an_unset_expensive_is_the_compile_knob_where_the_space_searches_it(
    tmp_path: Path, preset: str, expected: dict
) -> None:
    """A workload that searches ``knobs.compile`` and says nothing of ``expensive`` (as a user's own YAML may) gets
    the package's own: a compiled trial pays its compile first (priced as an eager one, a GRU's CPU sweep predicted
    13 of 34 trials within 30 %). Where the space pins compile (the tiny preset: "off"), none; an explicit ``{}``
    keeps none."""
    from sweeper.__main__ import _conf_dir, register_plugin
    from sweeper.sweep.plan import _expensive

    register_plugin()
    overrides = ["+workload=transformer_block", f"preset={preset}", "device=cpu", f"results_dir={tmp_path / 'r'}"]
    with initialize_config_dir(_conf_dir(), version_base=None):
        config = compose("config", overrides=[*overrides, "hydra.sweeper.expensive=null"], return_hydra_config=True)
    settings = settings_of(config.hydra.sweeper)
    plan = prepare(settings, config, None, [], Budget(None))
    assert plan.expensive == expected
    assert _expensive({}, plan.space) == {}
