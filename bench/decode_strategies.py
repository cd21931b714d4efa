"""Each JPEG decode strategy's own speed, then with the compiled model, in one GPU call.

    python bench/decode_strategies.py OUT [--smoke] [--parts loader,trials]

Parts:
  gpu_stages  the GPU path's two stages alone, for each GPU decoder (--gpu-decoders), on batches of 256 files held
          in memory (no loader, no model): wall ms per batch of the batched decode and of the crop (gather +
          roi_align), the crop's span on its stream (CUDA events, host gaps included) and its kernel time
          (profiler, summed over its kernels): what it takes from a training step that shares the GPU; and a
          Python thread's pace while the decode runs, against its idle pace (1.0: the decode leaves the GIL).
  under_load  the GPU pipeline while the consuming thread loads the GIL, the GPU, or both (see part_under_load),
          for each GPU decoder; also the load's own ms per batch, with the pipeline running and alone.
  loader  the input pipeline alone (workloads.data.Pipeline, no model): img/s of every decode strategy at batch 256
          with N workers (16 cores: 14), and the per-stage timings the pipeline records (which stage limits it).
  trials  the tool's single runs (``python -m sweeper``, one isolated trial each): the model on synthetic data
          (the reference), then the same model fed by the strategies (the inductor cache is shared, so only the
          first compiles cold); --model and --trial-strategies choose them (NAME@KEY=VALUE@...: a strategy with
          more overrides; ``synthetic@...``: the model on synthetic data again with them).
Rows go to OUT/decode_strategies.jsonl; a table is printed last. ``--smoke`` runs tiny sizes on the CPU.
The shipping baseline and the fp16 initialisation check (once parts ``defaults`` and ``fp16`` here) are in
bench/baseline_checks.py, which reuses this script's ``Out`` and ``tool``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
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
    "gpu-nvimgcodec": {"decode_device": "cuda", "gpu_decoder": "nvimgcodec"},
    "gpu-nvimgcodec-roi": {"decode_device": "cuda", "gpu_decoder": "nvimgcodec", "gpu_roi_decode": True},
    "hybrid-0.5-nvimgcodec": {
        "decode_device": "hybrid",
        "gpu_share": 0.5,
        "gpu_decoder": "nvimgcodec",
        "cpu_decoder": "torchvision",
        "transfer_dtype": "uint8",
    },
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
    # the hybrid split fed by torchvision's CPU decoder (uint8 transfer), with its own worker count, and with the
    # workers at niceness 10 ("-nice10": worker_nice, so one call can measure it against 0)
    **{
        f"hybrid-{share}-tv-w{w}{'-nice10' if nice else ''}": {
            "decode_device": "hybrid",
            "gpu_share": share,
            "cpu_decoder": "torchvision",
            "transfer_dtype": "uint8",
            "num_workers": w,
            "worker_nice": nice,
        }
        for share in (0.5, 0.625, 0.75)
        for w in (8, 12, 14)
        for nice in (0, 10)
    },
    # the CPU's images cropped on the GPU (augment_device=cuda: the workers only decode and cut out the window)
    **{
        f"hybrid-{share}-gpucrop-w{w}": {
            "decode_device": "hybrid",
            "gpu_share": share,
            "cpu_decoder": "torchvision",
            "augment_device": "cuda",
            "transfer_dtype": "uint8",
            "num_workers": w,
            "worker_nice": 10,
        }
        for share in (0.25, 0.375, 0.5)
        for w in (12, 14)
    },
    "cpu-gpucrop-w14": {
        "decode_device": "cpu",
        "augment_device": "cuda",
        "transfer_dtype": "uint8",
        "num_workers": 14,
        "worker_nice": 10,
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
    """The rows of one bench script: each appended to ``OUT/<file>`` as a JSON line and printed."""

    def __init__(self, out: Path, file: str = "decode_strategies.jsonl") -> None:
        self.path = out / file
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


def _gpu_decoders(names: str) -> list[tuple[str, str, bool]]:
    """``torchvision,nvimgcodec,nvimgcodec+roi`` -> (name, decoder, roi) for each installed decoder."""
    from workloads import decode

    chosen = []
    for name in [n for n in names.split(",") if n]:
        decoder, roi = name.removesuffix("+roi"), name.endswith("+roi")
        if decoder == "nvimgcodec" and decode.nvimgcodec_missing():
            print(f"skipping {name}: {decode.nvimgcodec_missing()}", flush=True)
            continue
        chosen.append((name, decoder, roi))
    return chosen


def part_gpu_stages(o: Out, out: Path, smoke: bool, decoders: str, reps: int = 12) -> None:
    for name, decoder, roi in _gpu_decoders(decoders):
        try:
            _gpu_stages(o, out, smoke, name, decoder, roi, reps)
        except Exception as e:  # noqa: BLE001 - one decoder's failure is a row; the others still run
            o.add("gpu_stages", name, error=repr(e)[:300])


def _gpu_stages(o: Out, out: Path, smoke: bool, name: str, decoder: str, roi: bool, reps: int) -> None:
    import statistics

    import torch

    from workloads import corpus, decode

    device = torch.device("cpu" if smoke else "cuda")
    p = _corpus(smoke)
    root = corpus.corpus_path(p, out / "results" / "data")
    corpus.ensure_corpus(root, p["corpus_images"], p["corpus_width"], p["corpus_height"], corpus.corpus_sizes(p))
    files = [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in sorted(root.glob("*/*.jpg"))]
    bs = 8 if smoke else 256
    gpu = decode.GpuDecode(32 if smoke else 224, device, decoder, roi)
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    dec_ms, crop_ms, crop_gpu_ms = [], [], []
    for r in range(reps + 2):
        batch = [files[(r * bs + i) % len(files)] for i in range(bs)]
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            t0 = time.perf_counter()
            decoded = gpu.decode(batch)
            t1 = time.perf_counter()
            if stream is not None:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            gpu.crop(decoded)
            if stream is not None:
                end.record()
            decode.synchronize(device)
            t2 = time.perf_counter()
        if r >= 2:  # the first two: nvJPEG and roi_align start-up
            dec_ms.append((t1 - t0) * 1e3)
            crop_ms.append((t2 - t1) * 1e3)
            if stream is not None:
                crop_gpu_ms.append(start.elapsed_time(end))
    # does the decode call leave the GIL to other threads (the training step, the crop thread)? A Python thread's
    # counting pace while this thread decodes, against its pace while this thread sleeps
    paces = []
    for work in (lambda: time.sleep(0.02), lambda: gpu.decode(files[:bs])):
        count, stop = [0], threading.Event()

        def counter() -> None:
            while not stop.is_set():
                count[0] += 1

        th = threading.Thread(target=counter)
        th.start()
        t0 = time.perf_counter()
        for _ in range(5):
            work()
        decode.synchronize(device)
        paces.append(count[0] / (time.perf_counter() - t0))
        stop.set()
        th.join()
    kernels: list[tuple[str, float]] = []
    kernel_ms = None
    if stream is not None:  # the crop's kernels, by GPU time (3 batches)
        from torch.profiler import ProfilerActivity, profile

        batch = [files[i % len(files)] for i in range(bs)]
        decoded = gpu.decode(batch)
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                gpu.crop(decoded)
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
        f"{name} batch {bs}",
        decode_ms=med(dec_ms),
        crop_ms=med(crop_ms),
        crop_span_ms=med(crop_gpu_ms) if crop_gpu_ms else None,
        crop_kernel_ms=kernel_ms,
        python_pace_while_decoding=paces[1] / paces[0],
        decode_img_s=bs / med(dec_ms) * 1e3,
        crop_img_s=bs / med(crop_ms) * 1e3,
        reps=reps,
        crop_kernels_ms=kernels,
    )


def part_under_load(
    o: Out, out: Path, smoke: bool, workers: int, seconds: float, decoders: str, only_loads: str = ""
) -> None:
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
    decoder_list = [("torchvision", "torchvision", False)] if smoke else _gpu_decoders(decoders)
    for dec_name, decoder, roi in decoder_list:
        for load_name, load in loads.items():
            if (decoder != "torchvision" and "switch" in load_name) or (
                only_loads and load_name not in only_loads.split(",")
            ):
                continue
            name = load_name if dec_name == "torchvision" else f"{dec_name}/{load_name}"
            sys.setswitchinterval(0.0005 if "switch" in load_name else 0.005)
            knobs = {
                "num_workers": workers,
                "prefetch_factor": 2,
                "pin_memory": not smoke,
                "non_blocking": not smoke,
                "persistent_workers": False,
                "decode_device": "cpu" if smoke else "cuda",
                **({"cpu_decoder": "torchvision", "transfer_dtype": "uint8"} if smoke else {}),
                **({} if smoke else {"gpu_decoder": decoder, "gpu_roi_decode": roi}),
            }
            pipe = _pipeline(p, knobs, bs, size, device, out)
            try:
                images, labels = pipe.next()
                for _ in range(pipe.buffered_batches + 4):
                    load(*pipe.next())
                if device.type == "cuda":
                    torch.cuda.synchronize()
                side = pipe.side
                before = (side.gpu_decode_s, side.gpu_crop_s, side.batches)
                n, in_load, t0 = 0, 0.0, time.perf_counter()
                while time.perf_counter() - t0 < seconds:
                    batch = pipe.next()
                    t1 = time.perf_counter()
                    load(*batch)
                    in_load += time.perf_counter() - t1
                    n += 1
                if device.type == "cuda":
                    torch.cuda.synchronize()
                wall = time.perf_counter() - t0
                batches = max(1, side.batches - before[2])
                pipe.close()
                # the same load alone, on one batch held still: what the pipeline's threads cost it
                m, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < min(seconds, 3.0):
                    load(images, labels)
                    m += 1
                if device.type == "cuda":
                    torch.cuda.synchronize()
                o.add(
                    "under_load",
                    name,
                    img_s=n * bs / wall,
                    batches=n,
                    decode_ms=(side.gpu_decode_s - before[0]) / batches * 1e3,
                    crop_ms=(side.gpu_crop_s - before[1]) / batches * 1e3,
                    load_ms=in_load / max(1, n) * 1e3,
                    load_alone_ms=(time.perf_counter() - t0) / m * 1e3,
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
        "data_wait_host_frac",
        "host_step_frac",
        "gpu_util_mean",
        "mfu",
        "first_step_s",
        "peak_mem_bytes",
        "data_limit_stage",
        "data_decode_ms",
        "data_augment_ms",
        "data_transfer_ms",
        "loss_last",
        "train_sms",
    )
    o.add("trials", name, wall_s=wall, **{k: row.get(k) for k in keep if k in row})


TRIAL_STRATEGIES = "cpu-tv-uint8,cpu-pil-reduced-prefetch,hybrid-0.25,gpu"
TRIAL_MODEL = (
    "knobs.precision=fp16,knobs.memory_format=channels_last,knobs.cudnn_benchmark=true,knobs.optimizer_impl=fused,"
    "knobs.batch_size=256,knobs.compile=default"
)


def part_trials(
    o: Out, out: Path, smoke: bool, workers: int, strategies: str = TRIAL_STRATEGIES, model_spec: str = TRIAL_MODEL
) -> None:
    """The model (``model_spec``: comma-separated overrides) on synthetic data, then fed by each strategy (a
    strategy's own ``num_workers`` wins over ``workers``)."""
    model = [*model_spec.split(","), "measure.min_time_s=2"]
    if smoke:
        model = ["knobs.precision=fp32", "knobs.batch_size=2", "knobs.compile=off", "preset=tiny", "cpu_threads=1"]
    tool(o, out, "synthetic", model)
    for name in [n for n in strategies.split(",") if n]:
        # NAME@OVERRIDE@...: the strategy with more overrides (e.g. @knobs.switch_interval_ms=0.5@cpu_threads=2)
        base, *extra = name.split("@")
        if base == "synthetic":  # the model again with more overrides (e.g. synthetic@knobs.pipeline_sms=16)
            tool(o, out, name, [*model, *extra])
            continue
        if smoke and base != "cpu-tv-uint8":  # the CPU smoke runs one JPEG trial
            continue
        knobs = {"num_workers": workers, "prefetch_factor": 4, "pin_memory": True, "non_blocking": True}
        knobs.update(STRATEGIES[base])
        if smoke:
            knobs.pop("device_prefetch", None)
        feed = [f"knobs.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in knobs.items()]
        tool(o, out, f"jpeg-{name}", [*model, "workload.data=jpeg", *feed, *extra])


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("out", type=Path)
    a.add_argument("--smoke", action="store_true")
    a.add_argument("--parts", default="loader,trials")
    a.add_argument("--workers", type=int, default=None)
    a.add_argument("--seconds", type=float, default=6.0)
    a.add_argument("--strategies", default="", help="comma-separated subset of the loader part's strategies")
    a.add_argument("--trial-strategies", default=TRIAL_STRATEGIES, help="trials: the strategies fed to the model")
    a.add_argument("--model", default=TRIAL_MODEL, help="trials: the model's overrides, comma-separated")
    a.add_argument("--loads", default="", help="under_load: comma-separated subset of the loads (default all)")
    a.add_argument(
        "--gpu-decoders",
        default="torchvision,nvimgcodec,nvimgcodec+roi",
        help="gpu_stages, under_load: the GPU decoders to measure (nvimgcodec ones only where it is installed)",
    )
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
            "trials": lambda: part_trials(o, args.out, args.smoke, workers, args.trial_strategies, args.model),
            "gpu_stages": lambda: part_gpu_stages(o, args.out, args.smoke, args.gpu_decoders),
            "under_load": lambda: part_under_load(
                o, args.out, args.smoke, workers, 1.0 if args.smoke else args.seconds, args.gpu_decoders, args.loads
            ),
        }[part]()
        print(f"== part {part}: {time.perf_counter() - t0:.0f} s", flush=True)
    print_table(o.rows)


def print_table(rows: list[dict[str, Any]]) -> None:
    """The rows' speed (img/s or a trial's throughput), what limited them, and their status or error."""
    print("\n| part | name | img/s | limit | wait | util |")
    for r in rows:
        v = r.get("img_s") or r.get("throughput")
        print(
            f"| {r['part']} | {r['name']} | {v if v is None else round(v)} | {r.get('data_limit_stage', '')} | "
            f"{r.get('data_wait_frac', '')} | {r.get('gpu_util_mean', '')} | {r.get('error', r.get('status', ''))}"
        )


if __name__ == "__main__":
    main()
