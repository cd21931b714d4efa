"""``knobs.augment_device``: where the CPU-decoded images are cropped and resized (workers, or the GPU).

With ``cuda`` a worker only decodes and cuts out the crop window (one-pixel border); the window crosses as uint8
and the GPU resizes and flips the batch in batched calls. These tests check what runs: the loader's batch holds
windows (not S x S crops), each resized window equals roi_align on the whole decoded image, DCT-reduced windows
keep the output resolution, and the row records where the crop ran. The CUDA run itself is a GPU test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.ops import roi_align

from workloads import corpus, data, decode, device_side
from workloads.base import DeviceInfo

from jpeg_helpers import CPU, TINY, knobs, one_thread, pipeline  # noqa: F401 (one_thread: autouse)

pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")
SIZE = 16


def files_of(path: Path) -> list[torch.Tensor]:
    return [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in sorted(path.glob("*/*.jpg"))]


def test_check_names_the_augment_device_conflicts() -> None:
    cpu = DeviceInfo(kind="cpu", name="cpu")
    gpu = DeviceInfo(kind="cuda", name="H200")
    assert "augment_device=cuda" in data.check(knobs(augment_device="cuda", transfer_dtype=None), cpu)
    assert "augment_device must be one of" in data.check(knobs(augment_device="tpu"), gpu)
    msg = data.check(knobs(decode_device="cuda", augment_device="cuda"), gpu)
    assert "augment_device=cuda" in msg and "set augment_device=cpu" in msg, "nothing is decoded on the CPU"
    msg = data.check(knobs(augment_device="cuda", transfer_dtype="float32"), gpu)
    assert "transfer_dtype=uint8" in msg, "the windows cross as uint8; float32 cannot be honoured"
    assert data.check(knobs(augment_device="cuda", transfer_dtype="uint8"), gpu) is None
    assert data.check(knobs(augment_device="cuda", decode_device="hybrid", gpu_share=0.25), gpu) is None
    assert data.check(knobs(augment_device="cpu"), cpu) is None


@pytest.mark.parametrize("decoder", ["torchvision", "pil"])
def test_workers_hand_over_uint8_windows_that_the_gpu_crop_resizes_as_on_the_whole_image(
    tmp_path: Path, decoder: str
) -> None:
    """The loader's batch carries each image's crop window plus a one-pixel border (clamped at the image's
    edge) as uint8, back to back, with its place inside; the device side's batched crop of those windows gives
    what roi_align gives on the whole decoded image with the window's box (the same RNG draws the window)."""
    path = corpus.corpus_path({**TINY, "corpus_sizes": "imagenet"}, tmp_path)
    corpus.ensure_corpus(path, 8, 64, 48, "imagenet")
    files = files_of(path)
    cpu = decode.CpuDecode(SIZE, decoder)
    gpu = decode.GpuDecode(SIZE, CPU)
    for i, f in enumerate(files):
        torch.manual_seed(i)
        region, window, stats = cpu.region(f)
        torch.manual_seed(i)
        whole = decode_jpeg(f, mode=ImageReadMode.RGB)  # both decoders are libjpeg-turbo: the same pixels
        top, left, h, w = decode.crop_window(whole.shape[1], whole.shape[2])
        assert window[2:].tolist() == [h, w], "the window is RandomResizedCrop's, drawn on the full size"
        wt, wl = window[:2].tolist()
        assert wt == min(top, 1) and wl == min(left, 1), "a one-pixel border where the image has one"
        assert region.shape[1] == wt + h + min(1, whole.shape[1] - top - h)
        assert region.shape[2] == wl + w + min(1, whole.shape[2] - left - w)
        assert region.dtype == torch.uint8 and region.shape[0] == 3
        if decoder == "torchvision":
            y0, x0 = top - wt, left - wl
            assert torch.equal(region, whole[:, y0 : y0 + region.shape[1], x0 : x0 + region.shape[2]])
        assert stats[2] == stats[3] == whole.shape[1] * whole.shape[2], "full-size decode: every pixel decoded"
        out = gpu.resized_crops([region], window.view(1, 4), torch.tensor([False]))[0]
        box = torch.tensor([[0, left, top, left + w, top + h]], dtype=torch.float32)
        ref = roi_align(whole[None].float(), box, (SIZE, SIZE), spatial_scale=1.0, sampling_ratio=0, aligned=True)[0]
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-3)

    batches = data.JpegBatches(path, "corpus", SIZE, 0.25, decoder, "full", normalize=True, regions=True)
    batch = batches.__getitems__([0, 1, 2, 3, 4, 5, 6, 7])
    assert batch["crops"].numel() == 0 and int(batch["n_gpu"]) == 2, "6 CPU windows, the GPU share as bytes"
    shapes = batch["region_shapes"]
    assert batch["regions"].dtype == torch.uint8 and batch["regions"].dim() == 1, "one tensor: one shm segment"
    assert batch["regions"].numel() == int(3 * shapes.prod(1).sum()) and len(shapes) == 6
    assert len({tuple(s) for s in shapes.tolist()}) > 1, "windows keep their own sizes (not resized in the worker)"
    windows = batch["region_windows"]
    assert ((windows[:, :2] <= 1) & (windows[:, :2] + windows[:, 2:] <= shapes)).all()
    side = device_side.DeviceSide(SIZE, CPU, torch.channels_last, non_blocking=False)
    images, labels = side(batch)
    assert images.shape == (8, 3, SIZE, SIZE) and images.dtype == torch.float32
    assert images.is_contiguous(memory_format=torch.channels_last) and images.std() > 0.1
    assert labels.tolist() == batch["labels"].tolist() and side.copied_dtype == "uint8"
    assert side.gpu_crop_s > 0 and side.bytes_gpu > 0


def test_reduced_decode_cuts_a_window_that_keeps_the_output_resolution(tmp_path: Path) -> None:
    """PIL with DCT scaling: the window is cut from the reduced image, scaled with it, and still at least
    ``image_size`` on both sides, so the GPU's resize loses no detail."""
    p = {"corpus_images": 8, "corpus_width": 640, "corpus_height": 480, "corpus_sizes": "fixed"}
    path = corpus.corpus_path(p, tmp_path)
    corpus.ensure_corpus(path, 8, 640, 480)
    cpu = decode.CpuDecode(SIZE, "pil", "reduced")
    reduced = 0
    for i, f in enumerate(files_of(path) * 4):
        torch.manual_seed(i)
        region, window, stats = cpu.region(f)
        h, w = window[2:].tolist()
        assert h >= SIZE and w >= SIZE, f"window {window.tolist()} below the output size"
        assert region.shape[1] >= window[0] + h and region.shape[2] >= window[1] + w
        reduced += bool(stats[2] < stats[3])
    assert reduced > 0, "640x480 images with a 16-px output: DCT scaling applies"


def test_the_pipeline_crops_on_the_device_side_and_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole pipeline with augment_device=cuda, run on the CPU (the check that stops it there is lifted: the
    GPU's crop code runs on any device): a worker process cuts windows, the prefetcher's device thread crops them,
    and the row says where the crop ran and what crossed."""
    monkeypatch.setattr(data, "knob_conflict", lambda knobs, kind: None)
    pipe = pipeline(tmp_path, num_workers=1, augment_device="cuda", transfer_dtype=None)
    try:
        assert pipe.prefetcher is not None, "the GPU crop runs on the device thread, ahead of the step"
        host = pipe._next_host()
        assert host["crops"].numel() == 0 and host["regions"].dtype == torch.uint8
        images, labels = pipe.next()
    finally:
        pipe.close()
    assert images.shape == (4, 3, SIZE, SIZE) and images.dtype == torch.float32 and images.std() > 0.1
    m = pipe.metrics()
    assert m["data_augment_device"] == "cuda" and m["data_transfer_dtype"] == "uint8"
    assert "cropped on the GPU" in m["data_decode_strategy"]
    cpu_pipe = pipeline(tmp_path)
    try:
        cpu_pipe.next()
    finally:
        cpu_pipe.close()
    assert cpu_pipe.metrics()["data_augment_device"] == "cpu"
