"""JPEG decoding and augmentation for resnet50's ``jpeg`` pipeline: on the CPU (two decoders) or batched on the GPU.

Every path applies the same augmentation, RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3) to ``image_size`` and a
horizontal flip with probability 1/2, and yields uint8 crops (3, S, S) that are normalized later (in the worker
for ``transfer_dtype: float32``, on the device for ``uint8`` and for GPU decoding).

CPU decoders (``knobs.cpu_decoder``):
- ``torchvision``: ``torchvision.io.decode_jpeg`` (libjpeg-turbo) of the whole image, then the crop resized with
  antialiasing on the uint8 tensor.
- ``pil``: Pillow (libjpeg-turbo too); the crop and resize are one ``Image.resize(box=...)`` call.
  With ``knobs.decode_scale: reduced`` the crop window is drawn first, from the header's size, and libjpeg's DCT
  scaling (``Image.draft``) decodes at 1/2, 1/4 or 1/8 of the size when the crop window is still at least
  ``image_size`` on both sides at that scale: every output pixel still comes from at least one decoded pixel
  (the final resize is a downscale or identity), so no detail of the 224x224 crop is lost, and the decode costs
  a fraction. ``full`` always decodes at full size.

GPU (:class:`GpuDecode`): one ``torchvision.io.decode_jpeg(list, device="cuda")`` call per batch (nvJPEG's batched
decoder, which uses the GPU's hardware JPEG engines where it has them), then every crop resized in one batched
``roi_align`` call.

Each CPU-decoded sample carries a small stats tensor (:data:`STATS`): seconds spent decoding and augmenting,
pixels decoded and pixels in the full image, file bytes; the pipeline sums them to say which stage limits it.
"""

from __future__ import annotations

import io
import math
import time
from typing import Any

import numpy as np
import torch
from PIL import Image
from torchvision import transforms
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.ops import roi_align
from torchvision.transforms import v2

CPU_DECODERS = ("torchvision", "pil")
DECODE_SCALES = ("full", "reduced")
DCT_DENOMINATORS = (8, 4, 2)  # libjpeg's DCT scaling: 1/8, 1/4, 1/2 (tried largest reduction first)
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)  # RandomResizedCrop's defaults
STATS = ("decode_s", "augment_s", "pixels_decoded", "pixels_full", "bytes")


def crop_window(height: int, width: int) -> tuple[int, int, int, int]:
    """(top, left, h, w) of a RandomResizedCrop window on a ``height x width`` image (torchvision's sampling)."""
    return transforms.RandomResizedCrop.get_params(torch.empty(1, 1, 1).expand(1, height, width), SCALE, RATIO)


def crop_windows(heights: torch.Tensor, widths: torch.Tensor, tries: int = 10) -> torch.Tensor:
    """(N, 4) int64 rows (top, left, h, w): :func:`crop_window` for N images at once, in a few tensor operations.

    The same sampling as torchvision's ``RandomResizedCrop.get_params``: up to ``tries`` draws of an area
    (``SCALE`` of the image's) and a log-uniform aspect ratio (``RATIO``); the first draw that fits is placed
    uniformly; an image none fits gets the central crop clamped to ``RATIO``. Drawn for a whole batch, because one
    Python call per image (~0.16 ms each) was most of the GPU path's per-batch crop time.
    """
    n = len(heights)
    hh, ww = heights.to(torch.float64).view(n, 1), widths.to(torch.float64).view(n, 1)
    area = hh * ww * torch.empty(n, tries, dtype=torch.float64).uniform_(*SCALE)
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    aspect = torch.exp(torch.empty(n, tries, dtype=torch.float64).uniform_(log_lo, log_hi))
    w = torch.round(torch.sqrt(area * aspect))
    h = torch.round(torch.sqrt(area / aspect))
    fits = (w > 0) & (w <= ww) & (h > 0) & (h <= hh)
    first = fits.to(torch.int8).argmax(dim=1, keepdim=True)  # the first draw that fits (0 if none does)
    any_fit = fits.any(dim=1)
    w, h = w.gather(1, first).view(n), h.gather(1, first).view(n)
    hh, ww = hh.view(n), ww.view(n)
    # the fallback: the central crop, clamped to the ratio range (torchvision's rounding: int(round(...)))
    ratio = ww / hh
    fw = torch.where(ratio < RATIO[0], ww, torch.where(ratio > RATIO[1], torch.round(hh * RATIO[1]), ww))
    fh = torch.where(ratio < RATIO[0], torch.round(ww / RATIO[0]), hh)
    w, h = torch.where(any_fit, w, fw), torch.where(any_fit, h, fh)
    # placement: uniform integers in [0, H - h] and [0, W - w] (randint's inclusive bounds), central for fallbacks
    top = torch.floor(torch.rand(n, dtype=torch.float64) * (hh - h + 1))
    left = torch.floor(torch.rand(n, dtype=torch.float64) * (ww - w + 1))
    top = torch.where(any_fit, top, torch.div(hh - h, 2, rounding_mode="floor"))
    left = torch.where(any_fit, left, torch.div(ww - w, 2, rounding_mode="floor"))
    return torch.stack([top, left, h, w], dim=1).to(torch.int64)


def dct_denominator(h: int, w: int, size: int) -> int:
    """The largest DCT scaling denominator that keeps an ``h x w`` crop window at least ``size`` on both sides."""
    for d in DCT_DENOMINATORS:
        if h // d >= size and w // d >= size:
            return d
    return 1


def _stats(decode_s: float, augment_s: float, decoded: int, full: int, nbytes: int) -> torch.Tensor:
    return torch.tensor([decode_s, augment_s, decoded, full, nbytes], dtype=torch.float64)


def _flip(img: torch.Tensor) -> torch.Tensor:
    return img.flip(-1) if torch.rand(()) < 0.5 else img


class CpuDecode:
    """JPEG bytes (uint8 1-D tensor) -> ``(uint8 crop (3, S, S), stats)`` with the chosen decoder and scale."""

    def __init__(self, image_size: int, decoder: str = "torchvision", scale: str = "full") -> None:
        if decoder not in CPU_DECODERS:
            raise ValueError(f"knobs.cpu_decoder must be one of {CPU_DECODERS}, got {decoder!r}")
        if scale not in DECODE_SCALES:
            raise ValueError(f"knobs.decode_scale must be one of {DECODE_SCALES}, got {scale!r}")
        if scale == "reduced" and decoder != "pil":
            raise ValueError(
                "knobs.decode_scale=reduced needs knobs.cpu_decoder=pil (libjpeg's DCT scaling through "
                "Image.draft); torchvision.io.decode_jpeg always decodes at full size"
            )
        self.size, self.decoder, self.reduced = image_size, decoder, scale == "reduced"

    def __call__(self, data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._pil(data) if self.decoder == "pil" else self._torchvision(data)

    def _torchvision(self, data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        img = decode_jpeg(data, mode=ImageReadMode.RGB)
        t1 = time.perf_counter()
        top, left, h, w = crop_window(img.shape[1], img.shape[2])
        crop = v2.functional.resized_crop(img, top, left, h, w, [self.size, self.size], antialias=True)
        crop = _flip(crop)
        pixels = img.shape[1] * img.shape[2]
        return crop, _stats(t1 - t0, time.perf_counter() - t1, pixels, pixels, data.numel())

    def _pil(self, data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        im = Image.open(io.BytesIO(data.numpy().tobytes()))
        width, height = im.size
        top, left, h, w = crop_window(height, width)
        d = dct_denominator(h, w, self.size) if self.reduced else 1
        if d > 1:  # DCT scaling: libjpeg decodes straight to ceil(width/d) x ceil(height/d)
            im.draft("RGB", (math.ceil(width / d), math.ceil(height / d)))
        im = im.convert("RGB")  # decodes
        t1 = time.perf_counter()
        sx, sy = im.size[0] / width, im.size[1] / height
        box = (left * sx, top * sy, (left + w) * sx, (top + h) * sy)
        out = im.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)
        crop = _flip(torch.from_numpy(np.array(out)).permute(2, 0, 1).contiguous())
        return crop, _stats(t1 - t0, time.perf_counter() - t1, im.size[0] * im.size[1], width * height, data.numel())


class GpuDecode:
    """JPEG byte tensors -> float32 crops (N, 3, S, S) on 0..255, decoded and cropped in batched calls on ``device``.

    :meth:`decode`: one ``decode_jpeg(list, device=...)`` call decodes the batch (nvJPEG's batched decoder, on the
    GPU's hardware JPEG engines where it has them); it returns when the images are decoded. torchvision's nvJPEG
    decoder writes its outputs from a private stream that waits for nothing, so the caller's current stream must have
    no work pending when it is called (memory freed there is then idle).

    :meth:`crop`: the images are flattened into one buffer (one ``cat``); each chunk of images, sorted by window
    size, is gathered into a canvas holding only its crop windows (one index computation and one gather, the
    horizontal flip folded into the column order), and one ``torchvision.ops.roi_align`` resizes every window:
    adaptive sampling (``sampling_ratio=0``) averages ceil(window / S) points per output pixel, so the downscale is
    antialiased like RandomResizedCrop's. The canvas keeps a one-pixel border around each window, clamped at the
    image's edge as roi_align clamps, so every output equals roi_align on the whole image with the window's box
    (tested). A fixed handful of kernels per batch, with no per-image Python beyond reading the shapes.
    """

    CHUNK = 64  # windows gathered together: bounds the canvas and its int64 index (~1 GB at 800x800 windows)

    def __init__(self, image_size: int, device: torch.device) -> None:
        self.size, self.device = image_size, device

    def decode(self, data: list[torch.Tensor]) -> list[torch.Tensor]:
        """The batch's images, uint8 (3, H, W) each, on the device (decoded when this returns)."""
        images = decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
        return [images] if isinstance(images, torch.Tensor) else list(images)

    def crop(self, images: list[torch.Tensor]) -> torch.Tensor:
        """A RandomResizedCrop window of each image, resized to S x S and flipped with probability 1/2."""
        n = len(images)
        shapes = torch.tensor([im.shape[1:] for im in images], dtype=torch.int64).view(n, 2)
        return self.resized_crops(images, crop_windows(shapes[:, 0], shapes[:, 1]), torch.rand(n) < 0.5)

    def resized_crops(self, images: list[torch.Tensor], windows: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
        """The (N, 4) ``windows`` (top, left, h, w) of ``images`` resized to S x S, flipped where ``flip`` (N,)."""
        n, size = len(images), self.size
        shapes = torch.tensor([im.shape[1:] for im in images], dtype=torch.int64).view(n, 2)
        heights, widths = shapes[:, 0], shapes[:, 1]
        top, left, h, w = windows.unbind(1)
        planes = heights * widths
        offsets = torch.cumsum(3 * planes, 0) - 3 * planes  # where each image starts in the flat buffer
        flat = torch.cat([im.reshape(-1) for im in images])
        out = torch.empty(n, 3, size, size, device=self.device)
        order = torch.argsort(h * w)  # similar windows share a canvas: less padding
        for start in range(0, n, self.CHUNK):
            ix = order[start : start + self.CHUNK]
            hc, wc = int(h[ix].max()) + 2, int(w[ix].max()) + 2  # the windows plus a one-pixel border
            # source row and column of every canvas position (row r, column c shows pixel top-1+r, left-1+c),
            # clamped to the image as roi_align clamps; flipped windows read their columns right to left
            rows = torch.minimum((top[ix, None] - 1 + torch.arange(hc)).clamp(min=0), heights[ix, None] - 1)
            c = torch.arange(wc)
            c = torch.where(flip[ix, None], w[ix, None] + 1 - c, c)
            cols = torch.minimum((left[ix, None] - 1 + c).clamp(min=0), widths[ix, None] - 1)
            row_start = (offsets[ix, None] + rows * widths[ix, None]).to(self.device)  # (m, hc), channel 0
            channel = torch.arange(3, device=self.device).view(1, 3, 1, 1) * planes[ix].to(self.device).view(
                -1, 1, 1, 1
            )
            index = (row_start[:, None, :, None] + channel) + cols.to(self.device)[:, None, None, :]
            canvas = flat[index].float()  # (m, 3, hc, wc)
            boxes = torch.stack(
                [
                    torch.arange(len(ix)),
                    torch.ones(len(ix), dtype=torch.int64),
                    torch.ones(len(ix), dtype=torch.int64),
                    1 + w[ix],
                    1 + h[ix],
                ],
                dim=1,
            ).to(torch.float32)
            out[ix.to(self.device)] = roi_align(
                canvas, boxes.to(self.device), (size, size), spatial_scale=1.0, sampling_ratio=0, aligned=True
            )
        return out

    def __call__(self, data: list[torch.Tensor]) -> tuple[torch.Tensor, float, float]:
        """:meth:`decode` then :meth:`crop`, with the decode and crop seconds (the crop synchronized: wall times)."""
        t0 = time.perf_counter()
        images = self.decode(data)
        t1 = time.perf_counter()
        out = self.crop(images)
        synchronize(self.device)
        return out, t1 - t0, time.perf_counter() - t1


def synchronize(device: torch.device) -> None:
    """Wait for the current stream's work on ``device`` (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def describe(knobs: dict[str, Any]) -> str:
    """A short name for the decode strategy these knobs select (for logs)."""
    device = knobs.get("decode_device", "cpu")
    if device == "cuda":
        return "gpu"
    cpu = f"{knobs.get('cpu_decoder') or 'torchvision'}/{knobs.get('decode_scale') or 'full'}"
    return cpu if device == "cpu" else f"hybrid({knobs.get('gpu_share')}) {cpu}"
