"""The search policy and the cost model replayed on landscapes recorded on an H200 (tests/replay.py), with a fake
clock: each default sweep of 300 s measures the compiled configurations that fit, skips none that would have fit,
uses the budget, and predicts most trials' wall within 30 %.

The landscapes, from measured facts (DESIGN.md's H200 facts; bench/results/h200-2026-12-0*-budget-* rows; the
sweeps of 2026-12-04 that these cases replay):

* ResNet-50, synthetic data: PyTorch's defaults 2,210 img/s; bf16/fp16 channels_last eager 4,660 at batch 256;
  compile default x1.38, batch 512 x1.066, batch 1024 a further x1.148 (7,876 by hand); a cold compiled trial
  ~59 s (compile 45 s, setup 9.6 s), its warm re-run 16 s. That sweep skipped 12 compile proposals
  ``over-budget:58`` with 142 s left, then stopped.
* ResNet-50 fed from JPEGs: the same model capped by the input pipeline (CPU decoders ~250 img/s per worker, GPU
  decode ~6,800), 65 warm-up steps to drain the pipeline, a compiled trial 64 s. That sweep skipped its second
  compile proposal ``over-budget:70`` with 177 s left.
* A ViT-B/16 the project does not ship: fp32 batch 64 362 img/s, eager bf16 ~2,300, compiled bf16 fused batch 512
  3,451 (by hand); fp32 batch 512 ~400 img/s (1.3 s steps); compile a per-model 28-29 s (a compiled trial 40-57 s),
  warm 2.9 s; 10 measured steps. That sweep never started a compile: 17 eager trials. (On 2026-12-05 its foreach
  trial compiled in 4.3 s after the fused one's cold 35.8 s: the optimizer's implementation is graph-neutral there
  too; the GPT's landscape replays that, this one stays as recorded on 2026-12-04.)

The default sweeps of 2026-12-05 (torch 2.11, rows in the sweeps' Parquet):

* bench/zoo's GPT (seq_len 512, in sequences/s): fp32 batch 16 57.0 ktokens/s (143.6 ms steps); eager bf16 x5.39,
  tf32 x2.48, fp16 x5.27, batch 32/64/128 x1.147/1.221/1.262, fused x1.011; compile default x1.405,
  reduce-overhead x1.41 (551-553 ktokens/s at bf16 batch 128); setup 4.6 s eager, 8.8 s compiled, start ~1 s;
  compile cold 23-27 s, warm 3.2 s also after a change of ``optimizer_impl`` only (its trials 10 and 12).
  max-autotune was never measured: x1.45 and a cold compile of 240 s (ResNet-50's ratio to its default compile).
* bench/zoo's DeepLabV3-MobileNetV3 fed by a DataLoader: the defaults (fp32, contiguous, batch 16, 0 workers)
  232 img/s at 69 ms a step; the handbook's start (bf16, channels_last, compile default, cudnn_benchmark, batch 128,
  fused, 12 workers, pinned, non_blocking) 459 img/s at 279 ms; setup 5.7 s eager, 12 s compiled; compile cold
  140 s; with 12 workers a warm-up of 26 steps (buffer 2 x workers, + 2) and a drain of 104; start ~2.5 s. Its
  eager factors were never measured: modest ones after the ResNet landscape (bf16/fp16 x1.1, tf32 x1.05,
  channels_last with them x1.06, batch x1.06 a doubling, cudnn_benchmark and fused x1.01, the data knobs x1),
  compile default x1.40 so that the handbook's start gives the measured 459 img/s; the other modes' compile after
  ResNet-50's ratios to its default.

An H100 sweep of 2026-12-05 (bench/results/h100-2026-12-05T1304-budget-lstm*): bench/zoo's two-layer LSTM language
model, whose compiles are cheap (4-5 s, max-autotune-no-cudagraphs 25-27 s) beside a 9 s eager trial, and whose
last 2 % came from compile's other modes: that sweep found them at 228 s, after seven eager screening trials and
the modes tried first on a screened configuration other than the start's.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.replay import Landscape, justified, replay
from workloads.base import DeviceInfo

H100 = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", count=1, compute_capability=(9, 0))

RESNET_PARAMS = {
    "knobs.precision": "choice(fp32, tf32, fp16, bf16)",
    "knobs.memory_format": "choice(contiguous, channels_last)",
    "knobs.compile": "choice(off, default, reduce-overhead, max-autotune-no-cudagraphs)",
    "knobs.batch_size": "choice(64, 128, 256, 512, 1024)",
    "knobs.cudnn_benchmark": "choice(false, true)",
    "knobs.optimizer_impl": "choice(foreach, fused)",
}
RESNET_DEFAULTS = {
    "knobs.precision": "fp32",
    "knobs.memory_format": "contiguous",
    "knobs.compile": "off",
    "knobs.batch_size": 256,
    "knobs.cudnn_benchmark": False,
    "knobs.optimizer_impl": "foreach",
}
# Knobs measured to leave a TrainStep's compiled graph, and so Inductor's cache, unchanged on the H200: the optimizer's
# implementation (the ViT's foreach trial compiled in 4.3 s after the fused one's cold 35.8 s, the GPT's in 3.2 s
# after 23-27 s, 2026-12-05) and the input pipeline's knobs (ResNet-50 fed from JPEGs, bench/results/
# h200-trial-rows.parquet: a change of workers, pinning, decode device and transfer dtype compiled in 6.7 s and
# 11.8 s after the same graph's cold 55 s), and cuDNN's benchmark flag (Inductor's cache key leaves it out: a
# 2-layer LSTM's max-autotune compile on an H100, 14.4 s with it on, took 1.9 s from the cache with it off,
# 2026-12-05; workloads/spec/training.py).
OUTSIDE = frozenset({"knobs.optimizer_impl", "knobs.num_workers", "knobs.decode_device", "knobs.pin_memory",
                     "knobs.non_blocking", "knobs.cudnn_benchmark"})  # fmt: skip
COMPILE = {"off": 1.0, "default": 1.38, "reduce-overhead": 1.41, "max-autotune-no-cudagraphs": 1.45}
BATCH = {64: 0.80, 128: 0.92, 256: 1.0, 512: 1.066, 1024: 1.224}


def _resnet_factors() -> dict:
    return {
        "knobs.precision": {"tf32": 1.5, "fp16": 1.1, "bf16": 1.1},
        "knobs.compile": COMPILE,
        "knobs.batch_size": BATCH,
        "knobs.cudnn_benchmark": {True: 1.01},
        "knobs.optimizer_impl": {"fused": 1.01},
    }


class _ResNet(Landscape):
    def throughput(self, c: dict) -> float:
        v = super().throughput(c)
        if c.get("knobs.memory_format") == "channels_last" and c.get("knobs.precision") in ("fp16", "bf16"):
            v *= 1.92  # tensor-core convolutions want channels_last (2,430 -> 4,660 img/s)
        return min(v, self.cap(c)) if self.cap else v


def resnet() -> Landscape:
    return _ResNet(
        "resnet50",
        RESNET_PARAMS,
        RESNET_DEFAULTS,
        {"knobs.compile": "off"},
        {"warmup_steps": 5, "steps": 20, "min_time_s": 0.0},
        2210.0,
        _resnet_factors(),
        "knobs.batch_size",
        start_s=1.0,
        setup_s=(4.6, 9.6),
        compile_cold={"default": 45.0, "reduce-overhead": 55.0, "max-autotune-no-cudagraphs": 400.0},
        compile_warm={"default": 5.7, "reduce-overhead": 7.0, "max-autotune-no-cudagraphs": 40.0},
        graph_ops=168,
        neutral=OUTSIDE,
    )


def jpeg() -> Landscape:
    params = {
        **RESNET_PARAMS,
        "knobs.compile": "choice(off, default, reduce-overhead)",
        "knobs.batch_size": "choice(256, 512)",
        "knobs.num_workers": "choice(0, 4, 8, 12, 14)",
        "knobs.decode_device": "choice(cpu, cuda, hybrid)",
        "knobs.pin_memory": "choice(false, true)",
    }
    defaults = {**RESNET_DEFAULTS, "knobs.num_workers": 4, "knobs.decode_device": "cpu", "knobs.pin_memory": False}

    def pipeline(c: dict) -> float:
        rate = {"cpu": 245.0 * max(1, c["knobs.num_workers"]), "cuda": 6800.0, "hybrid": 7100.0}[
            c["knobs.decode_device"]
        ]
        return rate * (1.03 if c.get("knobs.pin_memory") else 1.0)

    land = _ResNet(
        "jpeg",
        params,
        defaults,
        {"knobs.compile": "off"},
        {"warmup_steps": 65, "steps": 20, "min_time_s": 0.0},
        2210.0,
        _resnet_factors(),
        "knobs.batch_size",
        start_s=1.5,
        setup_s=(6.0, 7.8),
        compile_cold={"default": 49.0, "reduce-overhead": 60.0},
        compile_warm={"default": 6.0, "reduce-overhead": 8.0},
        graph_ops=168,
        neutral=OUTSIDE,
        cap=pipeline,
    )
    return land


def vit() -> Landscape:
    params = {
        "knobs.precision": "choice(fp32, tf32, fp16, bf16)",
        "knobs.compile": "choice(off, default, max-autotune-no-cudagraphs)",
        "knobs.batch_size": "choice(64, 128, 256, 512)",
        "knobs.optimizer_impl": "choice(foreach, fused)",
    }
    defaults = {
        "knobs.precision": "fp32",
        "knobs.compile": "off",
        "knobs.batch_size": 64,
        "knobs.optimizer_impl": "foreach",
    }
    factors = {
        "knobs.precision": {"tf32": 2.7, "fp16": 5.9, "bf16": 6.0},
        "knobs.compile": {"default": 1.45, "max-autotune-no-cudagraphs": 1.5},
        "knobs.batch_size": {128: 1.03, 256: 1.08, 512: 1.10},
        "knobs.optimizer_impl": {"fused": 1.01},
    }
    return Landscape(
        "vit",
        params,
        defaults,
        {"knobs.compile": "off"},
        {"warmup_steps": 5, "steps": 10},
        362.0,
        factors,
        "knobs.batch_size",
        start_s=0.5,
        setup_s=(4.6, 7.0),
        compile_cold={"default": 29.0, "max-autotune-no-cudagraphs": 200.0},
        compile_warm={"default": 2.9, "max-autotune-no-cudagraphs": 20.0},
        graph_ops=110,
        neutral=OUTSIDE,
    )


def gpt() -> Landscape:
    """The GPT-2-small-sized decoder of bench/zoo (seq_len 512), in sequences/s (its rows' tokens/s / 512)."""
    params = {
        "knobs.precision": "choice(fp32, tf32, fp16, bf16)",
        "knobs.compile": "choice(off, default, reduce-overhead, max-autotune-no-cudagraphs)",
        "knobs.batch_size": "choice(16, 32, 64, 128)",
        "knobs.optimizer_impl": "choice(foreach, fused)",
    }
    defaults = {
        "knobs.precision": "fp32",
        "knobs.compile": "off",
        "knobs.batch_size": 16,
        "knobs.optimizer_impl": "foreach",
    }
    factors = {
        "knobs.precision": {"tf32": 2.48, "fp16": 5.27, "bf16": 5.39},
        "knobs.compile": {"default": 1.405, "reduce-overhead": 1.41, "max-autotune-no-cudagraphs": 1.45},
        "knobs.batch_size": {32: 1.147, 64: 1.221, 128: 1.262},
        "knobs.optimizer_impl": {"fused": 1.011},
    }
    return Landscape(
        "gpt",
        params,
        defaults,
        {"knobs.compile": "off"},
        {"warmup_steps": 5, "steps": 10, "min_time_s": 1.0},
        57006.0 / 512,
        factors,
        "knobs.batch_size",
        start_s=1.0,
        setup_s=(4.6, 8.8),
        compile_cold={"default": 27.0, "reduce-overhead": 25.0, "max-autotune-no-cudagraphs": 240.0},
        compile_warm={"default": 3.2, "reduce-overhead": 3.2, "max-autotune-no-cudagraphs": 31.0},
        graph_ops=98,
        neutral=OUTSIDE,  # trials 10 and 12: 3.2 s after 23-27 s cold
    )


class _Seg(Landscape):
    def throughput(self, c: dict) -> float:
        v = super().throughput(c)
        if c.get("knobs.memory_format") == "channels_last" and c.get("knobs.precision") in ("fp16", "bf16"):
            v *= 1.06
        return v


def seg() -> Landscape:
    """DeepLabV3-MobileNetV3 fed by a DataLoader (bench/zoo/conf/workload/zoo_seg.yaml)."""
    params = {
        "knobs.precision": "choice(fp32, tf32, fp16, bf16)",
        "knobs.memory_format": "choice(contiguous, channels_last)",
        "knobs.compile": "choice(off, default, reduce-overhead, max-autotune-no-cudagraphs)",
        "knobs.cudnn_benchmark": "choice(false, true)",
        "knobs.batch_size": "choice(16, 32, 64, 128)",
        "knobs.optimizer_impl": "choice(foreach, fused)",
        "knobs.num_workers": "choice(0, 4, 8, 12)",
        "knobs.pin_memory": "choice(false, true)",
        "knobs.non_blocking": "choice(false, true)",
    }
    defaults = {
        "knobs.precision": "fp32",
        "knobs.memory_format": "contiguous",
        "knobs.compile": "off",
        "knobs.cudnn_benchmark": False,
        "knobs.batch_size": 16,
        "knobs.optimizer_impl": "foreach",
        "knobs.num_workers": 0,
        "knobs.pin_memory": False,
        "knobs.non_blocking": False,
    }
    factors = {
        "knobs.precision": {"tf32": 1.05, "fp16": 1.1, "bf16": 1.1},
        "knobs.compile": {"default": 1.40, "reduce-overhead": 1.41, "max-autotune-no-cudagraphs": 1.45},
        "knobs.batch_size": {32: 1.06, 64: 1.12, 128: 1.19},
        "knobs.cudnn_benchmark": {True: 1.01},
        "knobs.optimizer_impl": {"fused": 1.01},
    }
    return _Seg(
        "seg",
        params,
        defaults,
        {"knobs.compile": "off"},
        {"warmup_steps": 5, "steps": 20, "min_time_s": 1.0},
        232.2,
        factors,
        "knobs.batch_size",
        start_s=2.5,
        setup_s=(5.7, 12.0),
        compile_cold={"default": 140.0, "reduce-overhead": 171.0, "max-autotune-no-cudagraphs": 1244.0},
        compile_warm={"default": 18.2, "reduce-overhead": 22.2, "max-autotune-no-cudagraphs": 162.0},
        graph_ops=351,
        neutral=OUTSIDE,
        buffered=lambda c: 2 * c["knobs.num_workers"],  # prefetch_factor 2 per worker
    )


def seg_h100() -> Landscape:
    """The segmentation model on an H100 (bench/results/h100-2026-12-05T17*-budget-seg: the defaults 229 img/s, the
    compiled start 427-431; cuDNN's benchmark x1.24 of it, below). cuDNN's benchmark runs in every first step where
    it is on, eager or compiled: 46 s at batch 16 (an eager trial), 84 s at batch 128 (the compiled start's
    142.3-152.9 s first step less its compilers' 61.4-69.2 s), affine in the batch between; 1 s off. Its compilers:
    65 s (default); the other modes' are the H200's first steps (171 s, 1,244 s) less 75 s (the H200's default first
    step, 140 s, less those 65 s), their warm compiles the H200's."""
    land = seg()

    def benchmark(c: dict) -> float:
        return 40.6 + 0.34 * float(c["knobs.batch_size"]) if c.get("knobs.cudnn_benchmark") else 1.0

    # Measured on an H100 (bench/results/h100-2026-12-06T0851-budget-seg*): the compiled start without the benchmark
    # 348 img/s, with it 431 (x1.239); the compile modes' gains are the H200 landscape's less that factor, so the
    # start with the benchmark keeps its speed here. (Its eager twin without the benchmark ran at 258 img/s, which
    # the landscape's modest eager factors put at 321: not refitted.)
    factors = {
        **land.factors,
        "knobs.compile": {mode: gain * 1.01 / 1.239 for mode, gain in land.factors["knobs.compile"].items()},
        "knobs.cudnn_benchmark": {True: 1.239},
    }
    return dataclasses.replace(
        land,
        name="seg_h100",
        base=229.0,
        factors=factors,
        device=H100,
        start_s=2.5,
        setup_s=(5.5, 11.0),
        compile_cold={"default": 65.0, "reduce-overhead": 96.0, "max-autotune-no-cudagraphs": 1169.0},
        first_step=benchmark,
    )


class _Lstm(Landscape):
    """The LSTM's speeds as measured, in sequences/s: each precision's eager speed at batch 512, a batch curve
    per precision class (fp32's flatter), the optimizer's implementation, each compile mode's gain per precision."""

    def throughput(self, c: dict) -> float:
        precision = c.get("knobs.precision")
        reduced = precision in ("fp16", "bf16")
        v = LSTM_EAGER_512[precision] / 128
        v *= (LSTM_BATCH_REDUCED if reduced else LSTM_BATCH_FP32)[c["knobs.batch_size"]]
        v *= 1.0 if c.get("knobs.optimizer_impl") == "fused" else 0.94
        return v * LSTM_COMPILE["bf16" if precision == "bf16" else "fp16"][str(c.get("knobs.compile", "off"))]


# bench/results/h100-2026-12-05T1304-budget-lstm-trials.parquet, tokens/s (128 tokens a sequence): eager fused at
# batch 512, fp32 546.6 k, tf32 1,192.7 k, fp16 2,021.3 k, bf16 2,014.7 k; fp16 at batch 256 and 128 0.806 and 0.401
# of 512; fp32 foreach at batch 64 (the defaults) 353.9 k; foreach x0.94 (fp16: 1,899 k); compiled fused at 512:
# fp16 default 2,315 k, reduce-overhead 2,261 k, max-autotune-no-cudagraphs 2,349 k; bf16 default 2,339 k,
# reduce-overhead 2,297 k, max-autotune-no-cudagraphs 2,393 k (fp32's gains never measured: fp16's)
LSTM_EAGER_512 = {"fp32": 546.6e3, "tf32": 1192.7e3, "fp16": 2021.3e3, "bf16": 2014.7e3}
LSTM_BATCH_REDUCED = {64: 0.2, 128: 0.401, 256: 0.806, 512: 1.0}
LSTM_BATCH_FP32 = {64: 0.689, 128: 0.76, 256: 0.88, 512: 1.0}
LSTM_COMPILE = {
    "fp16": {"off": 1.0, "default": 1.1455, "reduce-overhead": 1.1185, "max-autotune-no-cudagraphs": 1.1622},
    "bf16": {"off": 1.0, "default": 1.161, "reduce-overhead": 1.140, "max-autotune-no-cudagraphs": 1.188},
}


def lstm_h100() -> Landscape:
    """bench/zoo's two-layer LSTM language model on an H100 (its rows above): a trial ~1 s to start, setup 7 s eager
    and 11 s compiled, a cold compile 4-5 s (default, reduce-overhead) and 25-27 s (max-autotune-no-cudagraphs),
    2.7-3.4 s warm (also after a change of the optimizer's implementation only: its trials 14 and 15)."""
    params = {
        "knobs.precision": "choice(fp32, tf32, fp16, bf16)",
        "knobs.compile": "choice(off, default, reduce-overhead, max-autotune-no-cudagraphs)",
        "knobs.cudnn_benchmark": "choice(false, true)",
        "knobs.batch_size": "choice(64, 128, 256, 512)",
        "knobs.optimizer_impl": "choice(foreach, fused)",
    }
    defaults = {
        "knobs.precision": "fp32",
        "knobs.compile": "off",
        "knobs.cudnn_benchmark": False,
        "knobs.batch_size": 64,
        "knobs.optimizer_impl": "foreach",
    }
    return _Lstm(
        "lstm_h100",
        params,
        defaults,
        {"knobs.compile": "off"},
        {"warmup_steps": 5, "steps": 20, "min_time_s": 1.0},
        353.9e3 / 128,
        {},
        "knobs.batch_size",
        start_s=1.0,
        setup_s=(7.0, 11.0),
        compile_cold={"default": 5.0, "reduce-overhead": 4.2, "max-autotune-no-cudagraphs": 26.0},
        compile_warm={"default": 2.7, "reduce-overhead": 2.7, "max-autotune-no-cudagraphs": 3.4},
        device=H100,
        graph_ops=37,
        neutral=OUTSIDE,
    )


CASES = {
    "resnet50": resnet,
    "jpeg": jpeg,
    "vit": vit,
    "gpt": gpt,
    "seg": seg,
    "seg_h100": seg_h100,
    "lstm_h100": lstm_h100,
}
# The segmentation model's first compiled trial (the handbook's start, 196 s: a 140 s compile, 0.40 s an operation,
# and a 36 s drain) is predicted before any compile was measured (by its count: 105 s); its sweep has room for only
# that trial and the two re-measurements after it, so one of its three predictions rests on the prior and the bar
# of 80 % within 30 % cannot hold: its own test asserts that every prediction resting on a measurement is within
# 30 %.
PREDICTED = sorted(set(CASES) - {"seg", "seg_h100"})
# What the hand loops applied (the handbook by hand: reduced precision, compile default, fused, channels_last, a
# large batch); the JPEG case's hand loop ran on synthetic data, which its pipeline cannot feed: its own handbook
# configuration (CPU decoders, the most workers) is its reference here.
HAND = {
    "resnet50": {
        "knobs.precision": "fp16",
        "knobs.memory_format": "channels_last",
        "knobs.compile": "default",
        "knobs.batch_size": 1024,
        "knobs.cudnn_benchmark": True,
        "knobs.optimizer_impl": "fused",
    },
    "jpeg": {
        "knobs.precision": "fp16",
        "knobs.memory_format": "channels_last",
        "knobs.compile": "default",
        "knobs.batch_size": 512,
        "knobs.optimizer_impl": "fused",
        "knobs.num_workers": 14,
        "knobs.pin_memory": True,
    },
    "vit": {
        "knobs.precision": "bf16",
        "knobs.compile": "default",
        "knobs.batch_size": 512,
        "knobs.optimizer_impl": "fused",
    },
    "gpt": {
        "knobs.precision": "bf16",
        "knobs.compile": "default",
        "knobs.batch_size": 128,
        "knobs.optimizer_impl": "fused",
    },
    "seg": {
        "knobs.precision": "bf16",
        "knobs.memory_format": "channels_last",
        "knobs.compile": "default",
        "knobs.cudnn_benchmark": True,
        "knobs.batch_size": 128,
        "knobs.optimizer_impl": "fused",
        "knobs.num_workers": 12,
        "knobs.pin_memory": True,
        "knobs.non_blocking": True,
    },
}


HAND["seg_h100"] = HAND["seg"]
HAND["lstm_h100"] = {
    "knobs.precision": "bf16",
    "knobs.compile": "default",
    "knobs.batch_size": 512,
    "knobs.optimizer_impl": "fused",
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 1])
def test_a_replayed_default_sweep_measures_compile_and_uses_its_budget(case: str, seed: int) -> None:
    """The three sweeps of the issue, replayed: each measures a compiled configuration, skips no proposal over
    budget that (at its actual cost, 30 % to spare) would have fit beside the re-measurements' actual cost, ends
    within the budget, uses at least 85 % of it, and reaches 0.98 of the hand loop."""
    land = CASES[case]()
    out = replay(land, budget_s=300.0, seed=seed)
    assert out.compiled(), f"{case}: no compiled configuration measured: {out.reason}"
    wrong = justified(out)
    assert not wrong, f"{case}: skipped over budget although it fit: " + "; ".join(
        f"at {e.at:.0f} s, {e.left:.0f} s left, predicted {e.predicted:.0f} s: {e.params}" for e in wrong
    )
    assert out.ended_at <= 300.0 + 5.0, f"{case}: ended at {out.ended_at:.0f} s"
    assert out.ended_at >= 0.85 * 300.0, f"{case}: ended at {out.ended_at:.0f} s: {out.reason}"
    hand = land.throughput({**land.defaults, **HAND[case]})
    assert out.best() >= 0.98 * hand, f"{case}: best {out.best():.0f} of the hand loop's {hand:.0f}"


# Where 0.99 of the sweep's own final best within half its budget can hold: the segmentation model's first compiled
# trial ends after 150 s; ResNet-50's reduce-overhead (+2.2 % here) comes after six fruitless screening trials that
# cost 57 s, under the 59 s of a compiled trial; the JPEG pipeline's compiled GPU decoding needs the eager GPU
# decoding found first (at 136 s).
EARLY = ["gpt", "lstm_h100", "vit"]


@pytest.mark.parametrize("case", EARLY)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_replayed_sweep_reaches_its_own_best_within_half_its_budget(case: str, seed: int) -> None:
    """0.99 of the sweep's final best is measured by 150 s of 300. The LSTM's sweep reached it at 195-224 s while a
    fruitless eager screen went on to min_screen and patience and the modes were tried first on the best screened
    configuration rather than the start's twin."""
    out = replay(CASES[case](), budget_s=300.0, seed=seed)
    best = out.best()
    at = min(e.at + (e.actual or 0.0) for e in out.ran() if (e.throughput or 0.0) >= 0.99 * best)
    assert at <= 150.0, f"{case}: 0.99 of its own best {best:.0f} at {at:.0f} s"


def test_the_segmentation_models_first_compiled_trial_runs_cudnns_benchmark() -> None:
    """The handbook's start keeps cuDNN's benchmark although it costs 62-84 s of every first step of this model: on
    an H100 the start without it ran at 348 img/s against 431 with it (2026-12-06), and the sweep that left it to
    the search reached 0.99 of its final best only at 269 s (172 s with it in the start)."""
    out = replay(seg_h100(), budget_s=300.0, seed=0)
    first = out.compiled()[0]
    assert first.params["knobs.cudnn_benchmark"] is True, first.params
    assert first.throughput >= 0.99 * out.best(), (first.throughput, out.best())


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_seed_reaches_near_the_landscapes_best(case: str) -> None:
    """Four seeds, each within 0.95 of the best configuration of the landscape (its best holds compile modes whose
    cold compile outlasts the budget: 400-1,244 s): the search does not rest on the sampler's luck. The JPEG
    pipeline's seed 2 reached 0.71 while the screen changed the model's knobs of a start that waited for its data,
    and then learned reduce-overhead on it."""
    land = CASES[case]()
    best = land.best()
    reached = [replay(CASES[case](), budget_s=300.0, seed=seed).best() / best for seed in range(4)]
    assert min(reached) >= 0.95, reached


@pytest.mark.parametrize("case", PREDICTED)
@pytest.mark.parametrize("seed", [0, 1])
def test_the_cost_model_predicts_replayed_trials_within_30_percent(case: str, seed: int) -> None:
    """At least 80 % of the trials' predicted walls (at their launch) are within 30 % of the actual."""
    out = replay(CASES[case](), budget_s=300.0, seed=seed)
    misses = [
        (round(e.predicted or 0), round(e.actual or 0))
        for e in out.ran()
        if abs((e.predicted or 0) - (e.actual or 0)) > 0.3 * (e.actual or 1)
    ]
    assert out.within(0.3) >= 0.8, misses


@pytest.mark.parametrize("case", PREDICTED)
def test_the_first_compiled_trial_is_priced_by_the_models_graph(case: str) -> None:
    """Before any compile was measured, the first compiled trial's wall is predicted from the count of the eager
    baseline's step (``graph_ops``) within 30 % of its actual wall. Priced as a multiple of an eager trial (without
    a count), ResNet-50's was predicted 34 s for 59 s and the JPEG pipeline's 119 s for 71 s."""
    land = CASES[case]()
    first = replay(land, budget_s=300.0, seed=0).compiled()[0]
    assert abs(first.predicted - first.actual) <= 0.3 * first.actual, (first.predicted, first.actual)


def test_a_data_pipelines_drain_and_warm_compile_are_priced_in_the_segmentation_sweep() -> None:
    """The segmentation model: after the defaults and the handbook's start (196 s, 130 warm-up steps of 279 ms),
    the re-measurements are priced from what was measured, each within 30 % of its actual wall: the baseline's at
    its own start (the drain's 36 s not in every trial's start), the best's with its drain and a warm compile."""
    out = replay(CASES["seg"](), budget_s=300.0, seed=0)
    first = out.compiled()[0]  # the handbook's start, predicted from the prior
    measured = [e for e in out.ran() if e.at > first.at]
    assert sum(e.repeat for e in measured) >= 2, out.events  # the baseline's and the best's re-measurement
    misses = [(round(e.predicted or 0), round(e.actual or 0)) for e in measured]
    assert all(abs((e.predicted or 0) - (e.actual or 0)) <= 0.3 * (e.actual or 1) for e in measured), misses


@pytest.mark.parametrize("case", ["jpeg", "vit"])
def test_each_admission_decision_reads_the_studys_trials_once(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a proposal fits, and what to spend the rest of the budget on, ask the cost model and the
    re-measurement plan many times; each read every trial again, a query of milliseconds on a database storage:
    on an H100 (2026-12-05) the JPEG sweep spent 2.2-2.6 s deciding each of three proposals that did not fit. One
    decision now reads the trials once, whatever it asks."""
    import optuna

    from tests.replay import _open, _search_step

    sweep, _ = _open(CASES[case](), 300.0, 0, 5.0)
    while len(sweep.out.ran()) < 4 and not _search_step(sweep):  # some measured trials to price from
        pass
    reads = []
    real = optuna.Study.get_trials

    def counted(self: optuna.Study, *args: object, **kwargs: object) -> list:
        reads.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(optuna.Study, "get_trials", counted)
    untried = {**sweep.land.defaults, **HAND[case], "knobs.compile": "max-autotune-no-cudagraphs"}
    admission = sweep.admission
    decisions = {"fits": lambda: admission.fits(untried), "any_fits": admission.any_fits, "spare": admission.spare}
    for name, decide in {**decisions, "reserve": admission.reserve}.items():
        reads.clear()
        decide()
        assert len(reads) == 1, f"{name}: the trials read {len(reads)} times"
