"""The device side of resnet50's ``jpeg`` pipeline (runs in the trial process): host batch -> device batch.

:class:`DeviceSide` copies the CPU-decoded crops (normalizing uint8 ones on the device) and decodes the GPU share
of a batch (``workloads.decode.GpuDecode``); :class:`Prefetcher` runs it on a background thread and CUDA stream a
few batches ahead. :func:`pack_bytes` / :func:`unpack_bytes` carry undecoded files from the workers in one tensor.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import torch

from workloads import decode

MEAN = (0.485, 0.456, 0.406)  # ImageNet channel statistics, on the 0..1 scale
STD = (0.229, 0.224, 0.225)
PREFETCH_DEPTH = 3  # batches the background device thread keeps ready


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
    decoded in one batched call and cropped there; the two parts are concatenated in the labels' order.
    """

    def __init__(
        self, image_size: int, device: torch.device, memory_format: torch.memory_format, non_blocking: bool
    ) -> None:
        self.device, self.memory_format, self.non_blocking = device, memory_format, non_blocking
        self.normalize = Normalize(device)
        self.gpu = decode.GpuDecode(image_size, device)
        self.cuda = device.type == "cuda"
        self.gpu_decode_s = self.gpu_crop_s = 0.0
        self.copies: list[tuple[Any, Any]] = []  # CUDA event pairs around copies (read after the window)
        self.copy_host_s = 0.0  # CPU device: host time of the copies
        self.batches = 0
        self.copied_dtype = ""
        self.bytes_gpu = 0

    def __call__(self, host: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        parts = []
        crops = host["crops"]
        if crops.numel():
            self.copied_dtype = str(crops.dtype).replace("torch.", "")
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                on_device = crops.to(self.device, non_blocking=self.non_blocking)
                end.record()
                if len(self.copies) < 512:
                    self.copies.append((start, end))
            else:
                t0 = time.perf_counter()
                on_device = crops.to(self.device)
                self.copy_host_s += time.perf_counter() - t0
            parts.append(self.normalize(on_device.float()) if crops.dtype == torch.uint8 else on_device)
        n_gpu = int(host["n_gpu"])
        if n_gpu:
            files = unpack_bytes(host["packed"], n_gpu)
            self.bytes_gpu += sum(f.numel() for f in files)
            images, decode_s, crop_s = self.gpu(files)
            self.gpu_decode_s += decode_s
            self.gpu_crop_s += crop_s
            parts.append(self.normalize(images))
        self.batches += 1
        images = parts[0] if len(parts) == 1 else torch.cat(parts)
        labels = host["labels"].to(self.device, non_blocking=self.non_blocking)
        return images.contiguous(memory_format=self.memory_format), labels

    def copy_s(self) -> float:
        """Seconds spent copying CPU crops to the device (mean over the copies timed, times the batches)."""
        if not self.copies:
            return self.copy_host_s
        torch.cuda.synchronize(self.device)
        ms = [a.elapsed_time(b) for a, b in self.copies]
        return sum(ms) / len(ms) / 1e3 * self.batches


class Prefetcher:
    """Runs :class:`DeviceSide` on a background thread and side stream, ``PREFETCH_DEPTH`` batches ahead.

    The thread pulls host batches, makes them device batches on its own CUDA stream, and queues them with an
    event; ``next()`` makes the training stream wait for that event (no host sync) and marks the tensors as used
    there. Before each batch the thread waits for its stream's earlier work: memory freed on that stream is then
    idle, so nvJPEG (which writes from a private stream) cannot overwrite memory queued kernels still read.
    """

    def __init__(self, source: Any, side: DeviceSide) -> None:
        self.source, self.side = source, side
        self.stream = torch.cuda.Stream(side.device) if side.cuda else None
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=PREFETCH_DEPTH)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="device-prefetch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                host = self.source()
                if self.stream is None:
                    item: Any = (*self.side(host), None)
                else:
                    with torch.cuda.stream(self.stream):
                        self.stream.synchronize()
                        images, labels = self.side(host)
                        event = torch.cuda.Event()
                        event.record(self.stream)
                    item = (images, labels, event)
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which raises it
            self.queue.put(e)

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
        try:
            while True:
                self.queue.get_nowait()
        except queue.Empty:
            pass
        self.thread.join(timeout=10)
