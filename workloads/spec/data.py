"""The data knobs of resnet50's ``jpeg`` pipeline: their types and defaults, and the conflicts checked before a
trial launches (``workloads.data`` applies them).

Each conflict is one line naming the knob and the fix; a sweep skips such a trial with that reason. Torch-free:
the sweeper process reads this module.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import numbers
import typing
from typing import Any, Literal

from workloads.base import DeviceInfo
from workloads.spec import typed

DecodeDevice = Literal["cpu", "cuda", "hybrid"]
# where the CPU-decoded images are cropped and resized: in the workers, or (uint8 crop windows copied) on the GPU
AugmentDevice = Literal["cpu", "cuda"]
TransferDtype = Literal["float32", "uint8"]
GpuDecoder = Literal["torchvision", "nvimgcodec"]
CpuDecoder = Literal["torchvision", "pil"]
DecodeScale = Literal["full", "reduced"]

DECODE_DEVICES: tuple[str, ...] = typing.get_args(DecodeDevice)
AUGMENT_DEVICES: tuple[str, ...] = typing.get_args(AugmentDevice)
TRANSFER_DTYPES: tuple[str, ...] = typing.get_args(TransferDtype)
GPU_DECODERS: tuple[str, ...] = typing.get_args(GpuDecoder)
CPU_DECODERS: tuple[str, ...] = typing.get_args(CpuDecoder)
DECODE_SCALES: tuple[str, ...] = typing.get_args(DecodeScale)


@dataclasses.dataclass(frozen=True)
class DataKnobs:
    """The input pipeline's knobs (``workload.data: jpeg``; inactive on synthetic data)."""

    num_workers: int = 0
    """DataLoader worker processes."""
    prefetch_factor: int | None = None
    """Batches prefetched per worker; exists only when num_workers > 0."""
    pin_memory: bool = False
    non_blocking: bool = False
    """Host-to-device copies without blocking the host."""
    persistent_workers: bool = False
    worker_nice: int = 0
    """Niceness added to each worker (os.nice, 0..19)."""
    switch_interval_ms: float | None = None
    """The trial process's GIL switch interval (null: Python's 5 ms)."""
    decode_device: DecodeDevice = "cpu"
    """cpu | cuda (batched nvJPEG on the GPU) | hybrid (gpu_share of each batch on the GPU)."""
    gpu_share: float | None = None
    """hybrid: share of each batch decoded on the GPU, in (0, 1)."""
    gpu_decoder: GpuDecoder = "torchvision"
    gpu_roi_decode: bool = False
    """nvimgcodec: decode only each crop window."""
    cpu_decoder: CpuDecoder = "torchvision"
    decode_scale: DecodeScale = "full"
    """reduced: libjpeg DCT scaling (cpu_decoder=pil)."""
    transfer_dtype: TransferDtype = "float32"
    augment_device: AugmentDevice = "cpu"
    device_prefetch: bool = False
    """GPU: copy and normalize CPU-decoded batches on a side stream, a few batches ahead."""


# The knobs that split the input pipeline's work between the host and the device, each with its values ordered from
# the host toward the device (``gpu_share``: a number, the larger the more on the device). Where a step keeps the
# device busy and never waits for its data, the search moves that work one step back to the host first.
HOST_TO_DEVICE: dict[str, tuple[str, ...] | None] = {
    "decode_device": ("cpu", "hybrid", "cuda"),
    "augment_device": AUGMENT_DEVICES,
    "gpu_share": None,
}


def toward_host(leaf: str, value: Any, other: Any, choices: typing.Sequence[Any]) -> bool:
    """Whether ``leaf`` changed from ``value`` to ``other`` moves the input pipeline's work one step from the device
    back to the host (``HOST_TO_DEVICE``): the next value toward the host among ``choices``."""
    if leaf not in HOST_TO_DEVICE:
        return False
    order = HOST_TO_DEVICE[leaf]
    if order is None:
        numbers_ = [c for c in choices if isinstance(c, numbers.Real) and not isinstance(c, bool)]
        if not isinstance(value, numbers.Real) or other not in numbers_:
            return False
        below = [c for c in numbers_ if c < value]
        return bool(below) and other == max(below)
    ranked = [c for c in order if c in choices]
    if value not in ranked or other not in ranked:
        return False
    return ranked.index(other) == ranked.index(value) - 1


# The input pipeline's capacity knobs: the more of each, the more batches the host prepares ahead of the device.
CAPACITY: frozenset[str] = frozenset({"num_workers", "prefetch_factor"})


def less_capacity(leaf: str, value: Any, other: Any) -> bool:
    """Whether ``leaf`` changed from ``value`` to ``other`` gives the input pipeline less capacity (``CAPACITY``: a
    smaller number of workers or of batches prefetched each)."""
    plain = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in (value, other))
    return leaf in CAPACITY and plain and other < value


def moves_a_stage(leaf: str, other: Any) -> bool:
    """Whether a step of ``leaf`` to ``other`` toward the host (:func:`toward_host`) leaves none of its stage of the
    input pipeline on the device (``decode_device`` hybrid -> cpu, ``augment_device`` cuda -> cpu), not a share of
    it (``gpu_share`` 1/2 -> 3/8; ``decode_device`` cuda -> hybrid)."""
    order = HOST_TO_DEVICE.get(leaf)
    return order is not None and other == order[0]


def nvimgcodec_missing() -> str | None:
    """Why ``gpu_decoder: nvimgcodec`` cannot run here (nvImageCodec is not installed), or None."""
    try:  # found, not imported: importing it loads its codec libraries (and logs the missing ones)
        found = importlib.util.find_spec("nvidia.nvimgcodec") is not None
    except ImportError:  # no ``nvidia`` package at all
        found = False
    if found:
        return None
    return (
        "knobs.gpu_decoder=nvimgcodec needs nvImageCodec, which is not installed; "
        "pip install 'nvidia-nvimgcodec-cu13[nvjpeg]' (-cu12 for CUDA 12), or set gpu_decoder=torchvision"
    )


def knob_conflict(knobs: dict[str, Any], device_kind: str) -> str | None:
    """Why these data knobs cannot run on a ``device_kind`` ("cpu"/"cuda") device, or None."""
    for conflict in (_decode_conflict, _transfer_conflict, _cpu_decode_conflict, _worker_conflict):
        problem = conflict(knobs, device_kind)
        if problem is not None:
            return problem
    return None


def _decode_conflict(knobs: dict[str, Any], device_kind: str) -> str | None:
    """Where JPEGs are decoded: decode_device, and the GPU decoder's knobs where a GPU decodes."""
    where = typed.of(DataKnobs, knobs).decode_device
    if where not in DECODE_DEVICES:
        return f"knobs.decode_device must be one of {DECODE_DEVICES}, got {where!r}"
    if where != "cpu" and device_kind != "cuda":
        return (
            f"knobs.decode_device={where} decodes JPEGs on a GPU, but this trial runs on the CPU; use decode_device=cpu"
        )
    gpu_decoder = knobs.get("gpu_decoder") or "torchvision"
    if where != "cpu":  # the GPU decoder's knobs mean nothing when every image is decoded on the CPU
        if gpu_decoder not in GPU_DECODERS:
            return f"knobs.gpu_decoder must be one of {GPU_DECODERS}, got {gpu_decoder!r}"
        if knobs.get("gpu_roi_decode") and gpu_decoder != "nvimgcodec":
            return (
                "knobs.gpu_roi_decode=true decodes crop windows through nvImageCodec; set gpu_decoder=nvimgcodec "
                "or gpu_roi_decode=false"
            )
        if gpu_decoder == "nvimgcodec":
            missing = nvimgcodec_missing()
            if missing:
                return missing
    if where == "hybrid":
        share = knobs.get("gpu_share")
        if share is None or not 0.0 < float(share) < 1.0:
            return f"knobs.gpu_share must lie in (0, 1) with decode_device=hybrid, got {share!r}"
    return None


def _transfer_conflict(knobs: dict[str, Any], device_kind: str) -> str | None:
    """How batches reach the device: device_prefetch, transfer_dtype and augment_device."""
    where = typed.of(DataKnobs, knobs).decode_device
    if knobs.get("device_prefetch") and device_kind != "cuda":
        return "knobs.device_prefetch=true copies batches on a side CUDA stream; it needs a GPU"
    transfer = knobs.get("transfer_dtype") or "float32"
    if transfer not in TRANSFER_DTYPES:
        return f"knobs.transfer_dtype must be one of {TRANSFER_DTYPES}, got {transfer!r}"
    augment = knobs.get("augment_device") or "cpu"
    if augment not in AUGMENT_DEVICES:
        return f"knobs.augment_device must be one of {AUGMENT_DEVICES}, got {augment!r}"
    if augment == "cuda":
        if where == "cuda":
            return (
                "knobs.augment_device=cuda crops the CPU-decoded images on the GPU, but decode_device=cuda "
                "decodes none on the CPU; set augment_device=cpu"
            )
        if device_kind != "cuda":
            return (
                f"knobs.augment_device=cuda crops and resizes on a GPU, but this trial runs on {device_kind}; "
                "use augment_device=cpu"
            )
        if knobs.get("transfer_dtype") == "float32":
            return (
                "knobs.augment_device=cuda copies the decoded crop windows as uint8 and normalizes them on the "
                "GPU; set knobs.transfer_dtype=uint8 (or null)"
            )
    return None


def _cpu_decode_conflict(knobs: dict[str, Any], device_kind: str) -> str | None:
    """How the CPU decodes: cpu_decoder and decode_scale."""
    decoder, scale = knobs.get("cpu_decoder") or "torchvision", knobs.get("decode_scale") or "full"
    if decoder not in CPU_DECODERS:
        return f"knobs.cpu_decoder must be one of {CPU_DECODERS}, got {decoder!r}"
    if scale not in DECODE_SCALES:
        return f"knobs.decode_scale must be one of {DECODE_SCALES}, got {scale!r}"
    if scale == "reduced" and decoder != "pil":
        return (
            "knobs.decode_scale=reduced needs knobs.cpu_decoder=pil (DCT scaling through Image.draft); "
            "set cpu_decoder=pil or decode_scale=full"
        )
    return None


def _worker_conflict(knobs: dict[str, Any], device_kind: str) -> str | None:
    """The input pipeline's worker processes: num_workers and the knobs that need them, worker_nice and
    switch_interval_ms."""
    workers = knobs.get("num_workers") or 0
    if int(workers) < 0:
        return f"knobs.num_workers must be >= 0, got {workers}"
    if workers == 0 and knobs.get("prefetch_factor") is not None:
        return (
            f"knobs.prefetch_factor={knobs['prefetch_factor']} needs worker processes (knobs.num_workers > 0); "
            "leave it null, or sweep it under the condition knobs.prefetch_factor: 'knobs.num_workers > 0'"
        )
    nice = knobs.get("worker_nice") or 0
    if isinstance(nice, bool) or not isinstance(nice, numbers.Real) or nice != int(nice) or not 0 <= nice <= 19:
        return f"knobs.worker_nice must be an integer in 0..19 (os.nice), got {nice!r}"
    if workers == 0 and nice:
        return (
            f"knobs.worker_nice={nice} lowers worker processes' priority, but knobs.num_workers=0; set it 0, or "
            "sweep it under the condition knobs.worker_nice: 'knobs.num_workers > 0'"
        )
    switch = knobs.get("switch_interval_ms")
    if switch is not None and (isinstance(switch, bool) or not isinstance(switch, numbers.Real) or switch <= 0):
        return (
            f"knobs.switch_interval_ms must be a positive number of milliseconds (sys.setswitchinterval), got "
            f"{switch!r}; use e.g. 0.5, or null for Python's 5 ms"
        )
    if workers == 0 and knobs.get("persistent_workers"):
        return (
            "knobs.persistent_workers=true needs worker processes (knobs.num_workers > 0); set it false, or sweep "
            "it under the condition knobs.persistent_workers: 'knobs.num_workers > 0'"
        )
    return None


def check(knobs: dict[str, Any], device: DeviceInfo) -> str | None:
    """Why the data knobs cannot run on this device (the trial is skipped before launch), or None."""
    return knob_conflict(knobs, device.kind)


def gpu_share(knobs: dict[str, Any]) -> float:
    """Share of each batch decoded on the GPU: 0 (cpu), 1 (cuda) or ``gpu_share`` (hybrid)."""
    where = typed.of(DataKnobs, knobs).decode_device
    return {"cpu": 0.0, "cuda": 1.0}.get(where, float(knobs.get("gpu_share") or 0.0))
