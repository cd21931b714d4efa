"""A workload with a planted bottleneck, for the profile's attribution tests (lives in tests/).

``knobs.kind``:
  sync          each step runs a few matmuls, then reads the loss with ``.item()`` (a host synchronisation) and does
                ``host_ms`` of Python work with it before the next step launches anything: the GPU idles because
                the host drained its queue.
  tiny_kernels  each step launches ``kernels`` elementwise kernels on a small tensor: each takes less time on the
                GPU than its launch on the host, so the GPU idles between launches.
  input         each ``next_batch`` waits ``host_ms`` (a slow input pipeline), then a few matmuls.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from workloads.base import Workload

KINDS = ("sync", "tiny_kernels", "input")


def _spin(ms: float) -> None:
    """Host work (not a sleep: a busy host thread, as Python code that uses the value would be)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    knobs = cfg["knobs"]
    kind, size, host_ms = str(knobs["kind"]), int(knobs["size"]), float(knobs["host_ms"])
    if kind not in KINDS:
        raise ValueError(f"knobs.kind must be one of {KINDS}, got {kind!r}")
    torch.manual_seed(0)
    a = torch.randn(size, size, device=device) / size**0.5
    small = torch.zeros(256, device=device)
    one = torch.ones((), device=device)  # a tensor, not a Python float: no scalar-to-tensor copy op per kernel
    log: list[float] = []

    def matmuls() -> torch.Tensor:
        x = a
        for _ in range(int(knobs["matmuls"])):
            x = x @ a
        return x.mean()

    def step(_batch: Any) -> torch.Tensor:
        if kind == "tiny_kernels":
            for _ in range(int(knobs["kernels"])):
                small.add_(one)
            return small.sum()
        loss = matmuls()
        if kind == "sync":
            log.append(loss.item())  # the planted synchronisation
            _spin(host_ms)
        return loss

    def next_batch() -> None:
        if kind == "input":
            time.sleep(host_ms / 1e3)  # waiting for a batch that is not ready
        return None

    return Workload(step=step, next_batch=next_batch, samples_per_step=1.0, input_pipeline=kind == "input")
