"""The knobs of a training step that the package's helpers (``workloads.common``) interpret, for the built-in
workloads and a user's own model alike: their types, choices, defaults and the device checks before launch.

Torch-free: the sweeper process reads this module (validation, ``check``) without importing torch.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import typing
from typing import Any, Literal

from workloads.base import DeviceInfo

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp32-strict"]
CompileMode = Literal["off", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune"]
MemoryFormat = Literal["contiguous", "channels_last"]
OptimizerImpl = Literal["foreach", "fused", "for_loop"]
Checkpointing = Literal["off", "all"] | int  # or the first N blocks

PRECISIONS: tuple[str, ...] = typing.get_args(Precision)
COMPILE_MODES: tuple[str, ...] = typing.get_args(CompileMode)
MEMORY_FORMATS: tuple[str, ...] = typing.get_args(MemoryFormat)
OPTIMIZER_IMPLS: tuple[str, ...] = typing.get_args(OptimizerImpl)


@dataclasses.dataclass(frozen=True)
class TrainingKnobs:
    """Knobs that :class:`workloads.common.TrainStep`, ``set_global_flags`` and the trial process interpret.

    A workload's own knob class extends it with the knobs its ``build`` reads (``batch_size`` and the like)."""

    precision: Precision = "fp32"
    """fp32 (PyTorch's defaults) | tf32 (TF32 matmuls) | fp16 | bf16 (autocast) | fp32-strict (no TF32 at all)."""
    compile: CompileMode = "off"
    """``torch.compile`` mode of the forward and loss (off: eager)."""
    cudnn_benchmark: bool = False
    """``torch.backends.cudnn.benchmark``: cuDNN autotunes its convolution algorithms."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step."""
    optimizer_impl: OptimizerImpl = "foreach"
    """The optimizer's update kernels: foreach (multi-tensor) | fused (one kernel) | for_loop."""
    cuda_connections: int | None = None
    """CUDA_DEVICE_MAX_CONNECTIONS of the trial process (1..32; null: CUDA's default, 8)."""


# The knobs above that TrainStep and the trial process apply outside its compiled forward and loss: they never
# change a compiled graph. cuDNN's benchmark flag picks a convolution's (an RNN's) algorithm when the kernel runs,
# and Inductor's cache key leaves it out (torch._inductor.codecache hashes the matmul and determinism settings, not
# cuDNN's): a 2-layer LSTM's max-autotune compile on an H100, 14.4 s with the benchmark on, took 1.9 s from the
# cache with it off (2026-12-05).
STEP_OUTSIDE_COMPILE: tuple[str, ...] = ("optimizer_impl", "cuda_connections", "cudnn_benchmark")

# Knobs that are environment variables of the trial process, read when CUDA starts: sweeper.trial.child sets them
# before anything touches CUDA and restores them after. CUDA_DEVICE_MAX_CONNECTIONS is the number of hardware work
# queues the process's streams are spread over (8 by default, 32 at most): with more streams than queues, a side
# stream's work (the GPU decoder's, on streams nvJPEG creates itself) can wait in a queue behind the training
# step's kernels although nothing orders them.
ENV_KNOBS = {"cuda_connections": "CUDA_DEVICE_MAX_CONNECTIONS"}


def knob_env(knobs: dict[str, Any]) -> dict[str, str]:
    """The environment variables these knobs set in the trial process (unset knobs: none)."""
    return {var: str(knobs[k]) for k, var in ENV_KNOBS.items() if knobs.get(k) is not None}


def check_common(knobs: dict[str, Any], device: DeviceInfo) -> str | None:
    """Why the device cannot honour these knobs (skipped before launch), or None."""
    queues = knobs.get("cuda_connections")  # on a CPU trial the variable is set and nothing reads it (as cuDNN's flags)
    if queues is not None and (isinstance(queues, bool) or not isinstance(queues, int) or not 1 <= queues <= 32):
        return f"knobs.cuda_connections must be an integer in 1..32 (CUDA_DEVICE_MAX_CONNECTIONS), got {queues!r}"
    precision = knobs.get("precision")
    cc = device.compute_capability
    if device.kind == "cuda" and cc is not None:
        if precision == "bf16" and cc < (8, 0):
            return f"bf16 needs compute capability >= 8.0, {device.name} has {cc[0]}.{cc[1]}"
        if precision == "tf32" and cc < (8, 0):
            return f"tf32 needs compute capability >= 8.0, {device.name} has {cc[0]}.{cc[1]}"
    if device.kind == "cpu":
        if knobs.get("compile") in ("reduce-overhead", "max-autotune"):
            return f"compile={knobs['compile']} uses CUDA graphs, which need a GPU"
        if knobs.get("optimizer_impl") == "fused" and not _fused_on_cpu():
            return "fused optimizers need a GPU on this torch version"
    return None


def _fused_on_cpu() -> bool:
    """torch >= 2.4 has fused CPU optimizers (read from the installed distribution: torch is not imported)."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(x) for x in version.split("+")[0].split(".")[:2]) >= (2, 4)
