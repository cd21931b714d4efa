"""The ``distributed`` config node: its schema (:class:`DistributedConf`), the FSDP sharding layout, and the
checks before launch. Torch-free: the sweeper process validates this node without importing torch;
``workloads.parallel`` wraps the model as these settings say (see its docstring for the sharding mapping).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any, Literal

from workloads.base import DeviceInfo
from workloads.spec import typed

Strategy = Literal["none", "ddp", "fsdp"]
Sharding = Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"]
CommHook = Literal["none", "fp16", "bf16"]
StartMethod = Literal["fork", "spawn", "forkserver"]
Backend = Literal["auto", "nccl", "gloo"]
DtypeName = Literal["fp32", "bf16", "fp16"]
STRATEGIES: tuple[str, ...] = typing.get_args(Strategy)
SHARDINGS: tuple[str, ...] = typing.get_args(Sharding)
COMM_HOOKS: tuple[str, ...] = typing.get_args(CommHook)
START_METHODS: tuple[str, ...] = typing.get_args(StartMethod)
DTYPE_NAMES: tuple[str, ...] = typing.get_args(DtypeName)
# Metrics a distributed trial adds to the usual ones (objectives may name them).
METRICS = ("world_size", "step_ms_p50_rank_min", "comm_frac", "comm_ms_per_step", "launch_s")


@dataclasses.dataclass(frozen=True)
class DistributedConf:
    """The ``distributed`` config node: its schema (registered in Hydra's ConfigStore as ``schema/distributed``,
    checked before any trial starts) and, through :func:`settings`, the validated settings a rank wraps with."""

    strategy: Strategy = "none"
    """none (one process) | ddp | fsdp (FSDP2, ``fully_shard``)."""
    nproc: int | None = None
    """Ranks of one trial; null: one per GPU visible to the trial (1 on the CPU)."""
    backend: Backend = "auto"
    """auto (nccl on GPU, gloo on CPU) | nccl | gloo."""
    timeout_s: float = 300  # 300, not 300.0: a row's knob.distributed.* columns keep the type earlier rows have
    """Process-group timeout in seconds: a rank waiting in a collective longer than this fails."""
    start_method: StartMethod = "fork"
    """How the launcher starts ranks: fork (torch already imported: fast) | spawn | forkserver."""
    comm_profile_steps: int = 3
    """Steps profiled after the measured window to measure ``comm_frac`` (0: off)."""
    bucket_cap_mb: float = 25  # an int likewise
    """DDP: gradient bucket size of the all-reduce, in MiB."""
    gradient_as_bucket_view: bool = False
    """DDP: gradients are views into the all-reduce buckets (saves a copy)."""
    static_graph: bool = False
    """DDP: the set of used parameters never changes between steps."""
    find_unused_parameters: bool = False
    """DDP: look for parameters without gradients after each forward."""
    comm_hook: CommHook = "none"
    """DDP: none | fp16 | bf16 (gradients compressed for the all-reduce, ``default_hooks``)."""
    sharding: Sharding = "FULL_SHARD"
    """FSDP2: FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD (see the module docstring)."""
    replicate_degree: int | None = None
    """FSDP2 HYBRID_SHARD: replica groups; null: the largest divisor of nproc <= sqrt(nproc)."""
    param_dtype: DtypeName | None = None
    """FSDP2 ``MixedPrecisionPolicy.param_dtype``: null (keep fp32) | fp32 | bf16 | fp16."""
    reduce_dtype: DtypeName | None = None
    """FSDP2 ``MixedPrecisionPolicy.reduce_dtype``: null (= param_dtype) | fp32 | bf16 | fp16."""
    cpu_offload: bool = False
    """FSDP2 ``CPUOffloadPolicy`` (GPU only): sharded params, grads and optimizer step on the CPU."""
    wrap_blocks: bool = True
    """FSDP2: ``fully_shard`` each block (layer, ResNet stage) before the root (false: the root only)."""

    def problems(self) -> list[tuple[str, str, str]]:
        """(key, problem, fix) for every setting out of its range; empty when the node is valid."""
        out = typed.field_problems(self)  # the choices, and each value of its field's type
        if out:
            return out
        if self.nproc is not None and int(self.nproc) < 1:
            out.append(
                (
                    "nproc",
                    f"must be >= 1 (or null for one rank per visible GPU), got {self.nproc!r}",
                    "give the number of ranks, or null",
                )
            )
        for key in ("bucket_cap_mb", "timeout_s"):
            if float(getattr(self, key)) <= 0:
                out.append((key, f"must be > 0, got {getattr(self, key)!r}", "give a positive number"))
        return out


def settings(node: Mapping[str, Any] | None) -> DistributedConf:
    """The validated settings of a ``distributed`` node (None or missing keys: defaults)."""
    node = dict(node or {})
    known = {f.name for f in dataclasses.fields(DistributedConf)}
    unknown = sorted(set(node) - known)
    if unknown:
        raise ValueError(f"distributed.{unknown[0]} is not a distributed setting; known: {', '.join(sorted(known))}")
    s = DistributedConf(**node)
    for key, problem, _fix in s.problems()[:1]:
        raise ValueError(f"distributed.{key} {problem}")
    return s


def resolve_nproc(s: DistributedConf, device_kind: str, gpu_count: int) -> int:
    """Ranks of the trial: ``nproc``, or one per visible GPU (one on the CPU)."""
    if s.nproc is not None:
        return int(s.nproc)
    return max(1, gpu_count) if device_kind == "cuda" else 1


def default_replicas(world: int) -> int:
    """The largest divisor of ``world`` that is at most sqrt(world)."""
    return max(d for d in range(1, math.isqrt(world) + 1) if world % d == 0)


def fsdp_layout(sharding: str, world: int, replicate_degree: int | None = None) -> tuple[tuple[int, ...], bool]:
    """(device-mesh shape, reshard_after_forward) for a sharding name; see the module docstring."""
    if sharding == "FULL_SHARD":
        return (world,), True
    if sharding == "SHARD_GRAD_OP":
        return (world,), False
    if sharding == "NO_SHARD":
        return (world, 1), False
    if sharding == "HYBRID_SHARD":
        r = int(replicate_degree) if replicate_degree else default_replicas(world)
        if r < 1 or world % r:
            raise ValueError(f"distributed.replicate_degree ({r}) must divide the number of ranks ({world})")
        return (r, world // r), True
    raise ValueError(f"distributed.sharding must be one of {SHARDINGS}, got {sharding!r}")


def check(cfg: Mapping[str, Any], device: DeviceInfo) -> str | None:
    """Why this machine cannot run the configured distributed trial (the trial is skipped), or None."""
    try:
        s = settings(cfg.get("distributed"))
    except (TypeError, ValueError) as e:
        return str(e)
    if s.strategy == "none":
        return None
    kind = "cuda" if str(cfg["device"]).startswith("cuda") else "cpu"
    n = resolve_nproc(s, kind, device.count)
    if kind == "cuda" and n > device.count:
        return f"distributed.nproc={n} needs {n} GPUs, {device.count} visible"
    if kind == "cpu" and s.backend == "nccl":
        return "distributed.backend=nccl needs GPUs; use gloo (or auto) on the CPU"
    if s.strategy == "fsdp":
        if s.sharding == "HYBRID_SHARD" and s.replicate_degree and n % int(s.replicate_degree):
            return f"distributed.replicate_degree={s.replicate_degree} does not divide nproc={n}"
        if s.cpu_offload and kind == "cpu":
            return "distributed.cpu_offload moves parameters from the GPU to the CPU; it needs a GPU"
    return None
