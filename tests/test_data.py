"""The ``jpeg`` input pipeline: its corpus, each data knob's effect on the DataLoader, and a real trial through the CLI.

Everything runs on the CPU at tiny sizes; the tests marked for CUDA (GPU decode, pinned copies) run only on a GPU.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torchvision.io import decode_jpeg, encode_jpeg, write_jpeg

from workloads import corpus, data, decode, resnet50
from workloads.base import DeviceInfo

from conftest import run_cli

CPU = torch.device("cpu")
# torchvision 0.29 deprecates its JPEG codec in favour of TorchCodec (not installed here); it still decodes.
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities:DeprecationWarning")

TINY = {"corpus_images": 8, "corpus_width": 32, "corpus_height": 24, "corpus_sizes": "fixed"}


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    """One intra-op thread: on the shared 2-core CI machine a second one mostly waits for a busy core."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def knobs(**over: Any) -> dict[str, Any]:
    base = {"num_workers": 0, "prefetch_factor": None, "pin_memory": False, "non_blocking": False,
            "persistent_workers": False, "decode_device": "cpu"}
    return {**base, **over}


def pipeline(tmp_path: Path, p: dict[str, Any] | None = None, device: torch.device = CPU, batch_size: int = 4,
             memory_format: torch.memory_format = torch.contiguous_format, **knob: Any) -> data.Pipeline:
    return data.Pipeline(p or dict(TINY), knobs(**knob), batch_size=batch_size, image_size=16, device=device,
                         memory_format=memory_format, cache_root=tmp_path / "data", num_classes=10)


def children() -> set[int]:
    return {c.pid for c in mp.active_children()}


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
    lo = min((0 - m) / s for m, s in zip(data.MEAN, data.STD))
    hi = max((1 - m) / s for m, s in zip(data.MEAN, data.STD))
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
    packed = data.pack_bytes(files[:3])
    assert packed.dtype == torch.uint8 and packed.dim() == 1, "one tensor per batch: one shared-memory segment"
    assert [torch.equal(a, b) for a, b in zip(data.unpack_bytes(packed, 3), files)] == [True] * 3

    share = data.JpegBatches(path, "corpus", 16, 0.5, "torchvision", "full", normalize=False)
    batch = share.__getitems__([0, 1, 2, 3])
    assert batch["crops"].shape == (2, 3, 16, 16) and int(batch["n_gpu"]) == 2, "half the batch on each side"
    gpu_files = data.unpack_bytes(batch["packed"], 2)
    assert all(f[:2].tolist() == [0xFF, 0xD8] for f in gpu_files), "the GPU share is still JPEG bytes"
    assert batch["stats"].shape == (2, len(decode.STATS)), "costs are recorded for the CPU-decoded images only"
    from_worker = next(iter(torch.utils.data.DataLoader(share, batch_size=4, num_workers=1,
                                                         collate_fn=lambda b: b, sampler=range(4))))
    assert torch.equal(from_worker["packed"], batch["packed"]), "a worker hands the packed batch over intact"
    side = data.DeviceSide(16, CPU, torch.contiguous_format, non_blocking=False)
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
    shapes = {decode_jpeg(torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.uint8)).shape
              for f in path.glob("*/*.jpg")}
    assert len(shapes) > 1
    with pytest.raises(ValueError, match="corpus_sizes"):
        corpus.corpus_sizes({"corpus_sizes": "huge"})


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


def test_prefetcher_keeps_order_and_reports_failures() -> None:
    batches = iter([{"crops": torch.full((1, 3, 2, 2), float(i)), "packed": torch.empty(0, dtype=torch.uint8),
                     "n_gpu": torch.tensor(0), "labels": torch.tensor([i]), "stats": torch.zeros(1, 5)}
                    for i in range(5)])
    side = data.DeviceSide(2, CPU, torch.contiguous_format, non_blocking=False)
    pre = data.Prefetcher(lambda: next(batches), side)
    try:
        assert [int(pre.next()[1]) for _ in range(5)] == [0, 1, 2, 3, 4]
        with pytest.raises(RuntimeError, match="prefetch thread failed"):
            pre.next()  # the source ran dry: StopIteration in the thread reaches the consumer
    finally:
        pre.close()


# ---------------------------------------------------------------- data knobs


def test_check_rejects_knobs_that_cannot_run() -> None:
    cpu, gpu = DeviceInfo("cpu"), DeviceInfo("cuda", "H200", 1, (9, 0))
    assert "decode_device" in data.check(knobs(decode_device="cuda"), cpu)
    assert "decode_device" in data.check(knobs(decode_device="hybrid", gpu_share=0.5), cpu)
    assert data.check(knobs(decode_device="cuda"), gpu) is None
    assert data.check(knobs(decode_device="hybrid", gpu_share=0.5), gpu) is None
    assert "gpu_share" in data.check(knobs(decode_device="hybrid", gpu_share=1.5), gpu)
    assert "cpu_decoder=pil" in data.check(knobs(decode_scale="reduced"), gpu)
    assert data.check(knobs(decode_scale="reduced", cpu_decoder="pil"), cpu) is None
    assert "device_prefetch" in data.check(knobs(device_prefetch=True), cpu)
    assert "prefetch_factor" in data.check(knobs(prefetch_factor=2), gpu)
    assert data.check(knobs(num_workers=2, prefetch_factor=2), gpu) is None
    assert "persistent_workers" in data.check(knobs(persistent_workers=True), gpu)
    assert data.check(knobs(num_workers=1, persistent_workers=True), cpu) is None
    cfg = {"workload": {"data": "jpeg"}, "knobs": {"precision": "fp32", **knobs(decode_device="cuda")}}
    assert "decode_device" in resnet50.check(cfg, cpu), "resnet50's check consults the pipeline's"
    assert resnet50.check({**cfg, "workload": {"data": "synthetic"}}, cpu) is None


def test_prefetch_factor_reaches_the_loader_only_with_workers(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, num_workers=1, prefetch_factor=3)
    try:
        assert pipe.loader.prefetch_factor == 3 and pipe.loader.num_workers == 1
        # forked from the trial process, not started through a forkserver that would import torch again
        assert pipe.loader.multiprocessing_context.get_start_method() == "fork"
        assert pipe.next()[0].shape == (4, 3, 16, 16)
    finally:
        pipe.close()
    with pytest.raises(ValueError, match="prefetch_factor"):
        pipeline(tmp_path, num_workers=0, prefetch_factor=3)


def test_num_workers_spawns_processes_and_persistent_workers_keep_them(tmp_path: Path) -> None:
    before = children()
    pipeline(tmp_path).next()
    assert children() == before, "num_workers=0 decodes in this process"
    seen = {}
    for persistent in (False, True):
        pipe = pipeline(tmp_path, num_workers=2, persistent_workers=persistent)
        pipe.next()
        first = children() - before
        assert len(first) == 2 and os.getpid() not in first, "two worker processes"
        for _ in range(3):  # 8 images / batch 4: two epochs pass, the loader restarts
            pipe.next()
        assert pipe.epochs >= 1
        seen[persistent] = (first, children() - before)
        pipe.close()
        assert children() == before, "close() stops the workers"
    first, later = seen[False]
    assert first.isdisjoint(later), "without persistent_workers each epoch starts new workers"
    first, later = seen[True]
    assert first == later, "persistent_workers keeps the same workers across epochs"


def test_epoch_images_sets_when_the_loader_restarts(tmp_path: Path) -> None:
    one_pass = pipeline(tmp_path)  # 8 images, batches of 4: an epoch is 2 batches
    cycled = pipeline(tmp_path, p={**TINY, "epoch_images": 12})  # the corpus cycled: 3 batches
    for _ in range(3):
        one_pass.next(), cycled.next()
    assert (one_pass.epochs, cycled.epochs) == (1, 0)
    cycled.next()
    assert cycled.epochs == 1
    with pytest.raises(ValueError, match="epoch_images"):
        pipeline(tmp_path, p={**TINY, "epoch_images": 3})


def test_pin_memory_reaches_the_loader(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, pin_memory=True)
    assert pipe.loader.pin_memory is True
    images = pipe._next_host()["crops"]
    if torch.accelerator.is_available():  # pinning needs an accelerator's driver; otherwise the loader skips it
        assert images.is_pinned()
    assert not pipeline(tmp_path, pin_memory=False)._next_host()["crops"].is_pinned()


# ---------------------------------------------------------------- the workload, end to end


def resnet_cfg(results: Path, **knob: Any) -> dict[str, Any]:
    return {"workload": {"name": "resnet50", "data": "jpeg", "image_size": 32, "num_classes": 10, "root": None,
                         "corpus_images": 16, "corpus_width": 48, "corpus_height": 40, "corpus_sizes": "fixed"},
            "knobs": {"precision": "fp32", "memory_format": "channels_last", "compile": "off", "batch_size": 2,
                      "grad_accum_steps": 1, "optimizer_impl": "foreach", "activation_checkpointing": "off",
                      **knobs(), **knob},
            "device": "cpu", "results_dir": str(results)}


def test_jpeg_training_step_runs_end_to_end(tmp_path: Path) -> None:
    work = resnet50.build(resnet_cfg(tmp_path, grad_accum_steps=2), CPU)
    steps = []
    handle = register_optimizer_step_post_hook(lambda *a: steps.append(1))
    try:
        batch = work.next_batch()
        assert len(batch) == 2, "one micro-batch per grad_accum_steps"
        for x, y in batch:
            assert x.dtype == torch.float32 and x.shape == (2, 3, 32, 32)
            assert x.is_contiguous(memory_format=torch.channels_last)
        loss = work.step(batch)
    finally:
        handle.remove()
        work.close()
    assert torch.isfinite(loss) and len(steps) == 1
    m = work.extra_metrics()
    assert m["data_corpus_images"] == 16 and m["data_decode_device"] == "cpu"
    assert (tmp_path / "data" / "jpeg-48x40-16" / corpus.MANIFEST).is_file(), "cached under <results_dir>/data"


def test_uint8_transfer_copies_a_quarter_of_the_bytes_and_normalizes_the_same(tmp_path: Path) -> None:
    """transfer_dtype=uint8: the loader's batch is the uint8 crops (a quarter of the bytes); normalized after the
    copy they are the float32 images the workers would have produced (same crops: same seed)."""
    out = {}
    for transfer in ("float32", "uint8"):
        pipe = pipeline(tmp_path, transfer_dtype=transfer)
        try:
            torch.manual_seed(7)
            out[transfer] = pipe._next_host()["crops"], pipe.next()[0]
        finally:
            pipe.close()
    (host32, _), (host8, dev8) = out["float32"], out["uint8"]
    assert host32.dtype == torch.float32 and host8.dtype == torch.uint8
    assert host8.nbytes * 4 == host32.nbytes
    assert torch.allclose(data.Normalize(CPU)(host8.float()), host32, atol=1e-5)  # vs the workers' torchvision path
    assert dev8.dtype == torch.float32 and dev8.shape == host32.shape and dev8.abs().max() < 3
    assert pipe.metrics()["data_transfer_dtype"] == "uint8", "what crossed to the device was uint8"
    with pytest.raises(ValueError, match="transfer_dtype"):
        pipeline(tmp_path, transfer_dtype="fp8")


def test_warmup_drains_what_the_workers_prefetched(tmp_path: Path) -> None:
    """With workers, warm-up runs past the loader's buffer (workers x prefetch_factor batches) before timing."""
    from sweeper.trial.measure import measure

    cfg = resnet_cfg(tmp_path, num_workers=2, prefetch_factor=3, grad_accum_steps=2)
    cfg["workload"]["epoch_images"] = 1000
    work = resnet50.build(cfg, CPU)
    try:
        assert work.buffered_steps == 3, "6 batches held ready, 2 micro-batches per step"
        m = measure(work, CPU, warmup_steps=1, steps=2)
    finally:
        work.close()
    assert m["warmup_steps"] == 5 and m["steps_measured"] == 2
    work = resnet50.build(resnet_cfg(tmp_path), CPU)  # no workers: nothing buffered, warm-up as configured
    try:
        assert work.buffered_steps == 0 and measure(work, CPU, warmup_steps=1, steps=1)["warmup_steps"] == 1
    finally:
        work.close()


def test_warmup_drain_runs_until_the_buffer_is_empty() -> None:
    """A pipeline slower than the model serves its prefetched batches at once, then makes each step wait: warm-up
    stops right after the buffer runs dry; a pipeline that keeps up is warmed up to the cap (4 x the buffer + 8)."""
    import time as clock

    from sweeper.trial.measure import _drain
    from workloads.base import Workload

    def work(buffered: int, slow_after: int | None) -> Workload:
        calls = []

        def next_batch() -> None:
            calls.append(1)
            if slow_after is not None and len(calls) > slow_after:
                clock.sleep(0.03)  # the workers' own rate: slower than a step

        return Workload(step=lambda b: clock.sleep(0.005), samples_per_step=1, next_batch=next_batch,
                        buffered_steps=buffered)

    assert _drain(work(6, slow_after=10)) == (12, True), "10 buffered batches, then two waits in a row"
    assert _drain(work(6, slow_after=None)) == (32, False), "keeps up: the cap"
    # A pipeline that says what it holds: the count decides, not the waits (a pinning thread can make every call
    # wait while the workers' queue is still full).
    held = iter([9, 7, 5, 3, 1, 2, 1, 0, 0])
    counted = work(6, slow_after=0)
    counted.ready_batches = lambda: next(held)
    assert _drain(counted) == (8, True), "stops at the second count <= 1 in a row, whatever the waits"
    steady = work(6, slow_after=0)
    steady.ready_batches = lambda: 5
    assert _drain(steady) == (6, False), "a count that does not shrink: the pipeline keeps up, no need to wait"


def test_ready_batches_counts_what_the_workers_finished(tmp_path: Path) -> None:
    import time as clock

    pipe = pipeline(tmp_path, p={**TINY, "epoch_images": 1000}, batch_size=2, num_workers=2, prefetch_factor=2)
    try:
        pipe.next()
        deadline = clock.time() + 60
        while pipe.ready_batches() < 3 and clock.time() < deadline:
            clock.sleep(0.1)
        assert pipe.ready_batches() >= 3, "idle workers fill their prefetch slots: batches wait to be taken"
        for _ in range(6):
            pipe.next()
    finally:
        pipe.close()
    assert pipeline(tmp_path).ready_batches() == 0, "no workers: nothing is prepared ahead"


def test_cli_jpeg_trial_writes_a_row_with_data_wait(results: Path) -> None:
    """Decoding in the training loop (num_workers=0) of 3072x2304 JPEGs for a 32-pixel model: the loop waits for
    data a large share of the window (0.43 measured on the loaded 2-core CI machine)."""
    run_cli(["+workload=resnet50", "workload.data=jpeg", "knobs.num_workers=0", "workload.corpus_images=4",
             "workload.corpus_width=3072", "workload.corpus_height=2304", "workload.corpus_sizes=fixed",
             "cpu_threads=1"], results, check=True)
    df = pd.read_parquet(results / "trials")
    assert len(df) == 1
    row = df.iloc[0]
    assert row["status"] == "complete"
    assert row["data_wait_frac"] > 0.2, row["data_wait_frac"]
    assert row["knob.num_workers"] == 0 and pd.isna(row["knob.prefetch_factor"])
    assert row["data_decode_device"] == "cpu" and row["data_corpus_images"] == 4
    assert (results / "data" / "jpeg-3072x2304-4" / corpus.MANIFEST).is_file()
    assert row["data_limit_stage"] in ("decode", "augmentation", "transfer") and row["data_decode_ms"] > 0


@pytest.mark.parametrize("load_s, step_s, low, high", [(0.02, 0.001, 0.7, 1.0), (0.0, 0.01, 0.0, 0.1)])
def test_data_wait_frac_is_the_share_of_the_window_spent_fetching(load_s: float, step_s: float, low: float,
                                                                  high: float) -> None:
    """A loader slow by construction (20 ms a batch for a 1 ms step) gives a high fraction; batches ready at once
    a low one. Sleeps do not compete for the CPU, so the ratio holds on a loaded machine."""
    from sweeper.trial.measure import measure
    from workloads.base import Workload

    def next_batch() -> None:
        if load_s:
            time.sleep(load_s)

    work = Workload(step=lambda _: time.sleep(step_s), samples_per_step=1.0, next_batch=next_batch)
    m = measure(work, CPU, warmup_steps=1, steps=20)
    assert low <= m["data_wait_frac"] <= high, m["data_wait_frac"]


# ---------------------------------------------------------------- GPU only (skipped on the CPU)

cuda_only = pytest.mark.gpu  # skipped without a CUDA GPU (conftest.py)


class CopyLog(TorchDispatchMode):
    """Records the non_blocking flag of every copy to the GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[bool] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if func is torch.ops.aten._to_copy.default and device is not None and torch.device(device).type == "cuda":
            self.copies.append(bool(kwargs.get("non_blocking", False)))
        return func(*args, **kwargs)


@cuda_only
@pytest.mark.parametrize("decode_device, extra", [("cpu", {}), ("cpu", {"device_prefetch": True}), ("cuda", {}),
                                                   ("hybrid", {"gpu_share": 0.5})])
def test_gpu_batches_are_float32_in_the_memory_format(tmp_path: Path, decode_device: str, extra: dict) -> None:
    pipe = pipeline(tmp_path, device=torch.device("cuda"), memory_format=torch.channels_last, num_workers=1,
                    decode_device=decode_device, **extra)
    try:
        images, labels = pipe.next()
    finally:
        pipe.close()
    assert images.is_cuda and labels.is_cuda and images.dtype == torch.float32
    assert images.shape == (4, 3, 16, 16) and images.is_contiguous(memory_format=torch.channels_last)
    assert images.std() > 0.1 and pipe.metrics()["data_decode_device"] == decode_device
    m = pipe.metrics()
    assert (m["data_bytes_decoded_gpu"] > 0) == (decode_device != "cpu")
    assert (m["data_bytes_decoded_cpu"] > 0) == (decode_device != "cuda")


@cuda_only
def test_pin_memory_and_non_blocking_reach_the_copy(tmp_path: Path) -> None:
    pipe = pipeline(tmp_path, device=torch.device("cuda"), pin_memory=True, non_blocking=True)
    assert pipe._next_host()["crops"].is_pinned()
    with CopyLog() as log:
        pipe.next()
    assert log.copies == [True, True], "images and labels are copied without blocking"
    with CopyLog() as log:
        pipeline(tmp_path, device=torch.device("cuda")).next()
    assert log.copies == [False, False]
