"""A model this project does not ship, written as a user would from the README's "Your own model": a small 1-D
convolution net over raw audio-length signals, fed by a DataLoader from memory (its workers and pinned memory are
knobs), trained with AdamW, knobs applied by the package's helpers. Small enough for a CPU sweep:

    cd bench/own_model && knob-sweeper -cd conf +workload=audio -m hydra.sweeper.timeout_s=120
"""

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from workloads import DeviceInfo, Workload, common


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)
    ch, n, bs = int(p["channels"]), int(p["samples"]), int(knobs["batch_size"])
    blocks = [m for c in (1, ch, ch) for m in (nn.Conv1d(c, ch, 9, stride=4), nn.BatchNorm1d(ch), nn.ReLU())]
    model = nn.Sequential(*blocks, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(ch, 12)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **common.optimizer_kwargs(knobs["optimizer_impl"], device))
    train = common.TrainStep(model, F.cross_entropy, opt, knobs, device)
    data = TensorDataset(torch.randn(2048, 1, n), torch.randint(0, 12, (2048,)))
    workers, pin = int(knobs["num_workers"]), bool(knobs["pin_memory"]) and device.type == "cuda"
    loader = DataLoader(data, batch_size=bs, shuffle=True, drop_last=True, num_workers=workers, pin_memory=pin)
    state = {"it": iter(loader)}

    def next_batch():
        try:
            x, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            x, y = next(state["it"])
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    return Workload(
        step=train,
        samples_per_step=bs,
        next_batch=next_batch,
        precision=knobs["precision"],
        input_pipeline=True,
        buffered_steps=workers * 2,  # the DataLoader's default prefetch_factor
    )
