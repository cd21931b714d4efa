"""The workload contract: what ``build`` returns, and what it may know of the device before launch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class Workload:
    """One timed unit of work.

    ``step(batch)`` runs one optimizer step (or one kernel) on ``batch`` and returns the loss tensor (or None)
    without synchronizing; ``next_batch()`` fetches the next input (None for synthetic data already on the
    device), and the time spent inside it counts as time waiting for data: on the CPU the host's time in it; on a
    GPU, for a workload with an ``input_pipeline``, the time the training stream sits idle across the call (the
    host may wait there while the GPU still runs earlier steps, which costs nothing).
    """

    step: Callable[[Any], Any]
    samples_per_step: float  # items of work per step, in throughput_unit * seconds
    flops_per_step: float | None = None  # model FLOPs of one step (forward + backward for training)
    throughput_unit: str = "samples/s"
    next_batch: Callable[[], Any] = lambda: None
    extra_metrics: Callable[[], dict[str, Any]] = dict  # read once after the measured window
    close: Callable[[], None] = lambda: None
    precision: str = "fp32"  # which peak FLOP/s the MFU is taken against
    # Share of flops_per_step in convolutions: under float32 precision cuDNN runs them on TF32 tensor cores
    # where torch.backends.cudnn.allow_tf32 (PyTorch's default), and the MFU's peak reflects it.
    conv_flops_frac: float = 0.0
    # Steps' worth of input the pipeline may hold ready before the measured window (DataLoader workers x
    # prefetch_factor): warm-up runs at least this many steps more, so the window does not time batches that were
    # prepared while the model started.
    buffered_steps: int = 0
    # Batches the input pipeline holds ready right now (None: unknown): warm-up runs until it is empty, or until
    # the count stops shrinking (the pipeline keeps up). For a torch DataLoader: ``lambda: loader_ready(batches)``
    # with ``batches = iter(loader)``. Without it, a pipeline that keeps up is warmed up to a cap (4 x the buffer).
    ready_batches: Callable[[], int | None] | None = None
    # next_batch() fetches real input: on a GPU its waits are timed on the device (two CUDA events per step, so
    # workloads without input, whose steps may be microseconds, do not pay for them).
    input_pipeline: bool = False


def loader_ready(iterator: Any) -> int | None:
    """Batches a torch DataLoader iterator (``iter(loader)``) holds finished and not yet taken: the workers' results
    before and after the pin-memory thread, plus those that arrived out of order; 0 without workers (nothing is
    prepared ahead); None where it does not show them (not a DataLoader iterator, a future torch, a platform
    without ``Queue.qsize``). A workload's ``ready_batches``: ``lambda: loader_ready(batches)``.

    Read from the iterator's private attributes, hence the None fallback.
    """
    try:
        if iterator._num_workers == 0:
            return 0
        ready = iterator._worker_result_queue.qsize()
        if iterator._data_queue is not iterator._worker_result_queue:
            ready += iterator._data_queue.qsize()
        return ready + sum(1 for v in list(iterator._task_info.values()) if len(v) == 2)  # arrived out of order
    except (AttributeError, NotImplementedError):
        return None


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """What the sweeper knows of the device without touching CUDA (from NVML)."""

    kind: str  # "cuda" or "cpu"
    name: str = "cpu"
    count: int = 0
    compute_capability: tuple[int, int] | None = None
    memory_bytes: int | None = None
