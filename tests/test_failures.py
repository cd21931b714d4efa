"""Failures never end a sweep and never lose a row: a fault-injection workload, a SIGKILLed sweeper, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import psutil
import pytest
from optuna.trial import TrialState

from conftest import NO_REMEASURE, ROOT, run_cli, run_main, run_report

FAULTS = ["hydra.searchpath=[file://tests/faultload/conf]", "+workload=faults"]
EXPECTED = {
    "none": ("complete", ""),
    "oom": ("infeasible", "oom"),
    "nan": ("failed", "nonfinite"),
    "raise": ("failed", "exception:ValueError"),
    "segfault": ("failed", "signal:SIGSEGV"),
    "abort": ("failed", "signal:SIGABRT"),
    "sigkill": ("failed", "signal:SIGKILL"),
    "hang": ("failed", "timeout"),
    "exit": ("failed", "exit:3"),
}


def _study(results: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{results / 'optuna.db'}")


def test_every_fault_gets_a_truthful_row_and_the_sweep_goes_on(results: Path) -> None:
    # The grid visits every (fault, work) pair once: 9 faults x 2 sizes = 18 trials.
    proc = run_main(
        [*FAULTS, "-m", "hydra.sweeper.sampler=grid", "hydra.sweeper.n_trials=18", "trial.timeout_s=6", *NO_REMEASURE],
        results,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_parquet(results / "trials")
    assert sorted(df["trial"]) == list(range(18))
    for _, row in df.iterrows():
        status, reason = EXPECTED[row["knob.fault"]]
        assert row["status"] == status, (row["knob.fault"], row["status"], row["reason"], row["message"])
        assert row["reason"] == reason, (row["knob.fault"], row["reason"])
    raised = df[df["knob.fault"] == "raise"].iloc[0]
    assert "planted failure at step" in raised["message"] and "in step" in raised["message"]  # last traceback lines
    nan = df[df["knob.fault"] == "nan"].iloc[0]
    assert nan["steps_measured"] > 0 and nan["loss_finite"] == False  # noqa: E712 - measured numbers kept
    hang = df[df["knob.fault"] == "hang"]
    assert (hang["wall_s"] < 30).all()

    study = _study(results, "faults")
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    oom = [t for t in study.trials if t.user_attrs.get("reason") == "oom"]
    assert oom and all(t.state == TrialState.COMPLETE for t in oom)
    assert all(t.system_attrs.get("constraints:fits_in_memory") == 1.0 for t in oom)

    report = run_report([str(results)], check=True)
    md = (results / "report.md").read_text()
    assert md.count("faults/") >= 2 and "infeasible" in md
    assert "| 1 |" in md and "| 2 |" in md, "the two good trials are ranked"
    assert "throughput" in report.stdout


def test_failure_budget_stops_a_broken_sweep(results: Path) -> None:
    proc = run_main(
        [
            *FAULTS,
            "knobs.fault=raise",
            "-m",
            "hydra.sweeper.n_trials=10",
            "hydra.sweeper.max_failures=3",
            # distinct configurations: one that failed is not run again by the same command
            "hydra.sweeper.params={knobs.fault:raise,knobs.work:'choice(8,16,24,32,48)'}",
        ],
        results,
    )
    assert proc.returncode == 1
    assert "max_failures=3" in proc.stderr
    df = pd.read_parquet(results / "trials")
    failed = df[df["status"] == "failed"]
    assert len(failed) == 3 and failed["knob.work"].nunique() == 3, df[["trial", "status", "reason"]]
    assert (df["status"].isin(["failed", "skipped"])).all()


def _children_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_sigkill_mid_sweep_then_resume(results: Path) -> None:
    args = [
        *FAULTS,
        "-m",
        "hydra.sweeper.n_trials=8",
        "hydra.sweeper.params={knobs.fault:none,knobs.work:'range(8,1000)'}",
        "hydra.sweeper.sampler=random",
        "hydra.sweeper.seed=1",
        "measure.min_time_s=0.8",
        "measure.max_steps=100000",
        *NO_REMEASURE,
    ]
    cmd = [sys.executable, "-m", "sweeper", *args, f"results_dir={results}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sweeper = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reads, deadline = 0, time.time() + 120
    trials_dir = results / "trials"
    descendants: list[psutil.Process] = []
    while time.time() < deadline:
        if trials_dir.is_dir() and any(trials_dir.glob("*.parquet")):
            n = len(pd.read_parquet(trials_dir))  # readable at every instant
            reads += 1
            # Kill at a known point: trials 0-2 told to the study, trial 3 measuring (>= 0.8 s), its row not written.
            states = {t.number: t.state for t in _study(results, "faults").trials} if n >= 3 else {}
            if states.get(3) == TrialState.RUNNING and all(states[i].is_finished() for i in range(3)):
                descendants = _children_of(sweeper.pid)
                sweeper.send_signal(signal.SIGKILL)
                break
        time.sleep(0.05)
    sweeper.wait(timeout=30)
    assert sweeper.returncode == -signal.SIGKILL
    assert sorted(pd.read_parquet(trials_dir)["trial"]) == [0, 1, 2], "killed while trial 3 measured"
    # The trial process and the forkserver die with the sweeper (no orphan keeps the GPU or the cores).
    gone, alive = psutil.wait_procs(descendants, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    before = pd.read_parquet(trials_dir)
    assert reads > 0 and len(before) >= 3

    run_main(args, results, check=True)
    df = pd.read_parquet(trials_dir)
    assert not df["trial"].duplicated().any()
    assert sorted(df["trial"]) == list(range(len(df)))
    interrupted = df[df["reason"] == "interrupted"]
    assert len(interrupted) == 1 and (interrupted["status"] == "interrupted").all()
    rerun = df[(df["status"] == "complete") & (df["knob.work"] == interrupted["knob.work"].item())]
    assert (rerun["trial"] > interrupted["trial"].item()).any(), "the interrupted configuration is measured again"
    reason = df["reason"].fillna("")
    counted = df[(reason != "interrupted") & ~reason.str.startswith("duplicate:")]  # duplicates measure nothing
    assert len(counted) == 8 and (counted["status"] == "complete").all()
    study = _study(results, "faults")
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    assert len(study.trials) == len(df)


# End-to-end sweeps of real workloads: `python -m pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow


def _forked_with(cfg: dict, names: str, before: str = "") -> dict:
    """Which of the modules ``names`` (a Python expression, evaluated in the sweeper) a process forked from a fresh
    forkserver starts with, the sweeper having run ``before`` and ``isolate.preload_workload(cfg)``."""
    code = f"""
import sys
sys.path.insert(0, {str(ROOT / "tests")!r})
import preload_probe
from sweeper.trial import isolate
{before}
isolate.preload_workload({cfg!r})
ctx = isolate._context()
parent, child = ctx.Pipe()
p = ctx.Process(target=preload_probe.imported, args=({names}, child))
p.start()
print(list(parent.recv().values()))
p.join()
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("workload,torchvision", [("matmul", False), ("resnet50", True)])
def test_forkserver_preloads_the_sweeps_workload_module_and_nothing_more(workload: str, torchvision: bool) -> None:
    """A trial process forks with its workload's module imported, and with torchvision only where the workload
    needs it (resnet50): a matmul sweep does not pay its ~3 s import."""
    seen = _forked_with({"workload": {"name": workload}}, f'["torchvision", "workloads.{workload}"]')
    assert seen == str([torchvision, True])


@pytest.mark.parametrize("uses_torchvision", [True, False])
def test_a_user_modules_torchvision_is_preloaded_but_never_the_module_itself(
    tmp_path: Path, uses_torchvision: bool
) -> None:
    """A workload of the user's own is imported by each trial process, never by the forkserver; torchvision, which
    its import brought into the sweeper (checking the module), is imported by the forkserver too: each trial forks
    with it instead of importing it again (~0.9 s of setup on a 2-core VM)."""
    mine = tmp_path / "mine_bench.py"
    mine.write_text(("import torchvision\n" if uses_torchvision else "") + "def build(cfg, device):\n    pass\n")
    check = f"import workloads\nworkloads.load_spec('mine', {str(mine)!r})"  # the sweeper's check of the module
    key = '[k for k in sys.modules if k.startswith("_workload_mine_bench")][0]'
    seen = _forked_with({"workload": {"name": "mine", "module": str(mine)}}, f'["torchvision", {key}]', check)
    assert seen == str([uses_torchvision, False])


@pytest.mark.parametrize(
    "knobs, dynamo, compile_entry",
    [({"compile": "off"}, True, True), ({"optimizer_impl": "foreach"}, True, False), ({"work": 32}, False, False)],
)
def test_trials_that_compile_or_step_an_optimizer_fork_with_dynamo_imported(
    knobs: dict, dynamo: bool, compile_entry: bool
) -> None:
    """TorchDynamo, which a trial imports to compile and at its optimizer's first step (~0.8 s of its setup on a
    2-core VM), is imported once by the forkserver where the workload has a knob of either; not where it has
    neither (the faults workload's own knobs). What ``torch.compile`` imports before it compiles (Inductor's
    entry: ~0.6 s more) only where it has a ``compile`` knob."""
    cfg = {"workload": {"name": "matmul"}, "knobs": knobs}
    seen = _forked_with(cfg, '["torch._dynamo", "torch._inductor.compile_fx"]')
    assert seen == str([dynamo, compile_entry])


def test_the_sweeps_env_reaches_what_the_forkserver_imported_before_the_trial(tmp_path: Path) -> None:
    """A variable of the sweep's ``env`` that torch reads when imported (``TORCH_LOGS``) or that Inductor's config
    reads when imported (``TORCHINDUCTOR_*``) holds in the trial although the forkserver imported both before it
    forked the trial (torch always; Inductor's config with torchvision, which the user's module imports)."""
    mine, out = tmp_path / "env_probe_bench.py", tmp_path / "seen.txt"
    mine.write_text(
        "from pathlib import Path\n"
        "import torchvision  # noqa: F401 - preloaded by the forkserver, and with it Inductor's config\n"
        "from tests.faultload import faults\n"
        "def build(cfg, device):\n"
        "    import torch._inductor.config as inductor\n"
        "    from torch._logging._internal import log_state\n"
        "    seen = [log_state.is_artifact_enabled('graph_breaks'), inductor.inplace_padding]\n"
        "    Path(cfg['workload']['probe_to']).write_text(repr(seen))\n"
        "    return faults.build(cfg, device)\n"
    )
    code = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
import workloads
from sweeper.trial import isolate
from tests.faultload.nights import night_config
cfg = night_config(["workload.module={mine}", "+workload.probe_to={out}", "+env.TORCH_LOGS=graph_breaks",
                    "+env.TORCHINDUCTOR_INPLACE_PADDING=0"])
workloads.load_spec("faults", {str(mine)!r})  # the sweeper's check of the module: torchvision imported here
isolate.preload_workload(cfg)
print(isolate.run_isolated(cfg, 300.0, Path({str(tmp_path / "trial.log")!r})).status)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("COMPLETE"), (proc.stdout, proc.stderr[-2000:])
    assert out.read_text() == "[True, False]"


def test_a_trial_killed_by_ctrl_c_leaves_no_warning_after_the_last_line() -> None:
    """Ctrl-C kills running trials; a semaphore one of them made (a DataLoader's queue) is unlinked by
    multiprocessing's resource tracker when the sweeper exits, and its "leaked semaphore" warning is not printed
    after the sweep's last line."""
    code = f"""
import os, signal, sys
sys.path.insert(0, {str(ROOT / "tests")!r})
import preload_probe
from sweeper.trial import isolate
ctx = isolate._context()
parent, child = ctx.Pipe()
p = ctx.Process(target=preload_probe.hold_a_semaphore, args=(child,))
p.start()
assert parent.recv() == "holding"
os.kill(p.pid, signal.SIGKILL)
p.join()
print("interrupted (Ctrl-C): the last line", file=sys.stderr, flush=True)
os._exit(130)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=120)  # stderr closes when the tracker, its last holder, has exited
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "interrupted (Ctrl-C): the last line", err[-2000:]
    assert "leaked semaphore" not in err, err[-2000:]


def test_a_result_sent_just_before_the_child_ends_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent waits for the child's message in slices; when the child sends its result and exits between one
    slice and the liveness check after it, the result is still in the pipe. Forced here: every wait with a timeout
    sees nothing, so the parent only learns of the result after the child has ended. Before, such a trial was
    recorded as failed ("exit:0 without a result", seen once in CI) and its measurement lost."""
    from multiprocessing.connection import Connection

    from hydra import compose, initialize_config_dir

    from sweeper.sweep.config.trial_config import as_dict, trial_config
    from sweeper.trial.isolate import run_isolated
    from workloads.base import DeviceInfo

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        # a window far shorter than the pruning report's tick: the child sends its result and nothing else
        over = ["+workload=matmul", "preset=tiny", "measure.min_time_s=0", "measure.steps=3", "measure.warmup_steps=1"]
        cfg = compose("config", overrides=[*over, f"results_dir={tmp_path / 'r'}"])
    cfg = trial_config(as_dict(cfg), DeviceInfo("cpu"))
    real_poll = Connection.poll

    def blind_poll(self: Connection, timeout: float = 0.0) -> bool:
        if timeout:
            time.sleep(min(timeout, 0.05))
            return False
        return real_poll(self, 0)

    monkeypatch.setattr(Connection, "poll", blind_poll)
    outcome = run_isolated(cfg, 60, tmp_path / "trial.log")
    assert outcome.status.value == "complete", (outcome.reason, outcome.message)
    assert outcome.metrics.get("throughput", 0) > 0


def test_a_trial_whose_budget_ends_while_the_forkserver_starts_is_not_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded host the forkserver's imports can outlast what is left of the sweep's budget: the wait for them
    ends with the budget, and the trial is recorded as interrupted by the budget (the same command runs it again)
    without a process started for it. Before, the sweep waited for the imports however long they took, then forked
    the trial and killed it, after a wait for the stacks of a process that had none yet."""
    import threading

    from hydra import compose, initialize_config_dir

    from sweeper.sweep.config.trial_config import as_dict, trial_config
    from sweeper.trial import isolate
    from workloads.base import DeviceInfo

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["+workload=matmul", "preset=tiny", f"results_dir={tmp_path / 'r'}"])
    cfg = trial_config(as_dict(cfg), DeviceInfo("cpu"))
    imported = threading.Event()  # the forkserver's imports, still running until the test sets it
    importing = threading.Thread(target=imported.wait, args=(30.0,), daemon=True)
    importing.start()
    started = []
    real_start = isolate._start_child

    def counted(*args: object) -> object:
        started.append(args)
        return real_start(*args)

    monkeypatch.setattr(isolate, "_READY", importing)
    monkeypatch.setattr(isolate, "_start_child", counted)
    log = tmp_path / "trial.log"
    try:
        isolate.ready(until=time.time() + 0.2)  # the sweep's wait before the trial is noted as running on the node
        assert importing.is_alive(), "the sweep waited for the imports past the budget's end"
        outcome = isolate.run_isolated(cfg, 60, log, stop_at=time.time() + 0.2)
        assert importing.is_alive(), "the trial waited for the imports past the budget's end"
    finally:
        imported.set()
    assert (outcome.status.value, outcome.reason) == ("interrupted", "budget"), outcome.message
    assert "before this trial's process could start" in outcome.message
    assert started == [] and not log.exists(), "no process was started for it"


def test_a_process_without_the_stack_handler_is_neither_signalled_nor_waited_for(tmp_path: Path) -> None:
    """A trial stopped in its first moments has not set up its stack dump (faulthandler on ``STACKS_SIGNAL``): the
    signal would end it (SIGUSR1's default action) and the stop would wait for stacks that never come. Its log says
    so instead, and the process is left for the kill that follows."""
    from sweeper.trial import isolate

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    log = tmp_path / "trial.log"
    try:  # Popen returned: the interpreter runs, with no handler for the signal
        isolate._stacks(proc.pid, log, "the sweep's budget", wait_s=30.0)
        assert proc.poll() is None, "the signal was sent: the process ended"
    finally:
        proc.kill()
        proc.wait()
    assert "had not yet set up its stack dump" in log.read_text()


def test_a_trial_stuck_after_its_first_step_ends_itself_with_every_threads_stack(results: Path, tmp_path: Path) -> None:
    """measure.stall_s: a step that never returns (here the third, in the warm-up) ends the trial as failed
    (stalled) long before trial.timeout_s, with every thread's stack in its log; the sweep goes on to the next."""
    t0 = time.time()
    proc = run_main(
        [
            *FAULTS,
            "-m",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.params={knobs.fault:'choice(hang,none)',knobs.work:16}",
            "hydra.sweeper.sampler=grid",
            "knobs.fault_step=3",
            "measure.stall_s=3",
            "trial.timeout_s=600",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            *NO_REMEASURE,
        ],
        results,
        check=True,
    )
    assert time.time() - t0 < 120, "the stuck trial held the sweep"
    df = pd.read_parquet(results / "trials")
    rows = {r["knob.fault"]: r for _, r in df.iterrows()}
    assert (rows["hang"]["status"], rows["hang"]["reason"]) == ("failed", "stalled"), rows["hang"]["message"]
    assert rows["none"]["status"] == "complete", proc.stderr
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "sweep").rglob("*.log"))
    assert "Timeout (0:00:03)!" in logs and "faults.py" in logs, "the stuck step's stack is in the trial's log"


@pytest.mark.parametrize("seconds", [1.0, 0.25])
def test_a_watchdog_timeout_is_read_as_a_stall_whole_seconds_or_not(tmp_path: Path, seconds: float) -> None:
    """The watchdog arms at 20 x the warm-up's step time where that exceeds measure.stall_s: a fractional timeout,
    whose faulthandler header carries microseconds (``Timeout (0:00:00.250000)!``); the trial is still ``stalled``,
    not ``exit:1``. A real faulthandler timeout in a real process writes the log."""
    from sweeper.trial.isolate import _stalled

    log = tmp_path / "trial.log"
    code = (
        "import faulthandler, sys, time\n"
        "f = open(sys.argv[1], 'w')\n"
        f"faulthandler.dump_traceback_later({seconds}, exit=True, file=f)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(log)], timeout=60)
    assert proc.returncode == 1 and _stalled(log), log.read_text()
    log.write_text("Traceback (most recent call last):\nRuntimeError: Timeout (0:00:01)! in a message\n")
    assert not _stalled(log), "only faulthandler's header line"


def test_the_stall_watchdog_never_ends_a_sweeper_that_runs_its_trial_in_its_own_process(results: Path) -> None:
    """trial.isolate=false: the trial runs inside the sweeper, whose process the watchdog would end (every other
    measurement of the sweep with it). A step past measure.stall_s is then only a slow step: the trial completes."""
    proc = run_cli(
        [
            *FAULTS,
            "-m",
            "hydra.sweeper.n_trials=1",
            "hydra.sweeper.params={knobs.fault:'choice(slow)',knobs.work:16}",
            "knobs.fault=slow",
            "knobs.fault_step=4",
            "measure.stall_s=1",
            "trial.isolate=false",
            *NO_REMEASURE,
        ],
        results,
    )
    assert proc.returncode == 0 and "Timeout" not in proc.stderr, proc.stderr[-3000:]
    df = pd.read_parquet(results / "trials")
    assert list(df["status"]) == ["complete"], df[["status", "reason", "message"]]


def _stopped_at_deadline(results: Path, tmp_path: Path, fault: str) -> str:
    """One trial of ``fault`` hanging in its first step (where the stall watchdog is not armed yet), killed at
    trial.timeout_s=6: its row says so; the logs of the sweep's trials."""
    run_main(
        [
            *FAULTS,
            "-m",
            "hydra.sweeper.n_trials=1",
            f"hydra.sweeper.params={{knobs.fault:'choice({fault})',knobs.work:16}}",
            "knobs.fault_step=1",
            "measure.stall_s=null",
            "trial.timeout_s=6",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            *NO_REMEASURE,
        ],
        results,
        check=True,
    )
    row = pd.read_parquet(results / "trials").iloc[0]
    assert (row["status"], row["reason"]) == ("failed", "timeout"), row["message"]
    return "".join(p.read_text(errors="replace") for p in (tmp_path / "sweep").rglob("trial.log"))


def test_a_trial_stopped_at_its_deadline_leaves_every_threads_stack_in_its_log(results: Path, tmp_path: Path) -> None:
    """A trial that hangs in its first step (where the stall watchdog is not armed yet) is killed at trial.timeout_s;
    before that it writes every thread's stack to its log, under a line saying why, so that the log says where it
    hung (before, the log of such a trial was empty)."""
    logs = _stopped_at_deadline(results, tmp_path, "hang")
    assert "stopped at its deadline (trial.timeout_s=6)" in logs, logs[-2000:]
    assert "in _hang" in logs and "faults.py" in logs, logs[-2000:]


def test_a_trial_stopped_at_its_deadline_leaves_its_workers_stacks_too(results: Path, tmp_path: Path) -> None:
    """A trial whose step waits for a forked child that hangs (as a step waits for a DataLoader worker's batch): the
    trial's own stacks show only the wait; the child, forked with the trial's handler, is asked for its stacks too,
    under a line naming it, so the log says where the worker hung (before, only the trial's own were there)."""
    logs = _stopped_at_deadline(results, tmp_path, "worker_hang")
    assert "in _wait_for_worker" in logs, logs[-3000:]
    assert "the trial's descendant" in logs and "in _hang_in_worker" in logs, logs[-3000:]
