"""The CPU side of resnet50's JPEG decode (``workloads.decode`` holds the GPU side and re-exports these names).

:class:`CpuDecode` decodes one JPEG with the chosen decoder (``knobs.cpu_decoder``: torchvision or PIL) and scale
(``knobs.decode_scale``), then either crops, resizes and flips it (``__call__``) or only cuts out the crop window
for the GPU to resize (``region``, ``knobs.augment_device: cuda``); the module docstring of ``workloads.decode``
describes each path.
"""

from __future__ import annotations

import io
import math
import time

import numpy as np
import torch
from PIL import Image
from torchvision import transforms
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms import v2

from workloads.spec.data import CPU_DECODERS, DECODE_SCALES

DCT_DENOMINATORS = (8, 4, 2)  # libjpeg's DCT scaling: 1/8, 1/4, 1/2 (tried largest reduction first)
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)  # RandomResizedCrop's defaults
STATS = ("decode_s", "augment_s", "pixels_decoded", "pixels_full", "bytes")


def crop_window(height: int, width: int) -> tuple[int, int, int, int]:
    """(top, left, h, w) of a RandomResizedCrop window on a ``height x width`` image (torchvision's sampling)."""
    return transforms.RandomResizedCrop.get_params(torch.empty(1, 1, 1).expand(1, height, width), SCALE, RATIO)


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

    def _pil_decode(self, data: torch.Tensor) -> tuple[Image.Image, int, int, tuple[int, int, int, int]]:
        """The decoded image (DCT-reduced when allowed), the full width and height, the crop window (full size)."""
        im = Image.open(io.BytesIO(data.numpy().tobytes()))
        width, height = im.size
        top, left, h, w = crop_window(height, width)
        d = dct_denominator(h, w, self.size) if self.reduced else 1
        if d > 1:  # DCT scaling: libjpeg decodes straight to ceil(width/d) x ceil(height/d)
            im.draft("RGB", (math.ceil(width / d), math.ceil(height / d)))
        return im.convert("RGB"), width, height, (top, left, h, w)  # convert decodes

    def region(self, data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``knobs.augment_device: cuda``: JPEG bytes -> (the crop window with a one-pixel border, uint8 (3, h, w),
        clamped at the image's edge; the window (top, left, h, w) within it, int64 (4,); stats). The GPU resizes
        and flips it (``GpuDecode.crop``), which gives the same output as resizing the window on the whole image.
        With DCT scaling the window is scaled with the image (still >= ``image_size`` on both sides)."""
        t0 = time.perf_counter()
        if self.decoder == "pil":
            im, width, height, (top, left, h, w) = self._pil_decode(data)
            hwc = np.asarray(im)  # (H', W', 3), read-only
            dh, dw = hwc.shape[0], hwc.shape[1]
        else:
            chw = decode_jpeg(data, mode=ImageReadMode.RGB)
            height, width = dh, dw = chw.shape[1], chw.shape[2]
            top, left, h, w = crop_window(height, width)
        t1 = time.perf_counter()
        if (dh, dw) != (height, width):  # the window on the reduced image
            sy, sx = dh / height, dw / width
            top, left = min(int(top * sy), dh - 1), min(int(left * sx), dw - 1)
            h, w = max(1, min(dh - top, round(h * sy))), max(1, min(dw - left, round(w * sx)))
        y0, x0 = max(top - 1, 0), max(left - 1, 0)
        y1, x1 = min(top + h + 1, dh), min(left + w + 1, dw)
        if self.decoder == "pil":
            region = torch.from_numpy(np.ascontiguousarray(hwc[y0:y1, x0:x1].transpose(2, 0, 1)))
        else:
            region = chw[:, y0:y1, x0:x1].contiguous()
        window = torch.tensor([top - y0, left - x0, h, w], dtype=torch.int64)
        stats = _stats(t1 - t0, time.perf_counter() - t1, dh * dw, height * width, data.numel())
        return region, window, stats

    def _pil(self, data: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        im, width, height, (top, left, h, w) = self._pil_decode(data)
        t1 = time.perf_counter()
        sx, sy = im.size[0] / width, im.size[1] / height
        box = (left * sx, top * sy, (left + w) * sx, (top + h) * sy)
        out = im.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)
        crop = _flip(torch.from_numpy(np.array(out)).permute(2, 0, 1).contiguous())
        return crop, _stats(t1 - t0, time.perf_counter() - t1, im.size[0] * im.size[1], width * height, data.numel())
