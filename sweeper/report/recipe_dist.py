"""How the ``distributed`` knobs of a row read in a training script of ``world`` ranks (torchrun), for the recipe.

Torch-free, so the report needs no torch: the FSDP sharding names map onto FSDP2's device mesh and
``reshard_after_forward`` as ``workloads.parallel.fsdp_layout`` applies them in the trial (a test holds the two
equal for every sharding and world size).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def fsdp_layout(sharding: str, world: int, replicate_degree: int | None = None) -> tuple[tuple[int, ...], bool]:
    """(device-mesh shape, reshard_after_forward) of a sharding name (see ``workloads/parallel.py``)."""
    if sharding == "SHARD_GRAD_OP":
        return (world,), False
    if sharding == "NO_SHARD":
        return (world, 1), False
    if sharding == "HYBRID_SHARD":
        r = (
            int(replicate_degree)
            if replicate_degree
            else max(d for d in range(1, math.isqrt(world) + 1) if world % d == 0)
        )
        return (r, world // r), True
    return (world,), True  # FULL_SHARD


def distributed_lines(d: Mapping[str, Any], world: int, device: str = "cuda") -> list[str]:
    strategy = d.get("strategy") or "none"
    if strategy == "ddp":
        lines = [
            "from torch.nn.parallel import DistributedDataParallel",
            f"model = DistributedDataParallel(model, bucket_cap_mb={d.get('bucket_cap_mb')}, "
            f"gradient_as_bucket_view={bool(d.get('gradient_as_bucket_view'))}, "
            f"static_graph={bool(d.get('static_graph'))}, "
            f"find_unused_parameters={bool(d.get('find_unused_parameters'))})",
        ]
        hook = d.get("comm_hook") or "none"
        if hook != "none":
            lines += [
                "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks",
                f"model.register_comm_hook(None, default_hooks.{hook}_compress_hook)",
            ]
        return lines
    if strategy == "fsdp":
        shape, reshard = fsdp_layout(str(d.get("sharding") or "FULL_SHARD"), world, d.get("replicate_degree"))
        dims = "'shard',)" if len(shape) == 1 else "'replicate', 'shard')"
        dtypes = {"fp32": "torch.float32", "bf16": "torch.bfloat16", "fp16": "torch.float16"}
        mp = ", ".join(f"{k}={dtypes[d[k]]}" for k in ("param_dtype", "reduce_dtype") if d.get(k) in dtypes)
        args = f"mesh=mesh, reshard_after_forward={reshard}"
        args += f", mp_policy=MixedPrecisionPolicy({mp})" if mp else ""
        args += ", offload_policy=CPUOffloadPolicy()" if d.get("cpu_offload") else ""
        return [
            "from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy, CPUOffloadPolicy",
            "from torch.distributed.device_mesh import init_device_mesh",
            f"mesh = init_device_mesh('{device}', {shape}, mesh_dim_names=({dims})",
            *([f"for block in model.blocks: fully_shard(block, {args})"] if d.get("wrap_blocks", True) else []),
            f"fully_shard(model, {args})",
        ]
    return []
