"""A torch.profiler trace of a few training steps of one configuration, and where its GPU idled.

    python bench/step_profile.py OUT NAME [--steps 6] [--warmup 30] -- OVERRIDE...
    e.g. ... OUT jpeg-best -- +workload=resnet50 workload.data=jpeg knobs.compile=default knobs.num_workers=14 ...

Composes the config from the overrides as the sweep does and builds the workload in this process as a trial does
(``workloads.load(...).build``), runs warm-up steps (at least the input pipeline's buffer, so the profiled steps are
fed at the pipeline's own pace), then profiles ``--steps`` steps (CPU and CUDA activities, no stacks). Writes
OUT/NAME.trace.json.gz (open it in Perfetto or chrome://tracing) and one summary line to OUT/step_profile.jsonl
(:func:`summarize`): the GPU's busy share over the profiled steps, each stream's, the idle gaps and what ended each
one, and the CPU time of each thread of this process. ``--smoke`` runs the tiny preset on the CPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.trial import trace_analysis as ta  # noqa: E402 (after the path insert)
from sweeper.trial.trace_analysis import covered as _covered  # noqa: E402
from sweeper.trial.trace_analysis import union as _union  # noqa: E402

GAP_MS = 0.2  # an idle stretch of the GPU shorter than this is launch latency, not a gap


def summarize(trace: dict[str, Any]) -> dict[str, Any]:
    """Where the GPU idled in a Chrome trace of ``torch.profiler`` (times in microseconds).

    The window runs from the first ``train_step`` annotation to the last GPU activity. ``gpu_busy``: the share of
    it in which a kernel, copy or memset ran on any stream; per stream likewise. Each idle gap longer than GAP_MS
    is attributed by the GPU work that ended it: ``late_launch`` when that work was launched after the gap began
    (the host was behind; the launching thread and the op it ran are named), else ``waited`` (the work was queued
    in time but waited for an event or another stream: data, or a copy). ``threads``: CPU time of each thread's
    outermost ops in the window, in ms.
    """
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    names = {
        (e.get("pid"), e.get("tid")): e.get("args", {}).get("name")
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    steps = [e for e in events if str(e.get("name", "")).startswith(("train_step", ta.STEP_LABEL))]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not steps or not gpu:
        return {"error": "no train_step annotation or no GPU activity in the trace", "steps": len(steps)}
    t0 = min(e["ts"] for e in steps)
    t1 = max(e["ts"] + e["dur"] for e in gpu)
    span = t1 - t0
    merged = _union([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    streams: dict[str, list[tuple[float, float]]] = {}
    for e in gpu:
        streams.setdefault(str(e.get("tid")), []).append((e["ts"], e["ts"] + e["dur"]))
    gaps = _gaps(merged, gpu, events, names, t0)
    threads = _threads(_cpu_ops(events), names, t0, t1)
    by_cause: dict[str, float] = {}
    for g in gaps:
        by_cause[g["cause"]] = round(by_cause.get(g["cause"], 0.0) + g["ms"], 3)
    return {
        "steps": len(steps),
        "window_ms": round(span / 1e3, 2),
        "gpu_busy": round(_covered(merged, t0, t1) / span, 4),
        "stream_busy": {k: round(_covered(v, t0, t1) / span, 4) for k, v in streams.items()},
        "gap_ms_by_cause": by_cause,
        "gaps": sorted(gaps, key=lambda g: -g["ms"])[:25],
        "threads_cpu_ms": dict(sorted(threads.items(), key=lambda kv: -kv[1])),
    }


def _cpu_ops(events: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    """The CPU ops and annotations of the trace, by thread."""
    out: dict[Any, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("cat") in ("cpu_op", "user_annotation"):
            out.setdefault(e.get("tid"), []).append(e)
    return out


def _gaps(
    merged: list[tuple[float, float]], gpu: list[dict[str, Any]], events: list[dict[str, Any]], names: dict, t0: float
) -> list[dict[str, Any]]:
    """Each idle gap of the GPU longer than GAP_MS after ``t0``, attributed by the work that ended it."""
    launch_cats = ("cuda_runtime", "cuda_driver")
    launches = {e.get("args", {}).get("correlation"): e for e in events if e.get("cat") in launch_cats}
    cpu_ops = _cpu_ops(events)
    gaps = []
    for (_, end), (start, _) in zip(merged, merged[1:]):
        if end < t0 or (start - end) / 1e3 < GAP_MS:
            continue
        first = min((e for e in gpu if e["ts"] == start), key=lambda e: e["ts"])
        launch = launches.get(first.get("args", {}).get("correlation"))
        gap = {"at_ms": round((end - t0) / 1e3, 3), "ms": round((start - end) / 1e3, 3), "ended_by": first["name"][:80]}
        if launch is not None and launch["ts"] > end:
            tid = launch.get("tid")
            before = [o for o in cpu_ops.get(tid, []) if o["ts"] <= launch["ts"] and o.get("cat") == "cpu_op"]
            gap.update(
                cause="late_launch",
                thread=names.get((launch.get("pid"), tid)) or str(tid),
                launched_after_ms=round((launch["ts"] - end) / 1e3, 3),
                op=max(before, key=lambda o: o["ts"])["name"][:80] if before else None,
            )
        else:
            gap["cause"] = "waited"
        gaps.append(gap)
    return gaps


def _threads(cpu_ops: dict[Any, list[dict[str, Any]]], names: dict, t0: float, t1: float) -> dict[str, float]:
    """CPU time (ms) of each thread's ops inside the window, the threads busy over 0.5 ms."""
    threads = {}
    for tid, ops in cpu_ops.items():
        ms = _covered([(o["ts"], o["ts"] + o["dur"]) for o in ops if o.get("cat") == "cpu_op"], t0, t1) / 1e3
        if ms > 0.5:
            threads[names.get((ops[0].get("pid"), tid)) or str(tid)] = round(ms, 1)
    return threads


def _arguments() -> argparse.Namespace:
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("out", type=Path)
    a.add_argument("name")
    a.add_argument("--steps", type=int, default=6)
    a.add_argument("--warmup", type=int, default=30)
    a.add_argument("--smoke", action="store_true")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = a.parse_args(argv[:cut])
    args.overrides = argv[cut + 1 :] + (["device=cpu"] if args.smoke else [])
    return args


def _build(args: argparse.Namespace) -> tuple[Any, Any]:
    """The workload of the overrides, built as a trial builds it (device and preset resolved; auto: tiny on the
    CPU), and its device."""
    import torch
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import workloads
    from sweeper.sweep.config.trial_config import trial_config
    from sweeper.trial.gpu import device_info
    from workloads.base import DeviceInfo

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        composed = OmegaConf.to_container(compose("config", overrides=args.overrides), resolve=True)
    assert isinstance(composed, dict)
    cfg = trial_config(composed, DeviceInfo(kind="cpu") if args.smoke else device_info(), args.overrides)
    device = torch.device(cfg["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    wl = cfg["workload"]
    return workloads.load(wl["name"], wl.get("module")).build(cfg, device), device


def _profile(work: Any, device: Any, args: argparse.Namespace) -> tuple[Any, float, list[tuple[float, float]]]:
    """Warm up, then profile ``args.steps`` steps under the trial's labels: (the profiler, the wall seconds, each
    step's host seconds in next_batch() and in step())."""
    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(max(args.warmup, work.buffered_steps + 4)):
        work.step(work.next_batch())
    sync()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    host: list[tuple[float, float]] = []
    t_start = time.perf_counter()
    rf = torch.profiler.record_function  # the trial's labels (sweeper.trial.profile), so ta.analyse reads it
    with torch.profiler.profile(activities=activities) as prof, rf(ta.WINDOW_LABEL):
        for i in range(args.steps):
            with rf(f"{ta.STEP_LABEL}#{i}"):
                t = time.perf_counter()
                with rf(ta.INPUT_LABEL):
                    batch = work.next_batch()
                t_mid = time.perf_counter()
                work.step(batch)
                host.append((t_mid - t, time.perf_counter() - t_mid))
        sync()
    return prof, time.perf_counter() - t_start, host


def main() -> None:
    args = _arguments()
    args.out.mkdir(parents=True, exist_ok=True)
    work, device = _build(args)
    try:
        prof, wall, host = _profile(work, device, args)
    finally:
        work.close()
    trace_path = args.out / f"{args.name}.trace.json"
    prof.export_chrome_trace(str(trace_path))
    trace = json.loads(trace_path.read_text())
    with gzip.open(f"{trace_path}.gz", "wt") as f:
        json.dump(trace, f)
    trace_path.unlink()
    row = {
        "name": args.name,
        "overrides": args.overrides,
        "wall_ms_per_step": round(wall / args.steps * 1e3, 2),
        "host_next_batch_ms": [round(a * 1e3, 2) for a, _ in host],
        "host_step_ms": [round(b * 1e3, 2) for _, b in host],
        **ta.analyse(trace["traceEvents"], args.steps),  # the prof_* columns a profiled trial records
        **(summarize(trace) if device.type == "cuda" else {"gpu": "none (CPU smoke)"}),
    }
    with open(args.out / "step_profile.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=1), flush=True)


if __name__ == "__main__":
    main()
