"""bench/step_profile.py's reading of a trace: the GPU's busy share and what ended each idle gap."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "bench" / "step_profile.py"
spec = importlib.util.spec_from_file_location("step_profile", SCRIPT)
step_profile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step_profile)


def _x(cat: str, name: str, ts: float, dur: float, tid: object, corr: int | None = None, pid: int = 1) -> dict:
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


def test_gaps_are_told_apart_by_when_the_work_that_ended_them_was_launched() -> None:
    """Three kernels on stream 7 over 0..10 ms: a 2 ms gap whose next kernel was launched 1.5 ms into it (the
    host was late: the main thread's op is named), then a 3 ms gap whose next kernel was queued long before (it
    waited); a side stream's kernel inside the second gap keeps the GPU busy there for 1 ms."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 11, "args": {"name": "main"}},
        _x("user_annotation", "train_step#0", 0, 10_000, 11),
        _x("cpu_op", "aten::convolution", 100, 100, 11),
        _x("cuda_runtime", "cudaLaunchKernel", 110, 5, 11, corr=1),
        _x("cpu_op", "aten::add_", 3_000, 600, 11),
        _x("cuda_driver", "cuLaunchKernel", 3_500, 5, 11, corr=2),
        _x("cuda_runtime", "cudaLaunchKernel", 3_700, 5, 11, corr=3),
        _x("kernel", "conv", 120, 1_880, 7, corr=1, pid=0),  # 0.12..2.0 ms
        _x("kernel", "add", 4_000, 2_000, 7, corr=2, pid=0),  # 4..6 ms: launched at 3.5 ms, gap began at 2 ms
        _x("kernel", "decode", 7_000, 1_000, 20, corr=None, pid=0),  # side stream, 7..8 ms
        _x("kernel", "fc", 9_000, 1_000, 7, corr=3, pid=0),  # 9..10 ms: queued at 3.7 ms, waited
    ]
    s = step_profile.summarize({"traceEvents": events})
    assert s["window_ms"] == 10.0
    assert s["gpu_busy"] == round((1.88 + 2 + 1 + 1) / 10, 4)
    assert s["stream_busy"] == {"7": round(4.88 / 10, 4), "20": 0.1}
    late, waited, waited2 = sorted(s["gaps"], key=lambda g: g["at_ms"])
    assert late["cause"] == "late_launch" and late["ms"] == 2.0 and late["thread"] == "main"
    assert late["op"] == "aten::add_" and late["launched_after_ms"] == 1.5
    assert waited["ms"] == 1.0 and waited2["ms"] == 1.0 and {waited["cause"], waited2["cause"]} == {"waited"}
    assert s["gap_ms_by_cause"] == {"late_launch": 2.0, "waited": 2.0}
    assert s["threads_cpu_ms"] == {"main": 0.7}, "the main thread's ops: 0.1 + 0.6 ms"


def test_a_trace_without_steps_says_so() -> None:
    assert "error" in step_profile.summarize({"traceEvents": []})
