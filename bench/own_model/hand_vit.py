"""An independent, hand-written ViT-B/16 training loop: the reference for the sweep of bench/own_model/vit.yaml.

It imports nothing from this project: torchvision's vit_b_16, fused AdamW, cross-entropy, bf16 autocast and
``torch.compile`` as a user would write them, on synthetic images on the device.

    python bench/own_model/hand_vit.py --batch 128 [--batch 256] [--compile default] [--seconds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
import torchvision


def run(batch: int, compile_mode: str, precision: str, seconds: float) -> dict:
    torch._dynamo.reset()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = torchvision.models.vit_b_16().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    mode = None if compile_mode == "default" else compile_mode
    fwd = model if compile_mode == "off" else torch.compile(model, mode=mode)
    x = torch.randn(batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype):
            loss = F.cross_entropy(fwd(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    t0 = time.time()
    step()
    torch.cuda.synchronize()
    first_s = time.time() - t0
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(5):
            step()
        n += 5
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return {
        "kind": "hand",
        "model": "vit_b_16",
        "batch": batch,
        "compile": compile_mode,
        "precision": precision,
        "first_step_s": round(first_s, 1),
        "img_s": n * batch / wall,
    }


def main() -> None:
    a = argparse.ArgumentParser()
    a.add_argument("--batch", type=int, action="append")
    a.add_argument("--compile", default="default")
    a.add_argument("--precision", default="bf16")
    a.add_argument("--seconds", type=float, default=3.0)
    a.add_argument("--json")
    args = a.parse_args()
    for b in args.batch or [128]:
        row = run(b, args.compile, args.precision, args.seconds)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
