"""A stack of GPT-style pre-norm blocks (causal SDPA attention, 4x GELU MLP); a full AdamW training step.

Knobs: precision, compile, batch_size, grad_accum_steps, optimizer_impl, activation_checkpointing (per layer),
sdpa_backend (flash, efficient, cudnn, math, or auto). FLOPs come from FlopCounterMode on the meta device.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads import common, parallel
from workloads.base import Workload
from workloads.spec.transformer_block import (  # noqa: F401 (the workload's contract)
    SDPA_BACKENDS,
    Knobs,
    TransformerBlockKnobs,
    check,
)
from workloads.spec.typed import of


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model, bias=False)
        self.out = nn.Linear(4 * d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Stack(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_layers: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[Block(d_model, n_heads) for _ in range(n_layers)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def _mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out.float(), target.float())


def sdpa_context(backend: str) -> contextlib.AbstractContextManager:
    if backend not in SDPA_BACKENDS:
        raise ValueError(f"sdpa_backend must be one of {SDPA_BACKENDS}, got {backend!r}")
    if backend == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel([names[backend]])


RECIPE = {  # a literal, read from the source by the report (see workloads.common.RECIPE for the spelling)
    "sdpa_backend": {
        "auto": [],
        "flash": ["from torch.nn.attention import SDPBackend, sdpa_kernel",
                 "with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # around each training step",
                 "    loss = train_step(batch)"],
        "efficient": ["from torch.nn.attention import SDPBackend, sdpa_kernel",
                     "with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):  # around each training step",
                     "    loss = train_step(batch)"],
        "cudnn": ["from torch.nn.attention import SDPBackend, sdpa_kernel",
                 "with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):  # around each training step",
                 "    loss = train_step(batch)"],
        "math": ["from torch.nn.attention import SDPBackend, sdpa_kernel",
                "with sdpa_kernel([SDPBackend.MATH]):  # around each training step",
                "    loss = train_step(batch)"],
    },
}


def flops_by_op(p: dict[str, Any], batch: int) -> dict[str, float]:
    """Model FLOPs of forward + backward for one micro-batch per aten op, counted by FlopCounterMode on the meta
    device. There SDPA runs its math path: attention is the ``bmm`` ops (QK^T and PV, full, not causal-halved),
    the linear layers ``mm``/``addmm``."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = Stack(int(p["d_model"]), int(p["n_heads"]), int(p["n_layers"]))
        x = torch.randn(batch, int(p["seq_len"]), int(p["d_model"]))
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return {str(op): float(n) for op, n in counter.get_flop_counts()["Global"].items()}


def flops_per_step(p: dict[str, Any], batch: int) -> float:
    """Model FLOPs of forward + backward for one micro-batch (:func:`flops_by_op`, summed)."""
    return sum(flops_by_op(p, batch).values())


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    k = of(TransformerBlockKnobs, knobs)
    common.set_global_flags(knobs)
    d, heads, layers, seq = int(p["d_model"]), int(p["n_heads"]), int(p["n_layers"]), int(p["seq_len"])
    if d % heads:
        raise ValueError(f"workload.d_model ({d}) must be divisible by workload.n_heads ({heads})")
    bs = int(k.batch_size)
    torch.manual_seed(0)
    model = Stack(d, heads, layers).to(device)
    ac = k.activation_checkpointing
    if ac != "off":
        n = layers if ac == "all" else int(ac)
        common.checkpoint_blocks(model.layers, [str(i) for i in range(min(n, layers))])
    model = parallel.wrap(model, cfg.get("distributed"), device, blocks=list(model.layers))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **common.optimizer_kwargs(k.optimizer_impl, device))
    train = common.TrainStep(model, _mse, opt, knobs, device)
    accum = train.accum
    x = torch.randn(accum, bs, seq, d, device=device)
    y = torch.randn(accum, bs, seq, d, device=device)
    batch = [(x[i], y[i]) for i in range(accum)]
    backend = k.sdpa_backend

    def step(_batch: Any) -> torch.Tensor:
        with sdpa_context(backend):
            return train(batch)

    return Workload(step=step, samples_per_step=bs * accum, flops_per_step=flops_per_step(p, bs) * accum,
                    throughput_unit="samples/s", precision=k.precision)
