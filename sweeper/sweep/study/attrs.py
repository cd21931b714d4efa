"""Every Optuna attribute the sweeper writes or reads, named once: the trials' user and system attributes and the
study's user attributes; their typed readings (:func:`status_of`, :func:`reason_of`); and the one reading of a
trial's owner: is the sweeper that asked it still running (:func:`owner_state`, an :class:`Owner`)?

Code compares attributes through these names and types, never through a string literal. The bookkeeping user
attributes are never a workload metric's (``sweeper.results.rows.SWEEPER_ATTRIBUTES``, where a metric is refused).
The system attributes Optuna itself writes (``fixed_params`` of a queued trial, ``constraints``) are Optuna's
private names: ``sweeper.sweep.study.optuna_private`` names them.
"""

from __future__ import annotations

import enum
import os
import socket
from typing import Any

from sweeper.results.outcome import Reason, Status
from sweeper.results.procs import pid_alive

# ---- trial user attributes the sweeper writes (its bookkeeping)
OWNER_KEY = "owner"  # host:pid of the sweeper that asked it
COMMAND_KEY = "command"  # the sweep command that asked it: a random id per command (SweepPlan.command)
STATUS_KEY = "status"  # its Status's value (sweeper.results.outcome.Status)
REASON_KEY = "reason"  # its reason text (sweeper.results.outcome.Reason and a detail)
CONFIRM_KEY = "confirm_of"  # the trial whose configuration this one measures again
COST_KEY = "wall_s"  # its wall time in seconds (the Parquet column of that name)
SPENT_KEY = "spent_s"  # seconds from its launch to its end, as the sweeper saw (the budget's cost)
PREDICTED_KEY = "predicted_wall_s"  # the wall seconds the cost model predicted at its launch (and a row column)
WARM_KEY = "warm_start_from"  # "<study>#<trial>": a trial added from an earlier study (sweeper.sweep.search.warm)
CONFIG_KEY = "config_key"  # its sampled values, canonical JSON (sweeper.sweep.search.dedup)
WAITS_KEY = "waits_for"  # the running trial this one waits for (-1: it measures, waits for nobody)
REMEASURE_FOR_KEY = "remeasure_for"  # the sweep target whose re-measurements it is (sweeper.sweep.run.remeasure)
PROFILE_KEY = "profile"  # run under torch.profiler after its measured window
START_KEY = "handbook_start_retry"  # the handbook's start queued again at a smaller batch after an OOM
FAILED_WITH_KEY = "failed_with"  # a failed trial's error, its first line (sweeper.sweep.search.failing)
BOOKKEEPING = (
    OWNER_KEY,
    COMMAND_KEY,
    STATUS_KEY,
    REASON_KEY,
    CONFIRM_KEY,
    COST_KEY,
    SPENT_KEY,
    PREDICTED_KEY,
    WARM_KEY,
    CONFIG_KEY,
    WAITS_KEY,
    REMEASURE_FOR_KEY,
    PROFILE_KEY,
    START_KEY,
    FAILED_WITH_KEY,
)  # none of them is a metric: a duplicate reusing another trial's result takes that trial's metrics but these

# ---- trial user attributes that are metrics of the row (every metric is one), read back by the sweeper
UNSTABLE_KEY = "step_unstable"  # its step times were not one steady value (sweeper.trial.stability)
PROFILE_S_KEY = "prof_s"  # the seconds profiling added to it
PROFILE_STEPS_KEY = "prof_steps"  # the steps its profile's window held (one more ran before it)
PROFILE_CUT_KEY = "prof_cut"  # the budget's end cut its profile: its prof_s is a lower bound, no profile's price
UNIT_KEY = "throughput_unit"  # the unit of its throughput (the console's best line)
GRAPH_OPS_KEY = "graph_ops"  # distinct operations of its eager step (sweeper.trial.ops): prices a first compile
CACHE_HITS_KEY = "compile_cache_hits"  # graphs Inductor's cache held compiled (a compiled trial's)
CACHE_MISSES_KEY = "compile_cache_misses"  # graphs it compiled
NODE_SHARED_KEY = "node_shared"  # another trial ran on its cores or GPUs during its window (its OOM may pass)
DATA_WAIT_KEY = "data_wait_frac"  # the share of its measured window spent waiting for data (data-bound >= 0.2)
GPU_UTIL_KEY = "gpu_util_mean"  # NVML's mean utilization of its device over its window (percent; GPUs only)
STEP_MS_KEY = "step_ms_mean"  # its mean step time in its measured window (ms): prices a profile's own steps

# ---- trial system attributes the sweeper writes
REQUEUED_KEY = "knob_sweeper:requeued"  # queued again after a cut run (measured first)
DEFERRED_KEY = "knob_sweeper:deferred_start"  # the handbook's start, left to the staged sampler (its params)
STAGE_KEY = "knob_sweeper:stage"  # the staged sampler's stage: screen | led | start | promote | search

# ---- study user attributes
STUDY_ID_KEY = "knob_sweeper:study_id"  # a random id, telling apart studies of one name
TARGET_KEY = "knob_sweeper:target"  # how many counted trials the current sweep aims for
FINISHED_KEY = "knob_sweeper:finished"  # the target of the last sweep that ran to its end
SEARCHED_KEY = "knob_sweeper:searched"  # the target whose search ended (re-measurements next)
WORKLOAD_KEY = "knob_sweeper:workload"  # the workload (data source, preset) it sweeps
QUEUED_KEY = "knob_sweeper:queued"  # its first trials (warm start, baseline, starts) are queued

CONSTRAINT_KEY = "fits_in_memory"  # the trials' Optuna constraint: <= 0 feasible, > 0 violated (OOM)

UNOWNED_S = 10.0  # a RUNNING trial without an owner this long after its start was asked by a killed sweeper
PID_REUSE_S = 2.0  # a process started this long after the trial cannot be its sweeper (psutil's times are coarse)


class Owner(str, enum.Enum):
    """Is the process that holds something (a trial's sweeper, the journal's lock) running?"""

    SELF = "self"  # this process
    ALIVE = "alive"  # a running process of this host
    DEAD = "dead"  # gone, a zombie, or its pid now another process's
    UNKNOWN = "unknown"  # cannot be seen from here: another host, or no holder named


def owner_state(t: Any) -> Owner:
    """The sweeper that asked the trial ``t`` (an Optuna FrozenTrial): ``SELF``, ``ALIVE``, ``DEAD`` (also when
    its pid is now a process started over ``PID_REUSE_S`` after the trial), or ``UNKNOWN`` (another host, or no
    owner recorded: not seen)."""
    import psutil

    host, _, pid = str(t.user_attrs.get(OWNER_KEY, "")).rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return Owner.UNKNOWN
    if int(pid) == os.getpid():
        return Owner.SELF
    try:
        started = t.datetime_start
        if started is not None and psutil.Process(int(pid)).create_time() > started.timestamp() + PID_REUSE_S:
            return Owner.DEAD
    except psutil.Error:
        return Owner.DEAD
    return Owner.ALIVE if pid_alive(int(pid)) else Owner.DEAD


def is_start(t: Any) -> bool:
    """Whether trial ``t`` is the handbook's start as the sweep ran it: proposed by the staged sampler (stage
    ``start``, fed by the best's pipeline) or queued again at a smaller batch (``START_KEY``)."""
    return t.system_attrs.get(STAGE_KEY) == "start" or t.user_attrs.get(START_KEY) is True


def reason_of(t: Any) -> Reason:
    """The typed reason a trial was settled with (its ``reason`` attribute; ``Reason.NONE`` when it has none)."""
    return Reason.of(t.user_attrs.get(REASON_KEY))


def status_of(t: Any) -> Status | None:
    """The status a trial was settled with (its ``status`` attribute); None before it was told, or for a value
    this version does not know."""
    try:
        return Status(t.user_attrs.get(STATUS_KEY))
    except ValueError:
        return None
