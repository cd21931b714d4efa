"""What a person reads in the report: rank order that never contradicts the numbers, numeric knob values in
numeric order, terminal tables that fit 80 or 200 columns without a broken word, an HTML page that fits a 1,400-px
window and opens with contents, a fingerprint line without empty fields, and the recipe that re-runs a
configuration."""

from __future__ import annotations

import html
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeper.report.blocks import num
from sweeper.report.importance import marginals
from sweeper.report.stats import group_ranks, rank_configs

from conftest import NO_REMEASURE, run_main, run_report

FIXTURES = Path(__file__).parent / "fixtures" / "report"


def _mixed(tmp_path: Path) -> Path:
    """A results folder of several studies (three workloads), as a multi-study page gets them."""
    results = tmp_path / "results"
    (results / "trials").mkdir(parents=True)
    for name in ("single", "failed", "multi", "data"):
        shutil.copy(FIXTURES / name / "trials" / "rows.parquet", results / "trials" / f"{name}.parquet")
    return results


def test_ranking_lists_by_throughput_with_ties_as_groups() -> None:
    # The case: a narrow interval ahead of a wide one. Ranked by "nothing surely ahead", the wide
    # 0.952 got rank 1 and was listed above 1.321 (rank 2). Listed by value, ties are runs within noise.
    configs = pd.DataFrame(
        {
            "value": [0.952, 1.5, 1.321, 0.2],
            "lo": [0.40, 1.45, 1.30, 0.19],
            "hi": [1.60, 1.55, 1.34, 0.21],
            "peak_mem_bytes": [1.0, 2.0, 3.0, 4.0],
        },
        index=["wide", "a", "b", "slow"],
    )
    ranked = rank_configs(configs)
    assert list(ranked.index) == ["a", "b", "wide", "slow"]
    assert list(ranked["rank"]) == [1, 2, 2, 4]
    assert list(ranked["tied"]) == [False, True, True, False]
    assert (np.diff(ranked["rank"].to_numpy()) >= 0).all() and (np.diff(ranked["value"].to_numpy()) <= 0).all()
    assert group_ranks(np.array([3.0, np.nan]), np.array([2.9, np.nan]), np.array([3.1, np.nan])).tolist() == [1, 2]


def test_numeric_knob_values_sort_as_numbers() -> None:
    configs = pd.DataFrame({"value": [4.0, 3.0, 2.0, 1.0, 5.0], "n": [1] * 5})
    values = pd.DataFrame(
        {
            "knob.batch_size": ["128", "256", "32", "64", "null"],
            "knob.precision": ["bf16", "fp32", "bf16", "fp32", "tf32"],
        }
    )
    m = marginals(configs, values, ["knob.batch_size", "knob.precision"])
    assert list(m[m["knob"] == "batch_size"]["value"]) == ["32", "64", "128", "256", "null"]
    assert list(m[m["knob"] == "precision"]["value"]) == ["bf16", "fp32", "tf32"]


@pytest.mark.parametrize("width", [80, 200])
def test_terminal_tables_fit_the_width_without_breaking_words(tmp_path: Path, width: int) -> None:
    results = _mixed(tmp_path)
    proc = run_report([str(results)], env={"COLUMNS": str(width)}, check=True)
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("report written to ")]  # paths
    assert max(map(len, lines)) <= width, max(lines, key=len)
    # Every word the terminal prints is a word of the Markdown report (which never wraps), so none was broken.
    md = html.unescape((results / "report.md").read_text()).replace("\\|", " ")

    def norm(word: str) -> str:
        return word.strip("()*_`.,;:")

    known = {norm(w) for w in re.split(r"[\s|]+", md)} | {
        "...",
        "more",
        "row",
        "rows",
        "column",
        "columns",
        "#1",  # the terminal's configuration column: "#1 + batch_size=128" (what differs from the first)
        "+",
        "and",
        "in",
        "report.md",
        "/",
        "report.html",
    }
    words = [w for line in lines for w in re.split(r"[\s│┃┏┓┗┛┡┩└┘┳┻╇╋━─┬┴┼├┤╭╮╰╯]+", line) if norm(w)]
    # the results folder's path is one word; longer than a line (pytest's folders under xdist are), it is cut
    broken = sorted({w for w in words if norm(w) not in known and norm(w) not in str(results)})
    assert not broken, broken
    assert "Ranking by throughput" in proc.stdout and "Summary: the best configuration of each study" in proc.stdout


def test_fingerprint_line_ignores_rows_that_never_ran(tmp_path: Path) -> None:
    results = _mixed(tmp_path)
    run_report([str(results)], check=True)
    md = (results / "report.md").read_text()
    assert "Ran on" in md
    assert not re.search(r"cpu: on|torch \.|on \?|torch \?", md)


def test_recipe_overrides_re_run_the_configuration(results: Path, tmp_path: Path) -> None:
    """The recipe's command, run as printed, measures the same configuration (every knob and parameter)."""
    run_main(
        [
            "+workload=matmul",
            "-m",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.sampler=random",
            "hydra.sweeper.seed=5",
            *NO_REMEASURE,
        ],
        results,
        check=True,
    )
    proc = run_report([str(results), "--recipe"], check=True)
    command = next(line for line in proc.stdout.splitlines() if line.startswith("python -m sweeper "))
    assert (
        "# apply it in a training script (cpu, as measured):" in proc.stdout
        or "# no knob of it needs code" in proc.stdout
    )
    again = tmp_path / "again"
    run_main(shlex.split(command)[3:], again, check=True)
    swept = pd.read_parquet(results / "trials")
    rerun = pd.read_parquet(again / "trials")
    assert len(rerun) == 1 and rerun["status"].iloc[0] == "complete"
    cols = [c for c in rerun.columns if c.startswith(("knob.", "param.")) and not c.startswith("knob.distributed.")]
    swept = swept[swept["status"] == "complete"]
    same = swept.merge(rerun[cols].astype(object), on=cols, how="inner")
    assert len(same) >= 1, "the re-run's configuration is one the sweep measured"
    shown = re.search(r"^# .+: (\S+) TFLOP/s", proc.stdout, re.M).group(1)
    assert shown == num(same["throughput"].mean()), "the recipe's overrides are those of the configuration it names"


def test_recipe_prints_whole_number_knobs_of_float_columns_as_ints() -> None:
    """A knob inactive in some rows is a float column in Parquet (4.0, 10.0): the recipe's lines must still run
    (``os.nice(10.0)`` raises TypeError; ``prefetch_factor=4.0`` reads wrong)."""
    from sweeper.report.recipe import code_lines

    row = pd.Series(
        {
            "workload": "resnet50",
            "knob.num_workers": 8,
            "knob.prefetch_factor": 4.0,
            "knob.worker_nice": 10.0,
            "knob.pin_memory": True,
        }
    )
    lines = code_lines(row)
    nice = next(line for line in lines if "os.nice" in line)
    assert "os.nice(10))" in nice, nice
    loader = next(line for line in lines if line.startswith("loader = DataLoader("))
    assert "num_workers=8, prefetch_factor=4, pin_memory=True" in loader, loader
