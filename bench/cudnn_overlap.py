"""Can cuDNN's benchmark run while ``torch.compile`` compiles? An experiment on one model, in one GPU call.

A compiled trial with ``cudnn_benchmark`` on pays, in its first step, the compile (CPU work: Dynamo, AOTAutograd,
Inductor) and then cuDNN's benchmark of every convolution the compiled graph runs (GPU work), one after the other:
on an H100 DeepLabV3-MobileNetV3 at batch 128 spent 56-60 s compiling and 62-75 s benchmarking. cuDNN's benchmark
cache is one per process, keyed by each convolution's shapes, strides, dtype and parameters, not by who called it;
an eager forward and backward of a copy of the model, in a thread started before the compiled model's first call,
could fill it while the compile runs, so that the compiled graph finds its algorithms chosen.

Each arm runs in a fresh process (a fresh cuDNN cache) with a fresh inductor cache (a cold compile):

* ``serial``: what a compiled trial does today: the compiled model's first step, then the measured steps;
* ``overlap``: the same, with a copy of the model (``copy.deepcopy``, the same dtype and memory format) run once
  eagerly, forward and ``torch.autograd.grad`` (no ``.grad`` written), in a thread started just before the first
  step; the compiled graph's first run waits for the thread (``torch._dynamo.callback``'s end-of-compile callback
  joins it), so that the two never benchmark on the GPU at the same time;
* ``tool`` and ``tool-serial``: the same model through the project's own training step
  (``workloads.common.TrainStep``), with and without its priming (``workloads.prime``, ``prime_cudnn``): the arms
  that import the project. Its compiled graph holds the loss too, so compare ``tool`` with ``tool-serial``, and
  ``overlap`` with ``serial``, never across the pairs.

Each prints one JSON line: the first step's seconds, the compilers' seconds (Dynamo's own count), the priming
thread's seconds and how long the first run waited for it, and samples/s over the measured steps afterwards (the
same algorithms chosen should give the same speed), and the peak memory of the first step (the priming's
included) and of the steps after. The serial and overlap arms are written independently of the project's code.

    python bench/cudnn_overlap.py OUT.jsonl [--batch 128] [--size 512] [--steps 20] [--arms tool-serial tool]
    python bench/cudnn_overlap.py OUT.jsonl --device cpu --tiny   # a CPU check of the script (no cuDNN)
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time


def _setup(args: argparse.Namespace) -> tuple:
    """The model (channels_last, cuDNN's benchmark on), its fused AdamW, one batch on the device."""
    import torch
    import torchvision

    dev = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    fmt = torch.channels_last
    model = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=args.classes, aux_loss=False
    ).to(device=dev, memory_format=fmt)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=dev.type == "cuda")
    x = torch.randn(args.batch, 3, args.size, args.size, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, args.classes, (args.batch, args.size, args.size), device=dev)
    return dev, model, opt, x, y


def _sync(dev: object) -> None:
    import torch

    if getattr(dev, "type", None) == "cuda":
        torch.cuda.synchronize()


def _overlap_thread(model: object, x: object, y: object, dev: object, primed: dict, t0: list) -> threading.Thread:
    """The overlap arm's priming thread, and Dynamo's end-of-compile callback that joins it (not started yet)."""
    import torch
    import torch.nn.functional as F

    twin = copy.deepcopy(model)

    def prime() -> None:
        t = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(twin(x.clone())["out"], y)
        torch.autograd.grad(loss, [p for p in twin.parameters() if p.requires_grad])
        _sync(dev)
        primed["prime_s"] = time.perf_counter() - t

    thread = threading.Thread(target=prime, name="cudnn-prime", daemon=True)

    def join(*_args: object) -> None:
        if thread.is_alive():
            t = time.perf_counter()
            thread.join()
            primed["waited_s"] = primed.get("waited_s", 0.0) + time.perf_counter() - t
        primed.setdefault("compile_end_at_s", time.perf_counter() - t0[0])

    torch._dynamo.callback.callback_handler.register_end_callback(join)
    return thread


def _step(args: argparse.Namespace, model: object, opt: object, x: object, y: object, dev: object) -> tuple:
    """One training step of the arm, and the project's TrainStep where the arm uses it (else None)."""
    import torch
    import torch.nn.functional as F

    if args.arm in ("tool", "tool-serial"):  # the project's training step (workloads.common.TrainStep)
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from workloads import common

        knobs = {"precision": "bf16", "compile": "default", "grad_accum_steps": 1, "cudnn_benchmark": True}
        loss_fn = lambda out, t: F.cross_entropy(out["out"], t)  # noqa: E731
        train = common.TrainStep(model, loss_fn, opt, knobs, dev, prime_cudnn=args.arm == "tool")
        return (lambda: train((x, y))), train
    compiled = torch.compile(model)

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(compiled(x)["out"], y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, None


def _child(args: argparse.Namespace) -> dict:
    import torch

    dev, model, opt, x, y = _setup(args)
    cuda = dev.type == "cuda"
    primed: dict[str, float] = {}
    t0 = [0.0]
    thread = _overlap_thread(model, x, y, dev, primed, t0) if args.arm == "overlap" else None
    step, train = _step(args, model, opt, x, y, dev)
    t0[0] = time.perf_counter()
    if thread is not None:
        thread.start()
    step()
    _sync(dev)
    first = time.perf_counter() - t0[0]
    if train is not None:
        primed.update({k: v for k, v in (train.primed or {}).items() if isinstance(v, float)})
    if thread is not None:
        thread.join()
    gib = 2.0**30
    peak_first = torch.cuda.max_memory_allocated() / gib if cuda else None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        step()
    _sync(dev)
    t = time.perf_counter()
    for _ in range(args.steps):
        step()
    _sync(dev)
    took = time.perf_counter() - t
    try:  # Dynamo's own count of its compilers' seconds (a private helper: None where it is missing)
        compiler_s = float(torch._dynamo.utils.calculate_time_spent()["total_wall_time"])
    except Exception:  # noqa: BLE001
        compiler_s = None
    return {"arm": args.arm, "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
            "batch": args.batch, "size": args.size, "first_step_s": round(first, 2),
            "compiler_s": round(compiler_s, 2) if compiler_s is not None else None,
            **{k: round(v, 2) for k, v in primed.items()},
            "samples_s": round(args.steps * args.batch / took, 1),
            "peak_first_gib": peak_first and round(peak_first, 2),
            "peak_steady_gib": round(torch.cuda.max_memory_allocated() / gib, 2) if cuda else None}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--classes", type=int, default=21)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="64 px, batch 2, 2 steps: a check of the script")
    arms = ["serial", "overlap", "tool", "tool-serial"]
    ap.add_argument("--arms", nargs="+", default=["tool-serial", "tool"], choices=arms)
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tiny:
        args.size, args.batch, args.steps, args.classes = 64, 2, 2, 4
    if args.arm:
        print(json.dumps(_child(args)), flush=True)
        return
    for arm in args.arms:
        with tempfile.TemporaryDirectory(prefix=f"inductor-{arm}-") as cache:
            cmd = [sys.executable, __file__, "--arm", arm, "--batch", str(args.batch), "--size", str(args.size),
                   "--classes", str(args.classes), "--steps", str(args.steps), "--device", args.device]  # fmt: skip
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
            t = time.perf_counter()
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            row = json.loads(lines[-1]) if lines else {"arm": arm, "error": done.stderr[-2000:]}
            row["process_s"] = round(time.perf_counter() - t, 1)
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
