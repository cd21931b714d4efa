"""The trial's default torch intra-op thread count (``cpu_threads: null``), chosen not to oversubscribe the node.

An intra-op pool meets at the end of every op: when one of its threads is descheduled (another process wants the
core: the sweeper, the Hydra job, the input pipeline, another user's job), every other thread waits for it. With
as many threads as cores, any other runnable process on the node costs whole steps: on a shared 2-core machine
one matmul configuration measured steps of either ~0.05 ms or ~8 ms with 2 threads, a steady ~0.05 ms with 1.
So the default is the physical cores the trial may use (logical siblings of one core share its units), divided
among the trials running at once, less one core left to the rest of the node (never fewer than 1 thread).
"""

from __future__ import annotations

import os
from pathlib import Path


def physical_cores(cpus: set[int]) -> int:
    """Distinct physical cores among the logical CPUs ``cpus`` (Linux topology; ``len(cpus)`` when unknown)."""
    seen = set()
    for c in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{c}/topology")
        try:
            seen.add(
                (topo.joinpath("physical_package_id").read_text().strip(), topo.joinpath("core_id").read_text().strip())
            )
        except OSError:
            return len(cpus)
    return len(seen) or len(cpus)


def default_threads(cores: int, physical: int | None = None, concurrent: int = 1) -> int:
    """Threads for one trial: ``min(cores, physical) // concurrent``, less one core left to the sweeper and the
    rest of the node, never below 1 (2 cores: 1 thread; 16: 15)."""
    share = max(1, min(cores, physical or cores) // max(1, concurrent))
    return max(1, share - 1)


def trial_threads(cpu_threads: int | None, concurrent: int = 1) -> int:
    """``cpu_threads`` when set, else the default for the cores this process may use."""
    if cpu_threads:
        return int(cpu_threads)
    cpus = os.sched_getaffinity(0)
    return default_threads(len(cpus), physical_cores(cpus), concurrent)
