"""What limits a configuration, from its measured window: data, compute, memory bandwidth or launch overhead.

The rule, first match wins (thresholds are module constants):

1. ``data_wait_frac >= 0.20`` -> **data-bound**: a fifth or more of the window was spent waiting for the next
   batch; faster input (workers, pinned memory, GPU decode) pays before any model knob does. Where the row
   recorded the pipeline's per-stage timings, the stage that limits it is named: ``data-bound (decode)``.
2. ``mfu >= 0.35`` -> **compute-bound**: the math units run at a large fraction of their peak.
3. no GPU utilisation was sampled (a CPU trial, or no NVML) -> **n/a**: without GPU counters the rest cannot
   be told apart.
4. ``gpu_util_mean < 70`` (percent) -> **launch-bound**: the GPU sat idle although the host was not waiting for
   data: kernel launches, Python overhead or host syncs (CUDA graphs / torch.compile help). Also when the GPU
   idled more than 5 % (``gpu_util_mean < 95``) while the host spent ``host_step_frac >= 0.7`` of the window
   launching steps: the host was behind. On the H200 (2026-12-02) the compiled ResNet-50 at batch 512 kept its
   host in ``step()`` 0.78 of the window on synthetic data (GPU 99 % busy); fed by a JPEG pipeline whose threads
   share the process (GPU crops), the host stayed 0.79-0.83 in ``step()`` while the GPU idled 6-15 %, and a
   profile (``bench/step_profile.py``) put most of that idle time on launches that came late.
5. otherwise, with an MFU below 0.35 -> **memory-bound**: the GPU is busy but far from peak FLOP/s, so its
   kernels are limited by memory bandwidth (fusion, lower precision, larger batches help).
6. busy GPU but no MFU (no FLOP count) -> **compute-bound** (GPU busy; MFU unknown).
"""

from __future__ import annotations

import math

DATA_WAIT = 0.20
COMPUTE_MFU = 0.35
LAUNCH_UTIL = 70.0
BUSY_UTIL = 95.0  # below this, a host that is launching most of the time is what keeps the GPU waiting
HOST_STEP = 0.7


def _num(value: object) -> float:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return v


def diagnose(
    data_wait_frac: object, gpu_util_mean: object, mfu: object, data_stage: object = None, host_step_frac: object = None
) -> str:
    """The rule above; a data-bound row also names the pipeline stage that limits it (``decode``,
    ``augmentation`` or ``transfer``), when its row recorded one (``data_limit_stage``, from measured timings).
    ``host_step_frac`` (rows from before it existed: None) adds rule 4's second case."""
    wait, util, m, host = _num(data_wait_frac), _num(gpu_util_mean), _num(mfu), _num(host_step_frac)
    if wait >= DATA_WAIT:
        stage = data_stage if isinstance(data_stage, str) and data_stage else None
        return f"data-bound ({stage})" if stage else "data-bound"
    if m >= COMPUTE_MFU:
        return "compute-bound"
    if math.isnan(util):
        return "n/a"
    if util < LAUNCH_UTIL or (util < BUSY_UTIL and host >= HOST_STEP):
        return "launch-bound"
    if not math.isnan(m):
        return "memory-bound"
    return "compute-bound"
