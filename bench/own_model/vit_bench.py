"""A model this project does not ship, written as a user would from the README's "Your own model": torchvision's
ViT-B/16 trained on synthetic images with AdamW, knobs applied by the package's helpers.

    cd bench/own_model && knob-sweeper -cd conf +workload=vit -m hydra.sweeper.timeout_s=300

``bench/own_model/hand_vit.py`` is the independent hand-written loop of the same model it is compared with.
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
    size, bs = int(p["image_size"]), int(knobs["batch_size"])
    model = torchvision.models.vit_b_16(image_size=size, num_classes=int(p["num_classes"])).to(device)
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-3, **common.optimizer_kwargs(knobs.get("optimizer_impl", "foreach"), device)
    )
    train = common.TrainStep(model, F.cross_entropy, opt, knobs, device)
    x = torch.randn(bs, 3, size, size, device=device)
    y = torch.randint(0, int(p["num_classes"]), (bs,), device=device)
    return Workload(
        step=lambda _batch: train((x, y)),
        samples_per_step=bs,
        throughput_unit="img/s",
        precision=knobs.get("precision", "fp32"),
    )
