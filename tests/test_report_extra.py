"""The report without its extra (scipy, scikit-learn, plotly): core tables, the same intervals, one line of advice."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.report import student_t
from sweeper.report.__main__ import EXTRA_HINT, main

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "report"

# Runs the report in a fresh interpreter where the extra's packages cannot be imported (as after a plain install).
WITHOUT_EXTRA = """
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("scipy", "sklearn", "plotly"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from sweeper.report.__main__ import main
code = main(sys.argv[1:])
print("loaded:", ",".join(m for m in ("scipy", "sklearn", "plotly") if m in sys.modules))
sys.exit(code)
"""


def _results(folder: Path) -> Path:
    for name in ("single", "multi"):
        for f in (FIXTURES / name / "trials").glob("*.parquet"):
            (folder / "trials").mkdir(parents=True, exist_ok=True)
            shutil.copy(f, folder / "trials" / f"{name}-{f.name}")
    return folder


def _ranking(md: str) -> list[str]:
    """The throughput ranking tables' rows of a Markdown report."""
    return [line for line in md.splitlines() if line.startswith("| ") and "x (" in line]


def test_the_report_without_its_extra_writes_the_core_tables_and_says_what_to_install(tmp_path: Path) -> None:
    bare = _results(tmp_path / "bare")
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, str(bare)], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if line.strip()] == [EXTRA_HINT]
    assert "pip install 'torch-knob-sweeper[report]'" in EXTRA_HINT
    assert "loaded: \n" in done.stdout  # none of them was imported after all
    assert not (bare / "report.html").exists()
    md = (bare / "report.md").read_text()
    assert "**Ranking by throughput**" in md and "PED-ANOVA" in md and "plots are in" not in md

    full = _results(tmp_path / "full")
    assert main([str(full)]) == 0  # here the extra is installed: the same intervals and ties, and the HTML
    assert _ranking(md) == _ranking((full / "report.md").read_text()) != []
    assert (full / "report.html").exists()


@pytest.mark.parametrize("df", [0.5, 1, 2, 3, 7, 29, 30, 100, 1000, 1e5])
def test_the_t_quantile_without_scipy_is_scipys(df: float) -> None:
    from scipy import stats

    for p in (0.6, 0.9, 0.975, 0.995, 0.9995):
        assert student_t._ppf(p, df) == pytest.approx(float(stats.t.ppf(p, df)), rel=1e-8)
    assert student_t._ppf(0.025, df) == pytest.approx(-student_t._ppf(0.975, df))
