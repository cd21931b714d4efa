"""Names of the Optuna trial attributes the sweeper writes (one definition for the loop, the samplers, warm start),
and the one reading of a trial's owner: is the sweeper that asked it still running?"""

from __future__ import annotations

import os
import socket
from typing import Any

from sweeper.results.outcome import Reason
from sweeper.results.procs import pid_alive

OWNER_KEY = "owner"  # trial user attr: host:pid of the sweeper that asked it
REASON_KEY = "reason"
SPENT_KEY = "spent_s"  # trial user attr: seconds from its launch to its end, as the sweeper saw (the budget's cost)
COST_KEY = "wall_s"  # trial user attr: its wall time in seconds (the Parquet column of that name)
WARM_KEY = "warm_start_from"  # trial user attr of a trial added from an earlier study (sweeper.sweep.search.warm)
UNOWNED_S = 10.0  # a RUNNING trial without an owner this long after its start was asked by a killed sweeper
PID_REUSE_S = 2.0  # a process started this long after the trial cannot be its sweeper (psutil's times are coarse)


def owner_state(t: Any) -> str:
    """The sweeper that asked the trial ``t`` (an Optuna FrozenTrial): ``"self"`` (this process), ``"alive"`` (a
    running process of this host), ``"dead"`` (gone, a zombie, or its pid now another process's: one started
    over ``PID_REUSE_S`` after the trial), or ``"elsewhere"`` (another host, or no owner recorded: not seen)."""
    import psutil

    host, _, pid = str(t.user_attrs.get(OWNER_KEY, "")).rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return "elsewhere"
    if int(pid) == os.getpid():
        return "self"
    try:
        started = t.datetime_start
        if started is not None and psutil.Process(int(pid)).create_time() > started.timestamp() + PID_REUSE_S:
            return "dead"
    except psutil.Error:
        return "dead"
    return "alive" if pid_alive(int(pid)) else "dead"


def reason_of(t: Any) -> Reason:
    """The typed reason a trial was settled with (its ``reason`` attribute; ``Reason.NONE`` when it has none)."""
    return Reason.of(t.user_attrs.get(REASON_KEY))
