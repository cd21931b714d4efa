"""The report's statistics and analysis, on Parquet rows recorded from real sweeps (tests/fixtures/report/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeper.report.analysis import analyse
from sweeper.report.data import load, norm
from sweeper.report.diagnose import diagnose
from sweeper.report.stats import pareto_mask, separated, tie_ranks

FIXTURES = Path(__file__).parent / "fixtures" / "report"


def rows_of(name: str, study: str | None = None) -> pd.DataFrame:
    df = load(FIXTURES / name, use_cache=False)
    return df[df["study"] == study].reset_index(drop=True) if study else df


def knob_groups(rows: pd.DataFrame) -> pd.core.groupby.DataFrameGroupBy:
    """Completed rows grouped by every knob/param value, computed here independently of the report."""
    ok = rows[(rows["status"] == "complete") & rows["throughput"].gt(0)]
    cols = sorted(c for c in ok.columns if c.startswith(("knob.", "param.")))
    return ok.assign(**{c: ok[c].astype(str) for c in cols}).groupby(cols, dropna=False)


# ------------------------------------------------------------------------------------------- pure functions


def test_norm_spells_each_value_once() -> None:
    assert [norm(v) for v in (True, np.bool_(False), 256, 256.0, np.int64(4), 0.5, None, float("nan"), "bf16")] == [
        "true",
        "false",
        "256",
        "256",
        "4",
        "0.5",
        "null",
        "null",
        "bf16",
    ]


def test_tie_ranks_count_only_disjoint_intervals() -> None:
    lo = np.array([10.0, 9.5, 7.0, 2.0])
    hi = np.array([12.0, 10.5, 8.0, 20.0])
    # #2 overlaps #1; #3 is below both #1 and #2; #4 is so wide that nothing is surely ahead of it.
    assert tie_ranks(lo, hi).tolist() == [1, 1, 3, 1]
    assert tie_ranks(lo, hi, maximize=False).tolist() == [2, 2, 1, 1]  # minimizing: #3 is surely ahead of #1, #2


def test_pareto_mask_two_objectives() -> None:
    values = np.array([[10, 5], [8, 3], [9, 6], [10, 5], [np.nan, 1]], dtype=float)
    mask = pareto_mask(values, ["maximize", "minimize"])
    assert mask.tolist() == [True, True, False, True, False]


@pytest.mark.parametrize(
    "args,expected",
    [
        ((0.45, 95, 0.5), "data-bound"),
        ((0.25, 30, 0.1), "data-bound"),
        ((0.15, 95, 0.5), "compute-bound"),
        ((0.01, 95, 0.50), "compute-bound"),
        ((0.01, 40, 0.05), "launch-bound"),
        ((0.01, 95, 0.10), "memory-bound"),
        ((0.01, None, None), "n/a"),
        ((0.01, 92, None), "compute-bound"),
        # the host launching most of the window while the GPU idles > 5 %: launch-bound; a busy GPU, or a host that
        # is not mostly launching, keeps the other rules (the H200's JPEG rows of 2026-12-02)
        ((0.025, 85.5, 0.155, None, 0.83), "launch-bound"),
        ((0.0, 99.4, 0.18, None, 0.78), "memory-bound"),
        ((0.08, 91.8, 0.155, "decode", 0.60), "memory-bound"),
        ((0.025, 85.5, 0.155, None, None), "memory-bound"),
    ],
)
def test_diagnosis_rule(args: tuple, expected: str) -> None:
    assert diagnose(*args) == expected


# ------------------------------------------------------------------------------------------- recorded sweeps


def test_single_objective_configurations_and_repeats() -> None:
    rows = rows_of("single")
    a = analyse(rows)
    groups = knob_groups(rows)
    assert len(a.configs) == groups.ngroups
    assert sorted(a.configs["n"].tolist()) == sorted(groups.size().tolist())
    assert a.configs["n"].max() >= 2, "the fixture has repeated configurations (repeat=true)"
    # Means, and each repeated configuration's own between-trial spread of log throughput, recomputed from the rows.
    assert sorted(a.configs["value"].round(12)) == sorted(groups["throughput"].mean().round(12))
    own = sorted(float(np.var(np.log(s), ddof=1)) for s in groups["throughput"].agg(list) if len(s) > 1)
    c = a.configs
    assert sorted(c.loc[c["n"] > 1, "log_var"]) == pytest.approx(own)
    c = a.configs
    assert ((c["lo"] <= c["value"]) & (c["value"] <= c["hi"])).all()
    # Listed by throughput; a run of configurations within noise of the run's first (intervals overlapping its
    # interval) shares that one's position as rank, so ranks never contradict the listed order.
    assert list(c["value"]) == sorted(c["value"], reverse=True)
    assert list(c["rank"]) == sorted(c["rank"])
    leader, rank = None, 0
    for position, (_, r) in enumerate(c.iterrows(), start=1):
        if leader is None or separated(leader, r):
            leader, rank = r, position
        assert r["rank"] == rank
    assert set(a.importance["throughput"]) == {k.split(".", 1)[1] for k in a.swept}
    assert sum(a.importance["throughput"].values()) == pytest.approx(1.0)


def test_ties_and_separations_occur_in_real_sweeps() -> None:
    """Across the recorded studies some configurations tie within noise and some are ranked apart."""
    tied = apart = 0
    for name in ("single", "multi", "nights", "compare"):
        for _, rows in rows_of(name).groupby("study"):
            c = analyse(rows.reset_index(drop=True)).configs
            tied += int(c["tied"].sum())
            apart += int(c["rank"].nunique() > 1)
    assert tied > 0 and apart > 0


def test_baseline_is_the_workload_defaults() -> None:
    rows = rows_of("single")
    a = analyse(rows)
    from omegaconf import OmegaConf

    yaml = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "conf" / "workload" / "matmul.yaml"))
    defaults = {f"knob.{k}": norm(v) for k, v in yaml["knobs"].items()}
    base = a.configs[a.configs["is_baseline"]]
    assert len(base) == 1, a.baseline_note
    for col in a.swept:
        value = base.iloc[0][f"v:{col}"]
        assert value in (defaults[col], "null"), (col, value)
    assert base.iloc[0]["speedup"] == pytest.approx(1.0)
    assert base.iloc[0]["label"] == "defaults"
    others = a.configs[~a.configs["is_baseline"]]
    assert (others["speedup"] == others["value"] / base.iloc[0]["value"]).all()


def test_no_baseline_is_said() -> None:
    """Recorded defaults that no trial ran (the sweep's space excluded them): no speed-ups, and the note says why."""
    import json

    rows = rows_of("multi").assign(knob_defaults=json.dumps({"knob.precision": "tf32", "knob.batch_size": 4}))
    a = analyse(rows)
    assert a.configs["speedup"].isna().all()
    assert a.baseline_note.startswith("no trial ran the workload defaults (")
    assert "precision=tf32" in a.baseline_note


def test_multi_objective_pareto_front() -> None:
    a = analyse(rows_of("multi"))
    assert a.objectives == [("throughput", "maximize"), ("peak_mem_bytes", "minimize")]
    c = a.configs
    for key, r in c.iterrows():
        dominated = (
            (c["value"] >= r["value"])
            & (c["peak_mem_bytes"] <= r["peak_mem_bytes"])
            & ((c["value"] > r["value"]) | (c["peak_mem_bytes"] < r["peak_mem_bytes"]))
        ).any()
        assert bool(r["pareto"]) == (not dominated), key
    assert list(c.sort_values("peak_mem_bytes")["rank_memory"]) == sorted(c["rank_memory"])
    assert set(a.importance) == {"throughput", "peak_mem_bytes"}


def test_marginals_match_a_direct_groupby() -> None:
    a = analyse(rows_of("multi"))
    per_config = knob_groups(rows_of("multi"))["throughput"].mean().reset_index()
    for _, m in a.marginals.iterrows():
        col = f"knob.{m['knob']}"
        sel = per_config[per_config[col].astype(str).map(lambda v: norm(int(v)) if v.isdigit() else v) == m["value"]]
        assert m["mean"] == pytest.approx(sel["throughput"].mean())
        assert m["best"] == pytest.approx(sel["throughput"].max())


def test_data_bound_diagnosis_from_a_real_jpeg_pipeline() -> None:
    a = analyse(rows_of("data"))
    assert (a.configs["data_wait_frac"] >= 0.2).all()
    assert set(a.configs["diagnosis"]) == {"data-bound"}


def test_failed_and_infeasible_rows_are_listed_not_ranked() -> None:
    rows = rows_of("failed")
    reasons = {}
    for _, study_rows in rows.groupby("study"):
        a = analyse(study_rows.reset_index(drop=True))
        reasons.update(dict(zip(a.failures["status"], a.failures["reason"])))
        ranked_trials = {int(t) for ts in a.configs["trials"] for t in ts.split(",") if t}
        assert not ranked_trials & set(a.failures["trial"].astype(int))
    assert reasons.get("failed") == "exception:ValueError"
    assert reasons.get("infeasible") == "oom"
