"""Checks of the baseline the tool measures against, in one GPU call.

    python bench/baseline_checks.py OUT [--smoke] [--parts defaults,fp16]

Parts:
  defaults  the JPEG workload as it ships (the baseline) and with strict fp32, one single run each (``python -m
            sweeper`` through bench/decode_strategies.py's ``tool``: its rows are of part ``trials``).
  fp16      why torchvision's default init diverges in fp16: loss, loss scale and the largest activation per stage
            over the first steps, default init against zero-initialised residual BN (hand-written, eager).
Rows go to OUT/baseline_checks.jsonl (the row format of bench/decode_strategies.py); a table is printed last.
``--smoke`` runs tiny sizes on the CPU. Both were parts of bench/decode_strategies.py before (same names).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_strategies import Out, print_table, tool  # noqa: E402 (after the path set-up above)


def part_defaults(o: Out, out: Path, smoke: bool) -> None:
    """The JPEG workload as it ships (the baseline: fp32 as PyTorch ships it, 0 workers) and the same with strict
    fp32 (cuDNN TF32 off, the baseline's setting before 2026-12-01), one trial each."""
    tiny = ["preset=tiny", "cpu_threads=1"] if smoke else []
    for precision in ("fp32", "fp32-strict"):
        tool(o, out, f"jpeg-defaults-{precision}", ["workload.data=jpeg", f"knobs.precision={precision}", *tiny])


def part_fp16(o: Out, smoke: bool) -> None:
    import torch
    import torch.nn.functional as F
    import torchvision

    dev = torch.device("cpu" if smoke else "cuda")
    # smoke: small enough for a CPU, big enough that zero-init keeps the starting scale (smaller inputs overflow)
    bs, size, steps = (2, 64, 3) if smoke else (256, 224, 15)
    for zero_init in (False, True):
        torch.manual_seed(0)
        model = torchvision.models.resnet50(zero_init_residual=zero_init).to(dev, memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.1 * bs / 256, momentum=0.9)
        scaler = torch.amp.GradScaler(dev.type)
        x = torch.randn(bs, 3, size, size, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (bs,), device=dev)
        acts: dict[str, float] = {}
        hooks = [
            getattr(model, n).register_forward_hook(
                lambda _m, _i, out, n=n: acts.__setitem__(n, float(out.detach().float().abs().max()))
            )
            for n in ("layer1", "layer2", "layer3", "layer4", "fc")
        ]
        grads: dict[str, float] = {}  # largest |d loss / d output| of each stage, loss-scaled, in fp32
        hooks += [
            getattr(model, n).register_full_backward_hook(
                lambda _m, _gi, go, n=n: grads.__setitem__(n, float(go[0].detach().float().abs().max()))
            )
            for n in ("layer1", "layer2", "layer3", "layer4", "fc")
        ]
        trace = []
        for i in range(steps):
            with torch.autocast(dev.type, dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            grads_finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            trace.append(
                {
                    "step": i,
                    "loss": float(loss.detach()),
                    "scale": scaler.get_scale(),
                    "grads_finite": grads_finite,
                    "max_act": dict(acts),
                    "max_grad_out": dict(grads),
                }
            )
        for h in hooks:
            h.remove()
        o.add(
            "fp16",
            f"zero_init={zero_init}",
            first=trace[0],
            last=trace[-1],
            losses=[round(t["loss"], 3) for t in trace],
            scales=[t["scale"] for t in trace],
        )


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("out", type=Path)
    a.add_argument("--smoke", action="store_true")
    a.add_argument("--parts", default="defaults,fp16")
    args = a.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    o = Out(args.out, "baseline_checks.jsonl")
    for part in args.parts.split(","):
        t0 = time.perf_counter()
        {
            "defaults": lambda: part_defaults(o, args.out, args.smoke),
            "fp16": lambda: part_fp16(o, args.smoke),
        }[part]()
        print(f"== part {part}: {time.perf_counter() - t0:.0f} s", flush=True)
    print_table(o.rows)


if __name__ == "__main__":
    main()
