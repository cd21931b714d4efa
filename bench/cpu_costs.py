"""What one JPEG costs the CPU on this machine: each decoder and each crop-resize, alone and on every core at once.

    python bench/cpu_costs.py OUT [--smoke] [--procs 1,8,14,16] [--seconds 2]

The JPEG pipeline's CPU side is decode (libjpeg-turbo through torchvision, Pillow or OpenCV, where installed) then
RandomResizedCrop's resize of the crop window to 224x224. Each variant runs in P processes at once (forked, one
thread each, as DataLoader workers run), each over its own share of the generated corpus for ``--seconds``:
rows give ms per image in one process and img/s over all of them, so the cost of sharing cores (SMT, memory) shows
as P grows. A first row records the machine: CPU model and flags, cores, torch's CPU capability, versions.
Rows go to OUT/cpu_costs.jsonl.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.io import ImageReadMode, decode_jpeg  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

from workloads import decode  # noqa: E402
from workloads.corpus import ensure_corpus  # noqa: E402

try:
    import cv2
except ImportError:  # OpenCV is optional
    cv2 = None

SIZE = 224
FILES: list[np.ndarray] = []  # the corpus's files, read before the fork
DECODED: list[torch.Tensor] = []  # (3, H, W) uint8, decoded before the fork (resize variants)
DECODED_HWC: list[np.ndarray] = []


def v_decode_tv(i: int) -> Any:
    return decode_jpeg(torch.from_numpy(FILES[i]), mode=ImageReadMode.RGB)


def v_decode_pil(i: int) -> Any:
    return Image.open(io.BytesIO(FILES[i].tobytes())).convert("RGB")


def v_decode_cv2(i: int) -> Any:
    return cv2.imdecode(FILES[i], cv2.IMREAD_COLOR_RGB)


def v_resize_tv(i: int) -> Any:  # the pipeline's torchvision path: CHW uint8, antialiased bilinear
    img = DECODED[i]
    top, left, h, w = decode.crop_window(img.shape[1], img.shape[2])
    return v2.functional.resized_crop(img, top, left, h, w, [SIZE, SIZE], antialias=True)


def v_resize_tv_cl(i: int) -> Any:  # the same on an HWC (channels_last) view of the image
    img = DECODED_HWC[i]
    top, left, h, w = decode.crop_window(img.shape[0], img.shape[1])
    crop = torch.from_numpy(img[top : top + h, left : left + w]).permute(2, 0, 1).unsqueeze(0)
    return torch.nn.functional.interpolate(crop, size=(SIZE, SIZE), mode="bilinear", antialias=True)


def v_resize_pil(i: int) -> Any:
    img = DECODED_HWC[i]
    top, left, h, w = decode.crop_window(img.shape[0], img.shape[1])
    im = Image.fromarray(img)
    return im.resize((SIZE, SIZE), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h))


def v_resize_cv2(i: int) -> Any:  # area averaging when shrinking (antialiased), bilinear when enlarging
    img = DECODED_HWC[i]
    top, left, h, w = decode.crop_window(img.shape[0], img.shape[1])
    interp = cv2.INTER_AREA if h * w >= SIZE * SIZE else cv2.INTER_LINEAR
    return cv2.resize(img[top : top + h, left : left + w], (SIZE, SIZE), interpolation=interp)


def v_pipeline_tv(i: int) -> Any:
    return CPU_TV(torch.from_numpy(FILES[i]))


def v_pipeline_pil(i: int) -> Any:
    return CPU_PIL(torch.from_numpy(FILES[i]))


CPU_TV = decode.CpuDecode(SIZE, "torchvision")
CPU_PIL = decode.CpuDecode(SIZE, "pil")
VARIANTS: dict[str, Callable[[int], Any]] = {
    "decode/torchvision": v_decode_tv,
    "decode/pil": v_decode_pil,
    "decode/opencv": v_decode_cv2,
    "resize/torchvision-chw": v_resize_tv,
    "resize/torchvision-hwc": v_resize_tv_cl,
    "resize/pil": v_resize_pil,
    "resize/opencv": v_resize_cv2,
    "pipeline/torchvision": v_pipeline_tv,
    "pipeline/pil": v_pipeline_pil,
}


def _worker(args: tuple[str, int, int, float]) -> tuple[int, float]:
    name, rank, procs, seconds = args
    torch.set_num_threads(1)
    if cv2 is not None:
        cv2.setNumThreads(1)
    torch.manual_seed(rank)
    fn, n = VARIANTS[name], len(FILES)
    for i in range(rank, min(n, rank + 5 * procs), procs):  # warm the code paths
        fn(i)
    count, t0 = 0, time.perf_counter()
    i = rank
    while time.perf_counter() - t0 < seconds:
        fn(i % n)
        i += procs
        count += 1
    return count, time.perf_counter() - t0


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "pillow": Image.__version__,
        "opencv": cv2.__version__ if cv2 is not None else None,
    }
    import torchvision

    info["torchvision"] = torchvision.__version__
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        keep = ("Model name", "Thread(s) per core", "Core(s) per socket", "Socket(s)", "CPU max MHz", "L3")
        info["lscpu"] = {
            k.strip(): v.strip()
            for k, _, v in (line.partition(":") for line in lscpu.splitlines())
            if k.strip().startswith(keep)
        }
    except (OSError, subprocess.SubprocessError) as e:
        info["lscpu"] = repr(e)
    cpuinfo = Path("/proc/cpuinfo")
    flags = cpuinfo.read_text().split("flags", 2)[1].splitlines()[0] if cpuinfo.exists() else ""
    info["simd"] = sorted({f for f in flags.split() if f.startswith(("avx", "sse4", "amx"))})
    # which nvJPEG backend torchvision's batched GPU decoder asks for: its library's message strings say
    image_so = list(Path(torchvision.__file__).parent.glob("image*.so"))
    if image_so:
        text = subprocess.run(["strings", str(image_so[0])], capture_output=True, text=True).stdout
        info["torchvision_nvjpeg_hardware_backend"] = "with hardware backend" in text
    return info


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("out", type=Path)
    a.add_argument("--smoke", action="store_true")
    a.add_argument("--procs", default="")
    a.add_argument("--seconds", type=float, default=2.0)
    a.add_argument("--images", type=int, default=512)
    args = a.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows_path = args.out / "cpu_costs.jsonl"

    def add(row: dict[str, Any]) -> None:
        with rows_path.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print(json.dumps(row, default=str), flush=True)

    add({"part": "machine", **machine()})
    images = 32 if args.smoke else args.images
    root = args.out / "results" / "data" / f"cpu-costs-{images}"
    ensure_corpus(root, images, 500, 375, "imagenet")
    FILES.extend(np.fromfile(p, dtype=np.uint8) for p in sorted(root.rglob("*.jpg")))
    for f in FILES:
        img = decode_jpeg(torch.from_numpy(f), mode=ImageReadMode.RGB)
        DECODED.append(img)
        DECODED_HWC.append(img.permute(1, 2, 0).contiguous().numpy())
    cores = os.cpu_count() or 2
    procs = [int(p) for p in args.procs.split(",") if p] or (
        [1, 2] if args.smoke else sorted({1, cores // 2, cores - 2, cores})
    )
    seconds = 0.3 if args.smoke else args.seconds
    ctx = mp.get_context("fork")
    for name in VARIANTS:
        if "opencv" in name and cv2 is None:
            add({"part": "cost", "name": name, "skipped": "opencv-python-headless is not installed"})
            continue
        for p in procs:
            with ctx.Pool(p) as pool:
                got = pool.map(_worker, [(name, r, p, seconds) for r in range(p)])
            per_image_ms = [t / c * 1e3 for c, t in got if c]
            add(
                {
                    "part": "cost",
                    "name": name,
                    "procs": p,
                    "ms_per_image": sum(per_image_ms) / len(per_image_ms),
                    "img_s": sum(c / t for c, t in got),
                    "images": [c for c, _ in got],  # per process, in its own window
                    "seconds": [t for _, t in got],
                }
            )


if __name__ == "__main__":
    main()
