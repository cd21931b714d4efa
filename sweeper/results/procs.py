"""Is a process alive: the liveness check of the project, in the lowest layer so that every process asks it.

Asked by the sweeper's resume bookkeeping (``sweeper.sweep.study.attrs``: is a trial's sweeper alive), the journal's
lock (``sweeper.sweep.study.journal``: is its holder alive), the node's
slot records (``sweeper.sweep.run.slots``), the row writer's clean-up of dead writers' temporary files
(``sweeper.results.store``) and the distributed agent's clean-up of dead agents' folders (``sweeper.trial.ranks``).
"""

from __future__ import annotations


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs. Not for ``pid <= 0`` (no process has it: ``kill(0, ...)`` names this process
    group), a pid that is gone, or a zombie (ended, not yet reaped by its parent: it runs nothing). A process of
    another user, which this one may not signal, runs."""
    import psutil

    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # a zombie psutil cannot read is a ZombieProcess, a NoSuchProcess
        return False
    except psutil.AccessDenied:
        return True
