"""A recurrent model this project does not ship, written as a user would from the README's "Your own model": a
word-level LSTM language model (embedding, ``nn.LSTM``, linear head), next-token cross-entropy on synthetic tokens,
AdamW. Throughput in tokens/s.

    cd bench/zoo && knob-sweeper -cd conf +workload=zoo_lstm -m hydra.sweeper.timeout_s=300

``bench/zoo/hand_zoo.py --model lstm`` is the independent hand-written loop it is compared with.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads import DeviceInfo, Workload, common


class LSTMLanguageModel(nn.Module):
    def __init__(self, vocab: int, embed: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.rnn = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(idx))
        return self.head(out)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)
    torch.manual_seed(0)
    vocab, seq, bs = int(p["vocab"]), int(p["seq_len"]), int(knobs["batch_size"])
    model = LSTMLanguageModel(vocab, int(p["embed"]), int(p["hidden"]), int(p["layers"])).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **common.optimizer_kwargs(knobs["optimizer_impl"], device))
    train = common.TrainStep(model, next_token_loss, opt, knobs, device)
    tokens = torch.randint(0, vocab, (bs, seq + 1), device=device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return Workload(
        step=lambda _batch: train((x, y)),
        samples_per_step=bs * seq,
        throughput_unit="tokens/s",
        precision=knobs["precision"],
    )
