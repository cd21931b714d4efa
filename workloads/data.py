"""The ``jpeg`` input pipeline of resnet50: JPEG files on disk, decoded and augmented per sample, as in training.

``decode_device: cpu``: DataLoader workers (or the trial process, with ``num_workers: 0``) read each file, decode it
with torchvision.io (libjpeg-turbo), apply RandomResizedCrop + RandomHorizontalFlip on uint8 and normalize to float32;
the trial process copies the batch to the device. ``decode_device: cuda``: the workers only read the file bytes;
the trial process decodes the batch with nvJPEG (``torchvision.io.decode_jpeg(..., device="cuda")``) and crops,
flips and normalizes on the GPU. Either way the model gets float32 images in the configured memory format.

Without ``workload.root`` the pipeline reads a synthetic ImageNet-like corpus (smooth noise plus grain, quality 90,
~100 KB at 500x375), generated once into ``<results_dir>/data/jpeg-<w>x<h>-<n>`` and reused by later trials.
Epochs are ``workload.epoch_images`` long (the corpus cycled): restarting the loader every pass over a small corpus
drains its prefetch queue each time, which real training on a large dataset rarely does (on an H200 with 14 workers
the loader alone gave 1,300 img/s restarting every 8 batches, 2,930 img/s without restarts).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, RandomSampler
from torchvision import transforms
from torchvision.datasets import DatasetFolder
from torchvision.io import ImageReadMode, decode_jpeg, encode_jpeg, read_file
from torchvision.transforms import v2

from workloads.base import DeviceInfo

MEAN = (0.485, 0.456, 0.406)  # ImageNet channel statistics, on the 0..1 scale
STD = (0.229, 0.224, 0.225)
DECODE_DEVICES = ("cpu", "cuda")
TRANSFER_DTYPES = ("float32", "uint8")
EXTENSIONS = (".jpg", ".jpeg")
CORPUS_CLASSES = 10  # class subfolders of the generated corpus
CORPUS_QUALITY = 90
MANIFEST = "corpus.json"  # written last inside the corpus: its presence marks a complete corpus


# ---------------------------------------------------------------- knob validation


def knob_conflict(knobs: dict[str, Any], device_kind: str) -> str | None:
    """Why these data knobs cannot run on a ``device_kind`` ("cpu"/"cuda") device, or None."""
    decode = knobs.get("decode_device", "cpu")
    if decode not in DECODE_DEVICES:
        return f"knobs.decode_device must be one of {DECODE_DEVICES}, got {decode!r}"
    if decode == "cuda" and device_kind != "cuda":
        return "knobs.decode_device=cuda decodes JPEGs on a GPU, but this trial runs on the CPU; use decode_device=cpu"
    transfer = knobs.get("transfer_dtype") or "float32"
    if transfer not in TRANSFER_DTYPES:
        return f"knobs.transfer_dtype must be one of {TRANSFER_DTYPES}, got {transfer!r}"
    workers = knobs.get("num_workers") or 0
    if int(workers) < 0:
        return f"knobs.num_workers must be >= 0, got {workers}"
    if workers == 0 and knobs.get("prefetch_factor") is not None:
        return (f"knobs.prefetch_factor={knobs['prefetch_factor']} needs worker processes (knobs.num_workers > 0); "
                "leave it null, or sweep it under the condition knobs.prefetch_factor: 'knobs.num_workers > 0'")
    if workers == 0 and knobs.get("persistent_workers"):
        return ("knobs.persistent_workers=true needs worker processes (knobs.num_workers > 0); set it false, or sweep "
                "it under the condition knobs.persistent_workers: 'knobs.num_workers > 0'")
    return None


def check(knobs: dict[str, Any], device: DeviceInfo) -> str | None:
    """Why the data knobs cannot run on this device (the trial is skipped before launch), or None."""
    return knob_conflict(knobs, device.kind)


# ---------------------------------------------------------------- the generated corpus


def corpus_path(p: dict[str, Any], cache_root: str | os.PathLike[str]) -> Path:
    """``<cache_root>/jpeg-<w>x<h>-<n>`` for the workload's ``corpus_width/height/images``."""
    w, h, n = int(p.get("corpus_width", 500)), int(p.get("corpus_height", 375)), int(p.get("corpus_images", 2048))
    return Path(cache_root).expanduser().resolve() / f"jpeg-{w}x{h}-{n}"


def synthetic_image(gen: torch.Generator, width: int, height: int) -> torch.Tensor:
    """A natural-looking uint8 (3, height, width) image: smooth noise at three scales plus per-pixel grain.

    The grain sets the JPEG size: at 500x375 and quality 90 a file is ~100 KB, like an average ImageNet photo.
    """
    lh, lw = max(2, height // 4), max(2, width // 4)
    low = torch.zeros(1, 3, lh, lw)
    for cells, amp in ((4, 1.0), (16, 0.5), (lw, 0.35)):  # coarse blobs, mid-scale texture, fine detail
        noise = torch.rand(1, 3, max(2, cells * height // width), cells, generator=gen)
        low += amp * F.interpolate(noise, size=(lh, lw), mode="bilinear", align_corners=False)
    img = F.interpolate(low, size=(height, width), mode="bilinear", align_corners=False)[0]
    grain = torch.randint(-40, 41, (3, height, width), generator=gen, dtype=torch.int16)
    return (img * (255 / 1.85)).to(torch.int16).add_(grain).clamp_(0, 255).to(torch.uint8)


def _write_corpus(folder: Path, images: int, width: int, height: int) -> None:
    """``images`` JPEGs in up to ``CORPUS_CLASSES`` class subfolders (ImageFolder layout), then the manifest."""
    gen = torch.Generator().manual_seed(0)
    classes = min(CORPUS_CLASSES, images)  # no empty class folder: ImageFolder rejects those
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per-image ops are small: threads only add contention
    try:
        for c in range(classes):
            (folder / f"class_{c:03d}").mkdir()
        for i in range(images):
            data = encode_jpeg(synthetic_image(gen, width, height), quality=CORPUS_QUALITY)
            (folder / f"class_{i % classes:03d}" / f"{i:06d}.jpg").write_bytes(data.numpy().tobytes())
    finally:
        torch.set_num_threads(threads)
    manifest = {"images": images, "width": width, "height": height, "quality": CORPUS_QUALITY, "classes": classes}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def ensure_corpus(path: Path, images: int, width: int, height: int) -> str:
    """Generate the corpus at ``path`` unless it is there; returns "reused", "generated" or "discarded".

    It is written into a temporary sibling folder and renamed into place (atomic), so concurrent trials never read
    a partial corpus. When two trials generate at once, the one whose rename comes second discards its copy and
    uses the winner's ("discarded").
    """
    if (path / MANIFEST).is_file():
        return "reused"
    if path.exists():
        raise RuntimeError(f"{path} exists but holds no complete corpus (no {MANIFEST}); delete it and run again")
    if images < 1 or width < 8 or height < 8:
        raise ValueError(f"workload.corpus_images/width/height must be >= 1/8/8, got {images}/{width}/{height}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the corpus is shared by every trial
    try:
        _write_corpus(tmp, images, width, height)
        try:
            os.rename(tmp, path)
        except OSError:  # ENOTEMPTY/EEXIST: another process renamed its complete copy first
            if not (path / MANIFEST).is_file():
                raise
            return "discarded"
        return "generated"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # left only when the rename did not happen


# ---------------------------------------------------------------- per-sample work (runs in the DataLoader workers)


class DecodeAugment:
    """JPEG bytes -> RGB uint8 -> RandomResizedCrop(size) -> RandomHorizontalFlip -> normalized float32 (3, S, S),
    or the uint8 crop itself with ``normalize=False`` (``transfer_dtype: uint8``: normalized after the copy)."""

    def __init__(self, image_size: int, normalize: bool = True) -> None:
        self.augment = v2.Compose([v2.RandomResizedCrop(image_size, antialias=True), v2.RandomHorizontalFlip()])
        self.normalize = normalize

    def __call__(self, data: torch.Tensor) -> torch.Tensor:
        img = self.augment(decode_jpeg(data, mode=ImageReadMode.RGB))  # crop and resize on uint8: 4x less memory
        if not self.normalize:
            return img
        return v2.functional.normalize(v2.functional.to_dtype(img, torch.float32, scale=True), MEAN, STD)


def collate_bytes(samples: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch of undecoded files, for decoding in the trial process: ``(packed, labels)``.

    ``packed`` is one 1-D uint8 tensor: the files' lengths as int64 (8 bytes each), then the files back to back
    (:func:`unpack_bytes` splits it). One tensor, so a worker hands a batch over through one shared-memory segment;
    a list of N tensors needs N file-descriptor handoffs, which is slow and was seen to stall a worker.
    """
    files = [s[0] for s in samples]
    lengths = torch.tensor([f.numel() for f in files], dtype=torch.int64)
    packed = torch.cat([lengths.view(torch.uint8), *files])
    return packed, torch.tensor([s[1] for s in samples], dtype=torch.int64)


def unpack_bytes(packed: torch.Tensor, count: int) -> list[torch.Tensor]:
    """The ``count`` files of a :func:`collate_bytes` batch, as views of ``packed``."""
    lengths = packed[: 8 * count].view(torch.int64).tolist()
    return list(torch.split(packed[8 * count:], lengths))


class Normalize:
    """Float images on the 0..255 scale -> normalized with the ImageNet mean/std, in place, on ``device``."""

    def __init__(self, device: torch.device) -> None:
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        return batch.sub_(self.mean).div_(self.std)


class DeviceDecode:
    """A batch of JPEG byte tensors -> normalized float32 (N, 3, S, S) on ``device``, decoded and augmented there.

    Crop windows are drawn per image as RandomResizedCrop does; each crop is resized on its own (images differ in
    size), then the batch is flipped, scaled and normalized at once.

    On a GPU this runs on a side stream that has finished its previous work: torchvision's nvJPEG decoder allocates
    its outputs on the current stream but writes them from a private stream that waits for nothing, so on the
    training stream it can overwrite memory that queued kernels still use (seen as NaN losses).
    """

    def __init__(self, image_size: int, device: torch.device) -> None:
        self.size, self.device = image_size, device
        self.scale, self.ratio = (0.08, 1.0), (3 / 4, 4 / 3)
        self.normalize = Normalize(device)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def __call__(self, data: list[torch.Tensor]) -> torch.Tensor:
        if self.stream is None:
            return self._decode(data)
        with torch.cuda.stream(self.stream):
            self.stream.synchronize()  # memory freed on this stream is now idle: safe for nvJPEG to write
            batch = self._decode(data)
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        batch.record_stream(current)  # not reused for a later decode while the training stream reads it
        return batch

    def _decode(self, data: list[torch.Tensor]) -> torch.Tensor:
        images = decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
        crops = []
        for img in images:
            top, left, h, w = transforms.RandomResizedCrop.get_params(img, self.scale, self.ratio)
            crop = img[None, :, top:top + h, left:left + w].float()
            crops.append(F.interpolate(crop, size=(self.size, self.size), mode="bilinear", align_corners=False,
                                       antialias=True))
        batch = torch.cat(crops)
        flip = torch.rand(len(crops)) < 0.5
        if flip.any():
            idx = flip.nonzero().flatten().to(self.device)
            batch[idx] = batch[idx].flip(-1)
        return self.normalize(batch)


# ---------------------------------------------------------------- the pipeline


def _dataset(root: Path, transform: DecodeAugment | None, source: str) -> DatasetFolder:
    try:
        return DatasetFolder(str(root), loader=read_file, extensions=EXTENSIONS, transform=transform)
    except (FileNotFoundError, OSError) as e:
        raise ValueError(f"{source}={str(root)!r} is no JPEG ImageFolder ({e}); point it at a folder with one "
                         "subfolder per class holding .jpg files, or set it null to use the generated corpus") from None


class Pipeline:
    """Batches of augmented images on the device, forever: ``next() -> (images, labels)``.

    images: float32 (batch, 3, image_size, image_size), normalized with the ImageNet mean/std, in ``memory_format``;
    labels: int64 (batch,). An epoch is ``workload.epoch_images`` images (the corpus reshuffled and cycled; null:
    one pass); then the loader is restarted, keeping its workers with ``persistent_workers``.
    """

    def __init__(self, p: dict[str, Any], knobs: dict[str, Any], *, batch_size: int, image_size: int,
                 device: torch.device, memory_format: torch.memory_format = torch.contiguous_format,
                 cache_root: str | os.PathLike[str] = "results/data", num_classes: int | None = None) -> None:
        reason = knob_conflict(knobs, device.type)
        if reason:
            raise ValueError(reason)
        self.device, self.memory_format = device, memory_format
        self.non_blocking = bool(knobs.get("non_blocking", False))
        self.decode_device = str(knobs.get("decode_device", "cpu"))
        # uint8: workers hand over the uint8 crops (a quarter of the bytes to copy) and normalization runs on the
        # trial's device after the copy; float32: workers normalize, the float32 batch crosses to the device.
        self.transfer_uint8 = self.decode_device == "cpu" and knobs.get("transfer_dtype") == "uint8"
        self.normalize = Normalize(device) if self.transfer_uint8 else None
        t0 = time.perf_counter()
        if p.get("root"):
            self.root, self.corpus_state, source = Path(p["root"]).expanduser().resolve(), "user", "workload.root"
        else:
            self.root, source = corpus_path(p, cache_root), "corpus"
            self.corpus_state = ensure_corpus(self.root, int(p.get("corpus_images", 2048)),
                                              int(p.get("corpus_width", 500)), int(p.get("corpus_height", 375)))
        self.corpus_s = time.perf_counter() - t0
        on_device = self.decode_device == "cuda"
        self.dataset = _dataset(self.root, None if on_device else DecodeAugment(image_size, not self.transfer_uint8),
                                source)
        epoch = int(p.get("epoch_images") or len(self.dataset))
        if epoch < batch_size:
            raise ValueError(f"an epoch of {epoch} images ({source}: {len(self.dataset)}) holds no full batch of "
                             f"knobs.batch_size={batch_size}; raise workload.epoch_images or lower the batch size")
        if num_classes is not None and len(self.dataset.classes) > num_classes:
            n = len(self.dataset.classes)
            raise ValueError(f"{source} has {n} classes but workload.num_classes={num_classes}; "
                             f"set workload.num_classes >= {n}")
        self.device_decode = DeviceDecode(image_size, device) if on_device else None
        workers = int(knobs.get("num_workers") or 0)
        per_worker: dict[str, Any] = {}
        if workers > 0:
            # Fork the workers from this process, as a training script on Linux does. A trial process comes from
            # the sweeper's forkserver, so multiprocessing's default there is "forkserver": each trial would start
            # a fresh server that imports torch again before its first worker runs (first batch 140 s on the H200
            # with 14 workers, 3 s on the CI machine with 2). Workers never touch CUDA: cuda decoding happens here.
            per_worker["multiprocessing_context"] = "fork"
            per_worker["persistent_workers"] = bool(knobs.get("persistent_workers", False))
            if knobs.get("prefetch_factor") is not None:
                per_worker["prefetch_factor"] = int(knobs["prefetch_factor"])
        sampler = RandomSampler(self.dataset, num_samples=epoch, generator=torch.Generator().manual_seed(0))
        self.loader = DataLoader(self.dataset, batch_size=batch_size, sampler=sampler, drop_last=True,
                                 num_workers=workers, pin_memory=bool(knobs.get("pin_memory", False)),
                                 collate_fn=collate_bytes if on_device else None, **per_worker)
        # Batches the loader can hold ready: each worker keeps prefetch_factor (torch's default 2) in flight.
        self.buffered_batches = workers * int(per_worker.get("prefetch_factor", 2)) if workers else 0
        self.epochs = 0  # loader restarts so far
        self._it: Any = None

    def _next_host(self) -> tuple[Any, torch.Tensor]:
        if self._it is None:
            self._it = iter(self.loader)
        try:
            return next(self._it)
        except StopIteration:
            self.epochs += 1
            self._it = iter(self.loader)  # persistent workers are reused; otherwise new ones start
            return next(self._it)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch, on the device (copies are queued, not synchronized, with ``non_blocking``)."""
        data, labels = self._next_host()
        if self.device_decode is not None:
            images = self.device_decode(unpack_bytes(data, len(labels)))
        else:
            images = data.to(self.device, non_blocking=self.non_blocking)
            if self.normalize is not None:
                images = self.normalize(images.float())
        images = images.contiguous(memory_format=self.memory_format)
        return images, labels.to(self.device, non_blocking=self.non_blocking)

    def close(self) -> None:
        """Stop the worker processes (and the pin-memory thread) now rather than at garbage collection."""
        it, self._it = self._it, None
        shutdown = getattr(it, "_shutdown_workers", None)  # the multi-process iterator's own cleanup
        if shutdown is not None:
            shutdown()

    def metrics(self) -> dict[str, Any]:
        """Columns of the trial's row that describe the pipeline (read once after the measured window)."""
        sizes = [os.path.getsize(path) for path, _ in self.dataset.samples]
        return {
            "data_corpus_images": len(self.dataset),
            "data_corpus_bytes_mean": sum(sizes) / len(sizes),
            "data_corpus_state": self.corpus_state,  # user | reused | generated | discarded
            "data_corpus_s": self.corpus_s,  # seconds this trial spent finding or generating the corpus
            "data_decode_device": self.decode_device,
            "data_epochs": self.epochs,
        }


# ---------------------------------------------------------------- recipe snippets
# How each data knob reads in a training script (``python -m sweeper.report RESULTS --recipe``): knob -> value ->
# lines, beside the pipeline that applies them. The DataLoader arguments are gathered into one call by the recipe.

RECIPE_LOADER_ARGS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers")
RECIPE: dict[str, Any] = {
    "non_blocking": lambda v: ["x = x.to('cuda', non_blocking=True); y = y.to('cuda', non_blocking=True)"] if v else [],
    "decode_device": lambda v: ["# DataLoader workers only read file bytes; decode on the GPU:",
                                "images = torchvision.io.decode_jpeg(list_of_bytes, device='cuda')"]
    if v == "cuda" else [],
    "transfer_dtype": lambda v: ["# workers return uint8 crops; normalize after the copy to the GPU:",
                                 "x = x.to('cuda', non_blocking=True).float().div_(255).sub_(mean).div_(std)"]
    if v == "uint8" else [],
}
