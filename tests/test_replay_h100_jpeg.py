"""A replayed ResNet-50 sweep fed from JPEGs on an H100 (tests/replay.py, a fake clock): the host's CPU decoding
caps the pipeline far below the model, so the sweep's best path is to decode on the GPU: the workload's declared
starts (the hybrid split, eager then compiled) come right after the defaults, before the handbook's start (compiled,
14 CPU workers, data-bound), and decide whether it gets there within 300 s.

The landscape, from the H100 sweeps of 2026-12-05 (bench/results/h100-2026-12-05T1252-budget-jpeg*, ...T1550-*;
an 8-photograph corpus, 16 host cores):

* model: fp32 contiguous batch 256 eager 1,850 img/s; fp16 x1.26, bf16 x1.24, tf32 x1.265; channels_last with
  fp16/bf16 x1.92; batch 512 x1.066, 1024 x1.12; cudnn_benchmark, fused x1.01; compile default x1.25 (the
  synthetic hand loop, compiled fp16 batch 1024: 6,400), reduce-overhead x1.27, max-autotune-no-cudagraphs x1.30;
  so eager fp16 channels_last batch 512 4,867 (T1252 trial 2: 4,877, no wait for data);
* pipeline: CPU decoding in the main process 330 img/s (T1550 trials 0 and 5: 296, 346), n workers 245 n capped
  at 3,000 (T1550 trial 1: 2,986 with 14, a 0.49 wait); pinned x1.03; hybrid (a share decoded on the GPU):
  min(cpu / (1 - share), gpu / share), GPU decoding 10,000 img/s with 32 CUDA connections, 6,000 with 8; all on
  the GPU: 6,000 (32) / 3,000 (8); a compiled step pays 22 us of GPU time for each image decoded on the GPU
  (T0437 of 2026-12-06: 5,768 img/s against the model's 6,160, the GPU 98 % busy), an eager one hides it;
* phases: start 3 s; setup 1.8 s eager, 6.0 s compiled; compile cold default 100 s (T1550 trial 1's first step:
  108.7 s), reduce-overhead 115 s, max-autotune-no-cudagraphs 400 s; warm 13 / 15 / 52 s; cuDNN's benchmark in the
  first step 8 s at fp16/bf16, 28 s at tf32/fp32 (T1252 trial 5: 28.8 s at tf32), 0.7 s without it; warm-up
  max(5, buffer + 2) steps (+7 decoding on the GPU: T1252's 65), a drain of 10 steps with workers (8-11 recorded).

The recorded sweep (T1550) priced the eager hybrid 51 s from its CPU-fed start's step (it ran 21 s at T1252) and
kept it out of the 118 s left; each workload ``start`` skipped after it queued one more spare-time choice, and the
sweep ended at 0.47 of the synthetic hand loop.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import yaml
from optuna.trial import TrialState

from sweeper.sweep.run.admission import WAITS
from tests.replay import Landscape, _open, _search_step, replay
from tests.test_replay import H100, RESNET_PARAMS, _ResNet

PARAMS = {
    **RESNET_PARAMS,
    "knobs.num_workers": "choice(0, 4, 8, 12, 14)",
    "knobs.prefetch_factor": "choice(2, 4)",
    "knobs.worker_nice": "choice(0, 10)",
    "knobs.pin_memory": "choice(false, true)",
    "knobs.non_blocking": "choice(false, true)",
    "knobs.decode_device": "choice(cpu, cuda, hybrid)",
    "knobs.gpu_share": "choice(0.25, 0.375, 0.5, 0.75)",
    "knobs.gpu_decoder": "choice(torchvision)",
    "knobs.gpu_roi_decode": "choice(false)",
    "knobs.cpu_decoder": "choice(torchvision, pil)",
    "knobs.decode_scale": "choice(full, reduced)",
    "knobs.transfer_dtype": "choice(float32, uint8)",
    "knobs.augment_device": "choice(cpu, cuda)",
    "knobs.device_prefetch": "choice(false, true)",
    "knobs.cuda_connections": "choice(8, 32)",
}
# conf/workload/resnet50.yaml's conditions, workload.data == 'jpeg' taken as true
CONDITIONS = {
    "knobs.prefetch_factor": "knobs.num_workers > 0",
    "knobs.worker_nice": "knobs.num_workers > 0",
    "knobs.gpu_share": "knobs.decode_device == 'hybrid'",
    "knobs.gpu_decoder": "knobs.decode_device != 'cpu'",
    "knobs.gpu_roi_decode": "knobs.decode_device != 'cpu' and knobs.gpu_decoder == 'nvimgcodec'",
    "knobs.cpu_decoder": "knobs.decode_device != 'cuda'",
    "knobs.decode_scale": "knobs.decode_device != 'cuda' and knobs.cpu_decoder == 'pil'",
    "knobs.augment_device": "knobs.decode_device != 'cuda'",
    "knobs.transfer_dtype": "knobs.decode_device != 'cuda' and knobs.augment_device == 'cpu'",
    "knobs.device_prefetch": "knobs.decode_device == 'cpu' and knobs.augment_device == 'cpu'",
    "knobs.cuda_connections": "knobs.decode_device != 'cpu'",
}
DEFAULTS = {
    "knobs.precision": "fp32",
    "knobs.memory_format": "contiguous",
    "knobs.compile": "off",
    "knobs.batch_size": 256,
    "knobs.cudnn_benchmark": False,
    "knobs.optimizer_impl": "foreach",
    "knobs.num_workers": 0,
    "knobs.prefetch_factor": None,
    "knobs.worker_nice": 0,
    "knobs.pin_memory": False,
    "knobs.non_blocking": False,
    "knobs.decode_device": "cpu",
    "knobs.gpu_share": None,
    "knobs.gpu_decoder": "torchvision",
    "knobs.gpu_roi_decode": False,
    "knobs.cpu_decoder": "torchvision",
    "knobs.decode_scale": "full",
    "knobs.transfer_dtype": "float32",
    "knobs.augment_device": "cpu",
    "knobs.device_prefetch": False,
    "knobs.cuda_connections": None,
}
# the workload's starts (conf/workload/resnet50.yaml: eager hybrid, compiled hybrid)
EAGER_HYBRID = {
    "knobs.precision": "fp16",
    "knobs.memory_format": "channels_last",
    "knobs.compile": "off",
    "knobs.cudnn_benchmark": True,
    "knobs.batch_size": 512,
    "knobs.optimizer_impl": "fused",
    "knobs.num_workers": 14,
    "knobs.prefetch_factor": 4,
    "knobs.worker_nice": 10,
    "knobs.pin_memory": True,
    "knobs.non_blocking": True,
    "knobs.decode_device": "hybrid",
    "knobs.gpu_share": 0.5,
    "knobs.cpu_decoder": "torchvision",
    "knobs.augment_device": "cpu",
    "knobs.transfer_dtype": "uint8",
    "knobs.cuda_connections": 32,
}
STARTS = [EAGER_HYBRID, {**EAGER_HYBRID, "knobs.compile": "default"}]

FACTORS = {
    "knobs.precision": {"tf32": 1.265, "fp16": 1.26, "bf16": 1.24},
    "knobs.compile": {"default": 1.25, "reduce-overhead": 1.27, "max-autotune-no-cudagraphs": 1.30},
    "knobs.batch_size": {64: 0.80, 128: 0.92, 512: 1.066, 1024: 1.12},
    "knobs.cudnn_benchmark": {True: 1.01},
    "knobs.optimizer_impl": {"fused": 1.01},
}
NEUTRAL = frozenset(f"knobs.{k}" for k in (
    "optimizer_impl", "cuda_connections", "cudnn_benchmark", "num_workers", "prefetch_factor", "worker_nice",
    "pin_memory", "non_blocking", "decode_device", "gpu_share", "gpu_decoder", "gpu_roi_decode", "cpu_decoder",
    "decode_scale", "transfer_dtype", "augment_device", "device_prefetch"))  # fmt: skip


def pipeline(c: dict, per_worker: float = 245.0, most: float = 3000.0) -> float:
    n = int(c.get("knobs.num_workers") or 0)
    cpu = 330.0 if n == 0 else min(per_worker * n, most)
    cc32 = c.get("knobs.cuda_connections") == 32
    dev = c.get("knobs.decode_device")
    if dev == "hybrid":
        share = float(c.get("knobs.gpu_share") or 0.5)
        rate = min(cpu / (1 - share), (10000.0 if cc32 else 6000.0) / share)
    elif dev == "cuda":
        rate = 6000.0 if cc32 else 3000.0
    else:
        rate = cpu
    return rate * (1.03 if c.get("knobs.pin_memory") else 1.0)


DECODE_S = 22e-6  # GPU seconds an image decoded on the GPU takes from a compiled step (below)
# The compiled model's own speed where the H100's synthetic sweeps measured it (channels_last, cuDNN's benchmark,
# fused; h100-2026-12-05T1243, T1606 and 2026-12-06T0218-budget-resnet50: fp16 batch 512 6,225-6,251, fp16 batch
# 1024 6,404-6,432, bf16 batch 1024 6,074-6,108): the factors above, fitted to eager trials, give 6,083, 6,392 and
# 6,290; a compiled step gains more at batch 512 and less at bf16. With them the hybrid split at 1/2 on the GPU
# gives 5,851 at fp16 batch 512 (measured 5,760-5,881 in six H100 sweeps) and 5,705 at bf16 batch 1024 (5,851 at
# T0403), at 3/4 5,657 (5,524-5,815).
COMPILED = {("fp16", 512, "default"): 6239.0, ("fp16", 1024, "default"): 6410.0, ("bf16", 1024, "default"): 6087.0}


class _GpuDecoding(_ResNet):
    """A compiled step keeps the GPU busy (98 % on the H100): images decoded there take their time from it. The
    second H100 run (T0437): compiled fp16 batch 512 with half the images decoded on the GPU 5,768 img/s against
    the model's 6,160 alone, 11 us an image, 22 us a decoded one; an eager step leaves the GPU gaps they fill
    (4,895-4,929 img/s eager, the model's own speed)."""

    def throughput(self, c: dict) -> float:
        v = _ResNet.throughput(dataclasses.replace(self, cap=None), c)  # the model's own speed
        v = COMPILED.get((c.get("knobs.precision"), c.get("knobs.batch_size"), c.get("knobs.compile")), v)
        share = {"hybrid": float(c.get("knobs.gpu_share") or 0.5), "cuda": 1.0}.get(c.get("knobs.decode_device"), 0.0)
        if share and str(c.get("knobs.compile", "off")) != "off":
            v = 1.0 / (1.0 / v + share * DECODE_S)
        return min(v, self.cap(c)) if self.cap else v


def buffered(c: dict) -> int:
    n = int(c.get("knobs.num_workers") or 0)
    return n * int(c.get("knobs.prefetch_factor") or 2) if n else 0


def first_step(c: dict) -> float:
    if not c.get("knobs.cudnn_benchmark"):
        return 0.7
    return 8.0 if c.get("knobs.precision") in ("fp16", "bf16") else 28.0


def warmup(c: dict) -> tuple[int, int]:
    """The H100's warm-up and drain: max(5, buffer + 2) steps (+7 decoding on the GPU), then 10 drain steps where
    workers prefetch."""
    buf = buffered(c)
    gpu_decode = c.get("knobs.decode_device") != "cpu"
    return max(5, buf + 2 + (7 if gpu_decode else 0) if buf else 0), 10 if buf else 0


def h100_jpeg() -> Landscape:
    return _GpuDecoding(  # channels_last with fp16/bf16 x1.92, as on the H200
        "jpeg_h100",
        PARAMS,
        DEFAULTS,
        {"knobs.compile": "off"},
        {"warmup_steps": 5, "steps": 20, "min_time_s": 1.0},
        1850.0,
        FACTORS,
        "knobs.batch_size",
        start_s=3.0,
        setup_s=(1.8, 6.0),
        compile_cold={"default": 100.0, "reduce-overhead": 115.0, "max-autotune-no-cudagraphs": 400.0},
        compile_warm={"default": 13.0, "reduce-overhead": 15.0, "max-autotune-no-cudagraphs": 52.0},
        cap=pipeline,
        device=H100,
        neutral=NEUTRAL,
        graph_ops=166,
        first_step=first_step,
        warmup=warmup,
        conditions=CONDITIONS,
        starts=STARTS,
    )


def reachable(land: Landscape) -> float:
    """The best the landscape allows in a budget of minutes: the modes whose cold compile fits (max-autotune's
    400 s does not), the model's and the pipeline's knobs that matter, the rest at their best."""
    keys = {"knobs.precision": ("fp16", "bf16"), "knobs.batch_size": (512, 1024),
            "knobs.compile": ("off", "default", "reduce-overhead"), "knobs.decode_device": ("cpu", "cuda", "hybrid"),
            "knobs.gpu_share": (0.25, 0.375, 0.5, 0.75), "knobs.cuda_connections": (8, 32)}  # fmt: skip
    fixed = {"knobs.memory_format": "channels_last", "knobs.cudnn_benchmark": True, "knobs.optimizer_impl": "fused",
             "knobs.num_workers": 14, "knobs.pin_memory": True}  # fmt: skip
    return max(
        land.throughput({**land.defaults, **fixed, **dict(zip(keys, combo))})
        for combo in itertools.product(*keys.values())
    )


def hand(land: Landscape) -> float:
    """The synthetic hand loop's speed: the handbook's configuration (compiled fp16 channels_last batch 1024, fused,
    cuDNN's benchmark) with no input pipeline to wait for."""
    c = {**land.defaults, "knobs.precision": "fp16", "knobs.memory_format": "channels_last",
         "knobs.compile": "default", "knobs.batch_size": 1024, "knobs.cudnn_benchmark": True,
         "knobs.optimizer_impl": "fused"}  # fmt: skip
    return land._uncapped(c)


def test_the_gpu_decode_path_is_measured_and_the_sweep_reaches_the_best_it_allows() -> None:
    """Each seed measures the eager hybrid decode right after the defaults (priced by the model's own time, about
    its 23 s), then compiles its pipeline, and ends within the budget at >= 0.95 of the best this landscape allows in
    it (the issue's JPEG bar, 0.95 of the synthetic hand loop, is out of reach here: with the GPU's decoding taken
    from the compiled step the landscape's best is 0.948 of it; 0.89-0.91 on the H100 itself). With the handbook's
    start (compiled batch 1024 fed by the CPU, 137 s here) before the declared starts, the sweep reached 5,705
    img/s by way of that start's graph (0.94) and 0.99 of it only at 232 s."""
    for seed in (0, 1, 2):
        land = h100_jpeg()
        out = replay(land, budget_s=300.0, seed=seed)
        ran = out.ran()
        hybrid = [e for e in ran if e.params.get("knobs.decode_device") != "cpu"]
        assert hybrid and hybrid[0].params.get("knobs.compile") == "off", [(e.at, e.params) for e in ran]
        assert abs(hybrid[0].predicted - hybrid[0].actual) <= 0.3 * hybrid[0].actual, hybrid[0]
        assert out.best() >= 0.95 * reachable(land), (seed, out.best(), reachable(land))
        assert reachable(land) < 0.95 * hand(land)  # the JPEG bar is out of reach on this host
        assert out.ended_at <= 300.0 + 10.0


def test_the_replayed_starts_are_the_workloads() -> None:
    """The replay's starts are conf/workload/resnet50.yaml's on the JPEG pipeline (those without a ``when``): a
    start added or changed there is replayed here before its cost shows on a GPU."""
    conf = yaml.safe_load((Path(__file__).parents[1] / "conf/workload/resnet50.yaml").read_text())
    declared = [s for s in conf["hydra"]["sweeper"]["starts"] if "when" not in s]
    assert declared == STARTS


def test_one_spare_time_choice_waits_in_the_queue_at_a_time() -> None:
    """With little time left, a queued start that does not fit asks for spare-time work at each skip, and one choice
    queued waits its turn behind the queued starts; another is queued only once it has run (on the recorded T1550
    sweep three were queued behind them, one measured)."""
    sweep, _baseline = _open(h100_jpeg(), 300.0, 0, 5.0)
    for _ in range(2):  # the baseline, the eager hybrid: the compiled hybrid stays queued
        assert not _search_step(sweep)
    sweep.clock.t = sweep.t0 + 200.0  # 100 s left: the handbook's start (a cold compile) does not fit

    def waiting() -> int:
        return len(sweep.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    before = waiting()
    first = sweep.admission.queue_spare()
    assert first is not None and first != WAITS
    assert sweep.admission.queue_spare() == WAITS
    assert waiting() == before + 1


def test_a_queued_repeat_waits_as_it_was_chosen() -> None:
    """A repeat of a top configuration queued for the time left was chosen as a repeat (its compile cache warm);
    whether it still waits its turn is asked the same way, not as a cold compile, so no second choice joins it."""
    sweep, _baseline = _open(h100_jpeg(), 300.0, 0, 5.0)

    def best() -> dict:
        return max(sweep.out.ran(), key=lambda e: e.throughput or 0.0).params

    while not sweep.out.ran() or best().get("knobs.compile", "off") == "off":  # until a compiled one is the best
        assert not _search_step(sweep)
    admission, best = sweep.admission, best()
    with admission.reading():
        reserve = admission.reserve()
    warm, cold = admission.predict(best, repeat=True), admission.predict(best)
    assert cold > warm + 10.0  # its compile: cold 100 s, warm 13 s
    sweep.clock.t = sweep.t0 + 300.0 - (reserve + warm + 5.0)  # a warm repeat fits, a cold compile would not
    assert admission.queue_repeat() is not None
    assert admission.queue_spare() == WAITS


def fed_by_a_faster_host(c: dict) -> float:
    """The input pipeline of the H100 hosts of 2026-12-06 08:08-22:24 UTC: 14 CPU workers fed the compiled model
    5,572-5,723 img/s with nothing decoded on the GPU (waiting 6.6-7.4 % of the window), against 2,986 on the host
    of 2026-12-05 15:50 that :func:`pipeline`'s defaults model: 400 img/s a worker, at most 5,500, pinned x1.03;
    with uint8 crops (normalized on the GPU) 6,000 img/s, waiting 3.2 % (bench/host_ladder.sh, 22:20): at most
    5,850; with the copy and normalization on a side stream (``device_prefetch``) 6,040, waiting 0.1 %: the host
    feeds the model (420 img/s a worker)."""
    uint8 = c.get("knobs.transfer_dtype") == "uint8"
    ahead = uint8 and c.get("knobs.decode_device") == "cpu" and c.get("knobs.device_prefetch") is True
    most = 5500.0 if not uint8 else 5850.0 if not ahead else math.inf
    return pipeline(c, per_worker=420.0 if uint8 else 400.0, most=most)


def today(land: Landscape) -> Landscape:
    """The landscape on the H100 hosts of 2026-12-06 (the T2007 sweep's rows, cuDNN's benchmark primed beside the
    compile): 14 workers feed more (:func:`fed_by_a_faster_host`); the compiled start's first trial 46 s, a warm one
    19-21 s, reduce-overhead's cold one 44 s."""
    return dataclasses.replace(
        land,
        cap=fed_by_a_faster_host,
        setup_s=(1.8, 3.0),
        compile_cold={"default": 25.0, "reduce-overhead": 30.0, "max-autotune-no-cudagraphs": 300.0},
        compile_warm={"default": 3.0, "reduce-overhead": 4.0, "max-autotune-no-cudagraphs": 30.0},
    )


def test_a_busy_compiled_best_moves_its_decoding_to_the_host_first() -> None:
    """Today's H100 host: the compiled best of the declared starts (half of each batch decoded on the GPU) keeps the
    GPU busy and never waits, so its decoding is moved back to the host, the whole stage in one step first (uint8
    crops, the knob the step wakes, ``device_prefetch``, on as the handbook's start sets it on a GPU): the host
    alone feeds the model, and it is the best, found by 150 s. On that host (bench/host_ladder.sh, 2026-12-06
    22:20) 1/2 ran 5,780 img/s, 1/4 5,930, the host 6,000 (waiting 3.2 %) and with the side stream 6,040; the
    sweep before stepped the share 3/8, then 1/4, then the host with ``device_prefetch`` off (its default), and on
    2026-12-07 ended on 1/4 (5,909) with the host's step at 5,806, waiting 3.8 %."""
    for seed in (0, 1, 2):
        land = today(h100_jpeg())
        out = replay(land, budget_s=300.0, seed=seed)
        ran = [e for e in out.ran() if not e.repeat]
        host = ran[len(STARTS) + 1].params
        assert host["knobs.decode_device"] == "cpu", [(e.at, e.params) for e in ran]
        assert host["knobs.device_prefetch"] is True and host["knobs.transfer_dtype"] == "uint8"
        assert out.best() == land.throughput(host) > land.throughput({**STARTS[1], "knobs.gpu_share": 0.25})
        t99 = min(e.at + e.actual for e in ran if e.throughput >= 0.99 * out.best())
        assert t99 <= 150.0, t99  # the bar of a sweep of 300 s
        assert out.ended_at <= 300.0 + 10.0


def test_where_the_host_alone_falls_short_the_share_steps_come_next() -> None:
    """A host that cannot decode the whole batch (the H100 host of 2026-12-05 15:50: 14 workers at most 2,986 img/s;
    today's compile times): the step to the host waits for its data, and the share steps come next from the best,
    1/2 to 3/8; where 3/8 runs as fast as 1/2 (within the 1 % the search counts as noise; on the H100 host of
    2026-12-06 22:13 5,790 and 5,804 img/s) the steps go on from it, to 1/4."""
    for seed in (0, 1, 2):
        land = dataclasses.replace(today(h100_jpeg()), cap=pipeline)

        def flat(c: dict, land: Landscape = land) -> float:  # 3/8 fed at 1/2's pace
            half = land.throughput({**c, "knobs.gpu_share": 0.5})
            return half if c.get("knobs.gpu_share") == 0.375 else land.cap(c)

        out = replay(dataclasses.replace(land, cap=flat), budget_s=300.0, seed=seed)
        ran = [e for e in out.ran() if not e.repeat]
        after = [(e.params.get("knobs.decode_device"), e.params.get("knobs.gpu_share")) for e in ran[len(STARTS) + 1 :]]
        assert after[:3] == [("cpu", None), ("hybrid", 0.375), ("hybrid", 0.25)], [(e.at, e.params) for e in ran]
        assert ran[len(STARTS) + 1].throughput < 0.6 * out.best()  # the host alone waits
        assert out.best() == land.throughput(STARTS[1])


def its_main_process_decodes_faster(c: dict) -> float:
    """The H100 host of 2026-12-06 22:13 UTC: the baseline (no worker) decoded 554 img/s (T2213 trial 0; 330 on the
    host of 2026-12-05 15:50), so the starts and diagnosed steps end sooner and the handbook's start fits after
    them; with workers, :func:`fed_by_a_faster_host`."""
    if not int(c.get("knobs.num_workers") or 0):
        return 554.0 * (1.03 if c.get("knobs.pin_memory") else 1.0)
    return fed_by_a_faster_host(c)


def test_the_handbooks_start_after_the_steps_is_fed_by_the_pipeline_they_measured() -> None:
    """The handbook's start comes after the declared starts and the diagnosed steps; by then those measured what
    feeds this host (a quarter of each batch decoded on the GPU, uint8 crops), while the start's own pipeline (14
    workers, float32 crops) is its rules' guess: it runs with the best's input pipeline, so it measures the
    handbook's model side (bf16, batch 1024) fed. On the H100 at 22:13 the start on its own pipeline ran 85 s for
    4,060 img/s, data-bound (here 50 s for 5,665); fed as the best is, 5,890 here, and it is proposed once."""
    for seed in (0, 1, 2):
        land = dataclasses.replace(today(h100_jpeg()), cap=its_main_process_decodes_faster)
        out = replay(land, budget_s=300.0, seed=seed)
        ran = [e for e in out.ran() if not e.repeat]
        start = [e for e in ran if e.params.get("knobs.batch_size") == 1024]
        assert len(start) == 1, [(e.at, e.params) for e in ran]
        best = max(ran[: ran.index(start[0])], key=lambda e: e.throughput).params
        assert {k: start[0].params.get(k) for k in NEUTRAL} == {k: best.get(k) for k in NEUTRAL}
        assert start[0].params["knobs.precision"] == "bf16" and start[0].params["knobs.compile"] == "default"
        assert start[0].throughput > 0.97 * out.best()
        assert out.ended_at <= 300.0 + 10.0
