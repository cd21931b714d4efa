"""The README's install, as a new user gets it: an editable and a wheel install into a fresh virtual environment,
run from a temporary folder (not the checkout); and the own-model example of ``examples/`` from the wheel install,
in a project folder that also holds a folder named ``workloads/``.

The fresh environment sees the dependencies (torch, hydra, optuna, ...) of the interpreter running the tests
through a ``.pth`` file listing its site-packages folders (their own ``.pth`` files, such as this checkout's
editable finder, are not processed there), and the project itself is installed with ``--no-deps``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

from conftest import NO_REMEASURE, ROOT

pytestmark = pytest.mark.slow


def _venv(where: Path) -> Path:
    """A fresh venv at ``where`` whose .pth points at this interpreter's site-packages; returns its bin folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(where), "platbase": str(where)}))
    sites = [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (purelib / "deps.pth").write_text("\n".join(sites) + "\n")
    return where / "bin"


def _pip(bin_dir: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "-q", "--no-deps", *args],
        check=True,
        cwd=bin_dir.parent,
    )


def _run(cmd: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(cmd, cwd=cwd, env={**env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def editable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bin_dir = _venv(tmp_path_factory.mktemp("editable") / "venv")
    _pip(bin_dir, "-e", str(ROOT))
    return bin_dir


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)], check=True, cwd=dist
    )
    bin_dir = _venv(tmp_path_factory.mktemp("wheel") / "venv")
    _pip(bin_dir, *map(str, dist.glob("*.whl")))
    return bin_dir


@pytest.mark.parametrize("install", ["editable", "wheel"])
def test_installed_console_script_and_module_work_from_any_folder(
    install: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    bin_dir: Path = request.getfixturevalue(install)
    found = _run([str(bin_dir / "python"), "-c", "import sweeper, workloads; print(sweeper.__file__)"], tmp_path)
    assert str(ROOT) not in found.stdout or install == "editable"
    shown = _run([str(bin_dir / "python"), "-m", "sweeper", "+workload=matmul", "--cfg", "job"], tmp_path)
    assert "search_space:" in shown.stdout  # composed with hydra/sweeper=knob: the plugin is found
    _run(
        [
            str(bin_dir / "knob-sweeper"),
            "+workload=matmul",
            "-m",
            "hydra.sweeper.n_trials=1",
            f"results_dir={tmp_path / 'results'}",
            *NO_REMEASURE,
        ],
        tmp_path,
    )
    df = pd.read_parquet(tmp_path / "results" / "trials")
    assert list(df["status"]) == ["complete"] and df["baseline"].all()


def test_own_model_from_a_wheel_install(wheel: Path, tmp_path: Path) -> None:
    """examples/my_project, copied into a temporary folder beside a `workloads/` folder of the user's own: both
    documented commands sweep it, a built-in workload still runs there, the report gives its recipe."""
    project = tmp_path / "my_project"
    shutil.copytree(ROOT / "examples" / "my_project", project)
    (project / "workloads").mkdir()
    (project / "workloads" / "__init__.py").write_text("raise ImportError('the user\\'s own package')\n")
    _run(
        [str(wheel / "knob-sweeper"), "-cd", "conf", "+workload=mlp", "-m", "hydra.sweeper.n_trials=2", *NO_REMEASURE],
        project,
    )
    _run(
        [
            str(wheel / "python"),
            "-m",
            "sweeper",
            "hydra.searchpath=[file://conf]",
            "+workload=mlp",
            "-m",
            "hydra.sweeper.n_trials=1",
            *NO_REMEASURE,
        ],
        project,
    )
    _run([str(wheel / "python"), "-m", "sweeper", "+workload=matmul", "knobs.dtype=fp32"], project)
    df = pd.read_parquet(project / "results" / "trials")
    mlp = df[df["workload"] == "mlp"]
    assert len(mlp) == 3 and (mlp["status"] == "complete").all() and (mlp["study"] == "mlp-tiny").all()
    assert mlp["knob.batch_size"].isin([8, 16, 32]).all()
    assert list(df[df["workload"] == "matmul"]["status"]) == ["complete"]
    recipe = _run(
        [str(wheel / "python"), "-m", "sweeper.report", "results", "--recipe", "--study", "mlp-tiny"], project
    )
    assert "+workload=mlp" in recipe.stdout


def _readme_file(name: str, lang: str) -> str:
    """The code block of the README that starts with ``# <name>``, as written there."""
    import re

    text = (ROOT / "README.md").read_text()
    m = re.search(r"```" + lang + r"\n# " + re.escape(name) + r"\n(.*?)```", text, re.S)
    assert m, f"the README has no {lang} block starting with '# {name}'"
    return m.group(1)


def test_the_readmes_own_model_followed_literally_runs_from_a_wheel(wheel: Path, tmp_path: Path) -> None:
    """The README's "Your own model" files, written as the README shows them into an empty folder, give a first
    trial that completes and a sweep with a recipe, with nothing but the installed wheel."""
    project = tmp_path / "my_project"
    (project / "conf" / "workload").mkdir(parents=True)
    (project / "mlp_bench.py").write_text(_readme_file("my_project/mlp_bench.py", "python"))
    (project / "conf" / "workload" / "mlp.yaml").write_text(_readme_file("my_project/conf/workload/mlp.yaml", "yaml"))
    _run([str(wheel / "knob-sweeper"), "-cd", "conf", "+workload=mlp"], project)
    _run([str(wheel / "knob-sweeper"), "-cd", "conf", "+workload=mlp", "-m", "hydra.sweeper.n_trials=2"], project)
    df = pd.read_parquet(project / "results" / "trials")
    assert (df["status"] == "complete").all(), df[["trial", "status", "reason", "confirm_of"]]
    assert df["confirm_of"].isna().sum() == 3, "one run and two trials; the baseline and the best measured again"
    assert df["confirm_of"].notna().any(), "the default sweep measures the baseline and the best again"
    assert set(df["confirm_of"].dropna().astype(int)) <= set(df["trial"].dropna().astype(int))
    recipe = _run([str(wheel / "python"), "-m", "sweeper.report", "results", "--recipe", "--study", "mlp-tiny"],
                  project)  # fmt: skip
    assert "+workload=mlp" in recipe.stdout and "AdamW" in recipe.stdout, recipe.stdout
