"""Resource slots: how many trials run at once on this node, and which GPUs and cores each one owns.

Default (no ``trial.resources``): one trial at a time owning the whole node, so benchmark numbers compare.
With ``trial.resources: {gpus: G, cpus: C}`` the node is cut into disjoint slots of G GPUs and C cores; a trial
is pinned to its slot (``CUDA_VISIBLE_DEVICES`` and CPU affinity), so a DataLoader in one trial never takes
another trial's cores.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from sweeper.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Slot:
    index: int
    gpus: tuple[str, ...] | None  # CUDA_VISIBLE_DEVICES tokens (indices or UUIDs as this process sees them)
    cpus: tuple[int, ...] | None  # core ids for sched_setaffinity


def visible_gpu_tokens(count: int) -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [t.strip() for t in visible.split(",") if t.strip()][:count]
    return [str(i) for i in range(count)]


def make_slots(resources: dict[str, Any] | None, n_jobs: int, n_gpus: int) -> list[Slot]:
    """Cut the node into slots; ``n_jobs`` > 1 without resources runs that many unpinned trials at once."""
    resources = resources or {}
    g, c = resources.get("gpus"), resources.get("cpus")
    if not g and not c:
        return [Slot(i, None, None) for i in range(max(1, n_jobs))]
    cores = sorted(os.sched_getaffinity(0))
    tokens = visible_gpu_tokens(n_gpus)
    limits = []
    if g:
        if int(g) < 1 or int(g) > len(tokens):
            raise ConfigError("trial.resources.gpus", f"asks {g} GPUs per trial but {len(tokens)} are visible",
                              f"use 1..{len(tokens)}, or null on a CPU-only node" if tokens else "use null on a CPU-only node")
        limits.append(len(tokens) // int(g))
    if c:
        if int(c) < 1 or int(c) > len(cores):
            raise ConfigError("trial.resources.cpus", f"asks {c} cores per trial but this process may use {len(cores)}",
                              f"use 1..{len(cores)}")
        limits.append(len(cores) // int(c))
    if n_jobs > 1:
        limits.append(n_jobs)
    n = min(limits)
    return [Slot(i,
                 tuple(tokens[i * int(g):(i + 1) * int(g)]) if g else None,
                 tuple(cores[i * int(c):(i + 1) * int(c)]) if c else None) for i in range(n)]


def slot_overrides(slot: Slot) -> list[str]:
    out = []
    if slot.gpus is not None:
        out.append("gpus=[" + ",".join(f"'{t}'" for t in slot.gpus) + "]")
    if slot.cpus is not None:
        out.append("cpus=[" + ",".join(str(c) for c in slot.cpus) + "]")
    return out
