"""Does decoding on more threads at once keep the GPU decoder's pace while the GPU is busy? One GPU call.

    python bench/gpu_decode_load.py OUT [--smoke] [--seconds 5] [--threads 1,2,3] [--batch-sizes 256]
        [--decoders torchvision,nvimgcodec,torchvision:unchanged] [--loads none,gpu_graph,resnet_eager]

The batched GPU decode slows beside a busy GPU (docs/measurements). If that is latency (each batch a chain of
small steps, each queued behind the training step's kernels) rather than a full decoder, batches decoded on several
threads at once (each with its own decoder and CUDA stream) add up. For each GPU decoder and thread count: batches
of 256 files held in memory decoded for ``--seconds`` on T threads while the main thread runs a load (``none``;
``gpu_graph``: a CUDA graph of bf16 matmuls sized to ~30 ms, replayed and waited for, again and again;
``resnet_eager``: eager fp16 channels_last ResNet-50 training steps at batch 128, which like a real trial leave the
GPU short gaps and hold the GIL while they launch); rows give the decode's img/s over all threads, the batches each
thread decoded, and the load's ms per replay or step (alone: ``load_alone_ms``). ``torchvision:unchanged`` asks
nvJPEG for the planes as coded (``ImageReadMode.UNCHANGED``: YCbCr, chroma subsampled, no colour conversion): is
the colour conversion what waits behind a busy GPU? (On the H200's
hardware path it returned the same RGB bytes: docs/measurements/jpeg-pipeline.md, 2026-12-02.)
torchvision's decoder is one object behind a lock inside torchvision, so its threads take turns; nvImageCodec's
decoders are separate objects. Rows go to OUT/gpu_decode_load.jsonl.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from workloads import corpus, decode  # noqa: E402


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("out", type=Path)
    a.add_argument("--smoke", action="store_true")
    a.add_argument("--seconds", type=float, default=5.0)
    a.add_argument("--threads", default="1,2,3")
    a.add_argument("--decoders", default="torchvision,nvimgcodec")
    a.add_argument("--batch-sizes", default="", help="images per decode call (default: 256; 8 with --smoke)")
    a.add_argument("--loads", default="none,gpu_graph,resnet_eager")
    args = a.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = args.out / "gpu_decode_load.jsonl"

    def add(**row: Any) -> None:
        row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **row}
        with rows.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print(json.dumps(row, default=str), flush=True)

    device = torch.device("cpu" if args.smoke else "cuda")
    images, bs = (32, 8) if args.smoke else (1024, 256)
    sizes = [int(b) for b in args.batch_sizes.split(",") if b] or [bs]
    wanted_loads = [x for x in args.loads.split(",") if x]
    root = args.out / "results" / "data" / f"gpu-decode-load-{images}"
    corpus.ensure_corpus(root, images, 500, 375, "imagenet")
    files = [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in sorted(root.glob("*/*.jpg"))]

    def replay(graph: Any) -> None:
        graph() if callable(graph) else graph.replay()
        torch.cuda.current_stream().synchronize()

    loads: dict[str, Any] = {"none": None} if "none" in wanted_loads else {}
    if device.type == "cuda" and "gpu_graph" in wanted_loads:
        x = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        torch.matmul(x, x, out=y)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            torch.matmul(x, x, out=y)
        torch.cuda.synchronize()
        n_mm = max(1, round(0.03 / ((time.perf_counter() - t0) / 10)))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n_mm):
                torch.matmul(x, x, out=y)
        loads["gpu_graph"] = graph

    if device.type == "cuda" and "resnet_eager" in wanted_loads:
        import torchvision

        model = torchvision.models.resnet50().to(device, memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        xb = torch.randn(128, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
        yb = torch.randint(0, 1000, (128,), device=device)

        def train_step() -> None:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        loads["resnet_eager"] = train_step
        for _ in range(3):
            replay(train_step)

    load_alone: dict[str, float] = {}
    for name, graph in loads.items():
        if graph is not None:
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 2:
                replay(graph)
                n += 1
            load_alone[name] = (time.perf_counter() - t0) / n * 1e3
    threads = [int(t) for t in args.threads.split(",") if t]
    for decoder_spec in [d for d in args.decoders.split(",") if d]:
        decoder, _, mode = decoder_spec.partition(":")
        if decoder == "nvimgcodec" and decode.nvimgcodec_missing():
            add(decoder=decoder, skipped=decode.nvimgcodec_missing())
            continue
        for t, bs in [(t, b) for t in threads for b in sizes]:
            try:
                gpus = [_decoder(decoder, mode, device) for _ in range(t)]
            except Exception as e:  # noqa: BLE001 - a decoder that cannot start is a row
                add(decoder=decoder, threads=t, error=repr(e)[:300])
                continue
            for load_name, graph in loads.items():
                stop = threading.Event()
                done = [0] * t
                errors: list[str] = []

                def run(k: int) -> None:
                    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
                    b = k
                    try:
                        while not stop.is_set():
                            batch = [files[(b * bs + i) % len(files)] for i in range(bs)]
                            if stream is not None:
                                with torch.cuda.stream(stream):
                                    stream.synchronize()
                                    gpus[k](batch)
                                    stream.synchronize()
                            else:
                                gpus[k](batch)
                            done[k] += 1
                            b += t
                    except Exception as e:  # noqa: BLE001
                        errors.append(repr(e)[:300])

                ths = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(t)]
                for th in ths:
                    th.start()
                time.sleep(0.5)  # start-up (the first batches) outside the window
                start_each = list(done)
                start_done, n_load, t0 = sum(done), 0, time.perf_counter()
                while time.perf_counter() - t0 < args.seconds:
                    if graph is None:
                        time.sleep(0.01)
                    else:
                        replay(graph)
                        n_load += 1
                wall = time.perf_counter() - t0
                now = list(done)  # one reading: the threads still count until they are stopped
                batches = sum(now) - start_done
                stop.set()
                for th in ths:
                    th.join(timeout=30)
                add(
                    decoder=decoder,
                    mode=mode or "rgb",
                    batch_size=bs,
                    threads=t,
                    load=load_name,
                    decode_img_s=batches * bs / wall,
                    batches=batches,
                    per_thread=[d - s for d, s in zip(now, start_each)],
                    load_ms=wall / n_load * 1e3 if n_load else None,
                    load_alone_ms=load_alone.get(load_name),
                    error=errors[0] if errors else None,
                )


def _decoder(name: str, mode: str, device: torch.device) -> Any:
    """Decodes a list of JPEG tensors on ``device``: the pipeline's decoder, or torchvision's in ``mode``."""
    if not mode:
        return decode.GpuDecode(224, device, name).decode
    from torchvision.io import ImageReadMode, decode_jpeg

    read_mode = getattr(ImageReadMode, mode.upper())
    return lambda batch: decode_jpeg(batch, mode=read_mode, device=device)


if __name__ == "__main__":
    main()
