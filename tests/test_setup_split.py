"""A trial's setup: split into the workload module's import in the trial process (``setup_load_s``) and its build
(``setup_build_s``), beside the whole (``setup_s``, which also holds the device's start); and the trial process
starting processes as the user's own script would."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from sweeper.results.outcome import Status
from sweeper.trial import local
from sweeper.trial.isolate import run_isolated
from tests.faultload.nights import night_config


class _Clock(types.ModuleType):
    """``time`` for ``sweeper.trial.local``: ``perf_counter`` moves only when the user's module says so."""

    def __init__(self) -> None:
        super().__init__("setup_clock")
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_setup_is_split_into_the_modules_import_and_its_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setitem(sys.modules, "setup_clock", clock)
    monkeypatch.setattr(local, "time", clock)
    mine = tmp_path / "slow_setup_bench.py"
    mine.write_text(
        "import setup_clock\n"
        "setup_clock.advance(2.0)  # an import that costs 2 s\n"
        "from tests.faultload import faults\n"
        "def build(cfg, device):\n"
        "    setup_clock.advance(5.0)  # a build that costs 5 s\n"
        "    return faults.build(cfg, device)\n"
    )
    cfg = night_config([f"workload.module={mine}", "trial.isolate=false"])
    metrics = local.execute(cfg)
    assert (metrics["setup_load_s"], metrics["setup_build_s"], metrics["setup_s"]) == (2.0, 5.0, 7.0)


def test_a_trial_starts_processes_as_the_users_own_script_would(tmp_path: Path) -> None:
    """multiprocessing's default start method in a trial is the one a plain ``python train.py`` gets (fork on Linux
    before Python 3.14), not the forkserver the trial process itself came from: a user's DataLoader workers then
    fork from the trial instead of starting a new server that imports torch and the user's module again."""
    mine, out = tmp_path / "start_method_bench.py", tmp_path / "seen.txt"
    mine.write_text(
        "import multiprocessing\n"
        "from pathlib import Path\n"
        "from tests.faultload import faults\n"
        "def build(cfg, device):\n"
        "    Path(cfg['workload']['probe_to']).write_text(multiprocessing.get_start_method())\n"
        "    return faults.build(cfg, device)\n"
    )
    plain = subprocess.run(
        [sys.executable, "-c", "import multiprocessing; print(multiprocessing.get_start_method())"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    cfg = night_config([f"workload.module={mine}", f"+workload.probe_to={out}"])
    outcome = run_isolated(cfg, 300.0, tmp_path / "trial.log")
    assert outcome.status == Status.COMPLETE, (outcome.reason, outcome.message)
    assert out.read_text() == plain
