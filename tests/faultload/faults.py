"""A workload that fails on purpose, for the failure-handling tests (not offered to users: it lives in tests/).

``knobs.fault`` picks what happens at measured step ``knobs.fault_step``: ``none`` (a good trial, its speed set by
``knobs.work``), ``oom`` (a real allocation far beyond memory), ``nan`` (the loss really becomes NaN), ``raise``,
``segfault`` (a real invalid read), ``abort``, ``sigkill`` (what the kernel's OOM killer does), ``hang``, ``exit``,
``gpu_only`` (refused by ``check`` on a CPU: skipped before launch). ``knobs.sleep_ms`` makes every step that much
slower by construction (a sleep: no competition for the CPU, so the ordering of trials is deterministic). The
trial reports ``env_probe``, the value of ``KNOB_PROBE`` it saw.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Any

import torch

from workloads.base import DeviceInfo, Workload


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    if cfg["knobs"]["fault"] == "gpu_only" and device.kind != "cuda":
        return "fault=gpu_only needs a GPU"
    return None


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    knobs = cfg["knobs"]
    fault, at = knobs["fault"], int(knobs["fault_step"])
    n = int(knobs["work"])
    pause = float(knobs.get("sleep_ms") or 0) / 1e3
    a = torch.randn(n, n, device=device)
    count = [0]

    def step(_batch: Any) -> torch.Tensor:
        count[0] += 1
        loss = (a @ a).mean()
        if pause:
            time.sleep(pause)
        if count[0] >= at:
            if fault == "oom":
                torch.empty(1 << 50, dtype=torch.uint8, device=device)  # 1 PiB: the allocator really fails
            elif fault == "nan":
                loss = torch.log(loss - loss - 1.0)  # log(-1) = NaN, computed for real
            elif fault == "raise":
                raise ValueError(f"planted failure at step {count[0]}")
            elif fault == "segfault":
                ctypes.string_at(0)  # read address 0: SIGSEGV
            elif fault == "abort":
                os.abort()
            elif fault == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif fault == "hang":
                time.sleep(3600)
            elif fault == "exit":
                os._exit(3)
        return loss

    return Workload(step=step, samples_per_step=1.0, flops_per_step=2.0 * n**3,
                    extra_metrics=lambda: {"env_probe": os.environ.get("KNOB_PROBE")})
