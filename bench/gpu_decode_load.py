"""Does decoding on more threads at once keep the GPU decoder's pace while the GPU is busy? One GPU call.

    python bench/gpu_decode_load.py OUT [--smoke] [--seconds 5] [--threads 1,2,3]

The batched GPU decode slows beside a busy GPU (README, Measured). If that is latency (each batch a chain of
small steps, each queued behind the training step's kernels) rather than a full decoder, batches decoded on several
threads at once (each with its own decoder and CUDA stream) add up. For each GPU decoder and thread count: batches
of 256 files held in memory decoded for ``--seconds`` on T threads while the main thread runs a load (``none``;
``gpu_graph``: a CUDA graph of bf16 matmuls sized to ~30 ms, replayed and waited for, again and again); rows give
the decode's img/s over all threads, the batches each thread decoded, and the load's ms per replay (alone:
``load_alone_ms``).
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
    root = args.out / "results" / "data" / f"gpu-decode-load-{images}"
    corpus.ensure_corpus(root, images, 500, 375, "imagenet")
    files = [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in sorted(root.glob("*/*.jpg"))]
    loads: dict[str, Any] = {"none": None}
    if device.type == "cuda":
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

    def replay(graph: Any) -> None:
        graph.replay()
        torch.cuda.current_stream().synchronize()

    load_alone: dict[str, float] = {}
    for name, graph in loads.items():
        if graph is not None:
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 2:
                replay(graph)
                n += 1
            load_alone[name] = (time.perf_counter() - t0) / n * 1e3
    threads = [int(t) for t in args.threads.split(",") if t]
    for decoder in [d for d in args.decoders.split(",") if d]:
        if decoder == "nvimgcodec" and decode.nvimgcodec_missing():
            add(decoder=decoder, skipped=decode.nvimgcodec_missing())
            continue
        for t in threads:
            try:
                gpus = [decode.GpuDecode(224, device, decoder) for _ in range(t)]
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
                                    gpus[k].decode(batch)
                                    stream.synchronize()
                            else:
                                gpus[k].decode(batch)
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
                    threads=t,
                    load=load_name,
                    decode_img_s=batches * bs / wall,
                    batches=batches,
                    per_thread=[d - s for d, s in zip(now, start_each)],
                    load_ms=wall / n_load * 1e3 if n_load else None,
                    load_alone_ms=load_alone.get(load_name),
                    error=errors[0] if errors else None,
                )


if __name__ == "__main__":
    main()
