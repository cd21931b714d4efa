"""transformer_block's knobs (:class:`TransformerBlockKnobs`) and its check before launch. Torch-free: read by the
sweeper process."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from workloads.base import DeviceInfo
from workloads.spec import distributed, typed
from workloads.spec.training import Checkpointing, Precision, TrainingKnobs, check_common

SdpaBackend = Literal["auto", "flash", "efficient", "cudnn", "math"]
SDPA_BACKENDS: tuple[str, ...] = typing.get_args(SdpaBackend)


@dataclasses.dataclass(frozen=True)
class TransformerBlockKnobs(TrainingKnobs):
    """The training step's knobs and the attention kernel."""

    precision: Precision = "bf16"
    """As :class:`TrainingKnobs`; bf16 by default (the precision such blocks train in)."""
    batch_size: int = 4
    """Sequences per micro-batch."""
    activation_checkpointing: Checkpointing = "off"
    """off | all | N: recompute the activations of the first N layers in backward."""
    sdpa_backend: SdpaBackend = "auto"
    """The scaled-dot-product-attention kernel (auto: PyTorch picks)."""


Knobs = TransformerBlockKnobs


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    """Why this configuration cannot run on ``device`` (skipped before launch), or None."""
    knobs = cfg["knobs"]
    reason = check_common(knobs, device) or distributed.check(cfg, device)
    if reason:
        return reason
    backend = typed.of(TransformerBlockKnobs, knobs).sdpa_backend
    if device.kind == "cpu" and backend in ("flash", "efficient", "cudnn"):
        return f"sdpa_backend={backend} is a CUDA kernel"
    if backend == "flash" and knobs.get("precision") in ("fp32", "tf32"):
        return "sdpa_backend=flash needs fp16 or bf16 activations"
    return None
