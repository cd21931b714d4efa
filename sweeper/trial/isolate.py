"""Run one trial in an isolated child process: timeout, signals, outcome. The parent side of ``sweeper.trial.child``.

Children come from a ``multiprocessing`` forkserver that has imported torch (not CUDA) and the workload's module
(``preload_workload``: torchvision for resnet50, ~3 s that a matmul sweep does not pay; for a module of the user's
own, torchvision where it imports it, never the module; TorchDynamo where the trials compile or step an
optimizer), with the sweep's import-time variables set first (``TORCH_LOGS``, ``TORCHINDUCTOR_*``), so CUDA state,
allocator fragmentation, compile caches and crashes stay inside one trial while the start costs milliseconds
instead of a fresh interpreter's seconds. The child runs in its own process group; a timeout kills the group.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.results.procs import pid_alive
from sweeper.trial.proc import FORKSERVER_ENV, STACKS_SIGNAL, TRIAL_ENV, kill_group, kill_marked, kill_tree

_CONTEXT: Any = None
_READY: threading.Thread | None = None  # the forkserver's imports, awaited off the main thread (``start_forkserver``)
# imported once by the forkserver, in this order, before it forks any trial (the first: SIGINT ignored from then on)
_PRELOAD = ["sweeper.trial.forkserver_signals", "sweeper.trial.child"]
# Trial processes running now (pid -> None), so an interrupted sweep can end them at once (``interrupt_all``).
_LIVE: dict[int, None] = {}
_LIVE_LOCK = threading.Lock()
INTERRUPTED = threading.Event()


def start_forkserver() -> None:
    """Start the forkserver now, from the main thread, with SIGINT ignored: it (while it imports torch) and every
    trial process forked from it inherit that, so a terminal's Ctrl-C reaches only the sweeper, which ends the
    trials itself (``interrupt_all``) and records them. Returns at once; a thread waits for its imports, and the
    first trial waits for that thread before its clock starts (``run_isolated``). A second call does nothing."""
    global _READY
    if _READY is not None:
        return
    ctx = _context()
    _ensure_forkserver()
    probe = ctx.Process(target=os.getpid)  # forked once the forkserver has imported its modules

    def ready() -> None:
        probe.start()
        probe.join()

    _READY = threading.Thread(target=ready, name="forkserver-ready", daemon=True)
    _READY.start()


def _ensure_forkserver() -> None:
    """The forkserver running; started deaf to SIGINT when this call starts it from the main thread: SIGINT is
    blocked while it is spawned, the mask inherited through exec, and its first preload module
    (``sweeper.trial.forkserver_signals``) ignores SIGINT before it imports torch (Python's forkserver only ignores
    it after its imports): a Ctrl-C, sent to the whole group, never interrupts that import with a traceback on the
    user's screen. Blocked, not ignored: a Ctrl-C that lands meanwhile reaches the sweeper (through another of its
    threads at once, or when this returns); an ignored one was lost, and the sweep ran on. A sweep that may run
    trials in its own process starts the forkserver early, from the main thread (``start_forkserver``, from
    ``sweeper.__main__`` or the sweep)."""
    import multiprocessing.forkserver as forkserver

    _context()
    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()  # its first preload module ignores SIGINT as early as it can
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # first: starting it would unblock SIGINT here (it blocks and unblocks it)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)  # a Ctrl-C meanwhile is handled now


def _forkserver_pid() -> int | None:
    """The running forkserver's pid (None before it started); Python keeps it in a private attribute."""
    import multiprocessing.forkserver as forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def interrupt_all() -> None:
    """Ctrl-C or SIGTERM of the sweeper: every running trial's process group is killed now; their outcome is
    ``failed (interrupted)``, not the signal that ended them."""
    INTERRUPTED.set()
    with _LIVE_LOCK:
        pids = list(_LIVE)
    for pid in pids:
        kill_group(pid)
    _end_launcher_workers()


def _end_launcher_workers() -> None:
    """Kill the processes a launcher started from this one (joblib's loky workers) and what runs under them: they
    start with SIGINT blocked (``sweeper.sweep.run.scheduler``; an idle one never unblocks it) and SIGTERM reaches
    the sweeper alone."""
    for child in mp.active_children():
        kill_tree(child.pid)


TRACKER_QUIET = "ignore:resource_tracker:UserWarning"


def _context() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        if mp.get_start_method(allow_none=True) not in (None, "fork", "spawn", "forkserver"):
            # Inside a joblib (loky) worker: children inherit the parent's start method by name, and "loky" is
            # unknown to plain multiprocessing there.
            mp.set_start_method("forkserver", force=True)
        mp_context = mp.get_context("forkserver")
        mp_context.set_forkserver_preload(list(_PRELOAD))
        # A trial stopped by Ctrl-C, the budget or its timeout cannot release the semaphores it made (a DataLoader's
        # queues where multiprocessing starts by forkserver): multiprocessing's resource tracker unlinks them when
        # the sweep ends, and says so in a warning printed after the sweep's last line. Its cleanup is kept, its
        # warning not: the tracker (started with the forkserver) takes its -W options from sys.warnoptions.
        if TRACKER_QUIET not in sys.warnoptions:
            sys.warnoptions.append(TRACKER_QUIET)
        _CONTEXT = mp_context
    return _CONTEXT


# Libraries a workload of the user's own may import that the forkserver imports too where this process did (the
# user's module, imported here to check it): each trial then forks with them instead of importing them again
# (torchvision: ~0.9 s of every trial's setup on a 2-core VM). The built-in resnet50 preloads it already.
SHARED_IMPORTS = ("torchvision",)


# Knobs whose trials import TorchDynamo: to compile, and to step any torch optimizer (``Optimizer.step`` imports it
# on its first call through ``torch._disable_dynamo``): ~0.8 s of every such trial's setup on a 2-core VM, paid
# once by the forkserver instead.
DYNAMO_KNOBS = ("compile", "optimizer_impl")
# What ``torch.compile(model)`` imports before it compiles anything (Inductor's entry, Dynamo's debug wrapper):
# ~0.6 s of a compiled trial's build on a 2-core VM, 3.4-5.1 s on an H100 host. Preloaded with TorchDynamo where
# the workload has a ``compile`` knob; a name this torch lacks is skipped (the forkserver ignores an ImportError).
COMPILE_IMPORTS = ("torch._inductor.compile_fx", "torch._dynamo.repro.after_dynamo")
# Variables of a sweep's ``env`` that torch or Triton may read when imported: the forkserver sets them before its
# imports (``sweeper.trial.forkserver_signals``), as the trial sets them before its own.
IMPORT_ENV_PREFIXES = ("TORCH", "PYTORCH", "TRITON")


def preload_workload(cfg: dict[str, Any]) -> None:
    """Have the forkserver import ``cfg``'s built-in workload module too (and what it imports, torchvision for
    resnet50), if it has not started yet: then every trial forks with it imported. A workload of the user's own
    (``workload.module``) is imported by its trial process instead: nothing of the user's runs in the forkserver,
    only the ``SHARED_IMPORTS`` this process holds (its import of the user's module brought them). TorchDynamo too
    where the workload declares a knob of ``DYNAMO_KNOBS`` (and ``COMPILE_IMPORTS`` where it has ``compile``); and
    the forkserver starts with ``cfg``'s ``env`` of ``IMPORT_ENV_PREFIXES`` set, before it imports what reads it."""
    workload = cfg.get("workload") or {}
    if workload.get("module"):
        modules = [m for m in SHARED_IMPORTS if m in sys.modules]
    else:
        modules = [f"workloads.{workload['name']}"] if workload.get("name") else []
    knobs = cfg.get("knobs") or {}
    if any(k in knobs for k in DYNAMO_KNOBS):
        modules.append("torch._dynamo")
        if "compile" in knobs:
            modules.extend(COMPILE_IMPORTS)
    env = {str(k): str(v) for k, v in (cfg.get("env") or {}).items() if str(k).startswith(IMPORT_ENV_PREFIXES)}
    if _forkserver_pid() is None:
        os.environ[FORKSERVER_ENV] = json.dumps(env)  # read and removed by the forkserver's first preload module
    added = [m for m in modules if m not in _PRELOAD]
    if added:
        _PRELOAD.extend(added)
        if _CONTEXT is not None:
            _CONTEXT.set_forkserver_preload(list(_PRELOAD))  # takes effect if the forkserver is not running yet


def _log_tail(path: Path, n: int = 12) -> str:
    """The last lines the trial printed (faulthandler's traceback for a crash), without its module list."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    text = text.split("\nExtension modules:", 1)[0]
    return "\n".join(text.splitlines()[-n:])


def ready(until: float | None = None) -> None:
    """Start the forkserver and wait for its imports (seconds, once a process) before a trial is noted as running on
    the node (``slots.Occupancy``): they are not the trial's run, and no other trial shares its cores with them. At
    most ``until`` (unix seconds: the sweep's budget ends then): the trial's ``run_isolated`` sees the time."""
    _ready_forkserver(_context(), until)


def _ready_forkserver(mp_context: Any, until: float | None = None) -> int | None:
    """Start the forkserver (again, if it was killed from outside) and wait for its imports, which are not the
    trial's time, at most ``until`` (unix seconds: the sweep's budget ends then; the caller sees the time); its
    pid."""
    lost = _forkserver_pid()
    _ensure_forkserver()  # restarts it if it was killed from outside
    if _READY is not None:
        _READY.join(None if until is None else max(0.0, until - time.time()))  # its imports: not the trial's time
    if lost is not None and _forkserver_pid() != lost:  # restarted: its imports are not this trial's time either
        probe = mp_context.Process(target=os.getpid)
        probe.start()
        probe.join()
    return _forkserver_pid()


def _start_child(mp_context: Any, cfg: dict[str, Any], log_path: Path, token: str) -> tuple[Any, Any]:
    """Start the trial's process: (the process, the parent's end of its pipe)."""
    parent, child = mp_context.Pipe(duplex=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    proc = mp_context.Process(target=_child_entry, args=(cfg, child, str(log_path), token), daemon=False)
    proc.start()
    child.close()
    with _LIVE_LOCK:
        _LIVE[proc.pid] = None
    if INTERRUPTED.is_set():  # the sweep was interrupted while this trial was being launched
        kill_group(proc.pid)
    return proc, parent


def _await_result(
    proc: Any, parent: Any, deadline: float, on_report: Callable[[int, float], bool] | None, kept: dict[str, Any]
) -> tuple[Any, bool]:
    """The child's result message (None if it died without one), its reports answered meanwhile; and whether the
    deadline came first. A measured window the child hands over before its profile lands in ``kept`` (``metrics``,
    and ``at``: when)."""
    while True:
        remaining = deadline - time.time()
        if remaining <= 0:
            while parent.poll(0):  # what the child sent before the deadline is read first: its result wins
                try:
                    msg = parent.recv()
                except (EOFError, OSError):
                    break
                if msg[0] == "measured":
                    kept.update(metrics=msg[1], at=time.time())
                elif msg[0] != "report":
                    return msg, False
            return None, True
        if not parent.poll(min(remaining, 0.5)):
            if proc.is_alive():
                continue
            if not parent.poll(0):  # it may have sent its result and ended after the wait above
                return None, False
        try:
            msg = parent.recv()
        except (EOFError, OSError):
            return None, False  # the child died without a result
        if msg[0] == "measured":
            kept.update(metrics=msg[1], at=time.time())
            continue
        if msg[0] != "report":
            return msg, False
        try:
            parent.send("prune" if on_report and on_report(msg[1], msg[2]) else "continue")
        except OSError:  # the child ended after reporting: its result follows, or none
            pass


def _stacks(pid: int, log_path: Path, deadline: str, wait_s: float = 2.0) -> None:
    """Before a trial is killed at its deadline: a line saying so, then every thread's stack (faulthandler, on
    ``STACKS_SIGNAL``) in its log, waited for until the log stops growing (at most ``wait_s``), so that a trial
    that hung says where. (A compiled JPEG trial on an H100 once ran 139 s where it had taken 19 s, until the budget
    cut it, and left an empty log.) Then, one by one, those of its descendants forked with the handler (DataLoader
    workers: on an H100 a hybrid-decoding trial waited 80 s for batches its 14 workers never delivered, 2026-12-06),
    each under a line naming it; one that does not catch the signal is left alone."""
    try:
        with open(log_path, "a") as log:
            log.write(f"\nstopped at its deadline ({deadline}); every thread's stack at that moment:\n")
    except OSError:
        return
    end = time.time() + wait_s
    if not _catches(pid, STACKS_SIGNAL):  # not set up yet (the trial's first moments): nothing to wait for
        with contextlib.suppress(OSError), open(log_path, "a") as log:
            log.write("(none: the trial had not yet set up its stack dump)\n")
        return
    if not _dump(pid, log_path, end):
        return
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return
    end = time.time() + wait_s
    for child in children:
        if time.time() >= end or not _catches(child.pid, STACKS_SIGNAL):
            continue
        try:
            with open(log_path, "a") as log:
                log.write(f"\nprocess {child.pid} ({child.name()}), the trial's descendant:\n")
        except (OSError, psutil.Error):
            continue
        _dump(child.pid, log_path, end)


def _dump(pid: int, log_path: Path, end: float) -> bool:
    """Send ``pid`` ``STACKS_SIGNAL`` and wait until ``log_path`` grew and then held still for 0.15 s (or ``end``);
    False where the signal could not be sent."""
    try:
        first = last = log_path.stat().st_size
        os.kill(pid, STACKS_SIGNAL)
    except OSError:
        return False
    still = 0
    while time.time() < end and still < 3:  # grown, then 0.15 s without a byte more
        time.sleep(0.05)
        now = log_path.stat().st_size
        still = still + 1 if now == last and now > first else 0
        last = now
    return True


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (Linux: ``SigCgt`` in /proc/PID/status): sending it
    to one without a handler would end it (SIGUSR1's default action)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            caught = next(int(line.split()[1], 16) for line in status if line.startswith("SigCgt:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    return bool(caught >> (int(signum) - 1) & 1)


def _profile_cut(kept: dict[str, Any], started: float) -> TrialOutcome:
    """A trial the sweep's budget stopped after its measured window (profiling, or ending): complete with what it
    measured (nothing measured is lost), the seconds since and why it has no profile (``prof_cut``: a profile's
    price never rests on it, a lower bound)."""
    now = time.time()
    metrics = {
        **kept["metrics"],
        "prof_s": now - kept["at"],
        "prof_cut": True,
        "prof_error": "the sweep's time budget ended after the measured window, before the profile's end",
    }
    return TrialOutcome(Status.COMPLETE, metrics=metrics, started_at=started, ended_at=now)


def _late(budget_cut: bool, timeout_s: float, started: float, launched: bool = True) -> TrialOutcome:
    """The outcome of a trial stopped at its deadline: the sweep's budget, or its own timeout; one the budget's end
    reached before its process started (``launched`` false) is not started at all."""
    if budget_cut:
        when = "while this trial ran" if launched else "before this trial's process could start"
        return TrialOutcome(
            Status.INTERRUPTED,
            Reason.BUDGET.tag(),
            f"the sweep's time budget (hydra.sweeper.timeout_s + grace_s) ended {when}, or, for a trial "
            "priced by the cost model's prior alone, the time it keeps for re-measuring the best and the baseline "
            "began; the same command runs it again",
            started_at=started,
            ended_at=time.time(),
        )
    return TrialOutcome(
        Status.FAILED,
        Reason.TIMEOUT.tag(),
        f"no result after {timeout_s:g} s (trial.timeout_s); process group killed",
        started_at=started,
        ended_at=time.time(),
    )


def _no_result(proc: Any, server: int | None, log_path: Path, started: float) -> TrialOutcome:
    """The outcome of a trial process that ended without a result: interrupted, or failed with its exit's reason."""
    if INTERRUPTED.is_set():
        return TrialOutcome(
            Status.INTERRUPTED,
            Reason.INTERRUPTED.tag(),
            "the sweep was interrupted (Ctrl-C or SIGTERM) while this trial ran; the same command runs it again",
            started_at=started,
            ended_at=time.time(),
        )
    if server is not None and not pid_alive(server):  # its trials die with it (PR_SET_PDEATHSIG), "exit:255"
        return TrialOutcome(
            Status.INTERRUPTED,
            Reason.FORKSERVER.tag(),
            "the forkserver that starts trials was killed from outside (the kernel's OOM killer?) while this trial "
            "ran: not the workload's failure, not counted; the next trial restarts it, and the same command runs "
            "this one again",
            started_at=started,
            ended_at=time.time(),
        )
    code = proc.exitcode
    tail = _log_tail(log_path)
    if code is not None and code < 0:
        reason = Reason.SIGNAL.tag(signal.Signals(-code).name)
    elif code == 1 and _stalled(log_path):
        return TrialOutcome(
            Status.FAILED,
            Reason.STALLED.tag(),
            f"no progress for measure.stall_s (or 20x the expected time); every thread's stack is in {log_path}\n"
            f"{tail}".strip(),
            started_at=started,
            ended_at=time.time(),
        )
    else:
        reason = Reason.EXIT.tag(str(code))  # "exit:None" too
    return TrialOutcome(
        Status.FAILED,
        reason,
        f"trial process ended ({reason}) without a result\n{tail}".strip(),
        started_at=started,
        ended_at=time.time(),
    )


def run_isolated(
    cfg: dict[str, Any],
    timeout_s: float,
    log_path: Path,
    on_report: Callable[[int, float], bool] | None = None,
    stop_at: float | None = None,
) -> TrialOutcome:
    """Run ``cfg``'s trial in a child; never raises for anything the trial does.

    ``on_report(step, value) -> prune?`` answers the child's intermediate reports (for pruning). ``stop_at``
    (unix seconds): the sweep's budget ends then (or the time it keeps for others); a trial still running is stopped
    and ends ``interrupted`` (reason ``budget``), so that the same command measures it again, unless it was
    profiling after its measured window (a trial hands it over first; a distributed one once every rank measured
    its own): then it is complete with that window, without a profile (``prof_error`` says why; the next command
    does not profile it again).
    """
    mp_context = _context()
    server = _ready_forkserver(mp_context, until=stop_at)
    started = time.time()
    if stop_at is not None and started >= stop_at:  # the forkserver's start (a loaded host) took what was left
        return _late(True, timeout_s, started, launched=False)
    token = f"{os.getpid()}-{uuid.uuid4().hex}"  # marks the trial's every descendant (``kill_marked``)
    proc, parent = _start_child(mp_context, cfg, log_path, token)
    deadline = started + timeout_s
    budget_cut = stop_at is not None and stop_at < deadline
    deadline = min(deadline, stop_at) if stop_at is not None else deadline
    kept: dict[str, Any] = {}
    try:
        message, late = _await_result(proc, parent, deadline, on_report, kept)
        if late:
            _stacks(proc.pid, log_path, "the sweep's budget" if budget_cut else f"trial.timeout_s={timeout_s:g}")
            kill_group(proc.pid)
            proc.join()
            if kept and budget_cut:  # a trial's own timeout is its failure, whatever it measured
                return _profile_cut(kept, started)
            return _late(budget_cut, timeout_s, started)
        proc.join(timeout=30)
    finally:
        kill_group(proc.pid)  # reap stragglers (DataLoader workers) in the trial's group
        kill_marked(token, started)  # and its descendants outside the group (a new session), wherever they are
        parent.close()
        with _LIVE_LOCK:
            _LIVE.pop(proc.pid, None)
    if message is not None:
        return TrialOutcome.from_dict(message[1])
    return _no_result(proc, server, log_path, started)


def _stalled(log_path: Path) -> bool:
    """The trial's watchdog (``sweeper.trial.measure.Watchdog``) ended it: faulthandler's timeout header (with the
    microseconds where the timeout has them: ``Timeout (0:00:41.270000)!`` for 20 x a 2.06 s step)."""
    header = r"^Timeout \(\d+:\d\d:\d\d(\.\d+)?\)!$"
    try:
        return re.search(header, log_path.read_text(errors="replace"), re.M) is not None
    except OSError:
        return False


def _child_entry(cfg: dict[str, Any], conn: Any, log_path: str, token: str) -> None:
    from sweeper.trial.child import child_main

    os.environ[TRIAL_ENV] = token  # inherited by every process the trial starts

    child_main(cfg, conn, log_path)
