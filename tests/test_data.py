"""The ``jpeg`` input pipeline: each data knob's effect on the DataLoader, and a real trial through the CLI (the
corpus and the decode paths: tests/test_decode.py).

Everything runs on the CPU at tiny sizes; the tests marked for CUDA (GPU decode, pinned copies) run only on a GPU.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode

from workloads import corpus, data, device_side, resnet50
from workloads.base import DeviceInfo

from conftest import run_main
from jpeg_helpers import CPU, TINY, children, knobs, one_thread, pipeline  # noqa: F401 (one_thread: autouse)

# torchvision 0.29 deprecates its JPEG codec in favour of TorchCodec (not installed here); it still decodes.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")



# ---------------------------------------------------------------- data knobs


def test_check_rejects_knobs_that_cannot_run() -> None:
    cpu, gpu = DeviceInfo("cpu"), DeviceInfo("cuda", "H200", 1, (9, 0))
    assert "decode_device" in data.check(knobs(decode_device="cuda"), cpu)
    assert "decode_device" in data.check(knobs(decode_device="hybrid", gpu_share=0.5), cpu)
    assert data.check(knobs(decode_device="cuda"), gpu) is None
    assert data.check(knobs(decode_device="hybrid", gpu_share=0.5), gpu) is None
    assert "gpu_share" in data.check(knobs(decode_device="hybrid", gpu_share=1.5), gpu)
    assert "cpu_decoder=pil" in data.check(knobs(decode_scale="reduced"), gpu)
    assert data.check(knobs(decode_scale="reduced", cpu_decoder="pil"), cpu) is None
    assert "device_prefetch" in data.check(knobs(device_prefetch=True), cpu)
    assert "prefetch_factor" in data.check(knobs(prefetch_factor=2), gpu)
    assert data.check(knobs(num_workers=2, prefetch_factor=2), gpu) is None
    assert "persistent_workers" in data.check(knobs(persistent_workers=True), gpu)
    assert data.check(knobs(num_workers=1, persistent_workers=True), cpu) is None
    cfg = {"workload": {"data": "jpeg"}, "knobs": {"precision": "fp32", **knobs(decode_device="cuda")}}
    assert "decode_device" in resnet50.check(cfg, cpu), "resnet50's check consults the pipeline's"
    assert resnet50.check({**cfg, "workload": {"data": "synthetic"}}, cpu) is None


def test_prefetch_factor_reaches_the_loader_only_with_workers(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, num_workers=1, prefetch_factor=3)
    try:
        assert pipe.loader.prefetch_factor == 3 and pipe.loader.num_workers == 1
        # forked from the trial process, not started through a forkserver that would import torch again
        assert pipe.loader.multiprocessing_context.get_start_method() == "fork"
        assert pipe.next()[0].shape == (4, 3, 16, 16)
    finally:
        pipe.close()
    with pytest.raises(ValueError, match="prefetch_factor"):
        pipeline(tmp_path, num_workers=0, prefetch_factor=3)


def test_num_workers_spawns_processes_and_persistent_workers_keep_them(tmp_path: Path) -> None:
    before = children()
    pipeline(tmp_path).next()
    assert children() == before, "num_workers=0 decodes in this process"
    seen = {}
    for persistent in (False, True):
        pipe = pipeline(tmp_path, num_workers=2, persistent_workers=persistent)
        pipe.next()
        first = children() - before
        assert len(first) == 2 and os.getpid() not in first, "two worker processes"
        for _ in range(3):  # 8 images / batch 4: two epochs pass, the loader restarts
            pipe.next()
        assert pipe.epochs >= 1
        seen[persistent] = (first, children() - before)
        pipe.close()
        assert children() == before, "close() stops the workers"
    first, later = seen[False]
    assert first.isdisjoint(later), "without persistent_workers each epoch starts new workers"
    first, later = seen[True]
    assert first == later, "persistent_workers keeps the same workers across epochs"


def test_workers_are_forked_on_the_thread_that_builds_the_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork copies only the forking thread: the workers start while the pipeline is built, before its own threads
    run and before the first step (a compile) does, never lazily on the prefetcher's thread."""
    starts: list[str] = []
    start = data.Pipeline._start

    def recorded(self: data.Pipeline) -> Any:
        if self.epochs == 0:  # an epoch's restart (the prefetcher may reach one soon) starts the next epoch's
            starts.append(threading.current_thread().name)
        return start(self)

    monkeypatch.setattr(data.Pipeline, "_start", recorded)
    # the device thread without a GPU (check() refuses device_prefetch there; the thread itself runs on the CPU)
    monkeypatch.setattr(data, "knob_conflict", lambda *_: None)
    before = children()
    pipe = pipeline(tmp_path, num_workers=2, persistent_workers=True, device_prefetch=True)
    try:
        assert len(children() - before) == 2, "both workers run once the pipeline is built"
        assert starts == [threading.current_thread().name]
        assert pipe.next()[0].shape == (4, 3, 16, 16)
        assert starts == [threading.current_thread().name], "the first batch starts no loader of its own"
    finally:
        pipe.close()


def test_two_threads_pulling_at_once_each_get_whole_batches_across_restarts(tmp_path: Path) -> None:
    """A DataLoader iterator is not thread-safe: pulls from two threads (a prefetcher's and a caller's) are taken one
    at a time, through the epochs' restarts, and none waits for a batch the other took."""
    pipe = pipeline(tmp_path, num_workers=1)
    got: list[int] = []

    def pull() -> None:
        for _ in range(6):
            got.append(len(pipe._next_host()["labels"]))

    threads = [threading.Thread(target=pull, daemon=True) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads), f"a pull waits for good after {len(got)} batches"
        assert got == [4] * 12 and pipe.epochs >= 5, (got, pipe.epochs)
    finally:
        pipe.close()


def test_worker_nice_lowers_the_workers_priority_not_the_trial_process(tmp_path: Path) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    if own > 12:
        pytest.skip(f"this test process already runs at nice {own}: +7 would not show")
    before = children()
    for nice, expected in ((0, own), (7, own + 7)):
        pipe = pipeline(tmp_path, num_workers=2, worker_nice=nice)
        try:
            # Batch i comes from worker i % 2, which runs its init function before its first batch: after two
            # batches both workers have set their priority (after one, worker 1 may not have started yet).
            pipe.next()
            pipe.next()
            workers = children() - before
            assert len(workers) == 2
            assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in workers} == {expected}, f"worker_nice={nice}"
        finally:
            pipe.close()
    assert os.getpriority(os.PRIO_PROCESS, 0) == own, "the trial process keeps its priority"
    cpu = DeviceInfo("cpu")
    assert "worker_nice" in data.check(knobs(num_workers=2, worker_nice=20), cpu)
    assert "worker_nice" in data.check(knobs(num_workers=2, worker_nice=-1), cpu)
    assert "num_workers=0" in data.check(knobs(worker_nice=5), cpu)
    assert "worker_nice" in data.check(knobs(num_workers=2, worker_nice=2.5), cpu)
    assert "worker_nice" in data.check(knobs(num_workers=2, worker_nice="10"), cpu)
    # a whole number however it arrives: a Parquet float column read back, a numpy integer
    for value in (19, 10.0, np.int64(10), np.float64(10.0)):
        assert data.check(knobs(num_workers=2, worker_nice=value), cpu) is None, repr(value)


def test_switch_interval_ms_sets_the_trial_process_gil_switch_interval_while_the_pipeline_runs(tmp_path: Path) -> None:
    own = sys.getswitchinterval()
    pipe = pipeline(tmp_path, num_workers=0, switch_interval_ms=0.25)
    try:
        assert pipe.next()[0].shape == (4, 3, 16, 16)
        assert sys.getswitchinterval() == pytest.approx(0.25e-3)
    finally:
        pipe.close()
    assert sys.getswitchinterval() == own, "close() gives the process its interval back"
    pipe = pipeline(tmp_path, num_workers=0)
    assert sys.getswitchinterval() == own, "null leaves Python's interval"
    pipe.close()
    cpu = DeviceInfo("cpu")
    for bad in (0, -1, "1", True):
        assert "knobs.switch_interval_ms" in data.check(knobs(switch_interval_ms=bad), cpu), repr(bad)
    for good in (0.5, 1, np.float64(0.2)):
        assert data.check(knobs(switch_interval_ms=good), cpu) is None, repr(good)


def test_epoch_images_sets_when_the_loader_restarts(tmp_path: Path) -> None:
    one_pass = pipeline(tmp_path)  # 8 images, batches of 4: an epoch is 2 batches
    cycled = pipeline(tmp_path, p={**TINY, "epoch_images": 12})  # the corpus cycled: 3 batches
    for _ in range(3):
        one_pass.next(), cycled.next()
    assert (one_pass.epochs, cycled.epochs) == (1, 0)
    cycled.next()
    assert cycled.epochs == 1
    with pytest.raises(ValueError, match="epoch_images"):
        pipeline(tmp_path, p={**TINY, "epoch_images": 3})


def test_pin_memory_reaches_the_loader(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, pin_memory=True)
    assert pipe.loader.pin_memory is True
    images = pipe._next_host()["crops"]
    if torch.accelerator.is_available():  # pinning needs an accelerator's driver; otherwise the loader skips it
        assert images.is_pinned()
    assert not pipeline(tmp_path, pin_memory=False)._next_host()["crops"].is_pinned()


# ---------------------------------------------------------------- the workload, end to end


def resnet_cfg(results: Path, **knob: Any) -> dict[str, Any]:
    return {"workload": {"name": "resnet50", "data": "jpeg", "image_size": 32, "num_classes": 10, "root": None,
                         "corpus_images": 16, "corpus_width": 48, "corpus_height": 40, "corpus_sizes": "fixed"},
            "knobs": {"precision": "fp32", "memory_format": "channels_last", "compile": "off", "batch_size": 2,
                      "grad_accum_steps": 1, "optimizer_impl": "foreach", "activation_checkpointing": "off",
                      **knobs(), **knob},
            "device": "cpu", "results_dir": str(results)}


def test_jpeg_training_step_runs_end_to_end(tmp_path: Path) -> None:
    work = resnet50.build(resnet_cfg(tmp_path, grad_accum_steps=2), CPU)
    steps = []
    handle = register_optimizer_step_post_hook(lambda *a: steps.append(1))
    try:
        batch = work.next_batch()
        assert len(batch) == 2, "one micro-batch per grad_accum_steps"
        for x, y in batch:
            assert x.dtype == torch.float32 and x.shape == (2, 3, 32, 32)
            assert x.is_contiguous(memory_format=torch.channels_last)
        loss = work.step(batch)
    finally:
        handle.remove()
        work.close()
    assert torch.isfinite(loss) and len(steps) == 1
    m = work.extra_metrics()
    assert m["data_corpus_images"] == 16 and m["data_decode_device"] == "cpu"
    assert (tmp_path / "data" / "jpeg-48x40-16" / corpus.MANIFEST).is_file(), "cached under <results_dir>/data"


def test_uint8_transfer_copies_a_quarter_of_the_bytes_and_normalizes_the_same(tmp_path: Path) -> None:
    """transfer_dtype=uint8: the loader's batch is the uint8 crops (a quarter of the bytes); normalized after the
    copy they are the float32 images the workers would have produced (same crops: same seed)."""
    out = {}
    for transfer in ("float32", "uint8"):
        pipe = pipeline(tmp_path, transfer_dtype=transfer)
        try:
            torch.manual_seed(7)
            out[transfer] = pipe._next_host()["crops"], pipe.next()[0]
        finally:
            pipe.close()
    (host32, _), (host8, dev8) = out["float32"], out["uint8"]
    assert host32.dtype == torch.float32 and host8.dtype == torch.uint8
    assert host8.nbytes * 4 == host32.nbytes
    normalized = device_side.Normalize(CPU)(host8.float())
    assert torch.allclose(normalized, host32, atol=1e-5)  # vs the workers' torchvision path
    assert dev8.dtype == torch.float32 and dev8.shape == host32.shape and dev8.abs().max() < 3
    assert pipe.metrics()["data_transfer_dtype"] == "uint8", "what crossed to the device was uint8"
    with pytest.raises(ValueError, match="transfer_dtype"):
        pipeline(tmp_path, transfer_dtype="fp8")


def test_warmup_drains_what_the_workers_prefetched(tmp_path: Path) -> None:
    """With workers, warm-up runs past the loader's buffer (workers x prefetch_factor batches) before timing."""
    from sweeper.trial.measure import measure

    cfg = resnet_cfg(tmp_path, num_workers=2, prefetch_factor=3, grad_accum_steps=2)
    cfg["workload"]["epoch_images"] = 1000
    work = resnet50.build(cfg, CPU)
    try:
        assert work.buffered_steps == 3, "6 batches held ready, 2 micro-batches per step"
        m = measure(work, CPU, warmup_steps=1, steps=2)
    finally:
        work.close()
    assert m["warmup_steps"] == 5 and m["steps_measured"] == 2
    work = resnet50.build(resnet_cfg(tmp_path), CPU)  # no workers: nothing buffered, warm-up as configured
    try:
        assert work.buffered_steps == 0 and measure(work, CPU, warmup_steps=1, steps=1)["warmup_steps"] == 1
    finally:
        work.close()


def test_warmup_drain_runs_until_the_buffer_is_empty() -> None:
    """A pipeline slower than the model serves its prefetched batches at once, then makes each step wait: warm-up
    stops right after the buffer runs dry; a pipeline that keeps up is warmed up to the cap (4 x the buffer + 8)."""
    import time as clock

    from sweeper.trial.measure import _drain
    from workloads.base import Workload

    def work(buffered: int, slow_after: int | None) -> Workload:
        calls = []

        def next_batch() -> None:
            calls.append(1)
            if slow_after is not None and len(calls) > slow_after:
                clock.sleep(0.03)  # the workers' own rate: slower than a step

        return Workload(step=lambda b: clock.sleep(0.005), samples_per_step=1, next_batch=next_batch,
                        buffered_steps=buffered)

    assert _drain(work(6, slow_after=10)) == (12, True), "10 buffered batches, then two waits in a row"
    assert _drain(work(6, slow_after=None)) == (32, False), "keeps up: the cap"
    # A pipeline that says what it holds: the count decides, not the waits (a pinning thread can make every call
    # wait while the workers' queue is still full).
    held = iter([9, 9, 7, 5, 3, 1, 2, 1, 0, 0])  # the first: read before the drain's first step
    counted = work(6, slow_after=0)
    counted.ready_batches = lambda: next(held)
    assert _drain(counted) == (8, True), "stops at the second count <= 1 in a row, whatever the waits"
    steady = work(6, slow_after=0)
    steady.ready_batches = lambda: 5
    assert _drain(steady) == (6, False), "a count that does not shrink: the pipeline keeps up, no need to wait"


def counted_pipeline(buffered: int, ready_after: Any) -> tuple[Any, list[int]]:
    """A workload whose steps take no time and whose ready count after ``n`` batches taken is ``ready_after(n)``;
    the counts the drain read, in order."""
    from workloads.base import Workload

    taken, read = [0], []

    def ready() -> int:
        read.append(ready_after(taken[0]))
        return read[-1]

    def next_batch() -> None:
        taken[0] += 1

    return Workload(lambda b: None, 1, next_batch=next_batch, buffered_steps=buffered, ready_batches=ready), read


def test_warmup_drain_stops_once_the_count_stops_shrinking_below_full() -> None:
    """After a long first step the buffer is full (12 workers x prefetch 2); a pipeline that keeps up then settles
    below full (batches in the making are not ready): the drain stops min(buffer, 8) steps after the count stopped
    shrinking, not at the cap (4 x 24 + 8 = 104 steps), although it never returns to its first value."""
    from sweeper.trial.measure import _drain

    work, read = counted_pipeline(24, lambda n: max(24 - n, 14))  # 24 ready, down to a steady 14 after 10 steps
    assert _drain(work) == (18, False), "8 steps after the count last shrank"
    assert read[-1] == read[-9] == 14
    noisy, _ = counted_pipeline(24, lambda n: max(24 - n, 14 - n % 2))  # steady between 13 and 14
    assert _drain(noisy) == (18, False), "a count that goes up and down around a level is not shrinking"


@pytest.mark.parametrize(("start", "rate", "expected"), [(24, (3, 4), 90), (12, (7, 8), 82), (12, (1, 2), 22)])
def test_warmup_drain_runs_a_shrinking_count_until_dry(start: int, rate: tuple[int, int], expected: int) -> None:
    """A pipeline slower than the model (``rate`` of its batches a step, evenly) loses a batch or more every 8
    steps: it is drained until it holds at most one batch twice in a row, 7/8 of the model's rate included (the
    bound: a pipeline is said to keep up only above it)."""
    from sweeper.trial.measure import _drain

    num, den = rate
    work, read = counted_pipeline(24, lambda n: start - n + num * n // den)
    assert _drain(work) == (expected, True)
    assert read[-2:] == [1, 1] and all(a >= b for a, b in zip(read, read[1:])), "shrinking, then dry"


def test_loader_ready_counts_a_dataloader_iterators_finished_batches() -> None:
    """The helper a workload of the user's own gives as ``ready_batches``: idle workers fill every prefetch slot
    (2 workers x prefetch 2); no workers: none; not a DataLoader iterator: unknown."""
    import time as clock

    from torch.utils.data import DataLoader, TensorDataset

    from workloads.base import loader_ready

    dataset = TensorDataset(torch.arange(64))
    loader = DataLoader(dataset, batch_size=2, num_workers=2, prefetch_factor=2)
    batches = iter(loader)
    try:
        next(batches)
        deadline = clock.time() + 60
        while loader_ready(batches) < 4 and clock.time() < deadline:
            clock.sleep(0.1)
        assert loader_ready(batches) == 4, "every prefetch slot holds a finished batch"
        assert next(batches)[0].tolist() == [2, 3], "in order"
    finally:
        batches._shutdown_workers()
    assert loader_ready(iter(DataLoader(dataset, batch_size=2))) == 0, "no workers: nothing is prepared ahead"
    assert loader_ready(iter([1, 2])) is None, "not a DataLoader iterator: unknown"


def test_ready_batches_counts_what_the_workers_finished(tmp_path: Path) -> None:
    import time as clock

    pipe = pipeline(tmp_path, p={**TINY, "epoch_images": 1000}, batch_size=2, num_workers=2, prefetch_factor=2)
    try:
        pipe.next()
        deadline = clock.time() + 60
        while pipe.ready_batches() < 3 and clock.time() < deadline:
            clock.sleep(0.1)
        assert pipe.ready_batches() >= 3, "idle workers fill their prefetch slots: batches wait to be taken"
        for _ in range(6):
            pipe.next()
    finally:
        pipe.close()
    assert pipeline(tmp_path).ready_batches() == 0, "no workers: nothing is prepared ahead"


def test_cli_jpeg_trial_writes_a_row_with_data_wait(results: Path) -> None:
    """Decoding in the training loop (num_workers=0) of 3072x2304 JPEGs for a 32-pixel model: the loop waits for
    data a large share of the window (0.43 measured on the loaded 2-core CI machine)."""
    run_main(["+workload=resnet50", "workload.data=jpeg", "knobs.num_workers=0", "workload.corpus_images=4",
             "workload.corpus_width=3072", "workload.corpus_height=2304", "workload.corpus_sizes=fixed",
             "cpu_threads=1"], results, check=True)
    df = pd.read_parquet(results / "trials")
    assert len(df) == 1
    row = df.iloc[0]
    assert row["status"] == "complete"
    assert row["data_wait_frac"] > 0.2, row["data_wait_frac"]
    assert row["knob.num_workers"] == 0 and pd.isna(row["knob.prefetch_factor"])
    assert row["data_decode_device"] == "cpu" and row["data_corpus_images"] == 4
    assert (results / "data" / "jpeg-3072x2304-4" / corpus.MANIFEST).is_file()
    assert row["data_limit_stage"] in ("decode", "augmentation", "transfer") and row["data_decode_ms"] > 0


@pytest.mark.parametrize("load_s, step_s, low, high", [(0.02, 0.001, 0.7, 1.0), (0.0, 0.01, 0.0, 0.1)])
def test_data_wait_frac_is_the_share_of_the_window_spent_fetching(load_s: float, step_s: float, low: float,
                                                                  high: float) -> None:
    """A loader slow by construction (20 ms a batch for a 1 ms step) gives a high fraction; batches ready at once
    a low one. Sleeps do not compete for the CPU, so the ratio holds on a loaded machine."""
    from sweeper.trial.measure import measure
    from workloads.base import Workload

    def next_batch() -> None:
        if load_s:
            time.sleep(load_s)

    work = Workload(step=lambda _: time.sleep(step_s), samples_per_step=1.0, next_batch=next_batch)
    m = measure(work, CPU, warmup_steps=1, steps=20)
    assert low <= m["data_wait_frac"] <= high, m["data_wait_frac"]
    assert m["data_wait_host_frac"] == m["data_wait_frac"], "on the CPU the wait is the host's time in next_batch"


# ---------------------------------------------------------------- GPU only (skipped on the CPU)

cuda_only = pytest.mark.gpu  # skipped without a CUDA GPU (conftest.py)


class CopyLog(TorchDispatchMode):
    """Records the non_blocking flag of every copy to the GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[bool] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if func is torch.ops.aten._to_copy.default and device is not None and torch.device(device).type == "cuda":
            self.copies.append(bool(kwargs.get("non_blocking", False)))
        return func(*args, **kwargs)


@cuda_only
@pytest.mark.parametrize("decode_device, extra", [("cpu", {}), ("cpu", {"device_prefetch": True}), ("cuda", {}),
                                                   ("hybrid", {"gpu_share": 0.5}),
                                                   ("cpu", {"augment_device": "cuda", "transfer_dtype": None}),
                                                   ("hybrid", {"gpu_share": 0.25, "augment_device": "cuda"})])
def test_gpu_batches_are_float32_in_the_memory_format(tmp_path: Path, decode_device: str, extra: dict) -> None:
    pipe = pipeline(tmp_path, device=torch.device("cuda"), memory_format=torch.channels_last, num_workers=1,
                    decode_device=decode_device, **extra)
    try:
        images, labels = pipe.next()
    finally:
        pipe.close()
    assert images.is_cuda and labels.is_cuda and images.dtype == torch.float32
    assert images.shape == (4, 3, 16, 16) and images.is_contiguous(memory_format=torch.channels_last)
    assert images.std() > 0.1 and pipe.metrics()["data_decode_device"] == decode_device
    m = pipe.metrics()
    assert (m["data_bytes_decoded_gpu"] > 0) == (decode_device != "cpu")
    assert (m["data_bytes_decoded_cpu"] > 0) == (decode_device != "cuda")
    assert m["data_augment_device"] == (None if decode_device == "cuda" else extra.get("augment_device", "cpu"))


@cuda_only
def test_copy_time_is_read_while_a_prefetch_thread_times_another_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """``DeviceSide.copy_s`` after the window while a prefetcher's thread still copies: a copy whose events it
    records after the reader synchronized the device (here: right after, behind a 50 ms kernel on another stream)
    is not read unfinished. The reader synchronized the device and then read every pair: "Both events must be
    completed before calculating elapsed time" ended a measured H100 JPEG trial (2026-12-06)."""
    from workloads.device_side import DeviceSide

    side = DeviceSide(16, torch.device("cuda"), torch.contiguous_format, non_blocking=True)
    for _ in range(3):
        side._copy(torch.ones(64, 64).pin_memory())
    side.batches = 3
    late = torch.cuda.Stream()
    real_sync = torch.cuda.synchronize

    def sync_then_a_late_copy(*args: Any, **kwargs: Any) -> None:
        real_sync(*args, **kwargs)
        with torch.cuda.stream(late):
            torch.cuda._sleep(100_000_000)  # the late copy's stream is busy ~50 ms; the host does not wait
            side._copy(torch.ones(64, 64).pin_memory())

    monkeypatch.setattr(torch.cuda, "synchronize", sync_then_a_late_copy)
    sync_then_a_late_copy()  # the window's end: the device synchronized, the thread copies on
    assert side.copy_s() > 0
    real_sync()


@cuda_only
def test_pin_memory_and_non_blocking_reach_the_copy(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, device=torch.device("cuda"), pin_memory=True, non_blocking=True)
    assert pipe._next_host()["crops"].is_pinned()
    with CopyLog() as log:
        pipe.next()
    assert log.copies == [True, True], "images and labels are copied without blocking"
    with CopyLog() as log:
        pipeline(tmp_path, device=torch.device("cuda")).next()
    assert log.copies == [False, False]
