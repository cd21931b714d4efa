"""Each JPEG decode strategy's own speed, then with the compiled model, in one GPU call.

    python bench/decode_strategies.py OUT [--smoke] [--parts loader,trials,fp16]

Parts:
  gpu_stages  the GPU path's two stages alone, on batches of 256 files held in memory (no loader, no model): wall ms
          per batch of the batched nvJPEG decode and of the crop (gather + roi_align), the crop's span on its
          stream (CUDA events, host gaps included) and its kernel time (profiler, summed over its kernels): what
          it takes from a training step that shares the GPU.
  under_load  the GPU pipeline while the consuming thread loads the GIL, the GPU, or both (see part_under_load).
  loader  the input pipeline alone (workloads.data.Pipeline, no model): img/s of every decode strategy at batch 256
          with N workers (16 cores: 14), and the per-stage timings the pipeline records (which stage limits it).
  trials  the tool's single runs (``python -m sweeper``, one isolated trial each): the model on synthetic data
          (the reference), then the same model fed by the strategies (the inductor cache is shared, so only the
          first compiles cold).
  fp16    why torchvision's default init diverges in fp16: loss, loss scale and the largest activation per stage
          over the first steps, default init against zero-initialised residual BN (hand-written, eager).
Rows go to OUT/decode_strategies.jsonl; a table is printed last. ``--smoke`` runs tiny sizes on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STRATEGIES: dict[str, dict[str, Any]] = {
    "cpu-tv-float32": {"decode_device": "cpu", "cpu_decoder": "torchvision", "transfer_dtype": "float32"},
    "cpu-tv-uint8": {"decode_device": "cpu", "cpu_decoder": "torchvision", "transfer_dtype": "uint8"},
    "cpu-pil-uint8": {"decode_device": "cpu", "cpu_decoder": "pil", "transfer_dtype": "uint8"},
    "cpu-pil-reduced": {
        "decode_device": "cpu",
        "cpu_decoder": "pil",
        "decode_scale": "reduced",
        "transfer_dtype": "uint8",
    },
    "cpu-pil-reduced-prefetch": {
        "decode_device": "cpu",
        "cpu_decoder": "pil",
        "decode_scale": "reduced",
        "transfer_dtype": "uint8",
        "device_prefetch": True,
    },
    "gpu": {"decode_device": "cuda"},
    "hybrid-0.25": {
        "decode_device": "hybrid",
        "gpu_share": 0.25,
        "cpu_decoder": "pil",
        "decode_scale": "reduced",
        "transfer_dtype": "uint8",
    },
    "hybrid-0.5": {
        "decode_device": "hybrid",
        "gpu_share": 0.5,
        "cpu_decoder": "pil",
        "decode_scale": "reduced",
        "transfer_dtype": "uint8",
    },
    "hybrid-0.75": {
        "decode_device": "hybrid",
        "gpu_share": 0.75,
        "cpu_decoder": "pil",
        "decode_scale": "reduced",
        "transfer_dtype": "uint8",
    },
}


class Out:
    def __init__(self, out: Path) -> None:
        self.path = out / "decode_strategies.jsonl"
        self.rows: list[dict[str, Any]] = []

    def add(self, part: str, name: str, **values: Any) -> None:
        row = {"part": part, "name": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **values}
        self.rows.append(row)
        with self.path.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
        print(f"[{part}] {name}: {shown}", flush=True)


def _corpus(smoke: bool) -> dict[str, Any]:
    """The generated corpus every part reads (ImageNet-like sizes around 500x375; tiny with --smoke)."""
    return {
        "corpus_images": 64 if smoke else 2048,
        "corpus_width": 64 if smoke else 500,
        "corpus_height": 48 if smoke else 375,
        "epoch_images": 1_000_000,
    }


def _pipeline(p: dict[str, Any], knobs: dict[str, Any], bs: int, size: int, device: Any, out: Path) -> Any:
    """The tool's JPEG pipeline as a part measures it: channels_last batches, the corpus cached under OUT."""
    import torch

    from workloads import data

    return data.Pipeline(
        p,
        knobs,
        batch_size=bs,
        image_size=size,
        device=device,
        memory_format=torch.channels_last,
        cache_root=out / "results" / "data",
        num_classes=1000,
    )


def part_gpu_stages(o: Out, out: Path, smoke: bool, reps: int = 12) -> None:
    import statistics

    import torch

    from workloads import corpus, decode

    device = torch.device("cpu" if smoke else "cuda")
    p = _corpus(smoke)
    root = corpus.corpus_path(p, out / "results" / "data")
    corpus.ensure_corpus(root, p["corpus_images"], p["corpus_width"], p["corpus_height"], corpus.corpus_sizes(p))
    files = [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in sorted(root.glob("*/*.jpg"))]
    bs = 8 if smoke else 256
    gpu = decode.GpuDecode(32 if smoke else 224, device)
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    dec_ms, crop_ms, crop_gpu_ms = [], [], []
    for r in range(reps + 2):
        batch = [files[(r * bs + i) % len(files)] for i in range(bs)]
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            t0 = time.perf_counter()
            images = gpu.decode(batch)
            t1 = time.perf_counter()
            if stream is not None:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            gpu.crop(images)
            if stream is not None:
                end.record()
            decode.synchronize(device)
            t2 = time.perf_counter()
        if r >= 2:  # the first two: nvJPEG and roi_align start-up
            dec_ms.append((t1 - t0) * 1e3)
            crop_ms.append((t2 - t1) * 1e3)
            if stream is not None:
                crop_gpu_ms.append(start.elapsed_time(end))
    kernels: list[tuple[str, float]] = []
    kernel_ms = None
    if stream is not None:  # the crop's kernels, by GPU time (3 batches)
        from torch.profiler import ProfilerActivity, profile

        batch = [files[i % len(files)] for i in range(bs)]
        images = gpu.decode(batch)
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                gpu.crop(images)
            decode.synchronize(device)
        from torch.autograd import DeviceType

        events = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]  # kernels and copies only
        events.sort(key=lambda e: -e.self_device_time_total)
        kernels = [(e.key[:60], round(e.self_device_time_total / 3e3, 3)) for e in events[:12]]
        kernel_ms = sum(e.self_device_time_total for e in events) / 3e3
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15), flush=True)
    med = statistics.median
    o.add(
        "gpu_stages",
        f"batch {bs}",
        decode_ms=med(dec_ms),
        crop_ms=med(crop_ms),
        crop_span_ms=med(crop_gpu_ms) if crop_gpu_ms else None,
        crop_kernel_ms=kernel_ms,
        decode_img_s=bs / med(dec_ms) * 1e3,
        crop_img_s=bs / med(crop_ms) * 1e3,
        reps=reps,
        crop_kernels_ms=kernels,
    )


def part_under_load(o: Out, out: Path, smoke: bool, workers: int, seconds: float) -> None:
    """The GPU decode pipeline (batch 256) while the consuming thread works as a training step would, ~30 ms per
    batch: ``none`` (takes batches only), ``python`` (a pure-Python busy loop: holds the GIL, leaves the GPU idle),
    ``gpu_graph`` (replays a CUDA graph of matmuls and waits: GPU busy, no Python), ``eager`` (ResNet-50 fp16
    channels_last eager steps: both). Which of GIL and GPU sharing slows the decode and crop threads."""
    import torch
    import torchvision

    device = torch.device("cpu" if smoke else "cuda")
    p = _corpus(smoke)
    bs, size = (8, 32) if smoke else (256, 224)
    loads: dict[str, Any] = {"none": lambda images, labels: None}

    def python_load(images: Any, labels: Any) -> None:
        end = time.perf_counter() + 0.03
        while time.perf_counter() < end:
            sum(range(100))

    loads["python"] = python_load
    if not smoke:
        x = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        graph = torch.cuda.CUDAGraph()
        torch.matmul(x, x, out=y)
        torch.cuda.synchronize()
        n_mm = 1
        t0 = time.perf_counter()
        for _ in range(10):
            torch.matmul(x, x, out=y)
        torch.cuda.synchronize()
        n_mm = max(1, round(0.03 / ((time.perf_counter() - t0) / 10)))
        with torch.cuda.graph(graph):
            for _ in range(n_mm):
                torch.matmul(x, x, out=y)

        def graph_load(images: Any, labels: Any) -> None:
            graph.replay()
            torch.cuda.current_stream().synchronize()

        loads["gpu_graph"] = graph_load
        model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=True)
        scaler = torch.amp.GradScaler()

        def eager_load(images: Any, labels: Any) -> None:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        loads["eager"] = eager_load
    loads["python+switch0.5ms"] = loads["python"]  # the same loads with a 10x shorter GIL switch interval
    if "eager" in loads:
        loads["eager+switch0.5ms"] = loads["eager"]
    for name, load in loads.items():
        sys.setswitchinterval(0.0005 if "switch" in name else 0.005)
        knobs = {
            "num_workers": workers,
            "prefetch_factor": 2,
            "pin_memory": not smoke,
            "non_blocking": not smoke,
            "persistent_workers": False,
            "decode_device": "cpu" if smoke else "cuda",
            **({"cpu_decoder": "torchvision", "transfer_dtype": "uint8"} if smoke else {}),
        }
        pipe = _pipeline(p, knobs, bs, size, device, out)
        try:
            for _ in range(pipe.buffered_batches + 4):
                load(*pipe.next())
            if device.type == "cuda":
                torch.cuda.synchronize()
            side = pipe.side
            before = (side.gpu_decode_s, side.gpu_crop_s, side.batches)
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                load(*pipe.next())
                n += 1
            if device.type == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            batches = max(1, side.batches - before[2])
            o.add(
                "under_load",
                name,
                img_s=n * bs / wall,
                batches=n,
                decode_ms=(side.gpu_decode_s - before[0]) / batches * 1e3,
                crop_ms=(side.gpu_crop_s - before[1]) / batches * 1e3,
            )
        except Exception as e:  # noqa: BLE001 - one load's failure is a row; the others still run
            o.add("under_load", name, error=repr(e)[:300])
        finally:
            pipe.close()
    sys.setswitchinterval(0.005)


def part_loader(o: Out, out: Path, smoke: bool, workers: int, seconds: float, only: list[str]) -> None:
    import torch

    device = torch.device("cpu" if smoke else "cuda")
    p = _corpus(smoke)
    bs = 8 if smoke else 256
    for name, strat in STRATEGIES.items():
        if only and name not in only:
            continue
        if smoke and (strat["decode_device"] != "cpu" or strat.get("device_prefetch")):
            continue
        knobs = {
            "num_workers": workers,
            "prefetch_factor": 4,
            "pin_memory": not smoke,
            "non_blocking": not smoke,
            "persistent_workers": False,
            **strat,
        }
        pipe = _pipeline(p, knobs, bs, 32 if smoke else 224, device, out)
        try:
            for _ in range(pipe.buffered_batches + 2):
                pipe.next()
            if device.type == "cuda":
                torch.cuda.synchronize()
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                images, _ = pipe.next()
                n += 1
            if device.type == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            m = pipe.metrics()
            o.add(
                "loader",
                name,
                img_s=n * bs / wall,
                batches=n,
                **{
                    k: m[k]
                    for k in (
                        "data_decode_ms",
                        "data_augment_ms",
                        "data_transfer_ms",
                        "data_limit_stage",
                        "data_decoded_pixels_frac",
                        "data_bytes_decoded_cpu",
                        "data_bytes_decoded_gpu",
                        "data_corpus_bytes_mean",
                        "data_corpus_s",
                    )
                },
            )
        except Exception as e:  # noqa: BLE001 - one strategy's failure is a row, not the end of the bench
            o.add("loader", name, error=repr(e)[:300])
        finally:
            pipe.close()


def tool(o: Out, out: Path, name: str, overrides: list[str], timeout: float = 400) -> None:
    results = out / "results"
    before = set((results / "trials").glob("*.parquet")) if (results / "trials").exists() else set()
    cmd = [sys.executable, "-m", "sweeper", "+workload=resnet50", f"results_dir={results}", *overrides]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    except subprocess.TimeoutExpired as e:  # one stuck run must not end the other strategies' measurements
        text = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x for x in (e.stdout, e.stderr) if x)
        proc = subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout} s\n{text}")
    wall = time.perf_counter() - t0
    (out / "logs").mkdir(exist_ok=True)
    (out / "logs" / f"trial-{name}.log").write_text(proc.stdout + proc.stderr)
    import pandas as pd

    new = sorted(set((results / "trials").glob("*.parquet")) - before)
    if not new:
        o.add("trials", name, error=f"exit {proc.returncode}, no row; {proc.stderr[-300:]}", wall_s=wall)
        return
    row = pd.read_parquet(new[-1]).iloc[-1].to_dict()
    keep = (
        "status",
        "reason",
        "throughput",
        "step_ms_p50",
        "data_wait_frac",
        "gpu_util_mean",
        "mfu",
        "first_step_s",
        "peak_mem_bytes",
        "data_limit_stage",
        "data_decode_ms",
        "data_augment_ms",
        "data_transfer_ms",
        "loss_last",
    )
    o.add("trials", name, wall_s=wall, **{k: row.get(k) for k in keep if k in row})


def part_trials(o: Out, out: Path, smoke: bool, workers: int) -> None:
    model = [
        "knobs.precision=fp16",
        "knobs.memory_format=channels_last",
        "knobs.cudnn_benchmark=true",
        "knobs.optimizer_impl=fused",
        "knobs.batch_size=256",
        "knobs.compile=default",
        "measure.min_time_s=2",
    ]
    if smoke:
        model = ["knobs.precision=fp32", "knobs.batch_size=2", "knobs.compile=off", "preset=tiny", "cpu_threads=1"]
    tool(o, out, "synthetic", model)
    feed = [
        f"knobs.num_workers={workers}",
        "knobs.prefetch_factor=4",
        "knobs.pin_memory=true",
        "knobs.non_blocking=true",
    ]
    for name in ("cpu-tv-uint8", "cpu-pil-reduced-prefetch", "hybrid-0.25", "gpu"):
        if smoke and name != "cpu-tv-uint8":
            continue
        strat = [f"knobs.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in STRATEGIES[name].items()]
        if smoke:
            strat = [s for s in strat if "device_prefetch" not in s]
        tool(o, out, f"jpeg-{name}", [*model, "workload.data=jpeg", *feed, *strat])


def part_fp16(o: Out, smoke: bool) -> None:
    import torch
    import torch.nn.functional as F
    import torchvision

    dev = torch.device("cpu" if smoke else "cuda")
    bs, size, steps = (4, 64, 3) if smoke else (256, 224, 15)
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
    a.add_argument("--parts", default="loader,trials,fp16")
    a.add_argument("--workers", type=int, default=None)
    a.add_argument("--seconds", type=float, default=6.0)
    a.add_argument("--strategies", default="", help="comma-separated subset of the loader part's strategies")
    args = a.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    workers = args.workers if args.workers is not None else (2 if args.smoke else max(1, (os.cpu_count() or 2) - 2))
    o = Out(args.out)
    for part in args.parts.split(","):
        t0 = time.perf_counter()
        {
            "loader": lambda: part_loader(
                o,
                args.out,
                args.smoke,
                workers,
                1.0 if args.smoke else args.seconds,
                [s for s in args.strategies.split(",") if s],
            ),
            "trials": lambda: part_trials(o, args.out, args.smoke, workers),
            "gpu_stages": lambda: part_gpu_stages(o, args.out, args.smoke),
            "under_load": lambda: part_under_load(
                o, args.out, args.smoke, workers, 1.0 if args.smoke else args.seconds
            ),
            "fp16": lambda: part_fp16(o, args.smoke),
        }[part]()
        print(f"== part {part}: {time.perf_counter() - t0:.0f} s", flush=True)
    print("\n| part | name | img/s | limit | wait | util |")
    for r in o.rows:
        v = r.get("img_s") or r.get("throughput")
        print(
            f"| {r['part']} | {r['name']} | {v if v is None else round(v)} | {r.get('data_limit_stage', '')} | "
            f"{r.get('data_wait_frac', '')} | {r.get('gpu_util_mean', '')} | {r.get('error', r.get('status', ''))}"
        )


if __name__ == "__main__":
    main()
