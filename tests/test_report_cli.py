"""The report's command line on recorded sweeps: files written, exit codes, comparisons, nightly gate, escaping."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from sweeper.report.__main__ import main
from sweeper.report.data import read_rows

from conftest import run_report

FIXTURES = Path(__file__).parent / "fixtures" / "report"


def copy(tmp_path: Path, *names: str) -> Path:
    """A results folder holding the rows of the named fixtures (the report writes into it)."""
    results = tmp_path / "results"
    for name in names:
        for f in (FIXTURES / name / "trials").glob("*.parquet"):
            (results / "trials").mkdir(parents=True, exist_ok=True)
            shutil.copy(f, results / "trials" / f"{name}-{f.name}")
    return results


def test_report_writes_markdown_and_html(tmp_path: Path) -> None:
    results = copy(tmp_path, "single", "multi")
    proc = run_report([str(results)], check=True)
    md = (results / "report.md").read_text()
    html = (results / "report.html").read_text()
    assert "## matmul — study matmul-single" in md and "## transformer_block — study block-multi" in md
    assert "Ranking by throughput" in md and "Ranking by peak memory" in md and "| 1 |" in md
    assert "x baseline" in md and "| baseline |" in md  # speed-ups against the defaults
    assert "importance (peak_mem_bytes)" in md  # the multi-objective study
    assert "Effect of each knob" in md and "Failed" not in md
    assert "throughput" in proc.stdout and "report written to" in proc.stdout
    assert "<script src" not in html and "Plotly.newPlot" in html and len(html) > 3_000_000  # plotly.js inline
    assert html.count('class="plot"') >= 6


def test_nightly_without_repeats_is_shown_not_gated(tmp_path: Path) -> None:
    """The recorded nights measured each configuration once: no between-trial noise, so nothing is gated (the
    gate's planted regressions, with repeats, are in test_nightly.py)."""
    results = copy(tmp_path, "nights")
    proc = run_report([str(results), "--baseline", "night-1", "--fail-on-regression", "5%"])
    assert proc.returncode == 0, proc.stderr
    assert "not gated: matmul: no configuration has repeats on both nights" in proc.stderr
    md = (results / "report.md").read_text()
    assert "## Nightly: night-2 vs baseline night-1" in md and "| not gated: needs repeats both nights |" in md
    assert "Best throughput per night" in md and "| night-1 |" in md and "| night-2 |" in md


@pytest.mark.parametrize("args,flag", [
    (["--baseline", "no-such-night"], "--baseline"),
    (["--baseline", "2001-01-01"], "--baseline 2001-01-01"),
    (["--baseline", "2026-13-45"], "--baseline"),
    (["--fail-on-regression", "5%"], "--fail-on-regression"),
    (["--baseline", "night-1", "--fail-on-regression", "lots"], "--fail-on-regression"),
    (["--compare", "no_such_column"], "--compare"),
    (["--compare", "gpu"], "--compare gpu"),  # every row ran on the same CPU
    (["--study", "night-9"], "--study"),
    (["--workload", "resnet50"], "results"),
    (["--top", "0"], "--top"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str],
                                         flag: str) -> None:
    results = copy(tmp_path, "nights")
    assert main([str(results), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: `{flag}"), err


def test_bad_flag_and_missing_folder_via_cli(tmp_path: Path) -> None:
    proc = run_report([str(tmp_path / "nowhere")])
    assert proc.returncode == 2 and proc.stderr.startswith("error: `results`") and "Traceback" not in proc.stderr
    proc = run_report([str(tmp_path), "--bogus"])
    assert proc.returncode == 2 and "--bogus" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_baseline_by_date_selects_that_night(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = copy(tmp_path, "nights")
    day = pd.to_datetime(read_rows(results, use_cache=False)["started_at"]).dt.strftime("%Y-%m-%d").iloc[0]
    # Both recorded nights started on the same date: the date means its last study, and nothing came after it.
    assert main([str(results), "--baseline", day]) == 2
    assert "no study started after the baseline (night-2)" in capsys.readouterr().err
    assert main([str(results), "--baseline", day, "--study", "night-1", "--top", "3"]) == 0
    assert "## Nightly: night-1 vs baseline night-2" in (results / "report.md").read_text()


def test_compare_two_fingerprints(tmp_path: Path) -> None:
    results = copy(tmp_path, "compare")
    run_report([str(results), "--compare", "cpu_cores"], check=True)
    md = (results / "report.md").read_text()
    assert "## Comparison by cpu_cores" in md
    assert "| cpu_cores=1 | one-core |" in md and "| cpu_cores=2 | two-cores |" in md
    assert re.search(r"cpu_cores=2 vs cpu_cores=1, 12 common configurations", md)
    assert "Spearman rank correlation over 12 common configurations" in md
    assert re.search(r"Best on cpu_cores=1 \(.+\) on cpu_cores=2: rank \d+ of 12", md)


def test_compare_gpu_generations(tmp_path: Path) -> None:
    """Rows recorded on an H200 and the same grid on this CPU: --compare gpu sets them side by side."""
    results = copy(tmp_path, "gpu")
    run_report([str(results), "--compare", "gpu"], check=True)
    md = (results / "report.md").read_text()
    assert "## Comparison by gpu" in md and "| NVIDIA H200 | gpu | 12 | 12 |" in md
    assert re.search(r"\| cpu:[^|]+ \| cpu \| 12 \| 12 \|", md)
    assert re.search(r"cpu:[^|]+ vs NVIDIA H200, 12 common configurations", md)
    assert "Spearman rank correlation over 12 common configurations" in md
    # mfu is given where the peak is known (the H200) and '-' where it is not (a CPU), never a made-up peak
    h200 = next(line for line in md.splitlines() if line.startswith("| NVIDIA H200 | gpu |"))
    cpu = next(line for line in md.splitlines() if re.match(r"\| cpu:[^|]+ \| cpu \|", line))
    assert re.search(r"\| 0\.0\d+ \|", h200) and "| - | - |" in cpu


def test_html_and_markdown_escape_names_from_configs(tmp_path: Path) -> None:
    results = copy(tmp_path, "failed")
    run_report([str(results)], check=True)
    html = (results / "report.html").read_text()
    md = (results / "report.md").read_text()
    for raw in ("<script>alert(1)</script>", "<img src=x onerror=alert(2)>"):
        assert raw not in html and raw not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert html.count("<script") == 3  # plotly.js, the figures (JSON), the loop that draws them
    figures = re.search(r'<script type="application/json" id="figures">(.*?)</script>', html, re.S).group(1)
    assert "<" not in figures and ">" not in figures
    assert "alert(1)" in json.dumps(json.loads(figures))  # the JSON still parses to the same text
    assert "exception:ValueError" in md and "| infeasible | oom |" in md


def test_script_json_cannot_close_the_script_element() -> None:
    from sweeper.report.html import script_json

    evil = {"name": "</script><script>alert(1)</script> & \u2028", "n": [1.5, None]}
    text = script_json(evil)
    assert not set("<>&\u2028") & set(text)
    assert json.loads(text) == evil


def test_cache_reads_only_new_files(tmp_path: Path) -> None:
    results = copy(tmp_path, "single")
    first = read_rows(results)
    assert (results / ".report-cache" / "rows.parquet").is_file()
    shutil.copy(FIXTURES / "multi" / "trials" / "rows.parquet", results / "trials" / "later.parquet")
    second = read_rows(results)
    assert len(second) == len(first) + len(read_rows(FIXTURES / "multi" / "trials" / "rows.parquet"))
    assert set(second["study"]) == {"matmul-single", "block-multi"}
    (results / "trials" / "later.parquet").unlink()
    assert len(read_rows(results)) == len(first)
    fresh = read_rows(results, use_cache=False)
    assert sorted(fresh.columns) == sorted(read_rows(results).columns)
