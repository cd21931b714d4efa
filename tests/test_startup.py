"""Start-up, signals and processes: what the command imports before its Ctrl-C handler, the signal windows of its
start, the trial's process tree, the forkserver lost from outside, and the one liveness check."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from sweeper.results.procs import pid_alive
from sweeper.results.store import read_results

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
    from sweeper.sweep.run import slots
    from sweeper.sweep.study import attrs, journal

    assert pid_alive(os.getpid())
    assert not pid_alive(0) and not pid_alive(-1)
    child = subprocess.Popen(["true"])
    try:
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, left unreaped: a zombie
        assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE
        assert not pid_alive(child.pid)
    finally:
        child.wait()
    assert not pid_alive(child.pid)
    assert store.pid_alive is slots.pid_alive is attrs.pid_alive is journal.pid_alive is pid_alive
    others = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "sweeper").rglob("*.py"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.search(r"os\.kill\([^,]+,\s*0\)|\.status\(\)\s*!=\s*psutil\.STATUS_ZOMBIE", line)
    ]
    assert others == ["sweeper/results/procs.py"]  # the check itself, once, nowhere else


def test_a_ctrl_c_while_the_forkserver_starts_reaches_the_sweeper_and_not_the_forkserver() -> None:
    """SIGINT was set to ignored while the forkserver was spawned (so that the terminal's Ctrl-C would not
    interrupt its import of torch): a Ctrl-C landing then was lost, and the sweep ran all its trials and exited 0.
    Now it is blocked meanwhile and raised as soon as the spawn is done; the forkserver and its trials still start
    with SIGINT ignored, and nothing blocked."""
    code = f"""
import os, signal, sys
import multiprocessing.forkserver as forkserver
sys.path.insert(0, {str(ROOT / "tests")!r})
import preload_probe
from sweeper.trial import isolate

real = forkserver.ensure_running
def landing():  # a Ctrl-C lands while the forkserver is being started
    os.kill(os.getpid(), signal.SIGINT)
    real()
forkserver.ensure_running = landing
try:
    isolate._ensure_forkserver()
    print("lost")
except KeyboardInterrupt:
    print("raised")
forkserver.ensure_running = real
print(signal.SIGINT in signal.pthread_sigmask(0, []))
ctx = isolate._context()
parent, child = ctx.Pipe()
p = ctx.Process(target=preload_probe.signals, args=(child,))
p.start()
print(parent.recv())
p.join()
status = open(f"/proc/{{forkserver._forkserver._forkserver_pid}}/status").read()
masks = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
print((bool(int(masks["SigIgn"], 16) & 2), bool(int(masks["SigBlk"], 16) & 2)))  # SIGINT's bit: 1 << (2 - 1)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome, blocked_here, trial, server = done.stdout.strip().splitlines()[-4:]
    assert outcome == "raised"  # the Ctrl-C reached the sweeper
    assert blocked_here == "False"
    assert trial == "(True, False)"  # a trial process: SIGINT ignored, not blocked
    assert server == "(True, False)"  # the forkserver too
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("sig,name,code", [("SIGINT", "Ctrl-C", 130), ("SIGTERM", "SIGTERM", 143)])
def test_a_signal_while_starting_is_one_line_and_its_exit_code(sig: str, name: str, code: int) -> None:
    """From the command's first line on (the package imports nothing heavy before the handler): SIGTERM too, which
    ended the process silently by its default action."""
    probe = f"import os, signal, sweeper.__main__; os.kill(os.getpid(), signal.{sig}); import torch"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"interrupted ({name}) while starting: nothing ran; run the command again"
    ]


PG_URL = os.environ.get("KNOB_SWEEPER_PG_URL")


@pytest.mark.skipif(not PG_URL, reason="needs PostgreSQL (KNOB_SWEEPER_PG_URL)")
def test_a_postgresql_command_shows_no_experimental_warning(results: Path, recwarn: pytest.WarningsRecorder) -> None:
    """Optuna's ExperimentalWarning for ``fail_stale_trials`` (and for the ``heartbeat_interval`` argument) was
    printed on every command with PostgreSQL storage (its heartbeat on). A sweep whose trials never launch (the
    device check answers them): only the storage's and the recovery's calls run."""
    from conftest import FAULTS, NO_REMEASURE, run_main

    name = f"no-warning-{uuid.uuid4().hex[:12]}"
    proc = run_main(
        [*FAULTS, "-m", "hydra.sweeper.params={knobs.fault:gpu_only,knobs.work:16}", *NO_REMEASURE,
         f"hydra.sweeper.storage={PG_URL}", "hydra.sweeper.heartbeat_interval=10", f"hydra.sweeper.study_name={name}"],
        results,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    import optuna

    assert [str(w.message) for w in recwarn if issubclass(w.category, optuna.exceptions.ExperimentalWarning)] == []


@pytest.mark.parametrize("fault", ["orphan", "daemon"])
def test_a_trials_processes_in_a_new_session_end_with_it(results: Path, tmp_path: Path, fault: str) -> None:
    """A process the workload starts in a session of its own is outside the trial's process group: it outlived
    the trial and the sweep (``sleep 300`` left with parent 1). Every descendant of the trial ends with it: a
    program it runs (``orphan``), and a daemon it forks twice without exec (``daemon``)."""
    from conftest import FAULTS, run_main

    pids = tmp_path / "orphans"
    proc = run_main([*FAULTS, f"knobs.fault={fault}", f"workload.orphans_to={pids}"], results)
    left = [int(p) for p in pids.read_text().split()]
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert left and [p for p in left if pid_alive(p)] == []
    finally:
        for p in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


def test_the_forkserver_killed_from_outside_is_not_the_workloads_failure(results: Path, tmp_path: Path) -> None:
    """The forkserver killed while a trial runs (as the kernel's OOM killer would): the trial was ``failed
    exit:255``, counted toward ``n_trials`` and the failure budget. Now it is interrupted (reason ``forkserver``:
    not counted, measured again by the next command), the next trial restarts the forkserver, and the sweep goes
    on to its one counted trial."""
    import multiprocessing.forkserver as forkserver
    import threading

    from conftest import FAULTS, NO_REMEASURE, run_main

    hold = tmp_path / "go"  # the trials' steps wait for it: the first is running when the forkserver is killed
    killed: list[int] = []

    def kill_the_forkserver_while_a_trial_runs() -> None:
        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline and not killed:
                server = forkserver._forkserver._forkserver_pid
                with contextlib.suppress(psutil.Error, ProcessLookupError):
                    # a trial process leads a process group of its own (the readiness probe does not)
                    if server and any(os.getpgid(c.pid) == c.pid for c in psutil.Process(server).children()):
                        os.kill(server, signal.SIGKILL)
                        killed.append(server)
                time.sleep(0.05)  # polls for the trial to start
        finally:
            hold.touch()

    watcher = threading.Thread(target=kill_the_forkserver_while_a_trial_runs, daemon=True)
    watcher.start()
    space = "hydra.sweeper.params={knobs.fault:none,knobs.work:'range(8,1000)'}"
    proc = run_main(
        [*FAULTS, "-m", space, "hydra.sweeper.sampler=random", "hydra.sweeper.n_trials=1", "hydra.sweeper.seed=0",
         f"workload.hold_until={hold}", *NO_REMEASURE],
        results,
    )  # fmt: skip
    watcher.join()
    assert killed, "the watcher never saw a trial running"
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = read_results(results).sort_values("trial")
    assert list(zip(df["status"], df["reason"].fillna(""))) == [("interrupted", "forkserver"), ("complete", "")]
    assert "killed from outside" in df["message"].iloc[0]
    assert forkserver._forkserver._forkserver_pid not in (None, killed[0])  # restarted


def test_cutting_a_trial_kills_what_it_forked_into_a_session_of_its_own() -> None:
    """A trial cut by its timeout, the budget or Ctrl-C is killed by its process group; a child that left it
    (here ``setsid sleep``, in a session of its own) is killed too, found by parentage while the trial runs."""
    from sweeper.trial.proc import kill_group

    leader = subprocess.Popen(["sh", "-c", "setsid sleep 300 & wait"], start_new_session=True)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        while not (children := psutil.Process(leader.pid).children()) or os.getsid(children[0].pid) == leader.pid:
            assert time.monotonic() < deadline
            time.sleep(0.01)  # polls for sh's child to be in a session of its own: outside the "trial's" group
        kill_group(leader.pid)
        leader.wait(timeout=30)
        psutil.wait_procs(children, timeout=10)
        assert [p.pid for p in children if pid_alive(p.pid)] == []
    finally:
        for p in [psutil.Process(leader.pid), *children] if leader.poll() is None else children:
            with contextlib.suppress(psutil.Error):
                p.kill()
