"""torchvision's ResNet-50 (random init), SGD with momentum, cross-entropy: a full training step.

Data (``workload.data``): ``synthetic`` tensors already on the device (the model alone), or ``jpeg``: a real
input pipeline (JPEG files decoded and augmented per sample, see ``workloads.data``).
Knobs: precision, memory_format, compile, cudnn_benchmark, batch_size, grad_accum_steps, optimizer_impl,
activation_checkpointing (``off``, ``all`` or the first N of the four stages), and the data-loading knobs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import torchvision

from workloads import common, parallel
from workloads.base import Workload
from workloads.spec.resnet50 import STAGES, Knobs, ResNet50Knobs, check  # noqa: F401 (the workload's contract)
from workloads.spec.typed import of


@functools.lru_cache(maxsize=8)
def _flop_counts(image_size: int, num_classes: int) -> tuple[tuple[str, float], ...]:
    """Forward + backward FLOPs of two images per aten op, counted by FlopCounterMode on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        model = torchvision.models.resnet50(num_classes=num_classes)
        x = torch.randn(2, 3, image_size, image_size)
        y = torch.zeros(2, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    return tuple((str(op), float(n)) for op, n in counter.get_flop_counts()["Global"].items())


def flops_per_sample(image_size: int, num_classes: int) -> float:
    """Forward + backward FLOPs of one image."""
    return sum(n for _, n in _flop_counts(image_size, num_classes)) / 2


def conv_flops_frac(image_size: int, num_classes: int) -> float:
    """The convolutions' share of those FLOPs (the rest: the classifier's matmuls)."""
    counts = _flop_counts(image_size, num_classes)
    return sum(n for op, n in counts if "convolution" in op) / sum(n for _, n in counts)


def _model(cfg: dict[str, Any], k: ResNet50Knobs, device: torch.device, classes: int, fmt: torch.memory_format) -> Any:
    """ResNet-50 on ``device`` in ``fmt``, its stages checkpointed as the knob says, wrapped for a distributed trial."""
    # Every residual block starts as the identity (its last BatchNorm's gamma zeroed), as large-batch and fp16
    # ResNet-50 recipes do (Goyal et al. 2017; MLPerf): with torchvision's default init the residual sums grow
    # block by block and fp16 training diverges from the first steps. All precisions use this init, so they
    # compare fairly.
    model = torchvision.models.resnet50(num_classes=classes, zero_init_residual=True)
    model = model.to(device=device, memory_format=fmt)
    ac = k.activation_checkpointing
    if ac != "off":
        common.checkpoint_blocks(model, STAGES if ac == "all" else STAGES[: int(ac)])
    return parallel.wrap(model, cfg.get("distributed"), device, blocks=[getattr(model, n) for n in STAGES])


def _inputs(
    cfg: dict[str, Any], device: torch.device, bs: int, size: int, classes: int, fmt: torch.memory_format, accum: int
) -> tuple[Callable[[], Any], Callable[[], None], Callable[[], dict[str, Any]], int, Callable[[], int | None] | None]:
    """A step's batches: ``(next_batch, close, extra_metrics, buffered_steps, ready_batches)`` of the synthetic
    tensors (the same ones every step) or of the JPEG pipeline (``workload.data``)."""
    p, knobs = cfg["workload"], cfg["knobs"]
    if p.get("data", "synthetic") == "synthetic":
        x = torch.randn(bs, 3, size, size, device=device).contiguous(memory_format=fmt)
        y = torch.randint(0, classes, (bs,), device=device)
        fixed = [(x, y)] * accum
        return (lambda: fixed), (lambda: None), dict, 0, None
    if p["data"] == "jpeg":
        from workloads import data

        pipe = data.Pipeline(
            p,
            knobs,
            batch_size=bs,
            image_size=size,
            device=device,
            memory_format=fmt,
            cache_root=f"{cfg['results_dir']}/data",
            num_classes=classes,
        )
        next_batch = lambda: [pipe.next() for _ in range(accum)]  # noqa: E731
        return next_batch, pipe.close, pipe.metrics, -(-pipe.buffered_batches // accum), pipe.ready_batches
    raise ValueError(f"workload.data must be 'synthetic' or 'jpeg', got {p['data']!r}")


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], cfg["knobs"]
    k = of(ResNet50Knobs, knobs)
    common.set_global_flags(knobs)
    bs, size, classes = int(k.batch_size), int(p.get("image_size", 224)), int(p.get("num_classes", 1000))
    fmt = common.memory_format(k.memory_format)
    torch.manual_seed(0)
    model = _model(cfg, k, device, classes, fmt)
    # Goyal et al.'s linear scaling rule: lr 0.1 per 256 images of effective batch (tiny batches stay finite).
    lr = 0.1 * bs * int(k.grad_accum_steps) / 256
    opt = torch.optim.SGD(
        model.parameters(),
        lr=lr,
        momentum=0.9,
        **common.optimizer_kwargs(k.optimizer_impl, device),
    )
    train = common.TrainStep(model, F.cross_entropy, opt, knobs, device)
    accum = train.accum
    next_batch, close, extra, buffered, ready = _inputs(cfg, device, bs, size, classes, fmt, accum)
    return Workload(
        step=train,
        next_batch=next_batch,
        samples_per_step=bs * accum,
        flops_per_step=flops_per_sample(size, classes) * bs * accum,
        throughput_unit="samples/s",
        precision=k.precision,
        conv_flops_frac=conv_flops_frac(size, classes),
        close=close,
        extra_metrics=extra,
        buffered_steps=buffered,
        ready_batches=ready,
        input_pipeline=p["data"] == "jpeg",
    )
