"""After the search the baseline and the best are measured again on every device (the CPU too), and each
configuration whose step times were unstable once; the report marks unstable configurations and does not state a
speed-up resting only on unstable measurements as certain."""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.distributions import IntDistribution
from optuna.trial import create_trial

from sweeper.report.__main__ import main as report_main
from sweeper.report.build import build
from sweeper.report.render import to_markdown
from sweeper.sweep.config.settings import settings_of
from sweeper.sweep.run import remeasure
from sweeper.sweep.study.trials import CONFIRM_KEY

from conftest import FAULTS, run_main

OBJECTIVES = [("throughput", "maximize")]
MARK = "†"  # beside an unstable configuration in the report's ranking (sweeper.report.sections.UNSTABLE)
BASELINE = {"knobs.work": 32}


def _study(trials: list[tuple[int, float, bool]], extra: list[dict] | None = None) -> optuna.Study:
    """Measured trials ``(work, throughput, step_unstable)`` in order (trial 0 first), then trials with the given
    user attrs (re-measurements)."""
    study = optuna.create_study(direction="maximize")
    space = {"knobs.work": IntDistribution(1, 100)}
    for work, value, unstable in trials:
        attrs = {"status": "complete", "step_unstable": unstable}  # the row's flag, a user attr
        trial = create_trial(params={"knobs.work": work}, distributions=space, values=[value], user_attrs=attrs)
        study.add_trial(trial)
    for attrs in extra or []:
        params = {"knobs.work": attrs.pop("work")}
        study.add_trial(create_trial(params=params, distributions=space, values=[1.0], user_attrs=attrs))
    return study


def test_by_default_the_baseline_and_the_best_then_unstable_configurations_are_measured_again() -> None:
    s = settings_of({})  # the defaults, on any device: profile (GPU only) plays no part here
    assert (s.confirm_top_k, s.confirm_unstable) == (1, True)
    study = _study([(32, 10.0, False), (8, 30.0, False), (16, 20.0, True), (24, 5.0, True), (40, 25.0, False)])
    wanted = remeasure.plan(study, OBJECTIVES, BASELINE, s.confirm_top_k, 0, s.confirm_unstable)
    assert [(r.of, r.unstable) for r in wanted] == [(0, False), (1, False), (2, True), (3, True)], (
        "the baseline, the best, then the unstable ones best first; a steady one that is not the best is not"
    )
    assert remeasure.plan(study, OBJECTIVES, BASELINE, 0, 0, False) == [], "confirm_top_k=0: none"
    unstable_best = _study([(32, 10.0, False), (8, 30.0, True)])
    assert [r.of for r in remeasure.plan(unstable_best, OBJECTIVES, BASELINE, 1, 0, True)] == [0, 1], "once"


def test_an_unstable_configuration_is_measured_again_once_across_commands() -> None:
    """A later command (a new target) measures the baseline and the best again, but not an unstable configuration
    an earlier command already measured again."""
    earlier = [{"work": w, CONFIRM_KEY: of, remeasure.FOR_KEY: 1, "status": "complete"} for w, of in ((32, 0), (16, 2))]
    study = _study([(32, 10.0, False), (8, 30.0, False), (16, 20.0, True), (24, 5.0, True)], earlier)
    wanted = remeasure.plan(study, OBJECTIVES, BASELINE, 1, 0, True)
    assert [r.of for r in remeasure.pending(study, wanted, 1)] == [1, 3], "the first command's own: done"
    assert [r.of for r in remeasure.pending(study, wanted, 2)] == [0, 1, 3], "the next: the baseline again, not 2"


def test_re_measurements_are_cut_where_the_budget_ends() -> None:
    items = [remeasure.Remeasure({"knobs.work": w}, n, False) for n, w in enumerate((32, 8, 16, 24))]
    fits = lambda s: s <= 25.0  # noqa: E731 - 25 s left
    assert [r.of for r in remeasure.that_fit(items, lambda r: 10.0, fits, 1)] == [0, 1], "one after the other"
    assert [r.of for r in remeasure.that_fit(items, lambda r: 10.0, fits, 2)] == [0, 1, 2, 3], "two at a time"


# ---------------------------------------------------------------------------------------------------- the report


def _rows(unstable_best: list[bool]) -> pd.DataFrame:
    """The baseline measured twice (steady), the best (work=8) once per entry of ``unstable_best``."""
    specs = [(0, 32, 10.0, False, None), (2, 32, 10.2, False, 0)]
    specs += [(1 if i == 0 else 3 + i, 8, 30.0 + i, u, None if i == 0 else 1) for i, u in enumerate(unstable_best)]
    return pd.DataFrame(
        [
            {
                "study": "s",
                "trial": trial,
                "status": "complete",
                "reason": "",
                "workload": "faults",
                "started_at": pd.Timestamp("2026-12-03", tz="UTC") + pd.Timedelta(seconds=trial),
                "throughput": value,
                "throughput_unit": "samples/s",
                "steps_measured": 20,
                "step_cv": 0.6 if unstable else 0.01,
                "step_bimodal": unstable,
                "step_unstable": unstable,
                "peak_mem_bytes": 1e6,
                "baseline": work == 32,
                "confirm_of": confirm_of,
                "knob.work": work,
            }
            for trial, work, value, unstable, confirm_of in specs
        ]
    )


def _markdown(df: pd.DataFrame) -> str:
    return to_markdown(build(df, with_plots=False).blocks)


def test_a_profile_is_priced_at_the_trials_own_steps_and_the_export_measured() -> None:
    """A JPEG baseline's profile took 5.9 s: six 0.866 s steps (the window's five and one before it) and a 0.70 s
    export. A best stepping at 0.18 s was priced those 5.9 s (the slowest profile) and its re-measurement then did
    not fit what was left; its profile is six of its own steps and that export. With no step time to go on, the
    slowest profile still prices it; a profile the budget cut prices none."""
    baseline = {"prof_s": 5.9, "prof_steps": 5, "step_ms_mean": 866.0, "status": "complete"}
    study = _study([(32, 296.0, False)], [{"work": 32, **baseline}])
    assert remeasure.profile_cost(study, 0.18, 5) == pytest.approx(6 * 0.18 + (5.9 - 6 * 0.866))
    assert remeasure.profile_cost(study, None, 5) == pytest.approx(5.9)
    assert remeasure.profile_cost(_study([(32, 296.0, False)]), 0.18, 5) == pytest.approx(6 * 0.18 + 2.0)
    cut = {"work": 32, "prof_s": 40.0, "prof_cut": True, "step_ms_mean": 175.0, "status": "complete"}
    assert remeasure.profile_cost(
        _study([(32, 296.0, False)], [{"work": 32, **baseline}, cut]), 0.18, 5
    ) == pytest.approx(6 * 0.18 + (5.9 - 6 * 0.866))


def test_the_report_marks_unstable_step_times_and_calls_a_speed_up_resting_on_them_uncertain() -> None:
    md = _markdown(_rows([True, True]))
    headline = next(line for line in md.splitlines() if line.startswith("Best:"))
    assert "the speed-up is uncertain: step times were unstable in every measurement of the best (2)" in headline
    assert "beyond noise" not in headline and "tied" not in headline
    assert f"work=8 {MARK}" in md and f"defaults {MARK}" not in md
    assert f"{MARK} work=8: step times unstable (bimodal) in all 2 measurements: re-measured, still unstable" in md

    md = _markdown(_rows([True, False]))  # the re-measurement was steady
    headline = next(line for line in md.splitlines() if line.startswith("Best:"))
    assert "uncertain" not in headline, headline
    assert f"{MARK} work=8: step times unstable (bimodal) in 1 of 2 measurements: re-measured" in md

    assert MARK not in _markdown(_rows([False, False])), "steady step times: no mark"


# ---------------------------------------------------------------------------------------------------- end to end


def test_a_default_cpu_sweep_measures_the_baseline_the_best_and_an_unstable_one_again(
    results: Path, capsys: pytest.CaptureFixture
) -> None:
    """No re-measurement setting given: on the CPU the baseline and the best are measured again, and the
    configuration whose steps switch between two speeds (fault=bimodal) once; the report marks it (terminal, .md,
    .html). The sweep and the report run in this process (no interpreter start-up to pay)."""
    starts = "[{knobs.fault:bimodal,knobs.work:32},{knobs.fault:none,knobs.work:8}]"
    proc = run_main(
        [
            *FAULTS,
            "-m",
            "hydra.sweeper.params={knobs.fault:'choice(none,bimodal)',knobs.work:'choice(8,32)'}",
            f"hydra.sweeper.starts={starts}",
            "hydra.sweeper.n_trials=3",
            "workload.wait_ms=5",  # steps of a sleep: steady on a loaded machine
            "trial.timeout_s=300",
        ],
        results,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    df = pd.read_parquet(results / "trials").sort_values("trial").reset_index(drop=True)
    search, again = df[df["confirm_of"].isna()], df[df["confirm_of"].notna()]
    assert list(search["trial"]) == [0, 1, 2] and (df["status"] == "complete").all(), df
    assert search.loc[1, "knob.fault"] == "bimodal" and bool(search.loc[1, "step_bimodal"]), search
    best = int(search.loc[search["throughput"].idxmax(), "trial"])
    flagged = {int(t) for t in search.loc[search["step_unstable"].astype(bool), "trial"]}
    assert list(again["confirm_of"].astype(int))[:2] == [0, best] or best == 0, "the baseline, then the best"
    assert set(again["confirm_of"].astype(int)) == {0, best} | flagged and len(again) == len({0, best} | flagged)
    assert (again["trial"] > 2).all(), "after the search"

    capsys.readouterr()
    assert report_main([str(results), "--top", "5"]) == 0
    terminal = capsys.readouterr().out
    md, page = (results / "report.md").read_text(), (results / "report.html").read_text()
    for text in (terminal, md, page):
        assert "bimodal" in text and MARK in text and "step times unstable (bimodal)" in text, text[-3000:]
    assert f"bimodal {MARK}" in md and "re-measured" in md, md
