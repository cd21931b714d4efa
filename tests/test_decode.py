"""The JPEG corpus (generated once, ImageNet-like sizes, a user's own root) and the decode paths (CPU decoders, the
DCT-reduced decode, GPU/hybrid splits, the measured limiting stage, the device-side prefetcher), on the CPU."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest
import torch
from torchvision.io import decode_jpeg, encode_jpeg, write_jpeg

from workloads import corpus, data, decode, device_side

from jpeg_helpers import CPU, TINY, children, knobs, one_thread, pipeline  # noqa: F401 (one_thread: autouse)

# torchvision 0.29 deprecates its JPEG codec in favour of TorchCodec (not installed here); it still decodes.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")


# ---------------------------------------------------------------- the corpus


def test_corpus_is_generated_once_then_reused(tmp_path: Path) -> None:
    path = corpus.corpus_path(TINY, tmp_path)
    assert path.name == "jpeg-32x24-8"
    assert corpus.ensure_corpus(path, 8, 32, 24) == "generated"
    files = sorted(path.glob("class_*/*.jpg"))
    assert len(files) == 8 and len({f.parent for f in files}) == 8
    img = decode_jpeg(torch.frombuffer(bytearray(files[0].read_bytes()), dtype=torch.uint8))
    assert img.shape == (3, 24, 32)
    stamps = {f: f.stat().st_mtime_ns for f in files}

    assert corpus.ensure_corpus(path, 8, 32, 24) == "reused"
    assert {f: f.stat().st_mtime_ns for f in sorted(path.glob("class_*/*.jpg"))} == stamps
    assert [p.name for p in tmp_path.iterdir()] == [path.name], "no temporary folder is left behind"


def test_corpus_images_are_imagenet_sized(tmp_path: Path) -> None:
    path = tmp_path / "jpeg-500x375-4"
    corpus.ensure_corpus(path, 4, 500, 375)
    sizes = [f.stat().st_size for f in path.glob("class_*/*.jpg")]
    assert all(60_000 < s < 160_000 for s in sizes), f"JPEG sizes {sizes} are not ~100 KB like ImageNet photos"


def _generate_in_child(path: str, barrier: Any, queue: Any) -> None:
    """Generate the corpus, but rename only once the other process has generated its copy too (a forced race)."""
    write = corpus.write_corpus

    def write_then_wait(*args: Any) -> None:
        write(*args)
        barrier.wait(timeout=60)

    corpus.write_corpus = write_then_wait
    queue.put(corpus.ensure_corpus(Path(path), 20, 32, 24))


def test_concurrent_generation_keeps_one_complete_corpus(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")  # the children share this process's imports: no second torch import
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    path = tmp_path / "jpeg-32x24-20"
    procs = [ctx.Process(target=_generate_in_child, args=(str(path), barrier, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    states = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert states == ["discarded", "generated"], "both generated; the second rename must lose and reuse the first"
    assert len(list(path.glob("class_*/*.jpg"))) == 20
    assert (path / corpus.MANIFEST).is_file()
    assert [p.name for p in tmp_path.iterdir()] == [path.name], "the loser's temporary copy is removed"


def test_user_root_is_read_instead_of_the_generated_corpus(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    for c, (h, w) in enumerate([(40, 60), (50, 30)]):
        (root / f"k{c}").mkdir(parents=True)
        for i in range(3):
            write_jpeg(torch.randint(0, 256, (3, h, w), dtype=torch.uint8), str(root / f"k{c}" / f"{i}.jpg"))
    pipe = pipeline(tmp_path, p={**TINY, "root": str(root)}, batch_size=2)
    images, labels = pipe.next()
    m = pipe.metrics()
    assert m["data_corpus_images"] == 6 and m["data_corpus_state"] == "user"
    assert images.shape == (2, 3, 16, 16) and set(labels.tolist()) <= {0, 1}
    assert not (tmp_path / "data").exists(), "no corpus is generated when workload.root is set"

    with pytest.raises(ValueError, match="workload.root"):
        pipeline(tmp_path, p={**TINY, "root": str(tmp_path / "empty")})


# ---------------------------------------------------------------- decode paths


def test_cpu_decode_gives_normalized_float32_in_the_memory_format(tmp_path: Path) -> None:
    lo = min((0 - m) / s for m, s in zip(device_side.MEAN, device_side.STD))
    hi = max((1 - m) / s for m, s in zip(device_side.MEAN, device_side.STD))
    for fmt in (torch.channels_last, torch.contiguous_format):
        images, labels = pipeline(tmp_path, memory_format=fmt).next()
        assert images.shape == (4, 3, 16, 16) and images.dtype == torch.float32
        assert images.is_contiguous(memory_format=fmt)
        assert (images.stride(1) == 1) == (fmt == torch.channels_last)
        assert lo - 1e-4 <= images.min() and images.max() <= hi + 1e-4 and images.std() > 0.1
        assert labels.dtype == torch.int64 and 0 <= labels.min() and labels.max() < 8


def test_gpu_share_reaches_the_gpu_decoder_as_bytes(tmp_path: Path) -> None:
    """The GPU share of a batch leaves the workers undecoded, packed in one tensor; the device side decodes it in
    one batched call (here torchvision's CPU decoder stands in for nvJPEG) and puts it after the CPU crops."""
    path = corpus.corpus_path(TINY, tmp_path)
    corpus.ensure_corpus(path, 8, 32, 24)
    files = [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in sorted(path.glob("*/*.jpg"))]
    packed = device_side.pack_bytes(files[:3])
    assert packed.dtype == torch.uint8 and packed.dim() == 1, "one tensor per batch: one shared-memory segment"
    assert [torch.equal(a, b) for a, b in zip(device_side.unpack_bytes(packed, 3), files)] == [True] * 3

    share = data.JpegBatches(path, "corpus", 16, 0.5, "torchvision", "full", normalize=False)
    batch = share.__getitems__([0, 1, 2, 3])
    assert batch["crops"].shape == (2, 3, 16, 16) and int(batch["n_gpu"]) == 2, "half the batch on each side"
    gpu_files = device_side.unpack_bytes(batch["packed"], 2)
    assert all(f[:2].tolist() == [0xFF, 0xD8] for f in gpu_files), "the GPU share is still JPEG bytes"
    assert batch["stats"].shape == (2, len(decode.STATS)), "costs are recorded for the CPU-decoded images only"
    from_worker = next(
        iter(torch.utils.data.DataLoader(share, batch_size=4, num_workers=1, collate_fn=lambda b: b, sampler=range(4)))
    )
    assert torch.equal(from_worker["packed"], batch["packed"]), "a worker hands the packed batch over intact"
    side = device_side.DeviceSide(16, CPU, torch.contiguous_format, non_blocking=False)
    images, labels = side(batch)
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.float32
    assert labels.tolist() == batch["labels"].tolist()
    assert side.bytes_gpu == sum(f.numel() for f in gpu_files) and side.gpu_decode_s > 0
    assert images.mean().abs() < 1.5 and images.std() > 0.1


def test_cpu_only_and_gpu_only_batches(tmp_path: Path) -> None:
    path = corpus.corpus_path(TINY, tmp_path)
    corpus.ensure_corpus(path, 8, 32, 24)
    for share, n_gpu in ((0.0, 0), (1.0, 4), (0.25, 1)):
        batch = data.JpegBatches(path, "corpus", 16, share, "pil", "full", normalize=True).__getitems__([0, 1, 2, 3])
        assert int(batch["n_gpu"]) == n_gpu and len(batch["crops"]) == 4 - n_gpu
        assert batch["crops"].dtype == torch.float32, "normalize=True: the workers hand over float32"


def test_imagenet_corpus_sizes_vary(tmp_path: Path) -> None:
    sizes = corpus.image_sizes(2000, 500, 375, "imagenet")
    longs = [max(w, h) for w, h in sizes]
    assert min(longs) >= 200 and max(longs) <= 800 and 470 < sum(longs) / len(longs) < 530
    assert len(set(sizes)) > 500, "sizes vary from image to image"
    assert sum(w > h for w, h in sizes) > sum(w < h for w, h in sizes) > 0, "mostly landscape, some portrait"
    assert corpus.image_sizes(3, 500, 375, "fixed") == [(500, 375)] * 3
    p = {"corpus_images": 6, "corpus_width": 64, "corpus_height": 48}
    path = corpus.corpus_path(p, tmp_path)
    assert path.name == "jpeg-64x48-6-imagenet"
    corpus.ensure_corpus(path, 6, 64, 48, "imagenet")
    shapes = {
        decode_jpeg(torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8)).shape for f in path.glob("*/*.jpg")
    }
    assert len(shapes) > 1
    with pytest.raises(ValueError, match="corpus_sizes"):
        corpus.corpus_sizes({"corpus_sizes": "huge"})


@pytest.mark.parametrize("height,width", [(375, 500), (800, 200), (224, 224), (20, 400)])
def test_batched_crop_windows_sample_as_torchvision_does(height: int, width: int) -> None:
    """crop_windows (the GPU path's batched draw) against torchvision's own RandomResizedCrop.get_params, 20,000
    windows each, seeded: every window lies inside the image; the area fraction, the aspect ratio, the placement
    and the share of central fallbacks agree (20x400: no draw can fit, so every window is the centre clamped to 4/3)."""
    n = 20_000
    torch.manual_seed(0)
    ours = decode.crop_windows(torch.full((n,), height), torch.full((n,), width)).to(torch.float64)
    torch.manual_seed(1)
    ref = torch.tensor([decode.crop_window(height, width) for _ in range(n)], dtype=torch.float64)
    for rows in (ours, ref):
        top, left, h, w = rows.unbind(1)
        assert bool(((top >= 0) & (left >= 0) & (h > 0) & (w > 0)).all())
        assert bool(((top + h <= height) & (left + w <= width)).all())

    def stats(rows: torch.Tensor) -> list[float]:
        top, left, h, w = rows.unbind(1)
        area, aspect = h * w / (height * width), torch.log(w / h)
        centre = (top == torch.div(height - h, 2, rounding_mode="floor")) & (
            left == torch.div(width - w, 2, rounding_mode="floor")
        )
        return [
            area.mean().item(),
            area.quantile(0.1).item(),
            area.quantile(0.9).item(),
            aspect.mean().item(),
            aspect.std().item(),
            ((top + h / 2) / height).mean().item(),
            ((left + w / 2) / width).mean().item(),
            centre.double().mean().item(),
        ]

    assert stats(ours) == pytest.approx(stats(ref), abs=0.02)
    if height == 20:  # a crop of >= 8 % of 20x400 with aspect <= 4/3 is >= 21.9 px high: none fits
        assert ours.unique(dim=0).tolist() == ref.unique(dim=0).tolist() == [[0, 186, 20, 27]]


def test_dct_scale_keeps_the_crop_at_output_resolution() -> None:
    assert decode.dct_denominator(448, 448, 224) == 2
    assert decode.dct_denominator(447, 900, 224) == 1, "the short side of the crop would fall under 224"
    assert decode.dct_denominator(1800, 1792, 224) == 8
    assert decode.dct_denominator(900, 1000, 224) == 4


def test_reduced_decode_decodes_fewer_pixels_and_keeps_the_crop(tmp_path: Path) -> None:
    """decode_scale=reduced: large crops are decoded at 1/2-1/8 size (fewer pixels), and the crop they give is the
    full-size decode's crop up to resampling differences (same window: same seed)."""
    img = corpus.synthetic_image(torch.Generator().manual_seed(3), 800, 600)
    data_bytes = torch.frombuffer(bytearray(encode_jpeg(img, quality=90).numpy().tobytes()), dtype=torch.uint8)
    full, reduced = decode.CpuDecode(32, "pil", "full"), decode.CpuDecode(32, "pil", "reduced")
    fracs, diffs = [], []
    for seed in range(40):
        torch.manual_seed(seed)
        a, sa = full(data_bytes)
        torch.manual_seed(seed)
        b, sb = reduced(data_bytes)
        assert a.shape == b.shape == (3, 32, 32) and a.dtype == b.dtype == torch.uint8
        assert sa[2] == sa[3] == 800 * 600, "full decodes every pixel"
        fracs.append(float(sb[2] / sb[3]))
        diffs.append(float((a.float() - b.float()).abs().mean()))
    assert min(fracs) <= 1 / 16 and sum(fracs) / len(fracs) < 0.5, "most crops of 800x600 decode at reduced size"
    assert max(diffs) < 6, f"the reduced-size crop differs from the full-size one: mean |diff| {max(diffs):.1f}/255"
    with pytest.raises(ValueError, match="cpu_decoder=pil"):
        decode.CpuDecode(32, "torchvision", "reduced")


def test_limit_stage_comes_from_measured_timings(tmp_path: Path) -> None:
    """Large JPEGs cropped to a tiny output: decoding costs far more than the crop and the copy, and the pipeline's
    row says so from the timings it measured."""
    p = {"corpus_images": 4, "corpus_width": 640, "corpus_height": 480, "corpus_sizes": "fixed"}
    pipe = pipeline(tmp_path, p=p, batch_size=2, cpu_decoder="torchvision")
    for _ in range(2):
        pipe.next()
    m = pipe.metrics()
    assert m["data_decode_ms"] > m["data_augment_ms"] and m["data_decode_ms"] > m["data_transfer_ms"]
    assert m["data_limit_stage"] == "decode"
    assert m["data_bytes_decoded_cpu"] > 0 and m["data_bytes_decoded_gpu"] == 0 and m["data_gpu_share"] == 0
    assert m["data_decoded_pixels_frac"] == 1.0 and m["data_transfer_dtype"] == "float32"


@pytest.mark.parametrize("decode_thread", [False, True])
def test_prefetcher_keeps_order_and_reports_failures(decode_thread: bool) -> None:
    batches = iter(
        [
            {
                "crops": torch.full((1, 3, 2, 2), float(i)),
                "packed": torch.empty(0, dtype=torch.uint8),
                "n_gpu": torch.tensor(0),
                "labels": torch.tensor([i]),
                "stats": torch.zeros(1, 5),
            }
            for i in range(5)
        ]
    )
    side = device_side.DeviceSide(2, CPU, torch.contiguous_format, non_blocking=False)
    pre = device_side.Prefetcher(lambda: next(batches), side, decode=decode_thread)
    try:
        assert [int(pre.next()[1]) for _ in range(5)] == [0, 1, 2, 3, 4]
        with pytest.raises(RuntimeError, match="prefetch thread failed"):
            pre.next()  # the source ran dry: StopIteration in the thread reaches the consumer
    finally:
        pre.close()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_gpu_crop_equals_roi_align_on_each_whole_image(device: str) -> None:
    """The GPU path gathers only the crop windows (plus a one-pixel border, clamped at the image's edge, with the
    flip folded into the column order) into a canvas per chunk; each output must equal roi_align on the whole image
    with the window's box, then flipped: windows at every edge and corner, the whole image, flipped or not, images
    of different sizes across several chunks."""
    from torchvision.ops import roi_align

    gen = torch.Generator().manual_seed(0)
    sizes = [(20, 30), (40, 25), (17, 17), (60, 44), (33, 70), (9, 9), (50, 12)] * 2
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen).to(device) for h, w in sizes]
    heights, widths = torch.tensor([h for h, _ in sizes]), torch.tensor([w for _, w in sizes])
    windows = decode.crop_windows(heights, widths)
    # edges and corners: top-left, bottom-right, the whole image, a one-pixel-wide column at the right edge
    windows[0] = torch.tensor([0, 0, 8, 11])
    windows[1] = torch.tensor([40 - 7, 25 - 9, 7, 9])
    windows[2] = torch.tensor([0, 0, 17, 17])
    windows[3] = torch.tensor([5, 43, 30, 1])
    flip = torch.arange(len(images)) % 3 == 0
    flip[2] = flip[3] = True
    gpu = decode.GpuDecode(16, torch.device(device))
    gpu.CHUNK = 4  # several chunks, each with images of different sizes
    out = gpu.resized_crops(images, windows, flip).cpu()
    assert out.shape == (len(images), 3, 16, 16) and out.dtype == torch.float32
    for i, im in enumerate(images):
        top, left, h, w = windows[i].tolist()
        box = torch.tensor([[0, left, top, left + w, top + h]], dtype=torch.float32)
        ref = roi_align(im[None].float().cpu(), box, (16, 16), spatial_scale=1.0, sampling_ratio=0, aligned=True)[0]
        ref = ref.flip(-1) if flip[i] else ref
        torch.testing.assert_close(
            out[i], ref, rtol=0, atol=1e-3 if device == "cpu" else 1e-2, msg=f"image {i}, window {windows[i].tolist()}"
        )


def test_prefetcher_decodes_the_next_batch_while_the_last_one_is_cropped(tmp_path: Path) -> None:
    """With a GPU share the prefetcher is a two-thread pipeline: while batch k is being cropped, batch k+1 is
    already being decoded (on its own thread). The probe's crop waits until the next decode has started; run on
    one thread, that decode could not start and every wait would time out."""
    import threading

    path = corpus.corpus_path(TINY, tmp_path)
    corpus.ensure_corpus(path, 8, 32, 24)
    share = data.JpegBatches(path, "corpus", 16, 1.0, "torchvision", "full", normalize=False)
    batches = iter([share.__getitems__([i, (i + 1) % 8]) for i in range(5)])
    started = [threading.Event() for _ in range(6)]
    started[5].set()  # there is no sixth batch: the fifth one's crop must not wait for it

    class Probe(decode.GpuDecode):
        decoded = cropped = 0
        threads: set[str] = set()
        overlapped: list[bool] = []

        def decode(self, files: list[torch.Tensor]) -> decode.Decoded:
            started[self.decoded].set()
            self.decoded += 1
            self.threads.add(threading.current_thread().name)
            return super().decode(files)

        def crop(self, decoded: decode.Decoded) -> torch.Tensor:
            self.overlapped.append(started[self.cropped + 1].wait(timeout=5))
            self.cropped += 1
            return super().crop(decoded)

    side = device_side.DeviceSide(16, CPU, torch.contiguous_format, non_blocking=False)
    side.gpu = probe = Probe(16, CPU)
    pre = device_side.Prefetcher(lambda: next(batches), side, decode=True)
    try:
        labels = [pre.next()[1].tolist() for _ in range(4)]
    finally:
        pre.close()
    assert labels == [[i, (i + 1) % 8] for i in range(4)], "batches keep their order through both threads"
    assert probe.overlapped[:4] == [True] * 4
    assert probe.threads == {"device-decode"}, "decoding happens on the decode thread only"
    assert side.gpu_decode_s > 0 and side.gpu_crop_s > 0 and side.bytes_gpu > 0


def test_a_closed_pipeline_never_restarts_its_loader(tmp_path: Path) -> None:
    """A prefetcher thread still inside the pipeline's next() when the pipeline closes gets an error, instead of
    starting a new loader iterator (new worker processes nobody would shut down)."""
    pipe = pipeline(tmp_path, device_prefetch=False)
    pipe.next()
    pipe.close()
    with pytest.raises(RuntimeError, match="closed"):
        pipe._next_host()
    assert pipe._it is None, "no iterator was started after close"


# ---------------------------------------------------------------- nvImageCodec (gpu_decoder=nvimgcodec)
# On a CPU device the same code path runs nvImageCodec's libjpeg-turbo backend (the H200 runs the hardware one).

needs_nvimgcodec = pytest.mark.skipif(decode.nvimgcodec_missing() is not None, reason="nvImageCodec not installed")


def _jpegs(tmp_path: Path, n: int = 6) -> list[torch.Tensor]:
    path = tmp_path / "jpeg-imagenet"
    corpus.ensure_corpus(path, n, 120, 90, "imagenet")  # sizes vary: each image its own shape
    return [torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8) for f in sorted(path.glob("*/*.jpg"))]


@needs_nvimgcodec
def test_nvimgcodec_decodes_the_pixels_torchvision_decodes(tmp_path: Path) -> None:
    """gpu_decoder=nvimgcodec goes through nvImageCodec (planar RGB, back to back), not torchvision; the pixels are
    the same (both libjpeg-turbo here). The second batch decodes into the first batch's buffers (reused) and is
    still right, in another order."""
    files = _jpegs(tmp_path)
    tv, nv = decode.GpuDecode(16, CPU), decode.GpuDecode(16, CPU, "nvimgcodec")
    assert nv.nvimgcodec is not None and tv.nvimgcodec is None
    for batch in (files, files[::-1]):
        want, got = tv.decode(batch), nv.decode(batch)
        assert len(set(map(tuple, got.shapes.tolist()))) > 1, "the corpus has images of several sizes"
        assert torch.equal(got.shapes, want.shapes) and got.windows is None
        assert got.flat.dtype == torch.uint8 and torch.equal(got.flat, want.flat)
        assert got.pixels_full == want.pixels_full == int(want.shapes.prod(1).sum())
    assert len(nv.nvimgcodec.reuse) == len(files), "the batch's images are kept for the next decode"
    out = nv.crop(nv.decode(files))
    assert out.shape == (len(files), 3, 16, 16) and out.dtype == torch.float32


@needs_nvimgcodec
def test_roi_decode_decodes_only_each_crop_window_and_crops_the_same(tmp_path: Path) -> None:
    """gpu_roi_decode=true draws the crop windows from the headers' sizes, decodes each window plus a one-pixel border
    (clamped at the image's edge) and nothing else; cropping those regions gives what cropping the whole images with
    the same windows gives."""
    files = _jpegs(tmp_path)
    full = decode.GpuDecode(16, CPU, "nvimgcodec").decode(files)
    roi_gpu = decode.GpuDecode(16, CPU, "nvimgcodec", roi=True)
    torch.manual_seed(7)
    roi = roi_gpu.decode(files)
    torch.manual_seed(7)
    windows = decode.crop_windows(full.shapes[:, 0], full.shapes[:, 1])  # the same draws, on the whole images
    top, left, h, w = windows.unbind(1)
    heights, widths = full.shapes.unbind(1)
    y0, x0 = (top - 1).clamp(min=0), (left - 1).clamp(min=0)
    want_shapes = torch.stack([torch.minimum(top + h + 1, heights) - y0, torch.minimum(left + w + 1, widths) - x0], 1)
    assert torch.equal(roi.shapes, want_shapes), "each region is its window and a one-pixel border"
    assert torch.equal(roi.windows, torch.stack([top - y0, left - x0, h, w], 1)), "windows within the region"
    assert roi.pixels_full == full.pixels_full and int(roi.shapes.prod(1).sum()) < full.pixels_full
    flip = torch.arange(len(files)) % 2 == 0
    a = roi_gpu._crops(roi.flat, roi.shapes, roi.windows, flip)
    b = roi_gpu._crops(full.flat, full.shapes, windows, flip)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-3)


@needs_nvimgcodec
def test_gpu_decoder_knobs_reach_the_device_side(tmp_path: Path) -> None:
    """The knobs choose the decoder the device side runs, and the ROI decode shows in the decoded pixel count."""
    path = corpus.corpus_path(TINY, tmp_path)
    corpus.ensure_corpus(path, 8, 32, 24)
    batch = data.JpegBatches(path, "corpus", 16, 1.0, "torchvision", "full", normalize=False).__getitems__([0, 1, 2, 3])
    for decoder, roi in (("torchvision", False), ("nvimgcodec", False), ("nvimgcodec", True)):
        side = device_side.DeviceSide(16, CPU, torch.contiguous_format, False, decoder, roi)
        images, labels = side(dict(batch))
        assert images.shape == (4, 3, 16, 16) and labels.tolist() == batch["labels"].tolist()
        assert side.gpu.decoder == decoder and (side.gpu.nvimgcodec is not None) == (decoder == "nvimgcodec")
        decoded, whole = side.gpu_pixels
        assert whole == 4 * 32 * 24 and (decoded < whole if roi else decoded == whole)


def test_gpu_decoder_knobs_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = type("D", (), {"kind": "cuda"})()
    assert "knobs.gpu_decoder must be one of" in data.check(knobs(decode_device="cuda", gpu_decoder="dali"), gpu)
    msg = data.check(knobs(decode_device="cuda", gpu_roi_decode=True), gpu)
    assert "gpu_roi_decode=true" in msg and "gpu_decoder=nvimgcodec" in msg
    with pytest.raises(ValueError, match="gpu_roi_decode"):
        decode.GpuDecode(16, CPU, "torchvision", roi=True)
    # where nvImageCodec is not installed, the trial is skipped with the install command
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if "nvimgcodec" in name else real(name, *a))
    msg = data.check(knobs(decode_device="hybrid", gpu_share=0.5, gpu_decoder="nvimgcodec"), gpu)
    assert "pip install 'nvidia-nvimgcodec-cu13[nvjpeg]'" in msg and "gpu_decoder=torchvision" in msg
    for inactive in ({"gpu_decoder": "nvimgcodec"}, {"gpu_decoder": "dali"}, {"gpu_roi_decode": True}):
        assert data.check(knobs(decode_device="cpu", **inactive), gpu) is None, f"{inactive}: inactive on the CPU path"


@needs_nvimgcodec
@pytest.mark.gpu
def test_nvimgcodec_on_the_gpu_decodes_what_libjpeg_decodes(tmp_path: Path) -> None:
    """On a GPU, gpu_decoder=nvimgcodec decodes on the hardware JPEG engines (or nvJPEG's CUDA decoder): the pixels
    match libjpeg-turbo's within the IDCT's rounding, twice in a row (the second batch reuses the first's buffers,
    in another order), and the ROI decode crops what the whole image crops."""
    files = _jpegs(tmp_path, 32)
    cuda = torch.device("cuda")
    cpu = decode.GpuDecode(16, CPU)
    gpu = decode.GpuDecode(16, cuda, "nvimgcodec")
    for batch in (files, files[::-1]):
        want, got = cpu.decode(batch), gpu.decode(batch)
        assert got.flat.device.type == "cuda" and torch.equal(got.shapes, want.shapes)
        diff = (got.flat.cpu().int() - want.flat.int()).abs().float()
        assert diff.mean() < 1.0 and diff.quantile(0.999) <= 8, (diff.mean(), diff.max())
    roi_gpu = decode.GpuDecode(16, cuda, "nvimgcodec", roi=True)
    torch.manual_seed(5)
    roi = roi_gpu.decode(files)
    torch.manual_seed(5)
    full = cpu.decode(files)
    windows = decode.crop_windows(full.shapes[:, 0], full.shapes[:, 1])
    flip = torch.zeros(len(files), dtype=torch.bool)
    a = roi_gpu._crops(roi.flat, roi.shapes, roi.windows, flip).cpu()
    b = cpu._crops(full.flat, full.shapes, windows, flip)
    assert (a - b).abs().mean() < 1.0, (a - b).abs().max()
    assert int(roi.shapes.prod(1).sum()) < roi.pixels_full
