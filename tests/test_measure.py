"""The measurement loop (sweeper/trial/measure.py): what the window contains, and how short steps are timed."""

from __future__ import annotations

import sys
import time

import pytest
import torch

from sweeper.trial.measure import MIN_BLOCK_S, plan
from sweeper.trial.measure import measure as run_measure
from workloads.base import Workload

CPU = torch.device("cpu")
STEP_S = 0.002


def sleeper() -> Workload:
    """Steps of 2 ms by construction (a sleep does not compete for the shared CPU)."""
    return Workload(step=lambda _: time.sleep(STEP_S), samples_per_step=1.0)


def test_pruning_reports_and_block_boundaries_are_outside_the_timed_window() -> None:
    """A report that takes 0.3 s (a slow storage round trip) costs the window nothing: the window is the steps'
    own time, and no step's time contains a report."""
    reports: list[tuple[int, float]] = []

    def report(step: int, value: float) -> None:
        reports.append((step, value))
        time.sleep(0.3)

    t0 = time.perf_counter()
    m = run_measure(sleeper(), CPU, warmup_steps=2, steps=20, min_time_s=0.8, report=report)
    total = time.perf_counter() - t0
    assert len(reports) >= 2, "reports every REPORT_EVERY_S of measured time"
    assert [s for s, _ in reports] == sorted({s for s, _ in reports}), "report steps are measured-time ticks"
    assert m["measured_s"] < total - 0.3 * len(reports), "the reports' time is not in the window"
    n = m["steps_measured"]
    assert m["measured_s"] == pytest.approx(n * m["step_ms_mean"] / 1e3, rel=0.05), "window = the steps' time"
    assert m["step_ms_p90"] < 0.3e3 / 4, "no step's time holds a report"
    assert m["throughput"] == pytest.approx(n / m["measured_s"])
    for _, value in reports:  # throughput so far, over measured time only (with the 0.3 s reports: ~half of it)
        assert value > 0.75 * m["throughput"], (value, m["throughput"])


def test_host_step_frac_is_the_hosts_share_of_the_window_inside_step() -> None:
    """Steps that hold the host 8 ms after 2 ms waits for data: ~0.8 of the window in step(); steps that return at
    once after 8 ms waits: ~0 in step(), ~1 waiting. The two shares never add up to more than the window."""

    def slow_step(_: object) -> None:
        time.sleep(0.008)

    launch_bound = Workload(
        step=slow_step, samples_per_step=1.0, next_batch=lambda: time.sleep(0.002), input_pipeline=True
    )
    m = run_measure(launch_bound, CPU, warmup_steps=1, steps=20)
    assert 0.6 < m["host_step_frac"] <= 1.0 - m["data_wait_host_frac"] + 1e-9
    fed_slowly = Workload(
        step=lambda _: None, samples_per_step=1.0, next_batch=lambda: time.sleep(0.008), input_pipeline=True
    )
    m = run_measure(fed_slowly, CPU, warmup_steps=1, steps=20)
    assert m["host_step_frac"] < 0.05 and m["data_wait_host_frac"] > 0.9


def test_window_floor_and_ceiling_in_steps() -> None:
    m = run_measure(sleeper(), CPU, warmup_steps=1, steps=7)
    assert m["steps_measured"] == 7, "without min_time_s or rel_precision exactly `steps` steps"
    m = run_measure(sleeper(), CPU, warmup_steps=1, steps=4, min_time_s=0.2, max_steps=1000)
    assert m["measured_s"] >= 0.2 and m["steps_measured"] < 1000, "min_time_s: the window lasts that long"
    m = run_measure(sleeper(), CPU, warmup_steps=1, steps=4, min_time_s=10.0, max_steps=30)
    assert m["steps_measured"] == 30, "max_steps ends a window that min_time_s would make longer"


def test_past_measure_end_at_the_window_ends_with_what_it_measured() -> None:
    """A sweep's ``measure.end_at`` (where its re-measurements' reserve begins) ends the window after its block: a
    configuration far over its price is measured on fewer steps (``window_cut``) instead of being stopped
    unmeasured by the budget; a window that measured what it asked for before then is not cut."""
    m = run_measure(sleeper(), CPU, warmup_steps=1, steps=2000, end_at=time.time())
    assert 1 <= m["steps_measured"] < 2000 and m["window_cut"] is True, (m["steps_measured"], m["window_cut"])
    assert m["throughput"] > 0 and m["measured_s"] < 2.0
    m = run_measure(sleeper(), CPU, warmup_steps=1, steps=7, end_at=time.time() + 60)
    assert m["steps_measured"] == 7 and m["window_cut"] is False
    m = run_measure(sleeper(), CPU, warmup_steps=1, steps=7)
    assert m["steps_measured"] == 7 and m["window_cut"] is False


@pytest.mark.parametrize(
    "step_s, steps, cuda, per_interval",
    [
        (0.2e-3, 50, True, 5),  # a 0.2 ms kernel: 5 steps per event pair, one interval ~1 ms
        (10e-6, 50, True, 12),  # 10 us: capped so the floor of 50 steps still gives 4 intervals
        (50e-3, 20, True, 1),  # a training step: one event per step
        (0.2e-3, 50, False, 1),  # the CPU: the host clock per step
    ],
)
def test_short_gpu_steps_are_timed_several_per_event_pair(
    step_s: float, steps: int, cuda: bool, per_interval: int
) -> None:
    k, block = plan(step_s, steps, cuda)
    assert k == per_interval
    assert block % k == 0 and block >= steps // 4
    assert block * step_s >= MIN_BLOCK_S * 0.999, "a block is long enough that the sync between blocks is noise"


def _host_waits(gpu_step_s: float, host_wait_s: float) -> Workload:
    """Steps that keep the GPU busy ``gpu_step_s`` (``torch.cuda._sleep``, queued without a host wait) and an
    input pipeline whose ``next_batch`` keeps the host ``host_wait_s``."""
    torch.cuda._sleep(1_000_000)  # the first launch loads the kernel; then ~0.2 s raises the clocks
    for spin in (100_000_000, 100_000_000):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(spin)
        end.record()
        end.synchronize()
        cycles = int(spin * gpu_step_s / (start.elapsed_time(end) / 1e3))

    def step(_: object) -> None:
        torch.cuda._sleep(cycles)

    return Workload(step=step, samples_per_step=1.0, next_batch=lambda: time.sleep(host_wait_s), input_pipeline=True)


@pytest.mark.gpu
def test_on_a_gpu_data_wait_is_the_time_the_training_stream_starves() -> None:
    """The host waits 10 ms for each batch. Beside 50 ms GPU steps the GPU starves only at the start of each of
    the window's 4 blocks (each starts synchronized, with nothing queued: 40 ms of 2 s), though the host waited
    20 % of the window. Beside 2 ms steps with 20 ms host waits the GPU idles most of the time."""
    gpu = torch.device("cuda")
    busy = run_measure(_host_waits(0.050, 0.010), gpu, warmup_steps=2, steps=40)
    assert busy["step_ms_p50"] > 40, "the GPU steps are as long as asked"
    assert busy["data_wait_host_frac"] > 0.15
    assert busy["data_wait_frac"] < 0.05
    starved = run_measure(_host_waits(0.002, 0.020), gpu, warmup_steps=2, steps=20)
    assert starved["data_wait_frac"] > 0.7


def test_a_compiled_first_step_counts_its_compilers_seconds_apart_from_the_rest() -> None:
    """``compiler_s``: the first step's seconds inside torch.compile's compilers (Dynamo's count), apart from what
    the step pays besides (here a 0.3 s lazy initialization, as cuDNN's benchmark is on a GPU); 0 for an eager
    step."""
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend="eager")
    calls: list[int] = []

    def step(_: object) -> None:
        if not calls:
            time.sleep(0.3)
        calls.append(1)
        fn(torch.ones(4))

    m = run_measure(Workload(step=step, samples_per_step=1.0), CPU, warmup_steps=2, steps=5)
    assert 0.0 < m["compiler_s"] <= m["first_step_s"] - 0.3, m
    eager = run_measure(sleeper(), CPU, warmup_steps=2, steps=5)
    assert eager["compiler_s"] == 0.0


def test_counting_the_compilers_seconds_does_not_load_dynamo_into_an_eager_trial() -> None:
    """Reading Dynamo's count must not import it where nothing compiled: the import (1.7 s on a 2-core VM) would
    land in an eager trial's first step."""
    import subprocess

    code = (
        "import sys, torch\n"
        "from sweeper.trial.measure import _compiler_seconds\n"
        "assert _compiler_seconds() == 0.0\n"
        "assert 'torch._dynamo.utils' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_compilers_seconds_include_tritons_runtime_autotuning_and_say_none_when_uncounted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Triton's autotuning runs at a kernel's first launch, after the frame's compile, and Dynamo counts it under its
    own keys (a GPU's, not runnable here: Dynamo's table stands in); a PyTorch that keeps no total says None, not
    0 (which would price the whole first step as what an eager one pays)."""
    import types

    from sweeper.trial.measure import _compiler_seconds

    counts = {"total_wall_time": 10.0, "inductor_compile": 8.0, "CachingAutotuner.benchmark_all_configs": 2.5}
    utils = types.SimpleNamespace(calculate_time_spent=lambda: dict(counts))
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", utils)
    assert _compiler_seconds() == pytest.approx(12.5)
    counts.pop("total_wall_time")
    assert _compiler_seconds() is None
