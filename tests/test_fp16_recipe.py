"""resnet50's fp16 recipe: zero-initialised residual BN keeps fp16 training finite from the first step (CPU).

torchvision's default initialisation overflows fp16 gradients at the GradScaler's starting scale (the first steps
are skipped while the scale halves; on the H200 the same, 2026-12-01); the workload's zero-init does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torchvision

from workloads import resnet50

pytestmark = pytest.mark.slow
CPU = torch.device("cpu")
SIZE, BATCH, CLASSES = 64, 4, 1000


def cfg(results: Path) -> dict:
    return {
        "workload": {"name": "resnet50", "data": "synthetic", "image_size": SIZE, "num_classes": CLASSES},
        "knobs": {
            "precision": "fp16",
            "memory_format": "channels_last",
            "compile": "off",
            "batch_size": BATCH,
            "grad_accum_steps": 1,
            "optimizer_impl": "foreach",
            "activation_checkpointing": "off",
        },
        "device": "cpu",
        "results_dir": str(results),
    }


def test_the_workload_trains_fp16_with_finite_loss_and_no_skipped_step(tmp_path: Path) -> None:
    work = resnet50.build(cfg(tmp_path), CPU)
    model = work.step.model
    gammas = [b.bn3.weight for stage in (model.layer1, model.layer2, model.layer3, model.layer4) for b in stage]
    assert len(gammas) == 16 and all(bool((g == 0).all()) for g in gammas), "each block starts as the identity"
    scaler = work.step.scaler
    assert scaler.is_enabled() and scaler.get_scale() == 65536.0
    losses = [work.step(work.next_batch()) for _ in range(4)]
    assert all(bool(torch.isfinite(loss)) for loss in losses)
    assert scaler.get_scale() == 65536.0, "no step was skipped for non-finite gradients"
    assert any(bool((g != 0).any()) for g in gammas), "the steps were taken: the zeroed gammas moved"


def test_torchvision_default_init_overflows_fp16_gradients_at_the_first_step() -> None:
    """The contrast that motivates the recipe: same model, data and scaler, default init."""
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=CLASSES).to(memory_format=torch.channels_last)
    scaler = torch.amp.GradScaler("cpu")
    x = torch.randn(BATCH, 3, SIZE, SIZE).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, CLASSES, (BATCH,))
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    assert bool(torch.isfinite(loss)), "the forward pass is finite: the overflow is in the scaled backward"
    finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
    assert not finite, "default init: some fp16 gradient overflows at scale 65,536"
