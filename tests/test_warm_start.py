"""Warm start across runs, end to end through the real CLI: a second night starts from the first one's best.

The costly test workload's steps sleep (tests/faultload/costly.py), so a configuration measures the same on any
CPU load: its landscape, and so this test, are deterministic up to sleep jitter.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd

from conftest import NO_REMEASURE, run_main

COSTLY = [
    "hydra.searchpath=[file://tests/faultload/conf]",
    "+workload=costly",
    "-m",
    "hydra.sweeper.seed=0",
    "knobs.compile_cost_s=0.3",
    *NO_REMEASURE,
]
KNOBS = ["knob.level", "knob.batch", "knob.compile"]


def _rows(results: Path, study: str) -> pd.DataFrame:
    df = pd.read_parquet(results / "trials")
    return df[df["study"] == study].sort_values("trial").reset_index(drop=True)


def test_second_night_with_warm_start_reaches_the_first_nights_best_within_3_trials(results: Path) -> None:
    run_main([*COSTLY, "hydra.sweeper.study_name=night1", "hydra.sweeper.n_trials=14"], results, check=True)
    night1 = _rows(results, "night1")
    measured = night1[night1["status"] == "complete"]
    best1 = measured.loc[measured["throughput"].idxmax()]
    # The default strategy (staged): the baseline, the handbook's start (compiled), then the screen runs with compile
    # off before any other compile.
    assert night1.loc[1, "knob.compile"] == "default"
    first_compiled = night1.index[(night1["knob.compile"] != "off") & (night1.index > 1)].min()
    assert first_compiled >= 8 or pd.isna(first_compiled)

    run_main(
        [*COSTLY, "hydra.sweeper.study_name=night2", "hydra.sweeper.warm_start=latest", "hydra.sweeper.n_trials=3"],
        results,
        check=True,
    )
    night2 = _rows(results, "night2")
    assert list(night2["trial"]) == list(range(3)), "three trials measured tonight, numbered from 0"
    assert (night2["status"] == "complete").all()
    # Re-measured, not copied: night 2's first trial is night 1's best configuration, measured again.
    assert night2.loc[0, KNOBS].tolist() == best1[KNOBS].tolist()
    assert night2.loc[0, "started_at"] > best1["ended_at"]
    top3 = measured.sort_values("throughput", ascending=False).drop_duplicates(KNOBS).head(3)
    assert sorted(map(tuple, night2[KNOBS].values.tolist())) == sorted(map(tuple, top3[KNOBS].values.tolist()))

    # Night 1's measured trials are in night 2's sampler history, marked, and not counted as night 2's trials.
    study = optuna.load_study(study_name="night2", storage=f"sqlite:///{results / 'optuna.db'}")
    seeded = [t for t in study.trials if "warm_start_from" in t.user_attrs]
    assert len(seeded) == len(measured)
    assert {t.user_attrs["warm_start_from"] for t in seeded} == {f"night1#{n}" for n in measured["trial"]}

    # A third night: warm start from night 2 (the latest) carries night 1's trials too, each once.
    run_main(
        [*COSTLY, "hydra.sweeper.study_name=night3", "hydra.sweeper.warm_start=latest", "hydra.sweeper.n_trials=1"],
        results,
        check=True,
    )
    study3 = optuna.load_study(study_name="night3", storage=f"sqlite:///{results / 'optuna.db'}")
    origins = [t.user_attrs["warm_start_from"] for t in study3.trials if "warm_start_from" in t.user_attrs]
    assert len(origins) == len(set(origins)) == len(measured) + 3
    night3 = _rows(results, "night3")
    # Night 3's first trial is the best configuration night 2 measured itself (seeded trials are history only).
    own2 = night2[night2["status"] == "complete"]
    assert night3.loc[0, KNOBS].tolist() == own2.loc[own2["throughput"].idxmax(), KNOBS].tolist()
