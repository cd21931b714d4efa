"""The report never crashes on a folder the sweeper wrote, never crowns a number no trial measured, and prints every
number compactly. Rows are built and written with the project's own row and store code (``tests/report_rows.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from report_rows import frame, row, write

from sweeper.report.analysis import analyse
from sweeper.report.blocks import interval, mib, num, pct, times
from sweeper.results.outcome import Status

from conftest import run_report

DEFAULTS = {"batch": 4, "fast": False}
SWEEP = [(4, False, 100.0), (8, False, 120.0), (4, True, 150.0), (4, False, 101.0), (4, True, 152.0)]


def sweep_rows(study: str = "s1", values=SWEEP, start: float | None = None) -> list[dict]:
    return [
        row(study, i, {"batch": b, "fast": f}, v, defaults=DEFAULTS, start=start) for i, (b, f, v) in enumerate(values)
    ]


def failed_single_run() -> dict:
    return row("single", None, {"batch": 4}, None, workload="mine", status=Status.FAILED, reason="exception:ValueError")


def test_a_failed_single_run_beside_a_sweep_is_listed_not_a_crash(tmp_path: Path) -> None:
    """A failed run of one's own model has no measured row: the report lists it with why (it raised KeyError
    'throughput' for the whole folder: an empty mask of object dtype selected columns, not rows)."""
    write(tmp_path, [*sweep_rows(), failed_single_run()])
    proc = run_report([str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "report.md").read_text()
    assert "Nothing to rank: no measured row: 1 failed (exception:ValueError)" in md
    assert "study s1" in md and "Best:" in md


def test_a_study_of_failed_trials_alone_is_listed(tmp_path: Path) -> None:
    write(tmp_path, [failed_single_run()])
    proc = run_report([str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    assert "Nothing to rank: no measured row: 1 failed (exception:ValueError)" in proc.stdout.replace("\n", " ")


def test_an_absurd_throughput_is_not_crowned_and_prints_compactly(tmp_path: Path) -> None:
    """A finite but absurd throughput copied into the folder (1e300) is listed as not a measurement, not ranked,
    and printed as 1.00e+300, not as a 301-digit number."""
    rows = sweep_rows() + [row("s1", 9, {"batch": 16, "fast": True}, 1e300, defaults=DEFAULTS)]
    a = analyse(frame(rows))
    assert a.configs["value"].max() == pytest.approx(152 / 2 + 150 / 2), "the best measured, not the absurd row"
    assert len(a.not_ranked) == 1 and "trial 9" in a.not_ranked[0] and "1.00e+300" in a.not_ranked[0]
    write(tmp_path, rows)
    proc = run_report([str(tmp_path)], env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    for text in (proc.stdout, (tmp_path / "report.md").read_text()):
        assert "Not ranked: trial 9" in text.replace("\n", " ")
        assert not re.search(r"\d[\d,]{20,}", text), "no number of more than 20 digits"


def test_a_throughput_far_above_its_study_is_not_crowned() -> None:
    rows = sweep_rows() + [row("s1", 9, {"batch": 16, "fast": True}, 3e7, defaults=DEFAULTS)]
    a = analyse(frame(rows))
    assert a.configs["value"].max() < 200 and len(a.not_ranked) == 1


@pytest.mark.parametrize("value", [1e300, -1e300, 1.5e12, float("inf")])
def test_every_number_format_is_compact(value: float) -> None:
    for text in (num(value), pct(value), times(value, value, value), interval(value, value), mib(value)):
        assert len(text) <= 40, text  # at most three numbers of 9-10 characters


def test_study_filter_narrows_the_trend_and_the_row_count(tmp_path: Path) -> None:
    """``--study X``: the header counts X's rows, and the trend over nights shows no other study."""
    write(tmp_path, sweep_rows("night-1") + sweep_rows("night-2", start=2e9) + sweep_rows("night-3", start=3e9))
    proc = run_report([str(tmp_path), "--study", "night-2", "--study", "night-3"])
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "report.md").read_text()
    assert f"{2 * len(SWEEP)} trial rows from" in md
    trend = md.split("Best throughput per night", 1)[1].split("\n\n", 2)[1]
    assert "night-2" in trend and "night-3" in trend and "night-1" not in trend
    write(tmp_path, [])
    proc = run_report([str(tmp_path), "--study", "night-1"])
    md = (tmp_path / "report.md").read_text()
    assert f"{len(SWEEP)} trial rows from" in md and "Trend over nights" not in md
