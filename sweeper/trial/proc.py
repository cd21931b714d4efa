"""Process helpers of the trial side: die with the parent, kill a process group (whether a process is alive is
``sweeper.results.procs.pid_alive``, the project's one liveness check)."""

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


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (or ``pid`` alone when it leads none); gone already is fine."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
