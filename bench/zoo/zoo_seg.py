"""A segmentation network this project does not ship, written as a user would from the README's "Your own model":
torchvision's DeepLabV3 with a MobileNetV3-Large backbone (random init, nothing downloaded), per-pixel
cross-entropy, AdamW, fed by a ``DataLoader`` over an in-memory dataset of synthetic uint8 images and masks (the
loader's workers, pinned memory and non-blocking copies are knobs; images are normalized on the device).

    cd bench/zoo && knob-sweeper -cd conf +workload=zoo_seg -m hydra.sweeper.timeout_s=300

``bench/zoo/hand_zoo.py --model seg`` is the independent hand-written loop it is compared with.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.data import DataLoader, Dataset

from workloads import DeviceInfo, Workload, common
from workloads.base import loader_ready

POOL = 64  # distinct images held in memory; the dataset cycles over them


class SyntheticSegmentation(Dataset):
    """uint8 images (3, size, size) and uint8 masks (size, size), generated once, cycled for a long epoch."""

    def __init__(self, size: int, classes: int, length: int = 1_000_000) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (POOL, 3, size, size), dtype=torch.uint8, generator=g)
        self.masks = torch.randint(0, classes, (POOL, size, size), dtype=torch.uint8, generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i % POOL], self.masks[i % POOL]


def segmentation_loss(out: dict[str, torch.Tensor], masks: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out["out"], masks)


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)
    torch.manual_seed(0)
    size, classes, bs = int(p["image_size"]), int(p["num_classes"]), int(knobs["batch_size"])
    fmt = common.memory_format(knobs["memory_format"])
    model = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=classes, aux_loss=False
    )
    model = model.to(device=device, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **common.optimizer_kwargs(knobs["optimizer_impl"], device))
    train = common.TrainStep(model, segmentation_loss, opt, knobs, device)

    workers = int(knobs["num_workers"])
    loader = DataLoader(
        SyntheticSegmentation(size, classes),
        batch_size=bs,
        num_workers=workers,
        pin_memory=bool(knobs["pin_memory"]) and device.type == "cuda",
        prefetch_factor=2 if workers else None,
        drop_last=True,
    )
    batches = iter(loader)
    non_blocking = bool(knobs["non_blocking"])
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        images, masks = next(batches)
        x = images.to(device, non_blocking=non_blocking).float().sub_(mean).div_(std)
        return x.contiguous(memory_format=fmt), masks.to(device, non_blocking=non_blocking).long()

    def close() -> None:
        shutdown = getattr(batches, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()

    return Workload(
        step=train,
        next_batch=next_batch,
        samples_per_step=bs,
        throughput_unit="img/s",
        precision=knobs["precision"],
        close=close,
        buffered_steps=2 * workers,
        ready_batches=lambda: loader_ready(batches),
        input_pipeline=True,
    )
