"""The nightly gate on nights measured for real (the faults workload's planted slowdown): per-configuration ratios
with intervals from repeats, nights as studies, mixed sizes refused, the trend one point per study."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from faultload.nights import measure_nights, night_config

from sweeper.report.__main__ import main
from sweeper.report.data import load
from sweeper.report.nightly import nightly, select, trend

from conftest import run_main, run_report

DAY = "2026-11-30"
# Each step works, then waits 5 ms: most of a step keeps its length on a loaded machine, so the same configuration
# measured on two nights compares as the same (a compute-only step ran 0.7x on one night while another process
# shared the 2 cores).
SHORT = [
    "knobs.fault=none",
    "knobs.work=32",
    "workload.reps=36",
    "workload.wait_ms=5",
    "measure.warmup_steps=3",
    "measure.steps=10",
    "measure.min_time_s=0.1",
    "measure.max_steps=1000000",
]


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six studies of one configuration started on one day (three trials each), then a seventh at another size."""
    results = tmp_path_factory.mktemp("day") / "results"
    measure_nights(results, {f"n{i}": {} for i in range(1, 7)}, 3, night_config(SHORT), day=DAY)
    measure_nights(results, {"bigger": {}}, 3, night_config([*SHORT, "workload.reps=72"]))
    return results


def test_six_studies_of_one_day_are_six_nights(day: Path) -> None:
    df = load(day)
    t = trend(df[df["study"] != "bigger"])
    assert t["night"].tolist() == [f"n{i}" for i in range(1, 7)], "one point per study, in the order they ran"
    assert (t["trials"] == 3).all() and (t["lo"] < t["best"]).all() and (t["best"] < t["hi"]).all()
    assert select(df, DAY, None) == ("n6", "bigger"), "a date means that day's last study"
    assert select(df, "latest", None) == ("n6", "bigger")
    assert select(df, "latest", ["n4"]) == ("n3", "n4")
    assert select(df, "n2", ["n5"]) == ("n2", "n5")


def test_date_without_a_later_study_says_so(day: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(day), "--baseline", "2001-01-01"]) == 2
    assert "no study started on that date" in capsys.readouterr().err
    assert main([str(day), "--baseline", "bigger"]) == 2
    err = capsys.readouterr().err
    assert "no study started after the baseline (bigger)" in err and len(err.strip().splitlines()) == 1


def test_mixed_sizes_say_the_parameters_differ_and_do_not_gate(day: Path) -> None:
    proc = run_report(
        [str(day), "--baseline", "n6", "--study", "bigger", "--fail-on-regression", "5%", "--top", "5"],
    )
    # 72 multiplications per step against 36: half the throughput, and still no verdict on it.
    assert proc.returncode == 0, proc.stderr
    assert "not gated: faults: the workload parameters differ" in proc.stderr
    md = (day / "report.md").read_text()
    assert "The workload parameters differ between the nights (reps: 36 in the baseline, 72 tonight)" in md
    assert "| regression |" not in md and "not compared: the workload parameters differ" in md


def test_same_nights_compare_per_configuration_with_repeats(day: Path) -> None:
    df = load(day)
    n = nightly(df, "n5", ["n6"], 0.05, 50, with_plots=False)
    assert not n.regressions and not n.not_gated
    table = next(b for b in n.blocks if getattr(b, "title", "").startswith("Configurations measured both nights"))
    (row,) = table.rows
    assert row[4] == "3 + 3" and row[5] in ("unchanged within noise", "faster", "slower, within the 5% threshold")


FAULTS = ["hydra.searchpath=[file://tests/faultload/conf]", "+workload=faults", "knobs.fault=none"]


def test_nightly_preset_measures_windows_long_enough_to_gate(tmp_path: Path) -> None:
    """preset=nightly: a window of at least 1 s however short the steps (max_steps does not cut it); a max_steps
    that does cut the window short is a warning and window_capped in the row."""
    run_main([*FAULTS, "preset=nightly", "cpu_threads=1"], tmp_path / "nightly", check=True)
    row = pd.read_parquet(tmp_path / "nightly" / "trials").iloc[0]
    assert row["preset"] == "nightly" and row["measured_s"] >= 1.0 and not row["window_capped"]
    proc = run_main(
        [*FAULTS, "cpu_threads=1", "measure.min_time_s=1", "measure.steps=5", "measure.max_steps=10"],
        tmp_path / "capped",
        check=True,
    )
    row = pd.read_parquet(tmp_path / "capped" / "trials").iloc[0]
    assert row["window_capped"] and row["steps_measured"] == 10 and row["measured_s"] < 1.0
    assert "measure.max_steps stopped the window at" in proc.stdout + proc.stderr


def _gate(df: pd.DataFrame, base: str, tonight: str, threshold: float = 0.05) -> bool:
    two = df[df["study"].isin([base, tonight])]
    return bool(nightly(two, base, [tonight], threshold, 10, with_plots=False).regressions)


# Each step waits 50 ms: a wait keeps its length on a loaded CI machine, so two nights measured for real differ by
# what was planted, not by what else ran.
NIGHT = [
    "knobs.fault=none",
    "knobs.work=8",
    "workload.wait_ms=50",
    "measure.warmup_steps=2",
    "measure.steps=5",
    "measure.min_time_s=0.5",
    "measure.max_steps=1000000",
]


def test_a_planted_slowdown_measured_for_real_fails_the_gate(tmp_path: Path) -> None:
    """Two nights measured in real trial processes (five trials each, interleaved), tonight's steps 25 % slower:
    the report's gate exits 3 and states the ratio with its interval from the repeats."""
    results = tmp_path / "results"
    measure_nights(results, {"base": {}, "slow25": {"slowdown": 0.25}}, 5, night_config(NIGHT))
    proc = run_report(
        [str(results), "--baseline", "base", "--study", "slow25", "--fail-on-regression", "5%", "--top", "3"],
    )
    assert proc.returncode == 3, proc.stderr
    match = re.search(
        r"faults .*: (0\.\d{3})x \((0\.\d{3})–(0\.\d{3})\) of the baseline, below 0\.95 \(5 \+ 5 trials\)", proc.stderr
    )
    assert match, proc.stderr
    r, lo, hi = (float(g) for g in match.groups())
    assert lo <= r <= hi and 0.70 < r < 0.90, "a step 1.25x as long: about 0.8x the throughput"


def _nights(template: pd.Series, plan: dict[str, tuple[float, float]], repeats: int, seed: int) -> pd.DataFrame:
    """Rows of nights with a known throughput: per study ``(factor, swing)``; each trial's throughput is the
    template's times ``factor``, times a per-trial noise of 1.5 % (log-normal, seeded), times ``1 + swing`` and
    ``1 - swing`` alternately (a noisy night). The rows are copies of a real row, one hour apart per night."""
    rng = np.random.default_rng(seed)
    base = float(template["throughput"])
    start = pd.Timestamp(template["started_at"])
    out = []
    for night, (study, (factor, swing)) in enumerate(plan.items()):
        for trial in range(repeats):
            row = template.copy()
            sign = 1 if trial % 2 == 0 else -1
            row["throughput"] = base * factor * (1 + sign * swing) * float(np.exp(rng.normal(0.0, 0.015)))
            row["study"], row["trial"] = study, trial
            row["started_at"] = start + pd.Timedelta(hours=night, seconds=trial)
            row["step_cv"] = 0.01
            out.append(row)
    return pd.DataFrame(out).reset_index(drop=True)


def test_the_gate_flags_10_percent_and_spares_unchanged_noisy_and_4_percent_nights(day: Path) -> None:
    """The gate's error rates at 5 %, on nights of known throughput with a stated noise (seeded, so the verdicts are
    fixed): 10 % slower is flagged in at least 19 of 20 nights, an unchanged night in at most 1 of 20; 4 % slower
    (just below the threshold) and a noisy but unchanged night (trials 1.3x / 0.7x in turn) are never flagged."""
    template = load(day).query("study == 'n1'").iloc[0]
    plan: dict[str, tuple[float, float]] = {}
    for n in range(21):
        plan[f"base-{n:02d}"] = (1.0, 0.0)
        if n < 20:
            plan[f"slow10-{n:02d}"] = (0.90, 0.0)
        if n < 10:
            plan.update({f"slow4-{n:02d}": (0.96, 0.0), f"noisy-{n:02d}": (1.0, 0.3)})
    df = _nights(template, plan, 5, seed=7)
    pairs = {
        "slow10": [(f"base-{n:02d}", f"slow10-{n:02d}") for n in range(20)],
        "same": [(f"base-{n:02d}", f"base-{n + 1:02d}") for n in range(20)],
        "slow4": [(f"base-{n:02d}", f"slow4-{n:02d}") for n in range(10)],
        "noisy": [(f"base-{n:02d}", f"noisy-{n:02d}") for n in range(10)],
    }
    flagged = {k: [p for p in v if _gate(df, *p)] for k, v in pairs.items()}
    counts = {k: f"{len(flagged[k])} of {len(v)}" for k, v in pairs.items()}
    assert len(flagged["slow10"]) >= 19 and len(flagged["same"]) <= 1, counts
    assert not flagged["slow4"] and not flagged["noisy"], counts
