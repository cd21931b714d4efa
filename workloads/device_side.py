"""The device side of resnet50's ``jpeg`` pipeline (runs in the trial process): host batch -> device batch.

:class:`DeviceSide` copies the CPU-decoded crops (normalizing uint8 ones on the device) and decodes the GPU share
of a batch (``workloads.decode.GpuDecode``); :class:`Prefetcher` runs it on background threads and CUDA streams a
few batches ahead (decoding on one thread, cropping and copying on another). :func:`pack_bytes` /
:func:`unpack_bytes` carry undecoded files from the workers in one tensor.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from typing import Any

import torch

from workloads import decode

MEAN = (0.485, 0.456, 0.406)  # ImageNet channel statistics, on the 0..1 scale
STD = (0.229, 0.224, 0.225)
PREFETCH_DEPTH = 3  # batches the background device thread keeps ready
DECODED_DEPTH = 2  # decoded batches the decode thread keeps ready for the device thread


class Normalize:
    """Float images on the 0..255 scale -> normalized with the ImageNet mean/std, in place, on ``device``."""

    def __init__(self, device: torch.device) -> None:
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        return batch.sub_(self.mean).div_(self.std)


def pack_bytes(files: list[torch.Tensor]) -> torch.Tensor:
    """Files as one 1-D uint8 tensor: their lengths as int64 (8 bytes each), then the files back to back.

    One tensor, so a worker hands a batch over through one shared-memory segment; a list of N tensors needs N
    file-descriptor handoffs, which is slow and was seen to stall a worker.
    """
    lengths = torch.tensor([f.numel() for f in files], dtype=torch.int64)
    return torch.cat([lengths.view(torch.uint8), *files])


def unpack_bytes(packed: torch.Tensor, count: int) -> list[torch.Tensor]:
    """The ``count`` files of a :func:`pack_bytes` tensor, as views of it."""
    lengths = packed[: 8 * count].view(torch.int64).tolist()
    return list(torch.split(packed[8 * count :], lengths))


class DeviceSide:
    """Host batch -> (images float32 normalized, in ``memory_format``, labels) on ``device``; timings kept.

    CPU crops are copied (``non_blocking`` if asked) and, if uint8, normalized on the device; the GPU share is
    decoded in one batched call (:meth:`decode`, which a :class:`Prefetcher` runs on its own thread ahead of the
    rest) and cropped there; the two parts are concatenated in the labels' order.
    """

    def __init__(
        self,
        image_size: int,
        device: torch.device,
        memory_format: torch.memory_format,
        non_blocking: bool,
        gpu_decoder: str = "torchvision",
        roi: bool = False,
    ) -> None:
        self.device, self.memory_format, self.non_blocking = device, memory_format, non_blocking
        self.normalize = Normalize(device)
        self.gpu = decode.GpuDecode(image_size, device, gpu_decoder, roi)
        self.cuda = device.type == "cuda"
        self.gpu_decode_s = self.gpu_crop_s = 0.0
        self.copies: list[tuple[Any, Any]] = []  # CUDA event pairs around copies (read after the window)
        self.copy_host_s = 0.0  # CPU device: host time of the copies
        self.batches = 0
        self.copied_dtype = ""
        self.bytes_gpu = 0
        self.gpu_pixels = [0, 0]  # pixels the GPU decoder decoded, pixels in those images (a ROI decode: fewer)

    def decode(self, host: dict[str, Any]) -> dict[str, Any]:
        """Decodes the batch's GPU share (if any) into ``host["gpu_images"]`` (a ``decode.Decoded``); returns
        ``host``.

        Call it with a current stream that has no work pending (see ``decode.GpuDecode.decode``).
        """
        n_gpu = int(host["n_gpu"])
        if n_gpu and "gpu_images" not in host:
            files = unpack_bytes(host["packed"], n_gpu)
            self.bytes_gpu += sum(f.numel() for f in files)
            t0 = time.perf_counter()
            decoded = host["gpu_images"] = self.gpu.decode(files)
            self.gpu_decode_s += time.perf_counter() - t0
            self.gpu_pixels[0] += int(decoded.shapes.prod(1).sum())
            self.gpu_pixels[1] += decoded.pixels_full
        return host

    def _copy(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on the device (``non_blocking`` if asked), the copy timed (CUDA events; host time on a CPU)."""
        self.copied_dtype = str(tensor.dtype).replace("torch.", "")
        if not self.cuda:
            t0 = time.perf_counter()
            on_device = tensor.to(self.device)
            self.copy_host_s += time.perf_counter() - t0
            return on_device
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        on_device = tensor.to(self.device, non_blocking=self.non_blocking)
        end.record()
        if len(self.copies) < 512:
            self.copies.append((start, end))
        return on_device

    def __call__(self, host: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        parts = []
        crops = host["crops"]
        if crops.numel():
            on_device = self._copy(crops)
            parts.append(self.normalize(on_device.float()) if crops.dtype == torch.uint8 else on_device)
        # the GPU's crops: the CPU-decoded crop windows (augment_device=cuda), then the GPU share (decoded by now
        # when a prefetcher's decode thread ran ahead)
        regions = None
        if len(host.get("region_shapes", ())):
            regions = (self._copy(host["regions"]), host["region_shapes"], host["region_windows"])
        decoded = self.decode(host).pop("gpu_images") if int(host["n_gpu"]) else None
        t0 = time.perf_counter()
        cropped = [self.gpu.crop_flat(*regions)] if regions is not None else []
        if decoded is not None:
            cropped.append(self.gpu.crop(decoded))
        if cropped:
            decode.synchronize(self.device)
            self.gpu_crop_s += time.perf_counter() - t0
            parts.extend(self.normalize(c) for c in cropped)
        self.batches += 1
        images = parts[0] if len(parts) == 1 else torch.cat(parts)
        labels = host["labels"].to(self.device, non_blocking=self.non_blocking)
        return images.contiguous(memory_format=self.memory_format), labels

    def copy_s(self) -> float:
        """Seconds spent copying CPU crops to the device (mean over the copies timed, times the batches). The copies
        timed so far, each waited for: a :class:`Prefetcher`'s thread may time another meanwhile, recorded after any
        device-wide synchronize (an H100 JPEG trial failed on one, its window measured: "Both events must be
        completed before calculating elapsed time")."""
        copies = list(self.copies)
        if not copies:
            return self.copy_host_s
        for _start, end in copies:
            end.synchronize()  # recorded after its start on the same stream: both complete
        ms = [a.elapsed_time(b) for a, b in copies]
        return sum(ms) / len(ms) / 1e3 * self.batches


class Prefetcher:
    """Runs :class:`DeviceSide` on background threads and side streams, ``PREFETCH_DEPTH`` batches ahead.

    With a GPU share (``decode=True``) two threads form a pipeline: the decode thread pulls host batches and decodes
    their GPU share on its own stream (nvJPEG, which releases the GIL while it waits for the hardware decoders),
    while the device thread crops the previous batch and copies CPU crops on another stream: decoding batch k+1
    overlaps cropping batch k. Without one, the device thread pulls the host batches itself. Both streams have high
    priority, so their few kernels are scheduled between the training step's instead of after them.

    The device thread queues each device batch with an event; ``next()`` makes the training stream wait for that
    event (no host sync) and marks the tensors as used there. The decode thread synchronizes its stream before each
    decode, so memory freed there is idle when nvJPEG (which writes from a private stream) reuses it; decoded images
    are marked as used on the device thread's stream, so their memory returns only after the crop read them.
    """

    def __init__(self, source: Any, side: DeviceSide, decode: bool = False) -> None:
        self.source, self.side = source, side
        cuda = side.cuda
        self.stream = torch.cuda.Stream(side.device, priority=-1) if cuda else None
        self.decode_stream = torch.cuda.Stream(side.device, priority=-1) if cuda and decode else None
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=PREFETCH_DEPTH)
        self.decoded: queue.Queue[Any] | None = queue.Queue(maxsize=DECODED_DEPTH) if decode else None
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, name="device-prefetch", daemon=True)]
        if decode:
            self.threads.append(threading.Thread(target=self._run_decode, name="device-decode", daemon=True))
        for t in self.threads:
            t.start()

    def _put(self, q: queue.Queue[Any], item: Any) -> None:
        while not self.stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _get(self, q: queue.Queue[Any]) -> Any:
        while not self.stop.is_set():
            try:
                return q.get(timeout=0.1)
            except queue.Empty:
                continue
        raise _Stopped

    def _run_decode(self) -> None:
        assert self.decoded is not None
        try:
            while not self.stop.is_set():
                host = self.source()
                if self.stop.is_set():
                    break
                if self.decode_stream is None:
                    self.side.decode(host)
                    event = None
                else:
                    with torch.cuda.stream(self.decode_stream):
                        self.decode_stream.synchronize()
                        self.side.decode(host)
                        event = torch.cuda.Event()
                        event.record(self.decode_stream)
                self._put(self.decoded, (host, event))
        except BaseException as e:  # noqa: BLE001 - handed on through the device thread to the consumer
            self._put(self.decoded, e)

    def _next_host(self) -> dict[str, Any]:
        if self.decoded is None:
            return self.source()
        item = self._get(self.decoded)
        if isinstance(item, BaseException):
            raise item
        host, event = item
        if event is not None and self.stream is not None:
            self.stream.wait_event(event)
            if "gpu_images" in host:
                host["gpu_images"].flat.record_stream(self.stream)
        return host

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                if self.stream is None:
                    item: Any = (*self.side(self._next_host()), None)
                else:
                    with torch.cuda.stream(self.stream):
                        if self.decoded is None:
                            # nvJPEG would run on this stream (a GPU share reaching a prefetcher without a decode
                            # thread): memory freed here must be idle before it reuses it
                            self.stream.synchronize()
                        images, labels = self.side(self._next_host())
                        event = torch.cuda.Event()
                        event.record(self.stream)
                    item = (images, labels, event)
                self._put(self.queue, item)
        except _Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(self.queue, e)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        item = self.queue.get()
        if isinstance(item, BaseException):
            raise RuntimeError(f"the device prefetch thread failed: {item!r}") from item
        images, labels, event = item
        if event is not None:
            current = torch.cuda.current_stream(self.side.device)
            current.wait_event(event)
            images.record_stream(current)
            labels.record_stream(current)
        return images, labels

    def close(self) -> None:
        self.stop.set()
        for q in (self.queue, self.decoded):
            try:
                while q is not None:
                    q.get_nowait()
            except queue.Empty:
                pass
        for t in self.threads:
            t.join(timeout=10)
            if t.is_alive():
                warnings.warn(f"the prefetcher's {t.name} thread did not stop in 10 s", RuntimeWarning, stacklevel=2)


class _Stopped(Exception):
    """The prefetcher was closed while a thread waited for its input."""
