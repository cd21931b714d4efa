"""SMs withheld from the training step for the input pipeline's GPU work (``knobs.pipeline_sms``): a CUDA green context.

Beside a compiled training step that keeps every SM busy, the GPU decoder's work (nvJPEG's colour conversion, on
streams nvJPEG creates itself at default priority) waits behind the step's kernels: the batched decoder that runs at
~12,000 img/s alone fell to ~5 % of that beside a saturated GPU (README, Measured). A green context (CUDA 12.4+
driver API, through NVIDIA's ``cuda.bindings``) partitions the SMs: the training step runs on a stream of a green
context that holds all SMs but ``pipeline_sms`` (rounded to the GPU's partition granularity, 8 SMs on Hopper), and
everything else (the decoder, the crop, the copies) runs as before on the whole GPU, so the withheld SMs are never
occupied by training work. The cost is the step's share of those SMs.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

_KEEP: list[Any] = []  # green contexts stay alive for the process (their streams run the trial)


def missing() -> str | None:
    """Why ``knobs.pipeline_sms`` > 0 cannot run here (no ``cuda.bindings``), or None."""
    try:
        found = importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return None
    return "knobs.pipeline_sms > 0 needs NVIDIA's cuda-bindings package: pip install cuda-bindings, or set it 0"


def _check(result: tuple[Any, ...]) -> Any:
    """The values of a ``cuda.bindings.driver`` call, or RuntimeError naming its error."""
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err!r} while setting up knobs.pipeline_sms")
    return values[0] if len(values) == 1 else tuple(values)


def training_stream(device: torch.device, withheld: int) -> tuple[torch.cuda.Stream, int, int]:
    """A stream on ``device`` whose kernels run on all SMs but about ``withheld``: (stream, its SMs, the GPU's SMs).

    The partition is the driver's: the training group is at least ``total - withheld`` SMs, rounded up to the
    partition granularity, so fewer may be withheld than asked (the returned counts say how many were).
    """
    from cuda.bindings import driver

    torch.cuda.init()
    index = device.index if device.index is not None else torch.cuda.current_device()
    cu_device = _check(driver.cuDeviceGet(index))
    whole = _check(driver.cuDeviceGetDevResource(cu_device, driver.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))
    total = int(whole.sm.smCount)
    if not 0 < withheld < total:
        raise ValueError(f"knobs.pipeline_sms={withheld} must be between 1 and {total - 1} (this GPU has {total} SMs)")
    groups, count, _rest = _check(driver.cuDevSmResourceSplitByCount(1, whole, 0, total - withheld))
    if count != 1:
        raise RuntimeError(f"knobs.pipeline_sms={withheld}: the driver made {count} SM groups, not one")
    desc = _check(driver.cuDevResourceGenerateDesc([groups[0]], 1))
    ctx = _check(driver.cuGreenCtxCreate(desc, cu_device, driver.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
    handle = _check(driver.cuGreenCtxStreamCreate(ctx, driver.CUstream_flags.CU_STREAM_NON_BLOCKING, 0))
    _KEEP.append((ctx, handle))
    return torch.cuda.ExternalStream(int(handle), device=device), int(groups[0].sm.smCount), total
