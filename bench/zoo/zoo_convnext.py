"""A CNN this project does not ship, written as a user would from the README's "Your own model": torchvision's
ConvNeXt-Tiny (random init, nothing downloaded) trained on synthetic images with AdamW.

    cd bench/zoo && knob-sweeper -cd conf +workload=zoo_convnext -m hydra.sweeper.timeout_s=300

``bench/zoo/hand_zoo.py --model convnext`` is the independent hand-written loop it is compared with.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
import torchvision

from workloads import DeviceInfo, Workload, common


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)
    torch.manual_seed(0)
    size, classes, bs = int(p["image_size"]), int(p["num_classes"]), int(knobs["batch_size"])
    fmt = common.memory_format(knobs["memory_format"])
    model = torchvision.models.convnext_tiny(weights=None, num_classes=classes)
    model = model.to(device=device, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **common.optimizer_kwargs(knobs["optimizer_impl"], device))
    train = common.TrainStep(model, F.cross_entropy, opt, knobs, device)
    x = torch.randn(bs, 3, size, size, device=device).contiguous(memory_format=fmt)
    y = torch.randint(0, classes, (bs,), device=device)
    return Workload(
        step=lambda _batch: train((x, y)), samples_per_step=bs, throughput_unit="img/s", precision=knobs["precision"]
    )
