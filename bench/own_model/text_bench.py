"""A model this project does not ship, written as a user would from the README's "Your own model": a small text
classifier (token embeddings, a ``torch.nn.TransformerEncoder`` of ``layers`` layers, mean pooling), its batches of
token ids already on the device (no DataLoader), trained with AdamW over ``grad_accum_steps`` micro-batches, each
encoder layer optionally under activation checkpointing. Small enough for a CPU sweep:

    cd bench/own_model && knob-sweeper -cd conf +workload=text -m hydra.sweeper.timeout_s=150
"""

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads import DeviceInfo, Workload, common
from workloads.spec.training import TrainingKnobs


@dataclasses.dataclass(frozen=True)
class Knobs(TrainingKnobs):
    batch_size: int = 32
    checkpoint_layers: int = 0  # encoder layers under activation checkpointing


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


class Classifier(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, seq: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens) + self.pos).mean(dim=1))


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)
    seq, bs, layers = int(p["seq"]), int(knobs["batch_size"]), int(p["layers"])
    model = Classifier(int(p["vocab"]), int(p["width"]), layers, seq, 4).to(device)
    checkpointed = min(int(knobs["checkpoint_layers"]), layers)
    common.checkpoint_blocks(model.encoder.layers, [str(i) for i in range(checkpointed)])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, **common.optimizer_kwargs(knobs["optimizer_impl"], device))
    train = common.TrainStep(model, F.cross_entropy, opt, knobs, device)
    tokens = torch.randint(0, int(p["vocab"]), (train.accum, bs, seq), device=device)
    labels = torch.randint(0, 4, (train.accum, bs), device=device)
    batch = [(tokens[i], labels[i]) for i in range(train.accum)]
    return Workload(step=lambda _batch: train(batch), samples_per_step=bs * train.accum, precision=knobs["precision"])
