"""Start-up, signals and processes: what the command imports before its Ctrl-C handler, the signal windows of its
start, the trial's process tree, the forkserver lost from outside, and the one liveness check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sweeper.results.procs import pid_alive

ROOT = Path(__file__).resolve().parent.parent


def test_the_plugin_and_the_package_import_no_pyarrow_numpy_or_pandas() -> None:
    """``python -m sweeper`` and ``knob-sweeper`` import the ``sweeper`` package before their Ctrl-C handler is
    installed, and Hydra's plugin discovery imports the plugin: neither may pay for pyarrow (a Ctrl-C in that
    second printed a traceback from ``import pyarrow.compute``)."""
    probe = "import sweeper, sweeper.__main__, hydra_plugins.knob_sweeper.knob_sweeper"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "hydra_plugins.knob_sweeper.knob_sweeper" in imported  # the probe reads what it should
    assert not {m.split(".")[0] for m in imported} & {"pyarrow", "numpy", "pandas", "torch", "optuna"}


def test_the_package_still_offers_its_public_names() -> None:
    import sweeper
    from sweeper.results.store import read_results

    assert sweeper.read_results is read_results
    assert {"ConfigError", "Status", "TrialOutcome", "read_results"} <= set(sweeper.__all__)
    with pytest.raises(AttributeError):
        sweeper.no_such_name  # noqa: B018


def test_pid_alive_is_the_one_liveness_check() -> None:
    """pid 0 and negative pids name no process (``kill(0, 0)`` succeeds: it signals this process group); a zombie
    runs nothing; a reaped pid is gone; this process runs. Every caller asks the same function."""
    from sweeper.results import store
    from sweeper.sweep import attrs, slots

    assert pid_alive(os.getpid())
    assert not pid_alive(0) and not pid_alive(-1)
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # ended, not reaped
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not pid_alive(child.pid)
    finally:
        child.wait()
    assert not pid_alive(child.pid)
    assert store.pid_alive is slots.pid_alive is attrs.pid_alive is pid_alive
    others = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in sorted((ROOT / "sweeper").rglob("*.py"))
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"os\.kill\([^,]+,\s*0\)|\.status\(\)\s*!=\s*psutil\.STATUS_ZOMBIE", line)
    ]
    assert others == ["sweeper/results/procs.py:20"]  # the check itself, nowhere else
