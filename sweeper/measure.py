"""Timing of a built workload: first step, warm-up, measured window, flat metrics with units in their names.

GPU: per-step CUDA events (no host sync inside the window), a synchronize at both ends of the window for the
wall time. CPU: ``time.perf_counter`` per step. Throughput = work in the window / window wall time (not a mean
of per-step rates). No ``.item()`` inside the timed region; the loss is checked once after it.
"""

from __future__ import annotations

import math
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from sweeper.gpu import UtilizationSampler, peak_tflops
from workloads.base import Workload


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or infinite: the configuration diverged and must not be ranked."""

    def __init__(self, message: str, metrics: dict[str, Any]) -> None:
        super().__init__(message)
        self.metrics = metrics  # what was measured is kept even though the trial failed


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def measure(work: Workload, device: torch.device, warmup_steps: int, steps: int, min_time_s: float = 0.0,
            max_steps: int | None = None, report: Callable[[int, float], None] | None = None,
            gpu_name: str | None = None) -> dict[str, Any]:
    """Run and time ``work``; returns the metrics dict (units in the names).

    Runs at least ``steps`` measured steps and, if ``min_time_s`` is set, keeps going until the window lasts that
    long (up to ``max_steps``). ``report(step, throughput_so_far)`` is called between blocks of steps (pruning).
    """
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    t0 = time.perf_counter()
    loss = work.step(work.next_batch())
    sync()
    first_step_s = time.perf_counter() - t0
    for _ in range(max(0, warmup_steps - 1)):
        loss = work.step(work.next_batch())
    sync()

    sampler = UtilizationSampler() if cuda else None
    if sampler:
        sampler.start()
    max_steps = max(steps, max_steps or steps)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(max_steps + 1)] if cuda else []
    host_marks: list[float] = []
    data_wait = 0.0
    done = 0
    sync()
    start = time.perf_counter()
    if cuda:
        events[0].record()
    else:
        host_marks.append(start)
    block = max(1, steps // 4)
    while done < max_steps:
        t = time.perf_counter()
        batch = work.next_batch()
        data_wait += time.perf_counter() - t
        loss = work.step(batch)
        done += 1
        if cuda:
            events[done].record()
        else:
            host_marks.append(time.perf_counter())
        if done >= steps and (time.perf_counter() - start) >= min_time_s:
            break
        if report is not None and done % block == 0:
            report(done, done * work.samples_per_step / (time.perf_counter() - start))
    sync()
    wall = time.perf_counter() - start
    util = sampler.stop() if sampler else {}

    if cuda:
        step_s = [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(done)]
    else:
        step_s = [host_marks[i + 1] - host_marks[i] for i in range(done)]
    step_sorted = sorted(step_s)
    mean = statistics.fmean(step_s)
    cv = statistics.pstdev(step_s) / mean if len(step_s) > 1 and mean > 0 else math.nan

    loss_finite = True
    if isinstance(loss, torch.Tensor):
        loss_finite = bool(torch.isfinite(loss).all().item())

    throughput = done * work.samples_per_step / wall
    flops = work.flops_per_step
    achieved = flops * done / wall / 1e12 if flops else math.nan
    peak = peak_tflops(gpu_name, work.precision) if cuda else math.nan
    metrics: dict[str, Any] = {
        "throughput": throughput,
        "throughput_unit": work.throughput_unit,
        "steps_measured": done,
        "measured_s": wall,
        "first_step_s": first_step_s,
        "step_ms_p50": _percentile(step_sorted, 0.5) * 1e3,
        "step_ms_p10": _percentile(step_sorted, 0.1) * 1e3,
        "step_ms_p90": _percentile(step_sorted, 0.9) * 1e3,
        "step_ms_mean": mean * 1e3,
        "step_cv": cv,
        "data_wait_frac": data_wait / wall if wall > 0 else math.nan,
        "flops_per_step": flops if flops else math.nan,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "mfu": achieved / peak if peak and not math.isnan(peak) else math.nan,
        "loss_finite": loss_finite,
    }
    if cuda:
        metrics["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device)
        metrics["peak_mem_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    else:
        metrics["peak_mem_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        metrics["peak_mem_reserved_bytes"] = math.nan
    metrics.update(util)
    metrics.update(work.extra_metrics())
    if not loss_finite:
        raise NonFiniteLoss(f"loss is not finite after {done} measured steps", metrics)
    return metrics
