"""Timing of a built workload: first step, warm-up, measured window, flat metrics with units in their names.

GPU: per-step CUDA events (no host sync inside the window), a synchronize at both ends of the window for the
wall time. CPU: ``time.perf_counter`` per step. Throughput = work in the window / window wall time (not a mean
of per-step rates). No ``.item()`` inside the timed region; the loss is checked once after it.
"""

from __future__ import annotations

import dataclasses
import math
import resource
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from sweeper.trial.gpu import UtilizationSampler, peak_tflops
from workloads.base import Workload


REPORT_EVERY_S = 0.2  # intermediate throughput goes to the pruner at most this often; its step unit


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


DRY_WAIT_S = 0.002  # a next_batch() call that waits this long (and a fifth of a step) found the buffer empty


def _drain(work: Workload) -> tuple[int, bool]:
    """Step until the input pipeline's prepared batches are used up: ``(steps run, whether it ran dry)``.

    Workers fill their prefetch buffers while the model starts; a pipeline slower than the model then feeds the
    first steps from that buffer, faster than it can sustain (on the H200, 14 workers x prefetch 4 held 56 batches
    of 512, ~4 s of a compiled ResNet-50, and a 1 s window read 7,226 img/s from a pipeline that sustains ~4,300).
    Warm-up goes on until, twice in a row, the pipeline holds at most one batch ready (``work.ready_batches``,
    read from its queues) or, where it cannot say, until two ``next_batch()`` calls in a row wait for data. A
    pipeline that keeps up never runs dry: warm-up stops once its ready count has not shrunk over min(buffer, 8)
    steps, or (without a count) after four times its buffer.
    """
    cap, dry, steps, interval = 4 * work.buffered_steps + 8, 0, 0, 0.0
    first_ready: int | None = None
    while steps < cap and dry < 2:
        t0 = time.perf_counter()
        batch = work.next_batch()
        waited = time.perf_counter() - t0
        work.step(batch)
        steps += 1
        took = time.perf_counter() - t0
        interval = took if steps == 1 else 0.8 * interval + 0.2 * took
        ready = work.ready_batches() if work.ready_batches is not None else None
        empty = ready <= 1 if ready is not None else waited > max(DRY_WAIT_S, 0.2 * interval)
        dry = dry + 1 if empty else 0
        if ready is not None:
            first_ready = ready if first_ready is None else first_ready
            if steps >= min(work.buffered_steps, 8) and ready >= first_ready and dry == 0:
                break  # the buffer is not shrinking: the pipeline keeps up, and its buffer cannot inflate the window
    return steps, dry >= 2


@dataclasses.dataclass
class Window:
    """What the timed run of a workload saw: the first step, the warm-up, and the measured window."""

    first_step_s: float  # the first step alone (compilation, autotuning, lazy init)
    warmup_steps: int  # steps run before the window (excluded from the numbers)
    steps: int  # steps measured in the window
    wall_s: float  # the window's wall time (synchronized at both ends on the GPU)
    step_s: list[float]  # per-step times inside the window
    data_wait_s: float  # time spent waiting for the next batch inside the window
    loss: Any  # the last step's loss (checked once, after the window)
    util: dict[str, Any]  # GPU utilization sampled during the window (NVML; empty on the CPU)
    drain_steps: int = 0  # warm-up steps run until the input pipeline's buffer was used up (see _drain)
    drained: bool = False  # whether that buffer ran dry (false: the pipeline kept up, or the cap was hit)
    capped: bool = False  # measure.max_steps ended the window before measure.min_time_s


class _StepClock:
    """Marks between steps: CUDA events on the GPU (no host sync per step), host clock readings on the CPU."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def wait_last(self) -> None:
        if self.cuda:
            self.marks[-1].synchronize()  # a block boundary: the host clock then sees the GPU's work done

    def step_times(self) -> list[float]:
        m = self.marks
        if self.cuda:
            return [m[i].elapsed_time(m[i + 1]) / 1e3 for i in range(len(m) - 1)]
        return [m[i + 1] - m[i] for i in range(len(m) - 1)]

    def precise_enough(self, rel_precision: float | None) -> bool:
        if rel_precision is None:
            return True
        times = self.step_times()
        if len(times) < 3:
            return False
        mean = statistics.fmean(times)
        return 1.96 * statistics.stdev(times) / math.sqrt(len(times)) <= rel_precision * mean


def measure(work: Workload, device: torch.device, warmup_steps: int, steps: int, min_time_s: float = 0.0,
            max_steps: int | None = None, rel_precision: float | None = None,
            report: Callable[[int, float], None] | None = None, gpu_name: str | None = None) -> dict[str, Any]:
    """Run and time ``work`` (:func:`run_window`), then its metrics (:func:`window_metrics`, units in the names).

    Raises :class:`NonFiniteLoss` (with the metrics) when the last loss is not finite.
    """
    window = run_window(work, device, warmup_steps, steps, min_time_s, max_steps, rel_precision, report)
    metrics = window_metrics(window, work, device, gpu_name)
    if not metrics["loss_finite"]:
        raise NonFiniteLoss(f"loss is not finite after {window.steps} measured steps", metrics)
    return metrics


def run_window(work: Workload, device: torch.device, warmup_steps: int, steps: int, min_time_s: float = 0.0,
               max_steps: int | None = None, rel_precision: float | None = None,
               report: Callable[[int, float], None] | None = None) -> Window:
    """The first step, the warm-up, then the measured window.

    Measures at least ``steps`` steps (the floor), then, checked at block boundaries (a quarter of ``steps``),
    keeps going until the window lasts ``min_time_s`` and the 95% confidence half-width of the mean step time is
    within ``rel_precision`` of it (like ``torch.utils.benchmark``'s blocked_autorange), up to ``max_steps``
    (the ceiling; default 100 x steps when adaptive). ``report(step, throughput_so_far)`` is called at block
    boundaries, at most every REPORT_EVERY_S, with the measured time in those ticks as its step (pruning);
    it may raise to stop the trial.
    """
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    t0 = time.perf_counter()
    loss = work.step(work.next_batch())
    sync()
    first_step_s = time.perf_counter() - t0
    # Drain what the input pipeline prepared while the model started, or the window times a full buffer.
    warmup_steps = max(warmup_steps, work.buffered_steps + 2 if work.buffered_steps else 0)
    for _ in range(max(0, warmup_steps - 1)):
        loss = work.step(work.next_batch())
    drain_steps, drained = _drain(work) if work.buffered_steps else (0, False)
    sync()

    sampler = UtilizationSampler() if cuda else None
    if sampler:
        sampler.start()
    adaptive = bool(min_time_s) or rel_precision is not None
    limit = max(steps, max_steps or (100 * steps if adaptive else steps))
    clock = _StepClock(cuda)
    data_wait = 0.0
    done = 0
    sync()
    start = time.perf_counter()
    clock.mark()
    block = max(1, steps // 4)
    last_tick = 0
    while done < limit:
        t = time.perf_counter()
        batch = work.next_batch()
        data_wait += time.perf_counter() - t
        loss = work.step(batch)
        done += 1
        clock.mark()
        if done % block and done != steps:
            continue
        clock.wait_last()
        elapsed = time.perf_counter() - start
        if done >= steps and elapsed >= min_time_s and clock.precise_enough(rel_precision):
            break
        tick = int(elapsed / REPORT_EVERY_S)
        if report is not None and tick > last_tick:
            # Reported "step" = measured time in REPORT_EVERY_S ticks, so trials of different speeds compare at
            # the same point; a report is a storage round trip, so a few per second at most.
            last_tick = tick
            report(tick, done * work.samples_per_step / elapsed)
    sync()
    wall = time.perf_counter() - start
    capped = bool(min_time_s) and wall < min_time_s and done >= limit
    if capped:  # the window asked for was not measured: say so in the row (window_capped) and the trial's log
        warnings.warn(f"measure.max_steps={limit} stopped the window at {wall:.3g} s, before measure.min_time_s="
                      f"{min_time_s:g} s; raise measure.max_steps", stacklevel=2)
    util = sampler.stop() if sampler else {}
    return Window(first_step_s=first_step_s, warmup_steps=warmup_steps, steps=done, wall_s=wall,
                  step_s=clock.step_times(), data_wait_s=data_wait, loss=loss, util=util, drain_steps=drain_steps,
                  drained=drained, capped=capped)


def window_metrics(window: Window, work: Workload, device: torch.device, gpu_name: str | None = None
                   ) -> dict[str, Any]:
    """The flat metrics of a measured window (units in the names), the workload's extra metrics last."""
    cuda = device.type == "cuda"
    done, wall, step_s = window.steps, window.wall_s, window.step_s
    step_sorted = sorted(step_s)
    mean = statistics.fmean(step_s)
    cv = statistics.pstdev(step_s) / mean if len(step_s) > 1 and mean > 0 else math.nan

    loss_finite = True
    if isinstance(window.loss, torch.Tensor):
        loss_finite = bool(torch.isfinite(window.loss).all().item())

    throughput = done * work.samples_per_step / wall
    flops = work.flops_per_step
    achieved = flops * done / wall / 1e12 if flops else math.nan
    peak = peak_tflops(gpu_name, work.precision) if cuda else math.nan
    metrics: dict[str, Any] = {
        "throughput": throughput,
        "throughput_unit": work.throughput_unit,
        "steps_measured": done,
        "warmup_steps": window.warmup_steps,
        "warmup_drain_steps": window.drain_steps,  # extra warm-up steps until the pipeline's buffer ran dry
        "warmup_drained": window.drained,  # false: the pipeline kept up (its buffer never ran dry), or the cap was hit
        "measured_s": wall,
        "first_step_s": window.first_step_s,
        "step_ms_p50": _percentile(step_sorted, 0.5) * 1e3,
        "step_ms_p10": _percentile(step_sorted, 0.1) * 1e3,
        "step_ms_p90": _percentile(step_sorted, 0.9) * 1e3,
        "step_ms_mean": mean * 1e3,
        "step_cv": cv,
        "data_wait_frac": window.data_wait_s / wall if wall > 0 else math.nan,
        "flops_per_step": flops if flops else math.nan,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "mfu": achieved / peak if peak and not math.isnan(peak) else math.nan,
        "loss_finite": loss_finite,
        "window_capped": window.capped,
    }
    if cuda:
        metrics["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device)
        metrics["peak_mem_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    else:
        metrics["peak_mem_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        metrics["peak_mem_reserved_bytes"] = math.nan
    metrics.update(window.util)
    metrics.update(work.extra_metrics())
    return metrics
