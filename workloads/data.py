"""The ``jpeg`` input pipeline of resnet50: JPEG files on disk, decoded and augmented per sample, as in training.

Decode strategies (knobs; ``workloads.decode`` has the decoders):
- ``decode_device: cpu``: DataLoader workers (or the trial process, with ``num_workers: 0``) read, decode
  (``cpu_decoder``: torchvision or PIL, ``decode_scale``: full or DCT-reduced) and crop each file; ``transfer_dtype``
  says whether the workers also normalize (``float32``) or hand over uint8 crops, a quarter of the bytes, normalized
  on the device after the copy (``uint8``).
- ``decode_device: cuda``: workers only read file bytes; each batch is decoded in one batched nvJPEG call by a
  background thread and cropped on the GPU by a second one (decoding batch k+1 while cropping batch k), each on
  its own CUDA stream, overlapped with the training step.
- ``decode_device: hybrid``: each batch is split: ``gpu_share`` of its images go to the GPU decoder as bytes, the
  workers decode the rest on the CPU, so both decoders are busy (DALI's hardware-decoder share is the same idea).
- ``augment_device: cuda`` (CPU or hybrid decode): the workers decode and only cut out each crop window (with a
  one-pixel border), handed over as uint8; the GPU resizes and flips every window of the batch in batched calls,
  as for GPU-decoded images (the resize was ~a fifth of a worker's time per image; DALI's ``mixed`` is alike).
- ``device_prefetch: true`` (GPU only): the host-to-device copy and normalization of CPU-decoded batches run in that
  background thread too, a few batches ahead (``cuda`` and ``hybrid`` always use it).

Every batch records what it cost: seconds decoding and augmenting in the workers, decode and crop seconds on the GPU,
copy time, pixels decoded (DCT scaling), bytes decoded on each device. :meth:`Pipeline.metrics` turns them into
``data_*`` columns and names the stage that limits the pipeline (``data_limit_stage``: decode, augmentation or
transfer), which the report shows for a data-bound row.

Epochs are ``workload.epoch_images`` long (the corpus cycled): restarting the loader every pass over a small corpus
drains its prefetch queue each time, which real training on a large dataset rarely does.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler
from torchvision.datasets import DatasetFolder
from torchvision.io import read_file

from workloads import decode
from workloads.base import loader_ready
from workloads.corpus import corpus_path, corpus_sizes, ensure_corpus
from workloads.device_side import DECODED_DEPTH, PREFETCH_DEPTH, DeviceSide, Normalize, Prefetcher, pack_bytes
from workloads.spec.data import (  # noqa: F401 (re-exported: the workload checks knobs through this module)
    AUGMENT_DEVICES,
    DECODE_DEVICES,
    TRANSFER_DTYPES,
    DataKnobs,
    check,
    gpu_share,
    knob_conflict,
)
from workloads.spec.typed import of

EXTENSIONS = (".jpg", ".jpeg")
TORCH_PREFETCH_FACTOR = 2  # batches each DataLoader worker keeps in flight when knobs.prefetch_factor is null


# ---------------------------------------------------------------- host side (runs in the DataLoader workers)


_CPU_NORMALIZE = Normalize(torch.device("cpu"))


class JpegBatches(Dataset):
    """An ImageFolder of JPEGs that builds whole batches (``__getitems__``), split between the two decoders.

    A batch is a dict: ``crops`` (the CPU-decoded images: uint8 (n, 3, S, S), or normalized float32 with
    ``normalize``; with ``regions``, empty, and ``regions`` holds their crop windows with a one-pixel border back
    to back, uint8, with ``region_shapes`` (n, 2) and ``region_windows`` (n, 4): ``CpuDecode.region``), ``packed``
    (the GPU share's file bytes, :func:`pack_bytes`), ``n_gpu``, ``labels`` (CPU images
    first, then GPU ones, the order of the device batch) and ``stats`` (:data:`decode.STATS` per CPU image).
    """

    def __init__(
        self,
        root: Path,
        source: str,
        image_size: int,
        share: float,
        decoder: str,
        scale: str,
        normalize: bool,
        regions: bool = False,
    ) -> None:
        try:
            folder = DatasetFolder(str(root), loader=read_file, extensions=EXTENSIONS)
        except (FileNotFoundError, OSError) as e:
            raise ValueError(
                f"{source}={str(root)!r} is no JPEG ImageFolder ({e}); point it at a folder with one "
                "subfolder per class holding .jpg files, or set it null to use the generated corpus"
            ) from None
        self.samples, self.classes = folder.samples, folder.classes
        self.size, self.share, self.normalize, self.regions = image_size, share, normalize and not regions, regions
        self.cpu = decode.CpuDecode(image_size, decoder, scale)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.__getitems__([index])

    def __getitems__(self, indices: list[int]) -> dict[str, torch.Tensor]:
        n_gpu = round(self.share * len(indices))
        n_cpu = len(indices) - n_gpu
        files = [read_file(self.samples[i][0]) for i in indices]
        labels = torch.tensor([self.samples[i][1] for i in indices], dtype=torch.int64)
        packed = pack_bytes(files[n_cpu:]) if n_gpu else torch.empty(0, dtype=torch.uint8)
        if self.regions:
            return {**self._regions(files[:n_cpu]), "packed": packed, "n_gpu": torch.tensor(n_gpu), "labels": labels}
        decoded = [self.cpu(f) for f in files[:n_cpu]]
        size = self.size
        empty = torch.empty(0, 3, size, size, dtype=torch.float32 if self.normalize else torch.uint8)
        crops = torch.stack([c for c, _ in decoded]) if decoded else empty
        stats = (
            torch.stack([s for _, s in decoded]) if decoded else torch.empty(0, len(decode.STATS), dtype=torch.float64)
        )
        if self.normalize and n_cpu:
            t0 = time.perf_counter()
            crops = _CPU_NORMALIZE(crops.float())
            stats[:, 1] += (time.perf_counter() - t0) / n_cpu
        return {"crops": crops, "packed": packed, "n_gpu": torch.tensor(n_gpu), "labels": labels, "stats": stats}

    def _regions(self, files: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        cut = [self.cpu.region(f) for f in files]
        return {
            "crops": torch.empty(0, 3, self.size, self.size, dtype=torch.uint8),
            "regions": torch.cat([r.reshape(-1) for r, _, _ in cut]) if cut else torch.empty(0, dtype=torch.uint8),
            "region_shapes": torch.tensor([r.shape[1:] for r, _, _ in cut], dtype=torch.int64).view(-1, 2),
            "region_windows": torch.stack([w for _, w, _ in cut]) if cut else torch.empty(0, 4, dtype=torch.int64),
            "stats": torch.stack([st for _, _, st in cut])
            if cut
            else torch.empty(0, len(decode.STATS), dtype=torch.float64),
        }


def _lower_priority(nice: int, worker_id: int) -> None:
    os.nice(nice)  # this worker process only: the trial process keeps its priority


def _pass_through(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return batch  # __getitems__ already built the batch


def _corpus(p: dict[str, Any], cache_root: str | os.PathLike[str]) -> tuple[Path, str, str]:
    """(the JPEG folder, its state, the key that named it): ``workload.root`` as given, or the generated corpus
    (made or checked here) under ``cache_root``."""
    if p.get("root"):
        return Path(p["root"]).expanduser().resolve(), "user", "workload.root"
    root = corpus_path(p, cache_root)
    state = ensure_corpus(
        root,
        int(p.get("corpus_images", 2048)),
        int(p.get("corpus_width", 500)),
        int(p.get("corpus_height", 375)),
        corpus_sizes(p),
    )
    return root, state, "corpus"


def _epoch(p: dict[str, Any], dataset: Any, source: str, batch_size: int, num_classes: int | None) -> int:
    """Images per epoch (``workload.epoch_images``; null: one pass), checked to hold a full batch, and the
    dataset's classes checked against ``workload.num_classes``."""
    epoch = int(p.get("epoch_images") or len(dataset))
    if epoch < batch_size:
        raise ValueError(
            f"an epoch of {epoch} images ({source}: {len(dataset)}) holds no full batch of "
            f"knobs.batch_size={batch_size}; raise workload.epoch_images or lower the batch size"
        )
    if num_classes is not None and len(dataset.classes) > num_classes:
        n = len(dataset.classes)
        raise ValueError(
            f"{source} has {n} classes but workload.num_classes={num_classes}; set workload.num_classes >= {n}"
        )
    return epoch


def _worker_options(knobs: dict[str, Any]) -> dict[str, Any]:
    """The DataLoader's options for worker processes (``knobs.num_workers > 0``)."""
    # Fork the workers from this process, as a training script on Linux does. A trial process comes from
    # the sweeper's forkserver, so multiprocessing's default there is "forkserver": each trial would start
    # a fresh server that imports torch again before its first worker runs (first batch 140 s on the H200
    # with 14 workers, 3 s on the CI machine with 2). Workers never touch CUDA.
    per_worker: dict[str, Any] = {"multiprocessing_context": "fork"}
    per_worker["persistent_workers"] = of(DataKnobs, knobs).persistent_workers
    if knobs.get("prefetch_factor") is not None:
        per_worker["prefetch_factor"] = int(knobs["prefetch_factor"])
    if knobs.get("worker_nice"):
        # Workers below the trial process's priority: when they fill every core, the threads that feed the
        # GPU (the training step's launches, the GPU decode and copy threads) still get a core at once.
        per_worker["worker_init_fn"] = functools.partial(_lower_priority, int(knobs["worker_nice"]))
    return per_worker


def _loader(
    dataset: Any, epoch: int, batch_size: int, workers: int, pin_memory: bool, per_worker: dict[str, Any]
) -> DataLoader:
    """The DataLoader of ``epoch`` images a pass, drawn in a seeded random order, whole batches only."""
    sampler = RandomSampler(dataset, num_samples=epoch, generator=torch.Generator().manual_seed(0))
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=True,
        num_workers=workers,
        pin_memory=pin_memory,
        collate_fn=_pass_through,
        **per_worker,
    )


def _buffered_batches(workers: int, per_worker: dict[str, Any], threaded: bool, share: float) -> int:
    """Batches the loader can hold ready: each worker keeps prefetch_factor (torch's default 2) in flight, plus
    what the device thread holds."""
    return (
        (workers * int(per_worker.get("prefetch_factor") or TORCH_PREFETCH_FACTOR) if workers else 0)
        + (PREFETCH_DEPTH + 1 if threaded else 0)
        + (DECODED_DEPTH + 1 if share > 0 else 0)
    )


def _device_side(
    knobs: dict[str, Any], share: float, image_size: int, device: torch.device, memory_format: torch.memory_format
) -> DeviceSide:
    """The device's side of the pipeline: copy, GPU decode of its ``share`` of the images, normalization."""
    return DeviceSide(
        image_size,
        device,
        memory_format,
        of(DataKnobs, knobs).non_blocking,
        (knobs.get("gpu_decoder") or "torchvision") if share > 0 else "torchvision",
        bool(knobs.get("gpu_roi_decode")) and share > 0,
    )


# ---------------------------------------------------------------- the pipeline


class Pipeline:
    """Batches of augmented images on the device, forever: ``next() -> (images, labels)``.

    images: float32 (batch, 3, image_size, image_size), normalized with the ImageNet mean/std, in ``memory_format``;
    labels: int64 (batch,). An epoch is ``workload.epoch_images`` images (the corpus reshuffled and cycled; null:
    one pass); then the loader is restarted, keeping its workers with ``persistent_workers``.
    """

    def __init__(
        self,
        p: dict[str, Any],
        knobs: dict[str, Any],
        *,
        batch_size: int,
        image_size: int,
        device: torch.device,
        memory_format: torch.memory_format = torch.contiguous_format,
        cache_root: str | os.PathLike[str] = "results/data",
        num_classes: int | None = None,
    ) -> None:
        reason = knob_conflict(knobs, device.type)
        if reason:
            raise ValueError(reason)
        self.knobs = knobs
        self.decode_device = str(of(DataKnobs, knobs).decode_device)
        self.share = gpu_share(knobs)
        # uint8: workers hand over the uint8 crops (a quarter of the bytes to copy), normalized on the device after
        # the copy; float32: workers normalize, the float32 batch crosses to the device.
        normalize_in_workers = (knobs.get("transfer_dtype") or "float32") == "float32"
        # augment_device=cuda: the workers cut out uint8 crop windows, the GPU resizes them (normalized there)
        self.augment_device = str(knobs.get("augment_device") or "cpu")
        regions = self.augment_device == "cuda"
        t0 = time.perf_counter()
        self.root, self.corpus_state, source = _corpus(p, cache_root)
        self.corpus_s = time.perf_counter() - t0
        self.dataset = JpegBatches(
            self.root,
            source,
            image_size,
            self.share,
            knobs.get("cpu_decoder") or "torchvision",
            knobs.get("decode_scale") or "full",
            normalize_in_workers,
            regions,
        )
        epoch = _epoch(p, self.dataset, source, batch_size, num_classes)
        self.workers = int(knobs.get("num_workers") or 0)
        per_worker = _worker_options(knobs) if self.workers > 0 else {}
        self.loader = _loader(
            self.dataset, epoch, batch_size, self.workers, of(DataKnobs, knobs).pin_memory, per_worker
        )
        threaded = self.share > 0 or bool(knobs.get("device_prefetch")) or regions
        self.buffered_batches = _buffered_batches(self.workers, per_worker, threaded, self.share)
        self.side = _device_side(knobs, self.share, image_size, device, memory_format)
        self.epochs = 0  # loader restarts so far
        self.stats = torch.zeros(len(decode.STATS), dtype=torch.float64)
        self.cpu_images = 0
        self._closed = False
        self._run(threaded)

    def _run(self, threaded: bool) -> None:
        """Sets the GIL's switch interval, forks the workers and starts the prefetcher's threads (``threaded``)."""
        self._it: Any = None
        # One pull at a time: a DataLoader iterator is not thread-safe (two threads inside its next() can leave one
        # waiting for a batch the other took, for good), and an epoch's restart replaces it.
        self._pull = threading.Lock()
        # how soon a thread waiting for the GIL (the training step's launches) gets it from a busy one (the loader's
        # pin-memory thread, the device threads): sys.setswitchinterval while the pipeline runs, Python's 5 ms if null
        self._switch = sys.getswitchinterval()
        if self.knobs.get("switch_interval_ms"):
            sys.setswitchinterval(float(self.knobs["switch_interval_ms"]) / 1e3)
        # The workers are forked here, on the thread that builds the trial, before the prefetcher's threads start
        # and before the first step runs (a compile): a fork copies only the forking thread, and a lock another
        # thread held at that moment (a module being imported, a stream's buffer) stays held in every worker. Made
        # lazily on the decode thread, the iterator forked while the trial's first step and the device thread ran,
        # and hybrid trials, eager and compiled, sometimes waited for workers that never delivered a batch (H100,
        # 2026-12-06: 2 of 4 in one sweep): the suspected cause; since the change 15 of 15 ran (a sweep and eight
        # repeats, H100). Epoch restarts without persistent_workers still fork on the thread that pulls batches.
        if self.workers > 0:
            self._it = self._start()
        self.prefetcher = Prefetcher(self._next_host, self.side, decode=self.share > 0) if threaded else None

    def _start(self) -> Any:
        """A new loader iterator (forks the workers), with this process's objects frozen for the fork.

        The workers are forked from a process that holds CUDA tensors and events; a garbage collection in a worker
        that freed one of them (a cycle inherited from the parent) would call into CUDA there and abort the worker
        (seen as "CUDA error: initialization error"). Collected first and frozen across the fork, the inherited
        objects are never collected in the workers.
        """
        gc.collect()
        gc.freeze()
        try:
            return iter(self.loader)
        finally:
            gc.unfreeze()

    def _next_host(self) -> dict[str, torch.Tensor]:
        with self._pull:
            if self._closed:
                raise RuntimeError("the JPEG pipeline is closed")
            if self._it is None:
                self._it = self._start()
            try:
                host = next(self._it)
            except StopIteration:
                self.epochs += 1
                self._it = self._start()  # persistent workers are reused; otherwise new ones start
                host = next(self._it)
            self.stats += host["stats"].sum(0)
            self.cpu_images += len(host["stats"])
            return host

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch, on the device (copies are queued, not synchronized, with ``non_blocking``)."""
        if self.prefetcher is not None:
            return self.prefetcher.next()
        return self.side(self._next_host())

    def ready_batches(self) -> int | None:
        """Batches prepared and not yet taken: the workers' finished batches (before and after pinning) plus the
        decode and device threads' queues; None where the loader does not show them (a future torch).

        The loader's part is :func:`workloads.base.loader_ready` (its iterator's queues: private attributes, hence
        the fallback): warm-up uses the count to run until the buffer filled while the model started is used up.
        """
        ready = 0
        if self.prefetcher is not None:
            ready = self.prefetcher.queue.qsize() + (self.prefetcher.decoded.qsize() if self.prefetcher.decoded else 0)
        if self._it is None:
            return ready
        loader = loader_ready(self._it)
        return None if loader is None else ready + loader

    def close(self) -> None:
        """Stop the prefetcher's threads and the worker processes (and the pin-memory thread) now, not at collection."""
        self._closed = True  # a prefetcher thread still inside next() must not restart the loader
        sys.setswitchinterval(self._switch)
        if self.prefetcher is not None:
            self.prefetcher.close()
        it, self._it = self._it, None
        shutdown = getattr(it, "_shutdown_workers", None)  # the multi-process iterator's own cleanup
        if shutdown is not None:
            shutdown()

    def stage_ms(self) -> dict[str, float]:
        """Per-batch milliseconds of each pipeline stage, as wall time given its parallelism.

        CPU decode/augment seconds are spread over the workers that ran them in parallel (the trial process with
        no workers); GPU decode ran on the decode thread and the crop on the device thread (each its own lane); decode
        runs on both sides at once in the hybrid split, so its stage time is the slower side.
        """
        batches = max(1, self.side.batches)
        lanes = max(1, self.workers)
        cpu_decode = float(self.stats[0]) / lanes / batches * 1e3
        cpu_augment = float(self.stats[1]) / lanes / batches * 1e3
        return {
            "decode": max(cpu_decode, self.side.gpu_decode_s / batches * 1e3),
            "augmentation": max(cpu_augment, self.side.gpu_crop_s / batches * 1e3),
            "transfer": self.side.copy_s() / batches * 1e3,
        }

    def metrics(self) -> dict[str, Any]:
        """Columns of the trial's row that describe the pipeline (read once after the measured window)."""
        sizes = [os.path.getsize(path) for path, _ in self.dataset.samples]
        stages = self.stage_ms()
        return {
            "data_corpus_images": len(self.dataset),
            "data_corpus_bytes_mean": sum(sizes) / len(sizes),
            "data_corpus_state": self.corpus_state,  # user | reused | generated | discarded
            "data_corpus_s": self.corpus_s,  # seconds this trial spent finding or generating the corpus
            "data_decode_device": self.decode_device,
            "data_augment_device": self.augment_device if self.cpu_images else None,  # where CPU images were cropped
            "data_decode_strategy": decode.describe(self.knobs),
            "data_gpu_share": self.share,
            "data_gpu_decoder": self.side.gpu.decoder if self.share > 0 else None,
            "data_gpu_roi_decode": self.side.gpu.nvimgcodec.roi if self.side.gpu.nvimgcodec is not None else None,
            "data_gpu_decoded_pixels_frac": (self.side.gpu_pixels[0] / self.side.gpu_pixels[1])
            if self.side.gpu_pixels[1]
            else None,
            "data_bytes_decoded_cpu": float(self.stats[4]),
            "data_bytes_decoded_gpu": float(self.side.bytes_gpu),
            "data_decoded_pixels_frac": (float(self.stats[2]) / float(self.stats[3])) if self.cpu_images else None,
            "data_transfer_dtype": self.side.copied_dtype or None,  # dtype of the CPU crops as copied
            "data_decode_ms": stages["decode"],
            "data_augment_ms": stages["augmentation"],
            "data_transfer_ms": stages["transfer"],
            "data_limit_stage": max(stages, key=stages.__getitem__),
            "data_epochs": self.epochs,
        }


# ---------------------------------------------------------------- recipe snippets
# How each data knob reads in a training script (``python -m sweeper.report RESULTS --recipe``): knob -> value ->
# lines, beside the pipeline that applies them. The DataLoader arguments are gathered into one call by the recipe.

RECIPE_LOADER_ARGS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers")
RECIPE = {  # a literal, read from the source by the report (see workloads.common.RECIPE for the spelling)
    "worker_nice": {
        "0": [],
        "*": [
            "# DataLoader(..., worker_init_fn=lambda _: os.nice({value})): workers yield the "
            "CPU to the training process"
        ],
    },
    "switch_interval_ms": {
        "0": [],
        "*": [
            "sys.setswitchinterval({value} / 1000)  # the training thread gets the GIL "
            "back sooner from the input pipeline's threads"
        ],
    },
    "non_blocking": {"true": ["x = x.to('cuda', non_blocking=True); y = y.to('cuda', non_blocking=True)"]},
    "decode_device": {
        "cuda": [
            "# DataLoader workers only read file bytes; decode the batch on the GPU (nvJPEG):",
            "images = torchvision.io.decode_jpeg(list_of_bytes, device='cuda')",
        ],
        "hybrid": [
            "# decode gpu_share of each batch on the GPU (torchvision.io.decode_jpeg(..., device='cuda')),",
            "# the rest in the DataLoader workers on the CPU",
        ],
    },
    "gpu_share": {"*": ["gpu_share = {value}  # share of each batch decoded on the GPU"]},
    "gpu_decoder": {
        "nvimgcodec": [
            "# decode with nvImageCodec (hardware JPEG engines first) instead of torchvision:",
            "decoder = nvidia.nvimgcodec.Decoder(backends=[Backend(BackendKind.HW_GPU_ONLY), "
            "Backend(BackendKind.GPU_ONLY)])",
            "images = decoder.decode([nvidia.nvimgcodec.CodeStream(b) for b in list_of_bytes])",
        ]
    },
    "gpu_roi_decode": {
        "true": [
            "# decode only each crop window: CodeStream(b).get_sub_code_stream(region="
            "nvidia.nvimgcodec.Region(y0, x0, y1, x1))"
        ]
    },
    "cpu_decoder": {"pil": ["img = PIL.Image.open(path).convert('RGB')  # Pillow decodes in the workers"]},
    "decode_scale": {"reduced": ["img.draft('RGB', (size, size))  # libjpeg DCT scaling: decode at a reduced size"]},
    "augment_device": {
        "cuda": [
            "# workers decode and cut out each crop window (uint8, sizes vary); the GPU resizes and flips them:",
            "x = torchvision.ops.roi_align(windows.float(), boxes, (224, 224), sampling_ratio=0, aligned=True)",
        ]
    },
    "device_prefetch": {
        "true": [
            "# copy and normalize the next batches on a side CUDA stream, a few batches ahead",
            "with torch.cuda.stream(copy_stream): x_next = x_next.to('cuda', non_blocking=True)",
        ]
    },
    "transfer_dtype": {
        "uint8": [
            "# workers return uint8 crops; normalize after the copy to the GPU:",
            "x = x.to('cuda', non_blocking=True).float().div_(255).sub_(mean).div_(std)",
        ]
    },
}
