"""A trial's setup, split: the workload module's import in the trial process (``setup_load_s``) and its build
(``setup_build_s``), beside the whole (``setup_s``, which also holds the device's start)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from sweeper.trial import local
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
