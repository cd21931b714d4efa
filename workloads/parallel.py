"""Data-parallel wrapping of a workload's model: DDP or FSDP2, from the ``distributed`` config node.

A workload's ``build`` calls ``wrap(model, cfg.get("distributed"), device, blocks)`` after moving the model to
its device (and after activation checkpointing) and *before* creating the optimizer: FSDP2 replaces the
parameters with sharded DTensors. With ``strategy: none`` (the default) ``wrap`` returns the model untouched.
The process group must already exist: ``sweeper.distributed`` starts the ranks and creates it.

FSDP sharding, as users name it (FSDP1's ``ShardingStrategy``), mapped onto FSDP2's device mesh and
``reshard_after_forward``:

* ``FULL_SHARD``: mesh ``(N,)`` ("shard"), ``reshard_after_forward=True``. ZeRO-3: a block's parameters are
  gathered for its forward and freed after it, gathered again for backward.
* ``SHARD_GRAD_OP``: mesh ``(N,)``, ``reshard_after_forward=False``. ZeRO-2: gathered parameters stay from
  forward to backward (more memory, one all-gather fewer).
* ``NO_SHARD``: mesh ``(N, 1)`` ("replicate", "shard"), ``reshard_after_forward=False``. HSDP with a shard
  group of one: every rank holds whole parameters and gradients are all-reduced (DDP-like, through FSDP2).
* ``HYBRID_SHARD``: mesh ``(R, N/R)`` ("replicate", "shard"), ``reshard_after_forward=True``. Sharded within
  groups of N/R ranks, replicated across the R groups.

``R`` is ``replicate_degree``, by default the largest divisor of N not above sqrt(N) (N=8 -> 2x4, N=4 -> 2x2,
N=2 -> 1x2). Every block in ``blocks`` (transformer layers, ResNet stages) gets its own ``fully_shard`` (so
its parameters are gathered and freed on their own), then the root module gets one for the rest.
Nothing here imports Optuna or Hydra.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from workloads.base import DeviceInfo

STRATEGIES = ("none", "ddp", "fsdp")
SHARDINGS = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
COMM_HOOKS = ("none", "fp16", "bf16")
START_METHODS = ("fork", "spawn", "forkserver")
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_DTYPE_NAMES = tuple(_DTYPES)
# Metrics a distributed trial adds to the usual ones (objectives may name them).
METRICS = ("world_size", "step_ms_p50_rank_min", "comm_frac", "comm_ms_per_step", "launch_s")


@dataclasses.dataclass(frozen=True)
class DistributedConf:
    """The ``distributed`` config node: its schema (registered in Hydra's ConfigStore as ``schema/distributed``,
    checked before any trial starts) and, through :func:`settings`, the validated settings a rank wraps with."""

    strategy: str = "none"
    """none (one process) | ddp | fsdp (FSDP2, ``fully_shard``)."""
    nproc: int | None = None
    """Ranks of one trial; null: one per GPU visible to the trial (1 on the CPU)."""
    backend: str = "auto"
    """auto (nccl on GPU, gloo on CPU) | nccl | gloo."""
    timeout_s: float = 300.0
    """Process-group timeout in seconds: a rank waiting in a collective longer than this fails."""
    start_method: str = "fork"
    """How the launcher starts ranks: fork (torch already imported: fast) | spawn | forkserver."""
    comm_profile_steps: int = 3
    """Steps profiled after the measured window to measure ``comm_frac`` (0: off)."""
    bucket_cap_mb: float = 25.0
    """DDP: gradient bucket size of the all-reduce, in MiB."""
    gradient_as_bucket_view: bool = False
    """DDP: gradients are views into the all-reduce buckets (saves a copy)."""
    static_graph: bool = False
    """DDP: the set of used parameters never changes between steps."""
    find_unused_parameters: bool = False
    """DDP: look for parameters without gradients after each forward."""
    comm_hook: str = "none"
    """DDP: none | fp16 | bf16 (gradients compressed for the all-reduce, ``default_hooks``)."""
    sharding: str = "FULL_SHARD"
    """FSDP2: FULL_SHARD | SHARD_GRAD_OP | NO_SHARD | HYBRID_SHARD (see the module docstring)."""
    replicate_degree: int | None = None
    """FSDP2 HYBRID_SHARD: replica groups; null: the largest divisor of nproc <= sqrt(nproc)."""
    param_dtype: str | None = None
    """FSDP2 ``MixedPrecisionPolicy.param_dtype``: null (keep fp32) | fp32 | bf16 | fp16."""
    reduce_dtype: str | None = None
    """FSDP2 ``MixedPrecisionPolicy.reduce_dtype``: null (= param_dtype) | fp32 | bf16 | fp16."""
    cpu_offload: bool = False
    """FSDP2 ``CPUOffloadPolicy`` (GPU only): sharded params, grads and optimizer step on the CPU."""
    wrap_blocks: bool = True
    """FSDP2: ``fully_shard`` each block (layer, ResNet stage) before the root (false: the root only)."""

    def problems(self) -> list[tuple[str, str, str]]:
        """(key, problem, fix) for every setting out of its range; empty when the node is valid."""
        out = []
        for key, allowed in (("strategy", STRATEGIES), ("sharding", SHARDINGS), ("comm_hook", COMM_HOOKS),
                             ("start_method", START_METHODS), ("backend", ("auto", "nccl", "gloo")),
                             ("param_dtype", (None, *_DTYPE_NAMES)), ("reduce_dtype", (None, *_DTYPE_NAMES))):
            value = getattr(self, key)
            if value not in allowed:
                out.append((key, f"must be one of {allowed}, got {value!r}",
                            f"use one of: {', '.join('null' if a is None else a for a in allowed)}"))
        if self.nproc is not None and int(self.nproc) < 1:
            out.append(("nproc", f"must be >= 1 (or null for one rank per visible GPU), got {self.nproc!r}",
                        "give the number of ranks, or null"))
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
    kind = "cuda" if str(cfg.get("device", "cpu")).startswith("cuda") else "cpu"
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


# ---------------------------------------------------------------- wrapping (inside a rank)

_WRAPPED: dict[str, nn.Module] = {}


def wrap(model: nn.Module, node: Mapping[str, Any] | None, device: torch.device,
         blocks: Iterable[nn.Module] = ()) -> nn.Module:
    """``model`` wrapped for data parallelism as ``node`` says (DDP or FSDP2); unchanged for strategy none.

    ``blocks`` are the submodules FSDP shards one by one (transformer layers, ResNet stages). Call before the
    optimizer is created, and use the returned module for the forward pass.
    """
    s = settings(node)
    if s.strategy == "none":
        return model
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError(f"distributed.strategy={s.strategy} needs a process group; run the trial through "
                           "sweeper.distributed (an isolated trial does), not by calling build directly")
    wrapped = _ddp(model, s, device) if s.strategy == "ddp" else _fsdp(model, s, device, list(blocks))
    _WRAPPED["model"] = wrapped
    return wrapped


def wrapped_model() -> nn.Module | None:
    """The module the last ``wrap`` call in this process produced (None: no workload wrapped anything)."""
    return _WRAPPED.get("model")


def _ddp(model: nn.Module, s: DistributedConf, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=float(s.bucket_cap_mb), gradient_as_bucket_view=bool(s.gradient_as_bucket_view),
        static_graph=bool(s.static_graph), find_unused_parameters=bool(s.find_unused_parameters))
    if s.comm_hook != "none":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        hook = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}[s.comm_hook]
        ddp.register_comm_hook(None, hook)  # state None: the default process group
    return ddp


def _fsdp(model: nn.Module, s: DistributedConf, device: torch.device, blocks: list[nn.Module]) -> nn.Module:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    shape, reshard = fsdp_layout(s.sharding, dist.get_world_size(), s.replicate_degree)
    names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
    mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
    kwargs = dict(mesh=mesh, reshard_after_forward=reshard,
                  mp_policy=MixedPrecisionPolicy(param_dtype=_DTYPES.get(s.param_dtype),
                                                 reduce_dtype=_DTYPES.get(s.reduce_dtype)),
                  offload_policy=CPUOffloadPolicy() if s.cpu_offload else OffloadPolicy())
    if s.wrap_blocks:
        for block in blocks:
            fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


# ---------------------------------------------------------------- what the wrapped module really does

def describe(model: nn.Module | None) -> dict[str, Any]:
    """Settings read back from the live wrapped module (not from the config), as flat metrics."""
    if model is None:
        return {}
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        data = model._get_ddp_logging_data()  # the reducer's own record of its configuration
        sizes = str(data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or "")
        return {
            "ddp_bucket_cap_bytes": int(model.bucket_bytes_cap),
            "ddp_num_buckets": len([x for x in sizes.split(",") if x.strip()]),
            "ddp_static_graph": bool(data.get("static_graph")),
            "ddp_gradient_as_bucket_view": bool(data.get("gradient_as_bucket_view")),
            "ddp_find_unused_parameters": bool(data.get("find_unused_parameters")),
            "ddp_comm_hook": str(data.get("comm_hook") or "none"),
        }
    return _describe_fsdp(model)


def _describe_fsdp(model: nn.Module) -> dict[str, Any]:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if isinstance(p, DTensor)]
    if not params:
        return {}
    local = sum(p.to_local().numel() for p in params)
    full = sum(p.numel() for p in params)
    out: dict[str, Any] = {
        "fsdp_mesh": "x".join(str(d) for d in params[0].device_mesh.shape),
        "fsdp_shard_frac": local / full if full else math.nan,  # 1/N for FULL_SHARD when dims divide evenly
        "fsdp_param_device": params[0].to_local().device.type,  # cpu with CPU offload
        "fsdp_modules": sum(1 for m in model.modules() if isinstance(m, FSDPModule)),
    }
    # FSDP2 keeps the forward resharding decision in its parameter group (private, read defensively).
    inner = [m for m in model.modules() if isinstance(m, FSDPModule) and m is not model] or [model]
    try:
        state = inner[0]._get_fsdp_state()
        groups = getattr(state, "_fsdp_param_groups", None) or [getattr(state, "_fsdp_param_group", None)]
        group = groups[0]
        out["fsdp_reshard_after_forward"] = group.post_forward_mesh_info is not None
        out["fsdp_param_dtype"] = _dtype_name(group.mp_policy.param_dtype)
        out["fsdp_reduce_dtype"] = _dtype_name(group.mp_policy.reduce_dtype)
    except (AttributeError, IndexError, TypeError):
        pass
    return out


def _dtype_name(dtype: torch.dtype | None) -> str:
    return "none" if dtype is None else str(dtype).removeprefix("torch.")

