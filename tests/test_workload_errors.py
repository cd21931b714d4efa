"""A workload's own code failing in the sweeper's process: its ``check()`` raising, its module not importing, its
name taken by a standard-library module. One line each, naming the key and the file; a trial's failure never ends
the sweep."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna
import pytest

from sweeper.errors import ConfigError
from sweeper.results.store import read_results
from sweeper.sweep.config.trial_config import load_workload

from conftest import FAULTS, NO_REMEASURE, ROOT, run_main


def test_a_check_that_raises_fails_its_trial_and_the_sweep_goes_on(results: Path) -> None:
    """``check()`` raising ended the sweep with a 40-line traceback and left the trial RUNNING; now that trial is
    failed (reason ``check``, one line naming the exception and where it was raised) and the sweep goes on."""
    space = "hydra.sweeper.params={knobs.fault:'choice(check_raise,gpu_only)',knobs.work:16}"
    proc = run_main([*FAULTS, "-m", space, "hydra.sweeper.sampler=grid", *NO_REMEASURE], results)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    df = read_results(results).set_index("knob.fault")
    assert df.loc["gpu_only", "status"] == "skipped"  # the sweep went on past the failed check
    assert (df.loc["check_raise", "status"], df.loc["check_raise", "reason"]) == ("failed", "check")
    message = df.loc["check_raise", "message"]
    assert "\n" not in message and "RuntimeError: planted failure in check()" in message
    assert "tests/faultload/faults.py:" in message
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    assert sorted(t.state.name for t in study.trials) == ["FAIL", "PRUNED"]  # none left RUNNING (skipped: pruned)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's project folder, the command's working folder (``sys.path`` restored after: a module name is also
    looked up in the working folder, which is then added to it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def _error(module: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_workload({"name": "mine", "module": module})
    return info.value


def test_a_module_that_imports_something_missing_names_the_file_and_the_missing_module(project: Path) -> None:
    """Was ``No module named ...`` under the key `overrides` (the first override's), with no file named."""
    (project / "helper_bench.py").write_text('"""A user\'s module."""\n\nimport not_a_real_pkg_xyz  # noqa\n')
    for given in ("helper_bench", str(project / "helper_bench.py")):
        e = _error(given)
        assert e.key == "workload.module" and "\n" not in str(e)
        assert f"{project / 'helper_bench.py'}:3 imports 'not_a_real_pkg_xyz', which is not found" in e.problem
        assert e.fix == "install 'not_a_real_pkg_xyz' or fix that import"


def test_a_copied_built_in_workload_without_its_contract_names_what_is_missing(project: Path) -> None:
    """A copy of a built-in workload imports its ``workloads/spec/`` contract: the missing module is said, not
    hidden behind "is not importable from <dir>" (a package of the user's own, whose spec module is missing)."""
    source = (ROOT / "workloads" / "matmul.py").read_text(encoding="utf-8")
    (project / "my_matmul.py").write_text(source.replace("workloads.spec.matmul", "workloads.spec.my_matmul"))
    e = _error("my_matmul")
    assert "imports 'workloads.spec.my_matmul', which is not found" in e.problem
    assert "workloads/spec/" in e.fix and "define check, METRICS and Knobs" in e.fix
    (project / "benches").mkdir()
    (project / "benches" / "__init__.py").write_text("")
    (project / "benches" / "mm.py").write_text(source.replace("workloads.spec.matmul", "benches.spec.mm"))
    e = _error("benches.mm")
    assert "not importable from" not in e.problem
    assert f"{project / 'benches' / 'mm.py'}:" in e.problem and "imports 'benches.spec'" in e.problem


def test_a_module_named_like_a_standard_library_module_is_refused_with_the_reason(project: Path) -> None:
    """``trace.py`` worked with ``python -m sweeper`` (the working folder first on ``sys.path``) and not with
    ``knob-sweeper`` (the library's ``trace`` found), and nothing said the name was taken. Given as a file, it
    loads."""
    source = (ROOT / "examples" / "my_project" / "mlp_bench.py").read_text(encoding="utf-8")
    (project / "trace.py").write_text(source)
    e = _error("trace")
    assert e.key == "workload.module" and "standard-library module" in e.problem
    assert "trace_bench.py" in e.fix and "path/to/trace.py" in e.fix
    assert callable(load_workload({"name": "mine", "module": "trace.py"}).check)


def test_the_command_names_the_key_and_the_file(results: Path, tmp_path: Path) -> None:
    bench = tmp_path / "broken_bench.py"
    bench.write_text("import not_a_real_pkg_xyz  # noqa\n")
    own = ["hydra.searchpath=[file://examples/my_project/conf]", "+workload=mlp", f"workload.module={bench}"]
    proc = run_main(own, results)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: `workload.module`: workload module '{bench}' does not import: {bench}:1 imports "
        "'not_a_real_pkg_xyz', which is not found; install 'not_a_real_pkg_xyz' or fix that import"
    ]


def test_a_module_whose_contract_has_the_wrong_shape_is_one_line_under_its_key(project: Path) -> None:
    """``METRICS = 5`` was a TypeError traceback; ``Knobs = 3`` an error under the key `overrides`."""
    source = (ROOT / "examples" / "my_project" / "mlp_bench.py").read_text(encoding="utf-8")
    for name, extra, problem in (
        ("metrics_bench", "METRICS = 5", "METRICS in {} is 5"),
        ("knobs_bench", "Knobs = 3", "Knobs in {} is 3, not a dataclass"),
        ("check_bench", "check = 'no'", "check in {} is not a function"),
    ):
        (project / f"{name}.py").write_text(f"{source}\n{extra}\n")
        e = _error(name)
        assert e.key == "workload.module" and e.problem == problem.format(project / f"{name}.py")
