"""An independent, hand-written ResNet-50 training loop: the reference the tool's sweep must reach.

It imports nothing from this project: torchvision's resnet50, SGD with momentum (fused), cross-entropy, autocast,
channels_last, cudnn.benchmark and ``torch.compile`` as a user would write them. Synthetic data on the device.

    python bench/hand_loop.py --precision bf16 --batch 256 [--batch 512 ...] [--compile default] [--zero-init]
                              [--seconds 3] [--json OUT.jsonl]

Each (precision, batch) runs in this process after ``torch._dynamo.reset()``; compile time is reported apart.
Throughput = images in the timed window / its wall time (synchronized at both ends, nothing in between).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision


def run(precision: str, batch: int, compile_mode: str, zero_init: bool, seconds: float) -> dict:
    torch._dynamo.reset()
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torchvision.models.resnet50(zero_init_residual=zero_init).to(dev, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * batch / 256, momentum=0.9, fused=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    fwd = (
        model
        if compile_mode == "off"
        else torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
    )
    x = torch.randn(batch, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step() -> torch.Tensor:
        with torch.autocast("cuda", dtype=dtype):
            loss = F.cross_entropy(fwd(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    losses = []
    while True:
        losses.append(step())
        n += 1
        if n % 10 == 0:
            torch.cuda.synchronize()
            if time.perf_counter() - t0 >= seconds:
                break
    wall = time.perf_counter() - t0
    finite = bool(torch.isfinite(torch.stack(losses)).all())
    return {
        "precision": precision,
        "batch": batch,
        "compile": compile_mode,
        "zero_init": zero_init,
        "img_s": n * batch / wall,
        "steps": n,
        "first_step_s": first_s,
        "finite": finite,
        "loss_last": float(losses[-1]),
        "scale": float(scaler.get_scale()) if scaler.is_enabled() else None,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--precision", action="append", choices=("bf16", "fp16"))
    p.add_argument("--batch", type=int, action="append")
    p.add_argument("--compile", default="default")
    p.add_argument("--zero-init", action="store_true")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--json")
    a = p.parse_args()
    for precision in a.precision or ["bf16"]:
        for batch in a.batch or [256]:
            row = run(precision, batch, a.compile, a.zero_init, a.seconds)
            print(json.dumps(row), flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
