"""The wheel: every module of the packages, their ``py.typed`` markers, and the report-only dependencies in an extra."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REPORT_ONLY = ("scipy", "plotly", "scikit-learn")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
        check=True,
        cwd=dist,
        timeout=300,
    )
    (path,) = dist.glob("*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_holds_every_module_and_the_typed_markers(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    sources = {
        str(p.relative_to(ROOT))
        for pkg in ("sweeper", "workloads", "hydra_plugins")
        for p in (ROOT / pkg).rglob("*.py")
    }
    assert sources - names == set()
    assert {"sweeper/py.typed", "workloads/py.typed"} <= names


def test_report_only_dependencies_are_in_the_report_extra(wheel: zipfile.ZipFile) -> None:
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    requires = [
        line.split(":", 1)[1].strip()
        for line in wheel.read(meta).decode().splitlines()
        if line.startswith("Requires-Dist:")
    ]
    for name in REPORT_ONLY:
        mine = [r for r in requires if r.startswith(name)]
        assert mine and all('extra == "report"' in r for r in mine), (name, mine)
    assert any(r.startswith("torch-knob-sweeper[report]") and 'extra == "dev"' in r for r in requires), requires


def test_a_users_workloads_folder_does_not_shadow_the_packages_own(tmp_path: Path) -> None:
    """``python -m sweeper`` puts the current folder first on ``sys.path``; a project with a ``workloads/`` folder
    of its own still gets the built-in workloads (``sweeper`` imports its sibling package by location)."""
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "__init__.py").write_text("raise SystemExit('the project folder was imported')\n")
    probe = "import sweeper, workloads; print(workloads.__file__)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == ROOT / "workloads" / "__init__.py"
