"""Process helpers of the trial side: die with the parent, is a process alive, kill a process group.

The one liveness check of the project: the sweeper's resume bookkeeping (``sweeper.sweep.study``) and the
distributed agent's clean-up of dead agents' scratch folders (``sweeper.trial.ranks``) both ask it.
"""

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


def pid_alive(pid: int) -> bool:
    """Whether a process runs (a killed one not yet reaped by its parent, a zombie, counts as dead)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (or ``pid`` alone when it leads none); gone already is fine."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
