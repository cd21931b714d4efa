"""Data-parallel wrapping of a workload's model: DDP or FSDP2, from the ``distributed`` config node.

A workload's ``build`` calls ``wrap(model, cfg.get("distributed"), device, blocks)`` after moving the model to
its device (and after activation checkpointing) and *before* creating the optimizer: FSDP2 replaces the
parameters with sharded DTensors. With ``strategy: none`` (the default) ``wrap`` returns the model untouched.
The process group must already exist: ``sweeper.trial.ranks`` starts the ranks and creates it.

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

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from workloads.spec.distributed import (  # noqa: F401 (re-exported: the settings a rank wraps with)
    COMM_HOOKS,
    METRICS,
    SHARDINGS,
    START_METHODS,
    STRATEGIES,
    DistributedConf,
    check,
    default_replicas,
    fsdp_layout,
    resolve_nproc,
    settings,
)

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


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
                           "sweeper.trial.ranks (an isolated trial does), not by calling build directly")
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

