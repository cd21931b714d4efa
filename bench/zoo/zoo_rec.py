"""A recommender this project does not ship, written as a user would from the README's "Your own model": a
DLRM-style click model, one embedding table per categorical feature (all in one ``nn.Embedding`` with per-table
offsets), a bottom MLP over the dense features, a top MLP over their concatenation, trained with binary
cross-entropy on synthetic clicks with AdamW. Throughput in samples/s. Its step is dominated by memory-bound
work (the lookups, the tables' dense gradients and the optimizer's update of every row), not matrix products.

    cd bench/zoo && knob-sweeper -cd conf +workload=zoo_rec -m hydra.sweeper.timeout_s=300

``bench/zoo/hand_zoo.py --model rec`` is the independent hand-written loop it is compared with.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads import DeviceInfo, Workload, common


def mlp(widths: list[int], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class ClickModel(nn.Module):
    def __init__(self, dense: int, tables: int, rows: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(tables * rows, dim)
        self.register_buffer("offsets", torch.arange(tables) * rows, persistent=False)
        self.bottom = mlp([dense, 512, 256, dim], last_relu=True)
        self.top = mlp([(tables + 1) * dim, 1024, 1024, 512, 1], last_relu=False)

    def forward(self, x: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        dense, sparse = x
        features = torch.cat([self.bottom(dense).unsqueeze(1), self.embed(sparse + self.offsets)], dim=1)
        return self.top(features.flatten(1)).squeeze(1)


def click_loss(logits: torch.Tensor, clicks: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits.float(), clicks)


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)
    torch.manual_seed(0)
    tables, rows, bs = int(p["tables"]), int(p["rows"]), int(knobs["batch_size"])
    model = ClickModel(int(p["dense"]), tables, rows, int(p["dim"])).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **common.optimizer_kwargs(knobs["optimizer_impl"], device))
    train = common.TrainStep(model, click_loss, opt, knobs, device)
    dense = torch.randn(bs, int(p["dense"]), device=device)
    sparse = torch.randint(0, rows, (bs, tables), device=device)
    clicks = torch.randint(0, 2, (bs,), device=device).float()
    return Workload(
        step=lambda _batch: train(((dense, sparse), clicks)),
        samples_per_step=bs,
        throughput_unit="samples/s",
        precision=knobs["precision"],
    )
