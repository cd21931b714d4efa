"""Independent, hand-written training loops of the zoo's models: the references for the sweeps of bench/zoo/conf.

It imports nothing from this project. Each model is written again here with the sizes of its workload YAML (the
``tiny`` sizes with ``--tiny``), and the handbook is applied by hand: the fastest reduced-precision autocast the
device supports (bf16 where it is supported, else fp16 with a GradScaler), ``torch.compile`` (default mode), fused
AdamW, channels_last for the convolutional models, a large batch, and for the segmentation model's DataLoader
pinned memory, workers and non-blocking copies. Steps are timed after a warm-up (CUDA events on a GPU); each batch
prints one JSON row with ``samples_s`` (img/s or tokens/s, the workload's unit).

    python bench/zoo/hand_zoo.py --model convnext|gpt|lstm|rec|seg [--batch 512 --batch 256] [--compile default]
        [--precision auto|bf16|fp16] [--device cuda|cpu] [--tiny] [--seconds 3] [--all] [--json OUT]

Batches are tried in order; the first that runs (one that does not fit in memory is recorded and skipped) ends the
loop unless ``--all`` is given.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from typing import Any

import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.utils.data import DataLoader, Dataset

# The workloads' sizes (bench/zoo/conf/workload/zoo_<model>.yaml): full, and the tiny preset's.
SIZES: dict[str, dict[str, dict[str, int]]] = {
    "convnext": {"full": {"image_size": 224, "num_classes": 1000, "batch": 512},
                 "tiny": {"image_size": 32, "num_classes": 10, "batch": 8}},
    "gpt": {"full": {"vocab": 32000, "width": 768, "depth": 12, "heads": 12, "seq_len": 512, "batch": 128},
            "tiny": {"vocab": 256, "width": 64, "depth": 2, "heads": 2, "seq_len": 32, "batch": 8}},
    "lstm": {"full": {"vocab": 10000, "embed": 512, "hidden": 1024, "layers": 2, "seq_len": 128, "batch": 512},
             "tiny": {"vocab": 128, "embed": 32, "hidden": 64, "layers": 2, "seq_len": 16, "batch": 8}},
    "rec": {"full": {"dense": 13, "tables": 26, "rows": 100000, "dim": 64, "batch": 16384},
            "tiny": {"dense": 13, "tables": 4, "rows": 100, "dim": 8, "batch": 64}},
    "seg": {"full": {"image_size": 512, "num_classes": 21, "batch": 128, "workers": 12},
            "tiny": {"image_size": 64, "num_classes": 4, "batch": 4, "workers": 1}},
}  # fmt: skip


OOM_WORDS = ("out of memory", "can't allocate memory")  # CUDA's, and the CPU allocator's


class GPT(nn.Module):
    """Token + learned position embeddings, pre-norm causal transformer layers (GELU, 4x MLP), a linear head."""

    def __init__(self, vocab: int, width: int, depth: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(seq_len, width)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)  # fmt: skip
        self.blocks = nn.TransformerEncoder(block, depth, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)
        self.register_buffer("causal", torch.triu(torch.full((seq_len, seq_len), float("-inf")), 1), persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        n = idx.shape[1]
        h = self.tok(idx) + self.pos(torch.arange(n, device=idx.device))
        return self.head(self.norm(self.blocks(h, mask=self.causal[:n, :n], is_causal=True)))


class LSTMLM(nn.Module):
    def __init__(self, vocab: int, embed: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.embed(idx))[0])


class DLRM(nn.Module):
    """Click model: every categorical feature's table stacked in one embedding (a row offset per table), a bottom
    MLP 13-512-256-dim over the dense features, a top MLP over [bottom, lookups] ending in one logit."""

    def __init__(self, dense: int, tables: int, rows: int, dim: int) -> None:
        super().__init__()
        self.rows = rows
        self.table = nn.Embedding(tables * rows, dim)
        self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                    nn.Linear(256, dim), nn.ReLU())  # fmt: skip
        self.top = nn.Sequential(nn.Linear((tables + 1) * dim, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                 nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 1))  # fmt: skip

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        dense, ids = batch
        shift = torch.arange(ids.shape[1], device=ids.device) * self.rows
        looked_up = self.table(ids + shift).flatten(1)
        return self.top(torch.cat([self.bottom(dense), looked_up], dim=1)).view(-1)


class Images(Dataset):
    """64 synthetic uint8 images and masks in memory, cycled."""

    def __init__(self, size: int, classes: int) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(0, 256, (64, 3, size, size), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, classes, (64, size, size), dtype=torch.uint8, generator=g)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i % 64], self.y[i % 64]


def setup(name: str, s: dict[str, int], batch: int, dev: torch.device) -> tuple[nn.Module, Any, Any, float]:
    """(model, loss(out, y), next_batch(), samples per step)."""
    conv = name in ("convnext", "seg")
    if name == "convnext":
        model: nn.Module = torchvision.models.convnext_tiny(weights=None, num_classes=s["num_classes"])
    elif name == "seg":
        model = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=s["num_classes"], aux_loss=False
        )
    elif name == "rec":
        model = DLRM(s["dense"], s["tables"], s["rows"], s["dim"])
    elif name == "gpt":
        model = GPT(s["vocab"], s["width"], s["depth"], s["heads"], s["seq_len"])
    else:
        model = LSTMLM(s["vocab"], s["embed"], s["hidden"], s["layers"])
    model = model.to(dev, memory_format=torch.channels_last) if conv else model.to(dev)
    if name == "convnext":
        x = torch.randn(batch, 3, s["image_size"], s["image_size"], device=dev).contiguous(
            memory_format=torch.channels_last
        )
        y = torch.randint(0, s["num_classes"], (batch,), device=dev)
        return model, F.cross_entropy, lambda: (x, y), batch
    if name == "seg":
        loader = DataLoader(Images(s["image_size"], s["num_classes"]), batch_size=batch, num_workers=s["workers"],
                            pin_memory=dev.type == "cuda", prefetch_factor=2, drop_last=True)  # fmt: skip
        it = iter(loader)
        mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
        std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255

        def fetch() -> tuple[torch.Tensor, torch.Tensor]:
            xb, yb = next(it)
            xb = xb.to(dev, non_blocking=True).float().sub_(mean).div_(std)
            return xb.contiguous(memory_format=torch.channels_last), yb.to(dev, non_blocking=True).long()

        return model, lambda out, t: F.cross_entropy(out["out"], t), fetch, batch
    if name == "rec":
        dense = torch.randn(batch, s["dense"], device=dev)
        ids = torch.randint(0, s["rows"], (batch, s["tables"]), device=dev)
        clicks = torch.randint(0, 2, (batch,), device=dev).float()
        loss = lambda out, t: F.binary_cross_entropy_with_logits(out.float(), t)  # noqa: E731
        return model, loss, lambda: ((dense, ids), clicks), batch
    tokens = torch.randint(0, s["vocab"], (batch, s["seq_len"] + 1), device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return model, lambda out, t: F.cross_entropy(out.flatten(0, 1), t.flatten()), lambda: (x, y), batch * s["seq_len"]


def reduced_precision(dev: torch.device, asked: str) -> str:
    if asked != "auto":
        return asked
    if dev.type == "cpu" or torch.cuda.is_bf16_supported():
        return "bf16"
    return "fp16"


def run(name: str, batch: int, dev: torch.device, tiny: bool, compile_mode: str, precision: str, seconds: float):
    torch._dynamo.reset()
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True  # cuDNN autotunes the convolutions and the LSTM's kernels
    s = SIZES[name]["tiny" if tiny else "full"]
    model, loss_fn, next_batch, per_step = setup(name, s, batch, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")

    def forward_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(dev.type, dtype=dtype):
            return loss_fn(model(x), y)

    fwd = (
        forward_loss
        if compile_mode == "off"
        else torch.compile(forward_loss, mode=None if compile_mode == "default" else compile_mode)
    )

    def step() -> None:
        x, y = next_batch()
        loss = fwd(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    step()
    sync()
    first_s = time.perf_counter() - t0
    for _ in range(5 if not tiny else 2):
        step()
    sync()
    n, elapsed = 0, 0.0
    while elapsed < seconds:
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(5):
                step()
            end.record()
            end.synchronize()
            elapsed += start.elapsed_time(end) / 1000
        else:
            t0 = time.perf_counter()
            for _ in range(5):
                step()
            elapsed += time.perf_counter() - t0
        n += 5
    unit = {"gpt": "tokens/s", "lstm": "tokens/s", "rec": "samples/s"}.get(name, "img/s")
    row = {"kind": "hand", "model": name, "device": dev.type, "tiny": tiny, "batch": batch, "precision": precision,
           "compile": compile_mode, "fused_adamw": True, "channels_last": name in ("convnext", "seg")}  # fmt: skip
    return {**row, "first_step_s": round(first_s, 2), "steps": n, "samples_s": n * per_step / elapsed, "unit": unit}


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--model", choices=sorted(SIZES), required=True)
    a.add_argument("--batch", type=int, action="append", help="tried in order (default: the space's largest)")
    a.add_argument("--compile", default="default")
    a.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp16"))
    a.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a.add_argument("--tiny", action="store_true", help="the tiny preset's sizes (a CPU check of this script)")
    a.add_argument("--seconds", type=float, default=3.0, help="measured time per batch, after the warm-up")
    a.add_argument("--all", action="store_true", help="measure every --batch, not only the first that runs")
    a.add_argument("--json")
    args = a.parse_args()
    dev = torch.device(args.device)
    precision = reduced_precision(dev, args.precision)
    sizes = SIZES[args.model]["tiny" if args.tiny else "full"]

    def emit(row: dict) -> None:
        row["threads"] = torch.get_num_threads() if dev.type == "cpu" else None
        row["inductor_cache"] = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")

    for batch in args.batch or [sizes["batch"]]:
        row: dict | None = None
        while row is None:
            try:
                row = run(args.model, batch, dev, args.tiny, args.compile, precision, args.seconds)
            except Exception as e:  # noqa: BLE001 (recorded: e.g. an op without a bf16 kernel on this device)
                oom = isinstance(e, torch.OutOfMemoryError) or any(w in str(e).lower() for w in OOM_WORDS)
                error = {"kind": "hand", "model": args.model, "batch": batch, "precision": precision,
                         "error": f"{'out of memory' if oom else type(e).__name__}: {str(e)[:200]}"}  # fmt: skip
            if row is not None:
                break
            emit(error)
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            if oom:  # the largest batch that fits is the handbook's (an OOM in a compiled step may come wrapped)
                break
            if args.precision == "auto" and precision == "bf16" and dev.type == "cuda":
                precision = "fp16"  # the next reduced precision, for this batch again and the rest
                continue
            raise SystemExit(1)
        if row is not None:
            emit(row)
            if not args.all:
                break


if __name__ == "__main__":
    main()
