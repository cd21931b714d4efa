"""A model this project does not ship, written as a user would from the README's "Your own model": a click model
over tabular rows (dense features and categorical ids, a batch a dict of tensors), embedding tables pooled per
field, an interaction of its own choosing (``interaction``: concatenation or pairwise dot products), an MLP head,
binary cross-entropy, gradients clipped before each optimizer step (``before_step``), and the last loss reported as
a metric of its own. Small enough for a CPU sweep:

    cd bench/own_model && knob-sweeper -cd conf +workload=tab -m hydra.sweeper.timeout_s=150
"""

import dataclasses
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from workloads import DeviceInfo, Workload, common
from workloads.spec.training import TrainingKnobs

METRICS = ("last_loss",)


@dataclasses.dataclass(frozen=True)
class Knobs(TrainingKnobs):
    batch_size: int = 256
    interaction: Literal["cat", "dot"] = "cat"


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


class ClickModel(nn.Module):
    def __init__(self, dense: int, fields: int, rows: int, dim: int, interaction: str) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(fields))
        self.bottom = nn.Sequential(nn.Linear(dense, 128), nn.ReLU(), nn.Linear(128, dim), nn.ReLU())
        self.interaction = interaction
        n = fields + 1
        width = n * dim if interaction == "cat" else n * (n - 1) // 2 + dim
        self.top = nn.Sequential(nn.Linear(width, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        d = self.bottom(batch["dense"])
        ids = batch["ids"]  # (batch, fields, hot)
        pooled = [t(ids[:, i]) for i, t in enumerate(self.tables)]
        feats = torch.stack([d, *pooled], dim=1)  # (batch, fields + 1, dim)
        if self.interaction == "cat":
            z = feats.flatten(1)
        else:
            dots = feats @ feats.transpose(1, 2)
            i, j = torch.triu_indices(feats.shape[1], feats.shape[1], 1, device=feats.device)
            z = torch.cat([d, dots[:, i, j]], dim=1)
        return self.top(z).squeeze(1)


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)
    bs, fields, rows, hot = int(knobs["batch_size"]), int(p["fields"]), int(p["rows"]), int(p["hot"])
    model = ClickModel(int(p["dense"]), fields, rows, int(p["dim"]), knobs["interaction"]).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **common.optimizer_kwargs(knobs["optimizer_impl"], device))
    loss_fn = lambda out, y: F.binary_cross_entropy_with_logits(out.float(), y)  # noqa: E731
    train = common.TrainStep(model, loss_fn, opt, knobs, device, before_step=lambda t: t.clip_grad_norm_(1.0))
    g = torch.Generator().manual_seed(0)
    micro = []
    for _ in range(train.accum):
        x = {
            "dense": torch.randn(bs, int(p["dense"]), generator=g).to(device),
            "ids": torch.randint(0, rows, (bs, fields, hot), generator=g).to(device),
        }
        micro.append((x, torch.randint(0, 2, (bs,), generator=g).float().to(device)))
    last: dict[str, torch.Tensor] = {}

    def step(_batch: Any) -> torch.Tensor:
        last["loss"] = train(micro)
        return last["loss"]

    return Workload(
        step=step,
        samples_per_step=bs * train.accum,
        precision=knobs["precision"],
        extra_metrics=lambda: {"last_loss": float(last["loss"])} if "loss" in last else {},
    )
