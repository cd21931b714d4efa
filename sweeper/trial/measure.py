"""Timing of a built workload: first step, warm-up, measured window, flat metrics with units in their names.

The window is a series of timed blocks of consecutive steps. Inside a block nothing waits for the GPU: CUDA
events are recorded every ``k`` steps (``steps_per_interval``: 1 for steps of a millisecond or more, more for
shorter steps, so an event record per step does not weigh on a 0.2 ms kernel) and the host clock is read only
at the block's ends, each after a synchronize. Between blocks, outside the timed intervals, the loop waits for
the GPU, decides whether the window is long and precise enough, and reports progress to the pruner (a storage
round trip). Window time (``measured_s``) = the sum of the blocks' wall times; throughput = work in the window /
window time (not a mean of per-step rates). CPU: the same blocks, ``time.perf_counter`` for the intervals.
No ``.item()`` inside the timed region; the loss is checked once after it.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import math
import resource
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from sweeper.trial import ops
from sweeper.trial.gpu import UtilizationSampler, mfu_peak
from sweeper.trial.returned import check_workload, checked_extra
from sweeper.trial.stability import stability
from workloads import prime
from workloads.base import Workload

REPORT_EVERY_S = 0.2  # intermediate throughput goes to the pruner at most this often; its step unit
MIN_BLOCK_S = 0.1  # a timed block lasts at least this long: the synchronize between blocks costs < 0.1 % of it
STALL_FACTOR = 20  # the watchdog (measure.stall_s) allows this many times the expected time, at least stall_s
MIN_INTERVAL_S = 1e-3  # steps per event pair so one interval lasts this long (event record cost << 0.1 %)


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


def plan(step_s: float, steps: int, cuda: bool) -> tuple[int, int]:
    """(steps per timed interval, steps per block) for steps of about ``step_s`` seconds.

    An interval lasts at least MIN_INTERVAL_S (on the GPU; the host clock costs ~0.1 us a reading, so on the CPU
    every step is its own interval), with at least 4 intervals over ``steps``; a block lasts at least MIN_BLOCK_S
    and a quarter of ``steps``, in whole intervals."""
    per_interval = max(1, min(math.ceil(MIN_INTERVAL_S / step_s), steps // 4)) if cuda else 1
    block = max(per_interval, steps // 4, math.ceil(MIN_BLOCK_S / step_s))
    return per_interval, math.ceil(block / per_interval) * per_interval


def _agree(values: list[float], op: str = "max") -> list[float]:
    """The same numbers on every rank of a distributed trial (max or min over ranks); unchanged otherwise. Ranks
    must take the same number of steps, or a collective waits forever."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return values
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.MIN)
    return t.tolist()


DRY_WAIT_S = 0.002  # a next_batch() call that waits this long (and a fifth of a step) found the buffer empty


def _drain(work: Workload) -> tuple[int, bool]:
    """Step until the input pipeline's prepared batches are used up: ``(steps run, whether it ran dry)``.

    Workers fill their prefetch buffers while the model starts; a pipeline slower than the model then feeds the
    first steps from that buffer, faster than it can sustain (on the H200, 14 workers x prefetch 4 held 56 batches
    of 512, ~4 s of a compiled ResNet-50, and a 1 s window read 7,226 img/s from a pipeline that sustains ~4,300).
    Warm-up goes on until, twice in a row, the pipeline holds at most one batch ready (``work.ready_batches``,
    read from its queues) or, where it cannot say, until two ``next_batch()`` calls in a row wait for data. A
    pipeline that keeps up never runs dry: warm-up stops once its ready count has not shrunk over w = min(buffer,
    8) steps (the count after a step that was not dry is at least the count w steps before), or (without a count)
    after four times its buffer plus 8 steps. The count is compared with w steps before, not with the first: after
    a long first step the buffer is full, and a pipeline that keeps up settles below full (the batches being made
    are not ready yet), so its count need never return to the first value.

    The bound: a count that did not shrink over w steps means the pipeline delivered at least as many batches as
    the model took in those w steps (w of them, one batch a step), which a pipeline delivering at an even rate
    does only if that rate is more than (w - 1) / w of the model's (7/8 with w = 8: at most 1/8 slower). A slower
    pipeline's count shrinks by a batch or more every w steps, and it is drained until dry (or to the cap).
    """
    window, ready_now = min(work.buffered_steps, 8), work.ready_batches or (lambda: None)
    cap, dry, steps, interval = 4 * work.buffered_steps + 8, 0, 0, 0.0
    counts = [ready_now()]  # counts[s]: the ready count after s drain steps
    while steps < cap and dry < 2:
        t0 = time.perf_counter()
        batch = work.next_batch()
        waited = time.perf_counter() - t0
        work.step(batch)
        steps += 1
        took = time.perf_counter() - t0
        interval = took if steps == 1 else 0.8 * interval + 0.2 * took
        ready = ready_now()
        counts.append(ready)
        empty = ready <= 1 if ready is not None else waited > max(DRY_WAIT_S, 0.2 * interval)
        dry = dry + 1 if empty else 0
        before = counts[-1 - window] if steps >= window else None
        if ready is not None and before is not None and ready >= before and dry == 0:
            break  # the buffer is not shrinking: the pipeline keeps up, and its buffer cannot inflate the window
    return steps, dry >= 2


@dataclasses.dataclass
class Window:
    """What the timed run of a workload saw: the first step, the warm-up, and the measured window."""

    first_step_s: float  # the first step alone (compilation, autotuning, lazy init)
    warmup_steps: int  # steps run before the window (excluded from the numbers)
    steps: int  # steps measured in the window
    wall_s: float  # the window's wall time (synchronized at both ends on the GPU)
    step_s: list[float]  # per-step times inside the window: each timed interval's mean step
    data_wait_s: float  # time the model waited for its next batch inside the window (see ``run_window``)
    loss: Any  # the last step's loss (checked once, after the window)
    util: dict[str, Any]  # GPU utilization sampled during the window (NVML; empty on the CPU)
    drain_steps: int = 0  # warm-up steps run until the input pipeline's buffer was used up (see _drain)
    drained: bool = False  # whether that buffer ran dry (false: the pipeline kept up, or the cap was hit)
    capped: bool = False  # measure.max_steps ended the window before measure.min_time_s
    cut: bool = False  # measure.end_at ended the window before what it asked for (steps, time, precision)
    per_interval: int = 1  # steps per timed interval (one CUDA event pair); see ``plan``
    between_s: float = 0.0  # time between the timed blocks (syncs, decisions, pruning reports), not in wall_s
    data_wait_host_s: float = 0.0  # the host's time inside next_batch() (the same as data_wait_s on the CPU)
    host_step_s: float = 0.0  # the host's time inside step(): on a GPU, launching the step (it does not wait for it)
    graph_ops: int | None = None  # distinct operations of the first step (sweeper.trial.ops), when counted
    compiler_s: float | None = None  # of the first step, the seconds inside torch.compile's compilers


def measure(
    work: Workload,
    device: torch.device,
    warmup_steps: int,
    steps: int,
    min_time_s: float = 0.0,
    max_steps: int | None = None,
    rel_precision: float | None = None,
    report: Callable[[int, float], None] | None = None,
    gpu_name: str | None = None,
    stall_s: float | None = None,
    count_ops: bool = False,
    end_at: float | None = None,
) -> dict[str, Any]:
    """Run and time ``work`` (:func:`run_window`), then its metrics (:func:`window_metrics`, units in the names).
    ``count_ops``: count the distinct operations of the first step (``graph_ops``; an eager step only).
    ``end_at``: unix seconds after which the measured window ends at its next block (``measure.end_at``).

    Raises :class:`NonFiniteLoss` (with the metrics) when the last loss is not finite.
    """
    check_workload(work)
    watch = Watchdog(stall_s)
    try:
        window = run_window(
            work, device, warmup_steps, steps, min_time_s, max_steps, rel_precision, report, watch, count_ops, end_at
        )
    finally:
        watch.stop()
    metrics = window_metrics(window, work, device, gpu_name)
    if not metrics["loss_finite"]:
        raise NonFiniteLoss(f"loss is not finite after {window.steps} measured steps", metrics)
    return metrics


class Watchdog:
    """A stuck trial ends itself: ``arm(seconds)`` has ``faulthandler`` write every thread's stack to the trial's
    log (after a ``Timeout (H:MM:SS)!`` line) and end the process with exit 1, which the parent reads as
    ``failed (stalled)``, unless it is armed again or stopped within ``max(stall_s, seconds)``. Without
    ``stall_s`` it does nothing."""

    def __init__(self, stall_s: float | None) -> None:
        self.stall_s = stall_s

    def arm(self, seconds: float = 0.0) -> None:
        if self.stall_s:
            faulthandler.dump_traceback_later(max(float(self.stall_s), seconds), exit=True)

    def stop(self) -> None:
        if self.stall_s:
            faulthandler.cancel_dump_traceback_later()


class _Clock:
    """Interval ends: CUDA events recorded on the current stream on a GPU, host clock readings on the CPU."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.sync = torch.cuda.synchronize if cuda else (lambda: None)

    def mark(self) -> Any:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds between two marks (on a GPU, once both events have completed)."""
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start


@dataclasses.dataclass
class _WarmUp:
    """The first step and the warm-up before the window."""

    first_step_s: float  # the first step alone (compilation, autotuning, lazy init)
    warmup_steps: int  # steps run before the window, the drain excluded
    est_step_s: float  # one step's time (agreed over ranks): sizes intervals and blocks
    drain_steps: int  # warm-up steps run until the input pipeline's buffer was used up
    drained: bool  # whether that buffer ran dry
    loss: Any  # the last warm-up step's loss
    graph_ops: int | None = None  # distinct operations of the first step (sweeper.trial.ops), when counted
    compiler_s: float | None = None  # of the first step, the seconds inside torch.compile's compilers


def _warm_up(work: Workload, warmup_steps: int, clock: _Clock, watch: Watchdog, count: bool = False) -> _WarmUp:
    """The first step alone, the warm-up steps, then the drain of what the input pipeline prepared meanwhile.
    ``count``: the first step runs under the operation counter (``sweeper.trial.ops``; its few milliseconds are the
    first step's, beside lazy initialization), again without it if it refused the counter."""
    prime.forget()  # this measurement records its own priming only
    compiled_before = _compiler_seconds()
    t0 = time.perf_counter()
    watch.arm()  # the first batch (the input pipeline's start); not the first step, which compiles
    batch = work.next_batch()
    watch.stop()
    loss, graph_ops = ops.count_ops(lambda: work.step(batch)) if count else (None, None)
    if graph_ops is None:
        loss = work.step(batch)
    clock.sync()
    first_step_s = time.perf_counter() - t0
    compiled_after = _compiler_seconds()
    compiler_s = compiled_after - compiled_before if None not in (compiled_before, compiled_after) else None
    # Drain what the input pipeline prepared while the model started, or the window times a full buffer.
    warmup_steps = max(warmup_steps, work.buffered_steps + 2 if work.buffered_steps else 0)
    t0 = time.perf_counter()
    for _ in range(max(0, warmup_steps - 1)):
        watch.arm(STALL_FACTOR * first_step_s)  # a recompilation in the warm-up is no stall
        loss = work.step(work.next_batch())
    clock.sync()
    # One step's time, from the warm-up (the first step includes compilation): sizes intervals and blocks.
    est_step_s = (time.perf_counter() - t0) / (warmup_steps - 1) if warmup_steps > 1 else first_step_s
    (est_step_s,) = _agree([max(est_step_s, 1e-7)])
    watch.arm(STALL_FACTOR * est_step_s * (work.buffered_steps + 2))
    drain_steps, drained = _drain(work) if work.buffered_steps else (0, False)
    clock.sync()
    return _WarmUp(first_step_s, warmup_steps, est_step_s, drain_steps, drained, loss, graph_ops, compiler_s)


def _primed(step: Any) -> dict[str, float]:
    """The priming's seconds (``prime_s``: the eager copy's thread, cuDNN's benchmark of each convolution in it;
    ``prime_waited_s``: how long the compiled graph's first run waited for it), NaN where no priming ran to its
    end: what the cost model prices an eager twin's first step and a warm repeat's by (the benchmark, no longer
    after the compile, is hidden in it)."""
    primed = (step.primed if hasattr(step, "primed") else prime.last()) or {}  # a wrapped TrainStep: the process's
    ran = isinstance(primed, dict) and primed.get("error") is None and primed.get("prime_s") is not None
    return {
        "prime_s": float(primed["prime_s"]) if ran else math.nan,
        "prime_waited_s": float(primed.get("waited_s") or 0.0) if ran else math.nan,
    }


def _compiler_seconds() -> float | None:
    """Seconds this process has spent inside torch.compile's compilers (Dynamo's own count: the frames' compile,
    a lazily compiled backward included, and Triton's autotuning at a kernel's first launch, which Inductor's cache
    keeps too), or None where this PyTorch does not keep them. The rest of a compiled first step is what an eager
    one pays too: lazy initialization, cuDNN's benchmark of each convolution. Dynamo not loaded: nothing compiled
    (importing it would cost an eager step a second or two)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0.0
    try:
        spent = utils.calculate_time_spent()
        if "total_wall_time" not in spent:
            return None
        tuning = sum(v for k, v in spent.items() if k.startswith("CachingAutotuner."))  # runtime autotuning
        return float(spent["total_wall_time"]) + float(tuning)
    except Exception:  # noqa: BLE001 (a private helper: any change in it only loses the number)
        return None


@dataclasses.dataclass
class _Tally:
    """What the timed blocks measured so far."""

    loss: Any  # the last step's loss
    intervals: list[float] = dataclasses.field(default_factory=list)  # seconds per interval (a block's last: shorter)
    counts: list[int] = dataclasses.field(default_factory=list)  # steps in each interval
    done: int = 0  # steps measured
    window_s: float = 0.0  # seconds inside timed blocks
    data_wait_s: float = 0.0  # the training stream idle across next_batch() (CUDA events; see run_window)
    host_wait_s: float = 0.0  # the host's time inside next_batch()
    host_step_s: float = 0.0  # the host's time inside step()

    def step_s(self) -> list[float]:
        """Each interval's mean step."""
        return [t / n for t, n in zip(self.intervals, self.counts)]

    def precise_enough(self, rel_precision: float | None) -> bool:
        """Whether the 95% confidence half-width of the mean step is within ``rel_precision`` of it."""
        if rel_precision is None:
            return True
        per_step = self.step_s()
        if len(per_step) < 3:
            return False
        mean = statistics.fmean(per_step)
        return 1.96 * statistics.stdev(per_step) / math.sqrt(len(per_step)) <= rel_precision * mean


def _time_block(
    work: Workload, clock: _Clock, n_block: int, per_interval: int, device_wait: bool, tally: _Tally
) -> None:
    """Run ``n_block`` steps as one timed block (nothing waits for the GPU inside it) and add them to ``tally``.

    Waiting for data: on a GPU, for a workload with an input pipeline, the time the training stream is idle
    across next_batch(), from CUDA events recorded on it just before and just after the call: the later one
    completes when the GPU has finished the earlier steps AND the host has the batch AND (a prefetcher's
    stream event) the batch is on the device, so it counts no time in which the GPU still ran earlier steps.
    The host's time in next_batch() overstates an asynchronous pipeline's wait: the host runs ahead of the
    GPU and blocks wherever its input queue is, while the GPU computes. It is kept as data_wait_host_frac.
    """
    waits: list[tuple[Any, Any]] = []  # (before, after) CUDA event pairs around next_batch()
    host_wait = host_step = 0.0
    loss = tally.loss
    clock.sync()  # the GPU is idle: the block's clock starts with no earlier work queued
    start = time.perf_counter()
    marks = [clock.mark()]  # one per interval end
    for i in range(1, n_block + 1):
        t = time.perf_counter()
        before = clock.mark() if device_wait else None
        batch = work.next_batch()
        host_wait += time.perf_counter() - t
        if device_wait:
            waits.append((before, clock.mark()))
        t = time.perf_counter()
        loss = work.step(batch)
        host_step += time.perf_counter() - t
        if i % per_interval == 0 or i == n_block:
            marks.append(clock.mark())
    clock.sync()
    tally.window_s += time.perf_counter() - start
    # Outside the timed block from here: read the intervals.
    tally.loss = loss
    tally.done += n_block
    tally.host_wait_s += host_wait
    tally.host_step_s += host_step
    tally.data_wait_s += sum(clock.seconds(a, b) for a, b in waits)
    for i in range(1, len(marks)):
        tally.counts.append(min(per_interval, n_block - (i - 1) * per_interval))
        tally.intervals.append(clock.seconds(marks[i - 1], marks[i]))


def _report_progress(report: Callable[[int, float], None] | None, work: Workload, tally: _Tally, last_tick: int) -> int:
    """Report the throughput so far when a REPORT_EVERY_S tick of measured time has passed; the last tick reported.

    Reported "step" = measured time in REPORT_EVERY_S ticks, so trials of different speeds compare at the same
    point; a report is a storage round trip, so a few per second at most."""
    tick = int(tally.window_s / REPORT_EVERY_S)
    if report is None or tick <= last_tick:
        return last_tick
    report(tick, tally.done * work.samples_per_step / tally.window_s)
    return tick


def _warn_if_capped(min_time_s: float, limit: int, tally: _Tally) -> bool:
    """Whether measure.max_steps ended the window before measure.min_time_s (said in the trial's log too)."""
    capped = bool(min_time_s) and tally.window_s < min_time_s and tally.done >= limit
    if capped:  # the window asked for was not measured: say so in the row (window_capped) and the trial's log
        warnings.warn(
            f"measure.max_steps={limit} stopped the window at {tally.window_s:.3g} s, before measure.min_time_s="
            f"{min_time_s:g} s; raise measure.max_steps",
            stacklevel=3,
        )
    return capped


def _start_sampler(cuda: bool) -> UtilizationSampler | None:
    """GPU utilization sampled during the window (NVML); none on the CPU."""
    sampler = UtilizationSampler() if cuda else None
    if sampler:
        sampler.start()
    return sampler


def _stop(
    tally: _Tally, steps: int, min_time_s: float, rel_precision: float | None, end_at: float | None
) -> tuple[bool, bool]:
    """(whether the window ends now, whether it ends cut): it measured what it asked for (``steps``, then
    ``min_time_s`` and ``rel_precision``), or ``end_at`` (unix seconds, ``measure.end_at``) has passed: the
    sweep's re-measurements' reserve begins there, and a configuration measured on a few steps is measured, where
    one the budget stops later is not. Every rank of a distributed trial decides alike."""
    enough = tally.done >= steps and tally.window_s >= min_time_s and tally.precise_enough(rel_precision)
    late = end_at is not None and time.time() >= end_at
    (stop,) = _agree([float(enough or late)], "min")
    return bool(stop), bool(stop) and not enough


def run_window(
    work: Workload,
    device: torch.device,
    warmup_steps: int,
    steps: int,
    min_time_s: float = 0.0,
    max_steps: int | None = None,
    rel_precision: float | None = None,
    report: Callable[[int, float], None] | None = None,
    watch: Watchdog | None = None,
    count_ops: bool = False,
    end_at: float | None = None,
) -> Window:
    """The first step, the warm-up, then the measured window.

    Measures at least ``steps`` steps (the floor), then, checked between timed blocks (``plan``), keeps going
    until the window lasts ``min_time_s`` and the 95% confidence half-width of the mean step time is within
    ``rel_precision`` of it (like ``torch.utils.benchmark``'s blocked_autorange), up to ``max_steps`` (the
    ceiling; default 100 x steps when adaptive). ``report(step, throughput_so_far)`` is called between blocks,
    at most every REPORT_EVERY_S of measured time, with the measured time in those ticks as its step (pruning);
    it may raise to stop the trial. Its time is not in the window. Waiting for data: see ``_time_block``. Past
    ``end_at``, it ends after the current block (:func:`_stop`)."""
    clock = _Clock(device.type == "cuda")
    watch = watch or Watchdog(None)
    warm = _warm_up(work, warmup_steps, clock, watch, count_ops)
    limit = max(steps, max_steps or (100 * steps if min_time_s or rel_precision is not None else steps))
    per_interval, block = plan(warm.est_step_s, steps, clock.cuda)
    device_wait = clock.cuda and work.input_pipeline
    sampler = _start_sampler(clock.cuda)
    tally = _Tally(loss=warm.loss)
    outer_start, last_tick, cut = time.perf_counter(), 0, False
    while tally.done < limit:
        n_block = min(block, limit - tally.done)
        watch.arm(STALL_FACTOR * warm.est_step_s * n_block)
        _time_block(work, clock, n_block, per_interval, device_wait, tally)
        stop, cut = _stop(tally, steps, min_time_s, rel_precision, end_at)
        if stop:
            break
        last_tick = _report_progress(report, work, tally, last_tick)
    between = time.perf_counter() - outer_start - tally.window_s  # syncs, decisions and reports between blocks
    return Window(
        first_step_s=warm.first_step_s,
        warmup_steps=warm.warmup_steps,
        steps=tally.done,
        wall_s=tally.window_s,
        step_s=tally.step_s(),
        data_wait_s=tally.data_wait_s if device_wait else tally.host_wait_s,
        loss=tally.loss,
        util=sampler.stop() if sampler else {},
        drain_steps=warm.drain_steps,
        drained=warm.drained,
        capped=_warn_if_capped(min_time_s, limit, tally),
        cut=cut,
        per_interval=per_interval,
        between_s=between,
        data_wait_host_s=tally.host_wait_s,
        host_step_s=tally.host_step_s,
        graph_ops=warm.graph_ops,
        compiler_s=warm.compiler_s,
    )


def _step_spread(window: Window) -> tuple[list[float], float, float]:
    """The window's per-step times sorted, their mean, and ``step_cv``.

    Per-step times are each interval's mean step. A full interval's spread is that of a mean of
    ``per_interval`` steps, so ``step_cv`` scales it by sqrt(per_interval): step_cv / sqrt(steps) stays the
    relative standard error of the mean step (what the report's intervals use)."""
    step_s = window.step_s
    mean = statistics.fmean(step_s)
    cv = statistics.pstdev(step_s) / mean * math.sqrt(window.per_interval) if len(step_s) > 1 and mean > 0 else math.nan
    return sorted(step_s), mean, cv


def _finite(loss: Any) -> bool:
    """Whether the last loss is finite (anything but a tensor counts as finite)."""
    if isinstance(loss, torch.Tensor):
        return bool(torch.isfinite(loss).all().item())
    return True


def _mfu_peak(work: Workload, gpu_name: str | None) -> tuple[float, str]:
    """The peak of the math that ran: TF32 tensor cores where PyTorch's flags allowed them (gpu.mfu_peak)."""
    return mfu_peak(
        gpu_name,
        work.precision,
        tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
        tf32_conv=torch.backends.cudnn.allow_tf32,
        conv_flops_frac=work.conv_flops_frac,
    )


def _peak_memory(device: torch.device) -> dict[str, Any]:
    """Peak memory: the CUDA caching allocator's on a GPU, the process's maximum resident set on the CPU."""
    if device.type == "cuda":
        return {
            "peak_mem_bytes": torch.cuda.max_memory_allocated(device),
            "peak_mem_reserved_bytes": torch.cuda.max_memory_reserved(device),
        }
    return {
        "peak_mem_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_mem_reserved_bytes": math.nan,
    }


def window_metrics(window: Window, work: Workload, device: torch.device, gpu_name: str | None = None) -> dict[str, Any]:
    """The flat metrics of a measured window (units in the names), the workload's extra metrics last."""
    cuda = device.type == "cuda"
    done, wall, step_s = window.steps, window.wall_s, window.step_s
    step_sorted, mean, cv = _step_spread(window)
    throughput = done * work.samples_per_step / wall
    flops = work.flops_per_step
    achieved = flops * done / wall / 1e12 if flops else math.nan
    peak, peak_name = _mfu_peak(work, gpu_name) if cuda else (math.nan, "")
    metrics: dict[str, Any] = {
        "throughput": throughput,
        "throughput_unit": work.throughput_unit,
        "steps_measured": done,
        "steps_per_interval": window.per_interval,
        "warmup_steps": window.warmup_steps,
        "warmup_drain_steps": window.drain_steps,  # extra warm-up steps until the pipeline's buffer ran dry
        "warmup_drained": window.drained,  # false: the pipeline kept up (its buffer never ran dry), or the cap was hit
        "measured_s": wall,
        "between_blocks_s": window.between_s,
        "first_step_s": window.first_step_s,
        # of the first step, the seconds inside torch.compile's compilers (0.0 eager; NaN where not counted)
        "compiler_s": window.compiler_s if window.compiler_s is not None else math.nan,
        "step_ms_p50": _percentile(step_sorted, 0.5) * 1e3,
        "step_ms_p10": _percentile(step_sorted, 0.1) * 1e3,
        "step_ms_p90": _percentile(step_sorted, 0.9) * 1e3,
        "step_ms_mean": mean * 1e3,
        "step_cv": cv,
        "data_wait_frac": window.data_wait_s / wall if wall > 0 else math.nan,
        "data_wait_host_frac": window.data_wait_host_s / wall if wall > 0 else math.nan,
        # the host's share of the window inside step(): on a GPU the time to launch the step's work. Near 1 (with
        # data_wait_host_frac) the host, not the GPU, sets the pace: launch-bound (fewer, larger kernels help:
        # compile, CUDA graphs, a larger batch), or slowed by other threads of the trial process.
        "host_step_frac": window.host_step_s / wall if wall > 0 else math.nan,
        "flops_per_step": flops if flops else math.nan,
        "achieved_tflops": achieved,
        "mfu_peak_tflops": peak,  # the peak the MFU divides by, named in mfu_peak
        "mfu_peak": peak_name,
        "mfu": achieved / peak if peak and not math.isnan(peak) else math.nan,
        "loss_finite": _finite(window.loss),
        "window_capped": window.capped,
        "window_cut": window.cut,
        # distinct operations of one eager step: what a compile of it lowers (sweeper.trial.ops; NaN: not counted)
        "graph_ops": window.graph_ops if window.graph_ops is not None else math.nan,
    }
    metrics.update(_peak_memory(device))
    # a step that primed cuDNN's benchmark from an eager copy (workloads.prime) keeps the peak from before it
    own = hasattr(work.step, "peak_floor_bytes")  # a TrainStep; else the process's last priming (a wrapped one)
    floor = (work.step.peak_floor_bytes if own else (prime.last() or {}).get("peak_floor_bytes")) or 0
    metrics["peak_mem_bytes"] = max(metrics["peak_mem_bytes"], floor)
    metrics.update(_primed(work.step))
    metrics.update(stability(step_s))  # steps switching between two speeds (a shared CPU): flagged
    metrics.update(window.util)
    metrics.update(checked_extra(work.extra_metrics(), metrics))
    return metrics
