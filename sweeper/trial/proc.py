"""Process helpers of the trial side: die with the parent, kill a process group, kill a trial's every descendant
(whether a process is alive is ``sweeper.results.procs.pid_alive``)."""

from __future__ import annotations

import os
import signal


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (the forkserver) dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def become_subreaper() -> None:
    """Orphans among this process's descendants (a daemon that forked twice into a session of its own) are
    re-parented to it, not to init: they stay in its tree, where ``kill_group`` (while it runs) and
    ``end_descendants`` (before it exits) find them (Linux: PR_SET_CHILD_SUBREAPER)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    except Exception:
        pass


def _kill(procs: list) -> None:
    """SIGKILL each of ``procs`` (psutil processes); gone already is fine."""
    import psutil

    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def end_descendants() -> None:
    """SIGKILL every descendant of this process (a trial's, as it ends) and reap them."""
    import psutil

    try:
        tree = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    _kill(tree)
    psutil.wait_procs(tree, timeout=5)


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and its descendants by parentage, one by one: not its process group (a launcher's worker
    shares the sweeper's); gone already is fine."""
    import psutil

    try:
        proc = psutil.Process(pid)
        tree = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return
    _kill(tree)


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (or ``pid`` alone when it leads none) and, while ``pid`` runs, its
    descendants by parentage (one that left the group or started a session of its own); gone already is fine."""
    import psutil

    try:
        tree = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        tree = []
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
    _kill(tree)


# Asks a trial's process for every thread's stack in its log (faulthandler, registered in ``child.child_main``)
STACKS_SIGNAL = signal.SIGUSR1
TRIAL_ENV = "KNOB_SWEEPER_TRIAL"  # set in each trial process to a token of its own; its descendants inherit it
# JSON of the variables the forkserver sets before its imports (``sweeper.trial.forkserver_signals.apply_env``)
FORKSERVER_ENV = "KNOB_SWEEPER_FORKSERVER_ENV"


def kill_marked(token: str, since: float) -> int:
    """SIGKILL every process of this user whose environment carries ``TRIAL_ENV=token`` (a trial's descendants,
    also those that left its process group or session, whose parent may be init by now) and that started at or
    after ``since`` (unix seconds; older processes are not read). The kernel shows the environment a process was
    started with (``exec``): the programs a trial runs carry the token; a child it only forks stays in its process
    group (``kill_group``) unless it starts a session of its own. Repeated until none is left, so that a child
    forked meanwhile goes too. Returns how many were killed."""
    import psutil

    killed, me = 0, os.getpid()
    for _ in range(20):
        found = []
        for p in psutil.process_iter(["create_time"]):
            try:
                if p.pid != me and (p.info["create_time"] or 0) >= since - 1 and p.environ().get(TRIAL_ENV) == token:
                    found.append(p)
            except (psutil.Error, OSError):  # gone, a zombie, or another user's
                continue
        if not found:
            break
        for p in found:
            try:
                p.kill()
                killed += 1
            except psutil.Error:
                pass
        psutil.wait_procs(found, timeout=5)  # gone (or a zombie their parent reaps) when this returns
    return killed
