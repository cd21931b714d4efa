"""The report names the input-pipeline stage that limits a data-bound configuration, from recorded rows."""

from __future__ import annotations

import shutil
from pathlib import Path

from sweeper.report.diagnose import diagnose

from conftest import ROOT, run_report

H200 = ROOT / "tests" / "fixtures" / "h200"
H200_JPEG = H200 / "jpeg-sweep-2026-12-01T1125.parquet"


def test_data_bound_names_the_stage_only_when_data_bound() -> None:
    assert diagnose(0.45, 70, 0.1, "decode") == "data-bound (decode)"
    assert diagnose(0.45, 70, 0.1, None) == "data-bound"
    assert diagnose(0.02, 97, 0.5, "decode") == "compute-bound", "a stage is named only for a data-bound row"


def test_report_of_recorded_h200_jpeg_rows_names_decode(tmp_path: Path) -> None:
    """Rows of the H200 JPEG sweep of 2026-12-01: the baseline (0 workers) and the CPU-decoding recipe waited for
    data (0.91, 0.42) and their rows say decode was the slowest stage; the report carries that into the diagnosis."""
    trials = tmp_path / "results" / "trials"
    trials.mkdir(parents=True)
    shutil.copy(H200_JPEG, trials / "h200.parquet")
    run_report([str(tmp_path / "results"), "--out", str(tmp_path / "report.md")], check=True)
    assert "data-bound (decode)" in (tmp_path / "report.md").read_text()


def test_report_of_recorded_h200_rows_names_a_host_that_falls_behind_launch_bound(tmp_path: Path) -> None:
    """The default JPEG sweep on the H200 (2026-12-02 19:56 UTC): with 3/8 of each batch on the GPU and GPU
    crops the model hardly waited for data (0.025) yet the GPU idled 14.5 % while the host spent 0.83 of the
    window launching steps (``host_step_frac``); no other configuration there had both. The report calls it
    launch-bound (before ``host_step_frac`` it read as memory-bound)."""
    trials = tmp_path / "results" / "trials"
    trials.mkdir(parents=True)
    shutil.copy(H200 / "jpeg-sweep-2026-12-02T1956.parquet", trials / "h200.parquet")
    run_report([str(tmp_path / "results"), "--out", str(tmp_path / "report.md")], check=True)
    lines = [line for line in (tmp_path / "report.md").read_text().splitlines() if "launch-bound" in line]
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 1 and "0.375" in table[0], lines
