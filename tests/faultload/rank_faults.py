"""A distributed trial with a planted fault on one rank (tests only; the test hooks live here, not in the sweeper).

Use with ``+workload.module=tests.faultload.rank_faults``: each rank builds the configured workload
(``workload.name``) and then, from the environment the trial inherits,
``SWEEPER_TEST_RANK_FAULT="<rank>:<kind>[@<step>]"`` makes that rank fail at its ``step``-th training step
(default 3): kind ``raise`` (ValueError), ``oom`` (a real allocation far beyond memory), ``exit``
(``os._exit(7)``) or ``hang`` (sleeps; first creates the file ``SWEEPER_TEST_HANG_MARKER`` names, if set);
``SWEEPER_TEST_PID_DIR=<dir>`` makes each rank write ``rank<r>.json``
with its pid, parent pid and process group.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import workloads
from workloads.base import Workload


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    work = workloads.load(cfg["workload"]["name"]).build(cfg, device)
    rank = int(os.environ.get("RANK", 0))
    _write_pid(rank)
    work.step = _with_planted_fault(work.step, rank, device)
    return work


def _write_pid(rank: int) -> None:
    d = os.environ.get("SWEEPER_TEST_PID_DIR")
    if d:
        info = {"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0)}
        Path(d, f"rank{rank}.json").write_text(json.dumps(info))


def _with_planted_fault(step: Callable, rank: int, device: torch.device) -> Callable:
    spec = os.environ.get("SWEEPER_TEST_RANK_FAULT", "")
    if not spec:
        return step
    who, _, rest = spec.partition(":")
    kind, _, at = rest.partition("@")
    if int(who) != rank:
        return step
    at_step = int(at or 3)
    calls = [0]

    def faulty(batch: Any) -> Any:
        calls[0] += 1
        if calls[0] == at_step:
            if kind == "raise":
                raise ValueError(f"planted fault on rank {rank} at step {at_step}")
            if kind == "oom":
                torch.empty(2**50, dtype=torch.uint8, device=device)  # 1 PiB: a real allocator failure
            if kind == "exit":
                os._exit(7)
            if kind == "hang":
                marker = os.environ.get("SWEEPER_TEST_HANG_MARKER")
                if marker:  # a test waits for it, not for a guessed time
                    _handed_over()
                    Path(marker).touch()
                time.sleep(3600)
        return step(batch)

    return faulty


def _handed_over(limit_s: float = 60.0) -> None:
    """Until the agent (this rank's parent) has handed the ranks' measured windows to the sweeper: it removes their
    files from its run folder (``sweeper.trial.ranks._Relay``, ``sweeper-dist-<agent pid>-*``) once sent."""
    import glob
    import tempfile

    pattern = os.path.join(tempfile.gettempdir(), f"sweeper-dist-{os.getppid()}-*", "measured-*.pkl")
    deadline = time.time() + limit_s
    while glob.glob(pattern) and time.time() < deadline:
        time.sleep(0.01)
