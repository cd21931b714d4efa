"""The trace analysis on hand-built events with known answers: each GPU idle gap goes to its cause, the CPU
timeline is split honestly, the MFU's peak follows the math that ran, and the report names the limit."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from sweeper.report.profile_section import headline
from sweeper.report.profiled import profile_diagnosis
from sweeper.trial import trace_analysis as ta
from sweeper.trial.gpu import mfu_peak

MAIN, GPU_STREAM = 11, 7


def x(cat: str, name: str, ts: float, dur: float, tid: object = MAIN, corr: int | None = None, pid: int = 1) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "pid": pid,
        "tid": tid,
        "args": {} if corr is None else {"correlation": corr},
    }


def kernel(name: str, ts: float, dur: float, corr: int, stream: int = GPU_STREAM) -> dict:
    return x("kernel", name, ts, dur, tid=stream, corr=corr, pid=0)


def launch(ts: float, corr: int) -> dict:
    return x("cuda_runtime", "cudaLaunchKernel", ts, 5, corr=corr)


def window(t0: float, t1: float) -> list[dict]:
    return [x("user_annotation", ta.WINDOW_LABEL, t0, t1 - t0), x("user_annotation", f"{ta.STEP_LABEL}#0", t0, t1 - t0)]


def fracs(out: dict) -> dict[str, float]:
    return {c: round(out[f"prof_idle_{c}_frac"], 6) for c in ta.IDLE_CAUSES} | {
        "busy": round(out["prof_gpu_busy_frac"], 6)
    }


def test_a_gap_before_a_kernel_launched_late_is_a_launch_gap() -> None:
    """0..1000 us: kernel A 0..400 (queued at 0), kernel B launched at 600, runs 700..1000: the 300 us gap
    began at 400, before B's launch, so the host was late."""
    events = [
        *window(0, 1000),
        launch(0, 1),
        kernel("ampere_sgemm_128x64_nn", 0, 400, 1),
        launch(600, 2),
        kernel("vectorized_elementwise_kernel", 700, 300, 2),
    ]
    out = ta.analyse(events, steps=1)
    assert fracs(out) == {"input": 0, "sync": 0, "launch": 0.3, "other": 0, "busy": 0.7}
    assert out["prof_device"] == "cuda"
    assert out["prof_k_matmul_frac"] == pytest.approx(4 / 7)
    assert out["prof_k_norm_elementwise_frac"] == pytest.approx(3 / 7)
    top = json.loads(out["prof_top_kernels"])
    assert top[0] == {"name": "ampere_sgemm_128x64_nn", "ms_per_step": 0.4, "share": pytest.approx(4 / 7, abs=1e-4)}


def test_a_gap_after_a_sync_that_drained_the_queue_is_sync_not_launch() -> None:
    """.item(): the host blocks in cudaStreamSynchronize from 100 until the GPU is done (400), then runs Python
    and launches the next kernel at 900: the whole gap 400..950 is the sync's, although that launch came late."""
    events = [
        *window(0, 1000),
        launch(0, 1),
        kernel("gemm", 0, 400, 1),
        x("cuda_runtime", "cudaStreamSynchronize", 100, 305),
        launch(900, 2),
        kernel("gemm", 950, 50, 2),
    ]
    assert fracs(ta.analyse(events, 1)) == {"input": 0, "sync": 0.55, "launch": 0, "other": 0, "busy": 0.45}


def test_gap_time_inside_a_sync_call_is_sync_and_time_in_the_input_label_is_input() -> None:
    """A 600 us gap (200..800): the host is in the input label 250..450 (input), then in cudaEventSynchronize
    500..600 (sync, though it began after the GPU went idle), then launches the next kernel at 700 (launch)."""
    events = [
        *window(0, 1000),
        launch(0, 1),
        kernel("gemm", 0, 200, 1),
        x("user_annotation", ta.INPUT_LABEL, 250, 200),
        x("cuda_runtime", "cudaEventSynchronize", 500, 100),
        launch(700, 2),
        kernel("gemm", 800, 200, 2),
    ]
    assert fracs(ta.analyse(events, 1)) == {"input": 0.2, "sync": 0.1, "launch": 0.3, "other": 0, "busy": 0.4}


def test_a_gap_before_work_queued_in_time_is_other() -> None:
    """Kernel B was launched at 10, long before the gap (500..800) began: it waited (an event, another stream)."""
    events = [*window(0, 1000), launch(0, 1), kernel("gemm", 0, 500, 1), launch(10, 2), kernel("gemm", 800, 200, 2)]
    assert fracs(ta.analyse(events, 1)) == {"input": 0, "sync": 0, "launch": 0, "other": 0.3, "busy": 0.7}


def test_busy_is_the_union_over_streams_and_classes_share_the_busy_time() -> None:
    """Two streams overlap 300..500: busy is their union (0..700 of 1000); an NCCL kernel, a copy, a flash
    kernel and an optimizer kernel land in their classes; the window ends at the last GPU activity."""
    events = [
        *window(0, 1000),
        launch(0, 1),
        kernel("flash_fwd_kernel", 0, 500, 1),
        launch(1, 2),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 300, 200, 2, stream=20),
        launch(2, 3),
        x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 500, 100, tid=GPU_STREAM, corr=3, pid=0),
        launch(3, 4),
        kernel("multi_tensor_apply_kernel", 600, 100, 4),
        launch(900, 5),
        kernel("triton_poi_fused_convert_element_type_0", 900, 100, 5),
    ]
    out = ta.analyse(events, 2)
    assert out["prof_gpu_busy_frac"] == pytest.approx(0.8)
    assert out["prof_idle_launch_frac"] == pytest.approx(0.2), "kernel 5 was launched when the gap ended"
    assert sum(out[f"prof_idle_{c}_frac"] for c in ta.IDLE_CAUSES) + out["prof_gpu_busy_frac"] == pytest.approx(1)
    total = 500 + 200 + 100 + 100 + 100
    assert out["prof_k_attention_frac"] == pytest.approx(500 / total)
    assert out["prof_k_comm_frac"] == pytest.approx(200 / total)
    assert out["prof_k_memcpy_frac"] == pytest.approx(100 / total)
    assert out["prof_k_optimizer_frac"] == pytest.approx(100 / total)
    assert out["prof_k_norm_elementwise_frac"] == pytest.approx(100 / total), "convert_element_type is not a conv"
    assert sum(out[f"prof_k_{c}_frac"] for c in ta.CLASSES) == pytest.approx(1)
    assert out["prof_step_ms"] == pytest.approx(0.5)


def test_elementwise_kernels_launched_inside_the_optimizer_step_are_optimizer_time() -> None:
    events = [
        *window(0, 1000),
        x("user_annotation", "Optimizer.step#AdamW.step", 100, 300),
        launch(0, 1),
        kernel("gemm", 0, 400, 1),
        launch(150, 2),
        kernel("vectorized_elementwise_kernel", 400, 600, 2),
    ]
    out = ta.analyse(events, 1)
    assert out["prof_k_optimizer_frac"] == pytest.approx(0.6) and out["prof_k_norm_elementwise_frac"] == 0


def test_the_cpu_timeline_is_split_into_busy_input_sync_launch_and_other() -> None:
    """No GPU activity: window 0..1000 on the main thread; step 100..900 with the input label 100..300, ops
    300..500 (mm, with a child add 400..450) and 600..650 (item), Python between them; a gloo thread."""
    events = [
        x("user_annotation", ta.WINDOW_LABEL, 0, 1000),
        x("user_annotation", f"{ta.STEP_LABEL}#0", 100, 800),
        x("user_annotation", ta.INPUT_LABEL, 100, 200),
        x("cpu_op", "aten::ones", 150, 100),
        x("cpu_op", "aten::mm", 300, 200),
        x("cpu_op", "aten::add", 400, 50),
        x("cpu_op", "aten::item", 600, 50),
        x("cpu_op", "gloo:all_reduce", 300, 100, tid=99),
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN, "args": {"name": "main"}},
    ]
    out = ta.analyse(events, 1)
    assert out["prof_device"] == "cpu"
    assert fracs(out) == {"input": 0.2, "sync": 0.05, "launch": 0.35, "other": 0.2, "busy": 0.2}
    # self times outside the input: mm 150 (its add child 50 apart), add 50, gloo 100 (item is sync, not work)
    assert out["prof_k_matmul_frac"] == pytest.approx(0.5)
    assert out["prof_k_norm_elementwise_frac"] == pytest.approx(1 / 6)
    assert out["prof_k_comm_frac"] == pytest.approx(1 / 3)
    assert json.loads(out["prof_host_threads"])["main"] == pytest.approx(0.35), "ops 150..250, 300..500, 600..650"


def test_a_trace_without_the_capture_labels_is_refused() -> None:
    with pytest.raises(ValueError, match="sweeper/profile"):
        ta.analyse([x("cpu_op", "aten::mm", 0, 10)], 1)


def test_trace_paths_keep_study_names_safe() -> None:
    assert ta.trace_relpath("resnet50 jpeg/x", 7) == "traces/resnet50_jpeg_x/resnet50_jpeg_x-000007.json.gz"
    assert ta.trace_relpath("s", 3, rank=1).endswith("s-000003.rank1.json.gz")


# ---------------------------------------------------------------- the MFU's peak


def test_the_mfu_peak_follows_the_math_that_ran() -> None:
    h200 = "NVIDIA H200"
    # PyTorch's defaults in fp32: cuDNN convolutions on TF32 tensor cores, matmuls in fp32
    peak, name = mfu_peak(h200, "fp32", tf32_matmul=False, tf32_conv=True, conv_flops_frac=0.9995)
    assert peak == 494.7 and name == "tf32 tensor core (H200 datasheet)"
    assert mfu_peak(h200, "fp32", tf32_matmul=False, tf32_conv=True, conv_flops_frac=0.0)[0] == 67.0
    assert mfu_peak(h200, "fp32-strict", tf32_matmul=False, tf32_conv=False, conv_flops_frac=1.0)[0] == 67.0
    assert mfu_peak(h200, "tf32", tf32_matmul=True, tf32_conv=True)[0] == 494.7
    assert mfu_peak(h200, "bf16", tf32_matmul=False, tf32_conv=True) == (989.4, "bf16 tensor core (H200 datasheet)")
    half, name = mfu_peak(h200, "fp32", tf32_matmul=False, tf32_conv=True, conv_flops_frac=0.5)
    assert half == pytest.approx(1 / (0.5 / 494.7 + 0.5 / 67.0)) and "50% of FLOPs (convolutions)" in name
    assert math.isnan(mfu_peak(None, "bf16", tf32_matmul=False, tf32_conv=True)[0])


# ---------------------------------------------------------------- the report's reading


def _profile(busy: float, **causes: float) -> pd.Series:
    row = {
        "prof_gpu_busy_frac": busy,
        "prof_device": "cuda",
        **{f"prof_idle_{c}_frac": 0.0 for c in ta.IDLE_CAUSES},
        **{f"prof_k_{c}_frac": 0.0 for c in ta.CLASSES},
    }
    row.update({f"prof_idle_{k}_frac" if k in ta.IDLE_CAUSES else f"prof_k_{k}_frac": v for k, v in causes.items()})
    return pd.Series(row)


def test_the_profile_names_the_limit_and_the_largest_change() -> None:
    base = _profile(0.13, input=0.80, launch=0.07, matmul=0.5, norm_elementwise=0.5)
    best = _profile(0.984, input=0.006, launch=0.01, matmul=0.61, norm_elementwise=0.39)
    assert profile_diagnosis(base) == "data-bound (profile: 80% input)"
    assert profile_diagnosis(best) == "compute-bound (profile: matmul/convolution 61%)"
    assert profile_diagnosis(_profile(0.5, sync=0.45)).startswith("sync-bound")
    assert profile_diagnosis(_profile(0.6, launch=0.4)).startswith("launch-bound")
    text = headline(base, best)
    assert text.startswith("baseline: GPU idle 87.0%, 80 points waiting for input")
    assert "best: GPU idle 1.6%" in text and "matmul/convolution (61%)" in text
    assert "largest change: waiting for input, 80 -> 1 points" in text
    assert "what usually removes it" not in text, "the best's 0.6-point input wait needs no remedy"
    # a best held back by launch gaps is told what removes them; two profiles alike name no change
    host_bound = _profile(0.87, launch=0.105, sync=0.01, other=0.015, matmul=0.4, norm_elementwise=0.6)
    text = headline(base, host_bound)
    assert "best: GPU idle 13.0%, 10 points in launch gaps (host behind) (what usually removes it: CUDA graphs" in text
    assert "largest change: waiting for input" in text
    assert "largest change" not in headline(best, _profile(0.99, input=0.002, launch=0.008, matmul=0.6))
