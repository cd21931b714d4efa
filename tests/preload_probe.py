"""Runs inside a trial process forked from the forkserver: which modules that process started with (imports only
``sys``, so it adds none of those asked about), and how it handles SIGINT."""

from __future__ import annotations

import sys
from typing import Any


def imported(names: list[str], conn: Any) -> None:
    conn.send({name: name in sys.modules for name in names})


def hold_a_semaphore(conn: Any) -> None:
    """Make a semaphore the resource tracker knows of (as a DataLoader's queue does where multiprocessing starts
    by forkserver), say so, and wait to be killed."""
    import multiprocessing
    import time

    lock = multiprocessing.get_context("forkserver").Lock()
    conn.send("holding")
    time.sleep(120)
    del lock


def signals(conn: Any) -> None:
    """How this trial process starts: SIGINT ignored, and whether SIGINT is blocked."""
    import signal

    conn.send((signal.getsignal(signal.SIGINT) == signal.SIG_IGN, signal.SIGINT in signal.pthread_sigmask(0, [])))
