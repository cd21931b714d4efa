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
With ``knobs.augment_device: cuda`` either decoder only decodes and cuts out the crop window (:meth:`CpuDecode.region`);
the GPU resizes and flips every window of the batch in the batched crop below, as for GPU-decoded images.

GPU (:class:`GpuDecode`, ``knobs.gpu_decoder``): one batched decode call per batch, then every crop resized in one
batched ``roi_align`` call per chunk.
- ``torchvision``: ``torchvision.io.decode_jpeg(list, device="cuda")``: torchvision's batched decoder asks nvJPEG
  for its hardware backend (the GPU's JPEG engines, NVJPG: A100, H100, H200 and later) and batch-decodes baseline
  JPEGs there, others one by one with nvJPEG's CUDA decoder; its work runs on a stream of its own at normal
  priority. Beside a GPU kept busy it slows to a fraction of its pace when those streams share CUDA's default 8
  hardware work queues with the training step's; ``knobs.cuda_connections: 32`` gives them their own
  (docs/measurements/jpeg-pipeline.md, H200, 2026-12-02).
- ``nvimgcodec``: nvImageCodec's decoder, also asked for the hardware engines first, nvJPEG's CUDA decoder for
  what they cannot take; it can decode only a region. On the H200 it slowed beside a busy GPU as much as
  torchvision's decoder (README, Measured), so the space holds it at torchvision.
  ``knobs.gpu_roi_decode: true`` decodes each image only inside its crop window (and a one-pixel border).

Each CPU-decoded sample carries a small stats tensor (:data:`STATS`): seconds spent decoding and augmenting,
pixels decoded and pixels in the full image, file bytes; the pipeline sums them to say which stage limits it.
"""

from __future__ import annotations

import io
import math
import time
from typing import Any, NamedTuple

import numpy as np
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.ops import roi_align

from workloads.cpu_decode import (  # noqa: F401 (re-exported: the CPU side's names, next to the GPU's)
    DCT_DENOMINATORS,
    RATIO,
    SCALE,
    STATS,
    CpuDecode,
    crop_window,
    dct_denominator,
)
from workloads.spec.data import (  # noqa: F401 (re-exported)
    CPU_DECODERS,
    DECODE_SCALES,
    GPU_DECODERS,
    DataKnobs,
    nvimgcodec_missing,
)
from workloads.spec.typed import of


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


class Decoded(NamedTuple):
    """A batch decoded on the device: the images back to back in ``flat`` (uint8, each (3, H, W) planar), their
    ``shapes`` (N, 2) int64 (H, W) on the host, and the crop windows (N, 4) (top, left, h, w) within each image when
    the decoder already chose them (a region-of-interest decode), else None; ``pixels_full``: pixels in the whole
    images (more than ``shapes`` hold after a region-of-interest decode)."""

    flat: torch.Tensor
    shapes: torch.Tensor
    windows: torch.Tensor | None
    pixels_full: int


def flatten(images: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (3, H, W) -> (all of them back to back in one 1-D tensor, their (N, 2) int64 (H, W) on the host)."""
    shapes = torch.tensor([im.shape[1:] for im in images], dtype=torch.int64).view(len(images), 2)
    return torch.cat([im.reshape(-1) for im in images]), shapes


class _NvImageCodec:
    """nvImageCodec's batched decoder: the GPU's hardware JPEG engines first (nvJPEG's hardware backend), nvJPEG's
    CUDA decoder for any image they cannot take; on a CPU device its libjpeg-turbo backend (the same code path,
    which the CPU tests run). Planar RGB output; with ``roi`` each image is decoded only inside its crop window
    plus a one-pixel border (nvJPEG's region-of-interest decode). The Image objects of one batch are handed back
    to the decoder for the next batch (it reuses their buffers instead of allocating): :meth:`__call__` copies
    the images into one flat tensor before it returns."""

    def __init__(self, device: torch.device, roi: bool) -> None:
        from nvidia import nvimgcodec as nv

        self.nv, self.device, self.roi = nv, device, roi
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            backends = [nv.Backend(nv.BackendKind.HW_GPU_ONLY), nv.Backend(nv.BackendKind.GPU_ONLY)]
            # nvJPEG before 13.2 may get the region's outermost pixel wrong with fancy upsampling, and nvImageCodec
            # then refuses region decodes unless told otherwise: that pixel is the border kept for roi_align's
            # sampling at the window's edge, at most one of the ceil(window / S) points averaged there.
            options = ":enable_roi_fancy_upsampling=1" if roi else ""
            self.decoder = nv.Decoder(device_id=index, backends=backends, options=options)
        else:
            backends = [nv.Backend(nv.BackendKind.CPU_ONLY)]
            self.decoder = nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, backends=backends, max_num_cpu_threads=1)
        self.params = nv.DecodeParams(
            apply_exif_orientation=False, color_spec=nv.ColorSpec.SRGB, sample_format=nv.SampleFormat.P_RGB
        )
        self.reuse: list[Any] = []
        # nvImageCodec registers its JPEG decoders only where it finds their library (nvJPEG for the GPU ones): one
        # tiny image says so now, with the fix, instead of a batch of failures later
        probe = io.BytesIO()
        Image.new("RGB", (16, 16)).save(probe, format="JPEG")
        if self.decoder.decode([nv.CodeStream(probe.getvalue())], params=self.params)[0] is None:
            raise RuntimeError(
                f"nvImageCodec has no JPEG decoder for {device} (for a GPU it needs nvJPEG): "
                "pip install 'nvidia-nvimgcodec-cu13[nvjpeg]' (-cu12 for CUDA 12), or use knobs.gpu_decoder=torchvision"
            )

    def __call__(self, data: list[torch.Tensor]) -> Decoded:
        nv, n = self.nv, len(data)
        streams = [nv.CodeStream(t.numpy()) for t in data]
        windows = None
        heights = torch.tensor([s.height for s in streams], dtype=torch.int64)
        widths = torch.tensor([s.width for s in streams], dtype=torch.int64)
        if self.roi:
            windows = crop_windows(heights, widths)
            top, left, h, w = windows.unbind(1)
            y0, x0 = (top - 1).clamp(min=0), (left - 1).clamp(min=0)
            y1, x1 = torch.minimum(top + h + 1, heights), torch.minimum(left + w + 1, widths)
            streams = [
                s.get_sub_code_stream(region=nv.Region(*r))
                for s, r in zip(streams, torch.stack([y0, x0, y1, x1], 1).tolist())
            ]
            windows = torch.stack([top - y0, left - x0, h, w], 1)  # within the decoded region
        cuda = self.device.type == "cuda"
        stream = torch.cuda.current_stream(self.device).cuda_stream if cuda else 0
        reuse = self.reuse if len(self.reuse) == n else None
        images = self.decoder.decode(streams, images=reuse, params=self.params, cuda_stream=stream)
        failed = [i for i, im in enumerate(images) if im is None]
        if failed:
            raise RuntimeError(
                f"nvImageCodec could not decode {len(failed)} of {n} JPEGs (first: batch index "
                f"{failed[0]}); use knobs.gpu_decoder=torchvision"
            )
        tensors = [torch.from_dlpack(im) if cuda else torch.from_numpy(np.asarray(im)) for im in images]
        flat, shapes = flatten(tensors)
        self.reuse = list(images)
        return Decoded(flat, shapes, windows, int((heights * widths).sum()))


class GpuDecode:
    """JPEG byte tensors -> float32 crops (N, 3, S, S) on 0..255, decoded and cropped in batched calls on ``device``.

    :meth:`decode`: one batched call decodes the batch (``decoder``): ``torchvision`` is
    ``decode_jpeg(list, device=...)``, nvJPEG's batched decode (hardware engines first); ``nvimgcodec`` is
    nvImageCodec's decoder on the GPU's hardware JPEG engines first (A100, H100, H200 and later; nvJPEG's CUDA
    decoder for what they cannot take), and with ``roi`` decodes only each crop window. It
    returns when the images are decoded, copied back to back into one flat tensor (:class:`Decoded`).
    torchvision's nvJPEG decoder writes its outputs from a private stream that waits for nothing, so the caller's
    current stream must have no work pending when it is called (memory freed there is then idle).

    :meth:`crop`: each chunk of images, sorted by window size, is gathered from the flat buffer into a canvas
    holding only its crop windows (one index computation and one gather, the horizontal flip folded into the
    column order), and one ``torchvision.ops.roi_align`` resizes every window: adaptive sampling
    (``sampling_ratio=0``) averages ceil(window / S) points per output pixel, so the downscale is antialiased like
    RandomResizedCrop's. The canvas keeps a one-pixel border around each window, clamped at the image's edge as
    roi_align clamps, so every output equals roi_align on the whole image with the window's box (tested). A fixed
    handful of kernels per batch, with no per-image Python beyond reading the shapes.
    """

    CHUNK = 64  # windows gathered together: bounds the canvas and its int64 index (~1 GB at 800x800 windows)

    def __init__(self, image_size: int, device: torch.device, decoder: str = "torchvision", roi: bool = False) -> None:
        if decoder not in GPU_DECODERS:
            raise ValueError(f"knobs.gpu_decoder must be one of {GPU_DECODERS}, got {decoder!r}")
        if roi and decoder != "nvimgcodec":
            raise ValueError("knobs.gpu_roi_decode=true needs knobs.gpu_decoder=nvimgcodec")
        self.size, self.device, self.decoder = image_size, device, decoder
        self.nvimgcodec = _NvImageCodec(device, roi) if decoder == "nvimgcodec" else None

    def decode(self, data: list[torch.Tensor]) -> Decoded:
        """The batch's images on the device, back to back (decoded when this returns)."""
        if self.nvimgcodec is not None:
            return self.nvimgcodec(data)
        images = decode_jpeg(data, mode=ImageReadMode.RGB, device=self.device)
        images = [images] if isinstance(images, torch.Tensor) else list(images)
        flat, shapes = flatten(images)
        return Decoded(flat, shapes, None, int(shapes.prod(1).sum()))

    def crop(self, decoded: Decoded) -> torch.Tensor:
        """A RandomResizedCrop window of each image (the decoder's, if it chose them), resized to S x S and flipped
        with probability 1/2."""
        return self.crop_flat(decoded.flat, decoded.shapes, decoded.windows)

    def crop_flat(self, flat: torch.Tensor, shapes: torch.Tensor, windows: torch.Tensor | None) -> torch.Tensor:
        """:meth:`crop` of images given as ``flat``, ``shapes`` and ``windows`` (as in :class:`Decoded`; None: drawn
        here): also the crop windows CPU workers cut out with a one-pixel border (``augment_device=cuda``)."""
        if windows is None:
            windows = crop_windows(shapes[:, 0], shapes[:, 1])
        return self._crops(flat, shapes, windows, torch.rand(len(shapes)) < 0.5)

    def resized_crops(self, images: list[torch.Tensor], windows: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
        """The (N, 4) ``windows`` (top, left, h, w) of ``images`` resized to S x S, flipped where ``flip`` (N,)."""
        return self._crops(*flatten(images), windows, flip)

    def _crops(
        self, flat: torch.Tensor, shapes: torch.Tensor, windows: torch.Tensor, flip: torch.Tensor
    ) -> torch.Tensor:
        n, size, dev = len(shapes), self.size, self.device
        heights, widths = shapes[:, 0], shapes[:, 1]
        top, left, h, w = windows.unbind(1)
        planes = heights * widths
        offsets = torch.cumsum(3 * planes, 0) - 3 * planes  # where each image starts in the flat buffer
        out = torch.empty(n, 3, size, size, device=dev)
        order = torch.argsort(h * w)  # similar windows share a canvas: less padding
        # Every per-image number crosses to the device in one asynchronous copy (pinned on a GPU), sorted so each
        # chunk is a slice; the indices are computed there. No copy inside the loop: a copy from pageable memory
        # would block this thread until the stream's earlier kernels ran (one wait per chunk under a busy GPU).
        meta = torch.stack([top, left, h, w, heights, widths, offsets, flip.to(torch.int64), torch.arange(n)], 1)
        meta = meta[order]
        if dev.type == "cuda":
            meta = meta.pin_memory()
        meta_d = meta.to(dev, non_blocking=True)
        for start in range(0, n, self.CHUNK):
            stop = min(start + self.CHUNK, n)
            m = stop - start
            hc, wc = int(meta[start:stop, 2].max()) + 2, int(meta[start:stop, 3].max()) + 2  # windows + border
            t, lft, hh, ww, ih, iw, off, fl, ix = meta_d[start:stop].unbind(1)
            # source row and column of every canvas position (row r, column c shows pixel top-1+r, left-1+c),
            # clamped to the image as roi_align clamps; flipped windows read their columns right to left
            rows = torch.minimum((t[:, None] - 1 + torch.arange(hc, device=dev)).clamp(min=0), ih[:, None] - 1)
            c = torch.arange(wc, device=dev)
            c = torch.where(fl[:, None].bool(), ww[:, None] + 1 - c, c)
            cols = torch.minimum((lft[:, None] - 1 + c).clamp(min=0), iw[:, None] - 1)
            row_start = off[:, None] + rows * iw[:, None]  # (m, hc), channel 0
            channel = torch.arange(3, device=dev).view(1, 3, 1, 1) * (ih * iw).view(-1, 1, 1, 1)
            index = (row_start[:, None, :, None] + channel) + cols[:, None, None, :]
            canvas = flat[index].float()  # (m, 3, hc, wc)
            one = torch.ones(m, device=dev)
            index_f = torch.arange(m, device=dev, dtype=torch.float32)
            boxes = torch.stack([index_f, one, one, (1 + ww).float(), (1 + hh).float()], dim=1)
            out[ix] = roi_align(canvas, boxes, (size, size), spatial_scale=1.0, sampling_ratio=0, aligned=True)
        return out

    def __call__(self, data: list[torch.Tensor]) -> tuple[torch.Tensor, float, float]:
        """:meth:`decode` then :meth:`crop`, with the decode and crop seconds (the crop synchronized: wall times)."""
        t0 = time.perf_counter()
        decoded = self.decode(data)
        t1 = time.perf_counter()
        out = self.crop(decoded)
        synchronize(self.device)
        return out, t1 - t0, time.perf_counter() - t1


def synchronize(device: torch.device) -> None:
    """Wait for the current stream's work on ``device`` (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def describe(knobs: dict[str, Any]) -> str:
    """A short name for the decode strategy these knobs select (for logs)."""
    device = of(DataKnobs, knobs).decode_device
    gpu = f"gpu:{knobs.get('gpu_decoder') or 'torchvision'}{'+roi' if knobs.get('gpu_roi_decode') else ''}"
    if device == "cuda":
        return gpu
    cpu = f"{knobs.get('cpu_decoder') or 'torchvision'}/{knobs.get('decode_scale') or 'full'}"
    if knobs.get("augment_device") == "cuda":
        cpu += " (cropped on the GPU)"
    return cpu if device == "cpu" else f"hybrid({knobs.get('gpu_share')}) {gpu} + {cpu}"
