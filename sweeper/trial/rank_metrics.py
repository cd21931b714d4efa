"""The metrics of a distributed trial: each rank's communication share, and the ranks' metrics merged into one row.

Runs in each rank (``comm_profile``, after the measured window) and in the agent, the isolated trial process
(``merge``). See :mod:`sweeper.trial.ranks` for what each merged column means.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from sweeper.trial.trace_analysis import union_length

# ---------------------------------------------------------------- communication share


def comm_profile(work: Any, device: torch.device, steps: int) -> dict[str, Any]:
    """``comm_frac``: share of the wall time of ``steps`` profiled steps with a collective in flight.

    Collectives are NCCL kernels (``cat == kernel``, name contains ``nccl``) on GPU and the gloo ops
    (``gloo:*``, timed on gloo's worker threads) on CPU; their intervals are merged (union), so concurrent or
    overlapped collectives count once. Overlap with compute is not subtracted.
    """
    if steps <= 0:
        return {}
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if not cuda:
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # else Kineto logs an error for the missing GPU
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync()
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": expected, one cycle
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            for _ in range(steps):
                work.step(work.next_batch())
            sync()
            wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="sweeper-trace-") as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            events = json.load(f).get("traceEvents", [])
    spans = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if e.get("ph") == "X" and _is_collective(e)
    )
    busy_us = union_length(spans)
    return {
        "comm_frac": min(1.0, busy_us / 1e6 / wall) if wall > 0 else math.nan,
        "comm_ms_per_step": busy_us / 1e3 / steps,
    }


def _is_collective(event: dict[str, Any]) -> bool:
    name = str(event.get("name", ""))
    if event.get("cat") == "kernel":
        return "nccl" in name.lower()
    return name.startswith("gloo:")


# ---------------------------------------------------------------- merging the ranks' metrics


def merge(per_rank: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One row from every rank's metrics: sums for work, the slowest rank for time, the max for memory."""
    ranks = [per_rank[r] for r in sorted(per_rank)]
    world = len(ranks)
    slow = max(ranks, key=lambda m: m["step_ms_p50"])

    def agg(key: str, fn: Callable[[list[float]], float]) -> float:
        values = [m[key] for m in ranks if isinstance(m.get(key), (int, float)) and not math.isnan(m[key])]
        return fn(values) if values else math.nan

    out = dict(ranks[0])  # fingerprint, units, GPU utilisation and the wrapped module's settings: rank 0's
    out.update({k: slow[k] for k in ("step_ms_p50", "step_ms_p10", "step_ms_p90", "step_ms_mean", "step_cv")})
    achieved = agg("achieved_tflops", sum)
    peak = ranks[0].get("mfu_peak_tflops", math.nan)
    out.update(
        world_size=world,
        rank_slowest=slow["rank"],
        throughput=sum(m["throughput"] for m in ranks),
        step_ms_p50_rank_min=min(m["step_ms_p50"] for m in ranks),
        peak_mem_bytes=max(m["peak_mem_bytes"] for m in ranks),
        peak_mem_reserved_bytes=agg("peak_mem_reserved_bytes", max),
        steps_measured=min(m["steps_measured"] for m in ranks),
        warmup_steps=max(m["warmup_steps"] for m in ranks),
        warmup_drain_steps=max(m.get("warmup_drain_steps", 0) for m in ranks),  # each rank drains its own loader
        measured_s=max(m["measured_s"] for m in ranks),
        first_step_s=max(m["first_step_s"] for m in ranks),
        setup_s=max(m["setup_s"] for m in ranks),
        setup_load_s=agg("setup_load_s", max),
        setup_build_s=agg("setup_build_s", max),
        compile_s=max(m["compile_s"] for m in ranks),
        compiler_s=agg("compiler_s", max),
        graph_breaks=max(m["graph_breaks"] for m in ranks),
        graph_ops=agg("graph_ops", max),
        compile_cache_hits=agg("compile_cache_hits", max),
        compile_cache_misses=agg("compile_cache_misses", max),
        data_wait_frac=agg("data_wait_frac", max),
        data_wait_host_frac=agg("data_wait_host_frac", max),
        host_step_frac=agg("host_step_frac", max),
        flops_per_step=agg("flops_per_step", sum),
        achieved_tflops=achieved,
        mfu=achieved / (peak * world) if peak and not math.isnan(peak) else math.nan,
        comm_frac=agg("comm_frac", max),
        comm_ms_per_step=agg("comm_ms_per_step", max),
        loss_finite=all(m["loss_finite"] for m in ranks),
        rank_started_at=min(m["rank_started_at"] for m in ranks),
    )
    if any("prof_s" in m for m in ranks):  # profiled: rank 0's columns and trace, each rank's busy share
        out["prof_s"] = agg("prof_s", max)
        out["prof_rank_busy"] = json.dumps({str(m["rank"]): _rounded(m.get("prof_gpu_busy_frac")) for m in ranks})
    out.pop("rank", None)
    return out


def _rounded(value: Any) -> float | None:
    return round(float(value), 4) if isinstance(value, (int, float)) and not math.isnan(value) else None
