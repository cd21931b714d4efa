"""Your own model, swept by knob-sweeper without touching the installed package: a small MLP training step.

A workload module defines ``build(cfg, device) -> Workload`` (and optionally ``check(cfg, device)``). The knob
helpers are the package's own (``workloads.common``), so precision, compile and the optimizer implementation mean
here exactly what they mean for the built-in workloads. Its YAML is ``conf/workload/mlp.yaml``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads import DeviceInfo, Workload, common


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    """Why this configuration cannot run on ``device``, or None: a sampled configuration is then skipped before
    launch; a single run (or a value a sweep fixes) is refused as bad input, exit 2."""
    return common.check_common(cfg["knobs"], device)


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    common.set_global_flags(knobs)  # TF32 and cudnn.benchmark, as the knobs say
    torch.manual_seed(0)
    width, depth, bs = int(p["width"]), int(p["depth"]), int(knobs["batch_size"])
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10)).to(device)
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-3, **common.optimizer_kwargs(knobs.get("optimizer_impl", "foreach"), device)
    )
    # autocast, GradScaler, compile, accumulation; clip_grad_norm_ between backward and the optimizer (unscaled)
    train = common.TrainStep(model, F.cross_entropy, opt, knobs, device, before_step=lambda t: t.clip_grad_norm_(1.0))
    x = torch.randn(bs, width, device=device)
    y = torch.randint(0, 10, (bs,), device=device)
    flops = 6.0 * bs * sum(m.weight.numel() for m in model if isinstance(m, nn.Linear))  # fwd + bwd
    return Workload(
        step=lambda _batch: train((x, y)),
        samples_per_step=bs,
        flops_per_step=flops,
        throughput_unit="samples/s",
        precision=knobs.get("precision", "fp32"),
    )
