"""What the report knows of a sweep comes from the rows alone: the workload defaults (baseline, labels) and the
search space (importance), as the sweeper recorded them; nothing is read from conf/."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from optuna.distributions import FloatDistribution, IntDistribution, distribution_to_json

from sweeper.report.analysis import analyse
from sweeper.report.data import load
from sweeper.report.importance import _distribution, importance, recorded_space
from sweeper.results import lookup

FIXTURES = Path(__file__).parent / "fixtures" / "report"


def test_baseline_and_labels_come_from_the_recorded_defaults_not_the_yaml() -> None:
    """Rows of a workload with no YAML here (results copied from elsewhere, or a YAML changed since): the recorded
    defaults find the baseline and name the other configurations."""
    rows = load(FIXTURES / "single", use_cache=False)
    rows = rows.drop(columns=["baseline"]).assign(workload="copied-from-elsewhere")
    defaults = {
        "knob.dtype": "bf16",
        "knob.transpose_a": False,
        "knob.transpose_b": True,
        "knob.bf16_reduced_precision": True,
        "param.m": 256,
    }
    rows["knob_defaults"] = json.dumps(defaults)
    a = analyse(rows)
    base = a.configs[a.configs["is_baseline"]]
    assert len(base) == 1, a.baseline_note
    assert (base.iloc[0]["v:knob.dtype"], base.iloc[0]["v:knob.transpose_b"]) == ("bf16", "true")
    assert base.iloc[0]["label"] == "defaults" and base.iloc[0]["speedup"] == pytest.approx(1.0)
    assert "defaults the rows record" in a.baseline_note
    other = a.configs[
        (a.configs["v:knob.dtype"] == "fp32")
        & (a.configs["v:knob.transpose_a"] == "false")
        & (a.configs["v:knob.transpose_b"] == "false")
    ]
    assert other.iloc[0]["label"] == "fp32 + no transpose_b", "named by what differs from the recorded defaults"


def test_without_a_flag_or_recorded_defaults_there_is_no_baseline() -> None:
    rows = load(FIXTURES / "single", use_cache=False).drop(columns=["baseline", "knob_defaults"])
    a = analyse(rows)
    assert a.configs["speedup"].isna().all()
    assert a.baseline_note.startswith("no baseline: no trial is marked")


def test_importance_fits_a_numeric_knob_as_a_number_and_stays_fast() -> None:
    """500 configurations of an integer knob (as ``range(1, 501)`` samples it) and a two-valued one: the integer
    knob is fitted with its recorded IntDistribution (one split variable, not 500 categories) and carries the
    importance; the fit stays within seconds."""
    rng = np.random.default_rng(0)
    n = 500
    values = pd.DataFrame(
        {
            "knob.batch_size": [str(v) for v in rng.permutation(np.arange(1, n + 1))],
            "knob.flag": rng.choice(["false", "true"], n),
        }
    )
    target = pd.Series(np.sqrt(values["knob.batch_size"].astype(float)) * rng.uniform(0.98, 1.02, n), name="throughput")
    space = recorded_space(
        pd.DataFrame(
            {
                "space": [
                    json.dumps(
                        {
                            "knob.batch_size": distribution_to_json(IntDistribution(1, n)),
                            "knob.lr": distribution_to_json(FloatDistribution(1e-4, 1e-1, log=True)),
                        }
                    )
                ]
            }
        )
    )
    assert space["knob.batch_size"] == IntDistribution(1, n)
    t0 = time.perf_counter()
    imp, note = importance(values, target, space=space)
    assert time.perf_counter() - t0 < 10, "bounded cost"
    assert imp["batch_size"] > 0.9, (imp, note)
    dist, fitted = _distribution(values["knob.batch_size"], space["knob.batch_size"])
    assert isinstance(dist, IntDistribution)
    order = np.argsort(values["knob.batch_size"].astype(int).to_numpy())
    levels = np.asarray(fitted)[order]
    assert len(set(fitted)) <= 32 and (np.diff(levels) >= 0).all() and 1 <= levels.min() <= levels.max() <= n, (
        "binned to at most 32 ordered levels within the knob's range"
    )
    lr = pd.Series(["0.0001", "0.001", "0.01"])
    dist, _ = _distribution(lr, space["knob.lr"])
    assert isinstance(dist, FloatDistribution) and dist.log, "a log-scale knob keeps its scale"
    dist, _ = _distribution(pd.Series(["64", "null", "128"]), IntDistribution(64, 128))
    assert dist.__class__.__name__ == "CategoricalDistribution", "inactive (null) in some configurations"


def test_column_types_come_from_the_workloads_yaml(tmp_path: Path) -> None:
    """A knob null in one trial and set in another (inactive under a condition) has one type in every file, from
    the workload's own declaration: its default, or its space when the default is null. No list of names."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from sweeper.results import store
    from sweeper.sweep.config.space import parse_param, value_types

    defaults = {
        "knobs.workers": 0,
        "knobs.prefetch": None,
        "knobs.pinned": False,
        "knobs.decoder": "cpu",
        "workload.size": 32,
    }
    space = {"knobs.prefetch": parse_param("knobs.prefetch", "choice(2, 4)")}
    types = lookup.column_types(value_types(space), defaults)
    assert types == {
        "knob.workers": pa.int64(),
        "knob.prefetch": pa.int64(),
        "knob.pinned": pa.bool_(),
        "knob.decoder": pa.string(),
        "param.size": pa.int64(),
    }
    for i, prefetch in enumerate((None, 4)):
        store.write_row(
            tmp_path / f"s.{i:06d}.parquet",
            {"study": "s", "trial": i, "knob.prefetch": prefetch, "knob.decoder": None if i else "cpu"},
            types,
        )
    table = ds.dataset(tmp_path, format="parquet").to_table()
    assert table.schema.field("knob.prefetch").type == pa.int64() and table["knob.prefetch"].to_pylist() == [None, 4]
    assert table.schema.field("knob.decoder").type == pa.string()
