"""resnet50's knobs (:class:`ResNet50Knobs`) and its check before launch. Torch-free: read by the sweeper process."""

from __future__ import annotations

import dataclasses
from typing import Any

from workloads.base import DeviceInfo
from workloads.spec import data, distributed
from workloads.spec.data import DataKnobs
from workloads.spec.training import Checkpointing, MemoryFormat, TrainingKnobs, check_common

STAGES = ("layer1", "layer2", "layer3", "layer4")


@dataclasses.dataclass(frozen=True)
class ResNet50Knobs(TrainingKnobs, DataKnobs):
    """The training step's knobs, the convolution's memory format, and the JPEG pipeline's data knobs."""

    memory_format: MemoryFormat = "contiguous"
    """contiguous (NCHW) | channels_last (NHWC: what tensor-core convolutions want)."""
    batch_size: int = 256
    """Images per micro-batch."""
    activation_checkpointing: Checkpointing = "off"
    """off | all | N: recompute the activations of the first N of the four stages in backward."""


Knobs = ResNet50Knobs


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    """Why this configuration cannot run on ``device`` (skipped before launch), or None."""
    knobs = cfg["knobs"]
    reason = check_common(knobs, device) or distributed.check(cfg, device)
    if reason:
        return reason
    if cfg["workload"].get("data", "synthetic") == "jpeg":
        return data.check(knobs, device)
    return None
