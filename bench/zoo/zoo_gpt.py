"""A decoder-only language model this project does not ship, written as a user would from the README's "Your own
model": token and position embeddings, pre-norm causal ``nn.TransformerEncoder`` layers and a linear head, trained
with next-token cross-entropy on synthetic tokens with AdamW. Throughput in tokens/s.

    cd bench/zoo && knob-sweeper -cd conf +workload=zoo_gpt -m hydra.sweeper.timeout_s=300

``bench/zoo/hand_zoo.py --model gpt`` is the independent hand-written loop it is compared with.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads import DeviceInfo, Workload, common


class Decoder(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq_len, width)
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        h = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(self.norm(h))


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)
    torch.manual_seed(0)
    vocab, seq, bs = int(p["vocab"]), int(p["seq_len"]), int(knobs["batch_size"])
    model = Decoder(vocab, int(p["width"]), int(p["depth"]), int(p["heads"]), seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, **common.optimizer_kwargs(knobs["optimizer_impl"], device))
    train = common.TrainStep(model, next_token_loss, opt, knobs, device)
    tokens = torch.randint(0, vocab, (bs, seq + 1), device=device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return Workload(
        step=lambda _batch: train((x, y)),
        samples_per_step=bs * seq,
        throughput_unit="tokens/s",
        precision=knobs["precision"],
    )
