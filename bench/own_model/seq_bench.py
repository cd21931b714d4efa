"""A model this project does not ship, written as a user would from the README's "Your own model": a GRU over
token sequences of varying length (each batch padded to its longest sequence, as a collate function does), fed by
a DataLoader, trained with AdamW. Its compiled step sees a new sequence length at each batch. Small enough for a
CPU sweep:

    cd bench/own_model && knob-sweeper -cd conf +workload=seq -m hydra.sweeper.timeout_s=150
"""

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from workloads import DeviceInfo, Workload, common


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


class Sequences(Dataset):
    """``n`` sequences of token ids, lengths drawn between ``shortest`` and ``longest``, each with a label."""

    def __init__(self, n: int, vocab: int, shortest: int, longest: int) -> None:
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(shortest, longest + 1, (n,), generator=g)
        self.items = [(torch.randint(1, vocab, (int(n_),), generator=g), int(i % 3)) for i, n_ in enumerate(lengths)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.items[i]


def pad(batch: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = nn.utils.rnn.pad_sequence([t for t, _ in batch], batch_first=True)
    return tokens, torch.tensor([y for _, y in batch])


class Classifier(nn.Module):
    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width, padding_idx=0)
        self.gru = nn.GRU(width, width, batch_first=True)
        self.head = nn.Linear(width, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.embed(tokens))
        return self.head(out.mean(dim=1))


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)
    bs = int(knobs["batch_size"])
    model = Classifier(int(p["vocab"]), int(p["width"])).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **common.optimizer_kwargs(knobs["optimizer_impl"], device))
    train = common.TrainStep(model, F.cross_entropy, opt, knobs, device)
    data = Sequences(2048, int(p["vocab"]), int(p["shortest"]), int(p["longest"]))
    workers = int(knobs["num_workers"])
    loader = DataLoader(data, batch_size=bs, shuffle=True, drop_last=True, num_workers=workers, collate_fn=pad)
    state = {"it": iter(loader)}

    def next_batch():
        try:
            x, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            x, y = next(state["it"])
        return x.to(device), y.to(device)

    return Workload(
        step=train,
        samples_per_step=bs,
        next_batch=next_batch,
        precision=knobs["precision"],
        input_pipeline=True,
        buffered_steps=workers * 2,
    )
