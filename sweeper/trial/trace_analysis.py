"""Where a profiled trial's time went, read from its torch.profiler trace (Chrome/Perfetto JSON); imports no torch.

The capture (:mod:`sweeper.trial.profile`) labels the host's timeline with ``record_function`` ranges: WINDOW_LABEL
around all profiled steps, STEP_LABEL around each step and INPUT_LABEL around each input fetch (``next_batch``).
:func:`analyse` turns the trace's events into the flat ``prof_*`` columns (fractions of the window, summing to 1):

On a GPU (kernels, copies and memsets on the device timeline; times in microseconds on one clock):
  window      from the start of the profiled loop on the host to the end of the last GPU activity.
  busy        the union of GPU activity over every stream (``prof_gpu_busy_frac``).
  idle        each gap in that union, attributed in this order:
    input     the part of the gap the host spent inside INPUT_LABEL (waiting for or preparing its next batch);
    sync      the rest of a gap that began while the host was blocked in a synchronising call (``SYNC_CALLS``:
              ``.item()``'s ``cudaStreamSynchronize``, a synchronous ``cudaMemcpy``, ...) that returned when the GPU
              ran dry, and any part of a gap spent inside such a call: the host drained the queue and must refill it;
    launch    the rest of a gap whose next GPU work was launched after the gap began (the host was late: Python,
              op dispatch and launch overhead between kernels; HTA's "host wait" rule);
    other     the rest (work that was queued in time but waited: another stream, an event, back-to-back kernels).
  kernel classes  each class's share of the summed GPU activity time (``KERNEL_CLASSES``, matched on the name).

On the CPU (no device timeline: the CPU is the device, honestly described from the main thread's timeline):
  window      the WINDOW_LABEL range on the main thread.
  busy        time in the step's outermost ops (inside STEP_LABEL), except synchronising ops.
  input       time inside INPUT_LABEL.     sync  time in the step's synchronising ops (``aten::item``, ...).
  launch      time inside STEP_LABEL outside any op: Python between ops (the CPU's analogue of a launch gap).
  other       the rest of the window (the loop itself, the profiler).
  kernel classes  each class's share of the ops' self time on every thread (input excluded).
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

WINDOW_LABEL = "sweeper/profile"
STEP_LABEL = "sweeper/step"
INPUT_LABEL = "sweeper/input"
OPTIMIZER_LABEL = "Optimizer.step#"  # torch.optim labels each step() (also zero_grad: Optimizer.zero_grad#)
IDLE_CAUSES = ("input", "sync", "launch", "other")
CLASSES = ("matmul", "attention", "norm_elementwise", "optimizer", "memcpy", "comm", "other")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
SYNC_CALLS = {
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cuMemcpyDtoH_v2",
}
CPU_SYNC_OPS = {"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal"}
SYNC_TOLERANCE_US = 50.0  # a sync call that returned this soon before a gap began still drained the queue
TOP_KERNELS = 5
TOP_THREADS = 6
# (class, substrings of a lower-cased kernel or op name), first match wins: attention before matmul (flash
# kernels are GEMMs); Inductor's pointwise/reduction kernels and normalisation (cuDNN's cudnn::bn_*) before the
# loose convolution names ("conv" is also in "convert_element_type").
KERNEL_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("comm", ("nccl", "gloo", "all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter", "c10d")),
    ("memcpy", ("memcpy", "memset", "aten::copy_", "aten::_to_copy", "pin_memory")),
    ("attention", ("flash", "fmha", "attention", "attn", "sdpa")),
    (
        "matmul",
        (
            "gemm",
            "nvjet",
            "xmma",
            "cutlass",
            "cublas",
            "wgmma",
            "triton_tem",
            "implicit_convolve",
            "winograd",
            "dgrad",
            "wgrad",
            "fprop",
        ),
    ),
    ("optimizer", ("adam", "sgd", "multi_tensor_apply", "_foreach", "optimizer", "lamb", "rmsprop")),
    (
        "norm_elementwise",
        (
            "norm",
            "bn_fw",
            "bn_bw",
            "triton_poi",
            "triton_per",
            "triton_red",
            "elementwise",
            "vectorized",
            "reduce",
            "pointwise",
            "unrolled",
            "softmax",
        ),
    ),
    ("matmul", ("conv", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")),
    (
        "norm_elementwise",
        (
            "relu",
            "gelu",
            "silu",
            "dropout",
            "aten::add",
            "aten::mul",
            "aten::sub",
            "aten::div",
            "aten::copy",
            "aten::fill",
            "aten::zero",
            "aten::sum",
            "aten::mean",
            "aten::threshold",
            "aten::max_pool",
            "aten::cat",
            "aten::exp",
            "aten::where",
            "aten::clamp",
        ),
    ),
)


def kernel_class(name: str, cat: str = "kernel") -> str:
    """The class of a GPU activity (``cat``: kernel, gpu_memcpy, gpu_memset) or a CPU op, from its name."""
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "memcpy"
    low = name.lower()
    return next((cls for cls, keys in KERNEL_CLASSES if any(k in low for k in keys)), "other")


def trace_relpath(study: str, number: int | None, rank: int | None = None, stamp: str = "") -> str:
    """Where a trial's trace goes, relative to ``results_dir``: ``traces/<study>/<study>-<number>.json.gz``
    (``.rank<r>`` before the suffix for a rank of a distributed trial; ``run-<stamp>`` for a single run)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", study).strip("._-") or "study"
    tail = f"{int(number):06d}" if number is not None else f"run-{stamp}"
    return f"traces/{safe}/{safe}-{tail}{f'.rank{rank}' if rank is not None else ''}.json.gz"


def load(path: str | Path) -> list[dict[str, Any]]:
    """The ``traceEvents`` of a Chrome trace file (gzipped when its name ends in .gz)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        return json.load(f).get("traceEvents", [])


# ---------------------------------------------------------------- interval helpers (microseconds)


def union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, merged intervals."""
    merged: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        elif e > s:
            merged.append((s, e))
    return merged


def union_length(spans: list[tuple[float, float]]) -> float:
    return sum(e - s for s, e in union(spans))


def covered(spans: list[tuple[float, float]], t0: float, t1: float) -> float:
    """Time inside [t0, t1] covered by any of ``spans``."""
    return union_length([(max(a, t0), min(b, t1)) for a, b in spans if b > t0 and a < t1])


def _span(e: dict[str, Any]) -> tuple[float, float]:
    return float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))


def _gaps(busy: list[tuple[float, float]], t0: float, t1: float) -> list[tuple[float, float]]:
    out, at = [], t0
    for s, e in busy:
        if s > at:
            out.append((at, min(s, t1)))
        at = max(at, e)
    if at < t1:
        out.append((at, t1))
    return [(a, b) for a, b in out if b > a]


# ---------------------------------------------------------------- the analysis


def analyse(events: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """The ``prof_*`` columns of one trace (see the module's docstring); a GPU trace when it holds GPU activity."""
    xs = [e for e in events if e.get("ph") == "X" and "ts" in e]
    names = {
        (e.get("pid"), e.get("tid")): (e.get("args") or {}).get("name")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    labels = [e for e in xs if e.get("cat") == "user_annotation"]
    windows = [e for e in labels if e.get("name") == WINDOW_LABEL]
    steps_ = [e for e in labels if str(e.get("name", "")).startswith(STEP_LABEL)]
    if not windows and not steps_:
        raise ValueError(f"the trace has no {WINDOW_LABEL!r} or {STEP_LABEL!r} range: not a profiled trial's")
    outer = windows or steps_
    host0, host1 = min(_span(e)[0] for e in outer), max(_span(e)[1] for e in outer)
    main = (outer[0].get("pid"), outer[0].get("tid"))
    gpu = [e for e in xs if e.get("cat") in GPU_CATS]
    device = "cuda" if gpu else "cpu"
    t1 = max([_span(e)[1] for e in gpu] + [host0]) if gpu else host1
    window = max(t1 - host0, 1e-9)
    inputs = [_span(e) for e in labels if e.get("name") == INPUT_LABEL]
    if gpu:
        split = _gpu_split(xs, gpu, inputs, host0, t1)
        shares, top = _gpu_classes(gpu, _optimizer_launches(xs), host0, t1, steps)
    else:
        split = _cpu_split(xs, main, inputs, [_span(e) for e in steps_], host0, t1)
        shares, top = _cpu_classes(xs, main, inputs, host0, t1, steps)
    out: dict[str, Any] = {
        "prof_device": device,
        "prof_window_ms": window / 1e3,
        "prof_steps": steps,
        "prof_step_ms": window / 1e3 / max(steps, 1),
        "prof_gpu_busy_frac": split["busy"] / window,
    }
    for cause in IDLE_CAUSES:
        out[f"prof_idle_{cause}_frac"] = split[cause] / window
    total = sum(shares.values())
    for cls in CLASSES:
        out[f"prof_k_{cls}_frac"] = shares.get(cls, 0.0) / total if total > 0 else math.nan
    out["prof_top_kernels"] = json.dumps(top)
    out["prof_host_threads"] = json.dumps(_threads(xs, names, host0, t1, window))
    return out


def _gpu_split(xs, gpu, inputs, t0: float, t1: float) -> dict[str, float]:
    busy = union([(max(a, t0), min(b, t1)) for a, b in map(_span, gpu) if b > t0 and a < t1])
    launches = {(e.get("args") or {}).get("correlation"): float(e["ts"]) for e in xs if e.get("cat") in LAUNCH_CATS}
    syncs = [_span(e) for e in xs if e.get("cat") in LAUNCH_CATS and e.get("name") in SYNC_CALLS]
    starts = sorted((float(e["ts"]), launches.get((e.get("args") or {}).get("correlation"))) for e in gpu)
    start_ts = [ts for ts, _ in starts]
    out = dict.fromkeys(("busy", *IDLE_CAUSES), 0.0)
    out["busy"] = sum(b - a for a, b in busy)
    for g0, g1 in _gaps(busy, t0, t1):
        length = g1 - g0
        waiting = covered(inputs, g0, g1)
        out["input"] += waiting
        rest = length - waiting
        drained = any(s0 < g0 <= s1 + SYNC_TOLERANCE_US for s0, s1 in syncs)
        in_sync = rest if drained else min(rest, _covered_outside(syncs, inputs, g0, g1))
        out["sync"] += in_sync
        rest -= in_sync
        i = bisect.bisect_left(start_ts, g1)
        nxt = starts[i][1] if i < len(starts) else None
        late = nxt is not None and nxt > g0  # the work that ended the gap was launched after the gap began
        out["launch" if late else "other"] += rest
    return out


def _covered_outside(spans, exclude, t0: float, t1: float) -> float:
    """Time in [t0, t1] covered by ``spans`` but not by ``exclude``."""
    both = covered(spans + exclude, t0, t1)
    return both - covered(exclude, t0, t1)


def _optimizer_spans(xs) -> dict[Any, list[tuple[float, float]]]:
    """Per host thread, the ranges of ``torch.optim``'s own ``Optimizer.step#...`` labels."""
    spans: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for e in xs:
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(OPTIMIZER_LABEL):
            spans[(e.get("pid"), e.get("tid"))].append(_span(e))
    return spans


def _optimizer_launches(xs) -> set[Any]:
    """Correlation ids of the GPU work launched inside an optimizer step."""
    spans = _optimizer_spans(xs)
    return {
        (e.get("args") or {}).get("correlation")
        for e in xs
        if e.get("cat") in LAUNCH_CATS
        and any(a <= float(e["ts"]) < b for a, b in spans.get((e.get("pid"), e.get("tid")), []))
    }


def _gpu_classes(gpu, optimizer: set[Any], t0: float, t1: float, steps: int):
    shares: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    for e in gpu:
        a, b = _span(e)
        d = max(0.0, min(b, t1) - max(a, t0))
        cls = kernel_class(str(e.get("name", "")), str(e.get("cat")))
        if cls == "norm_elementwise" and (e.get("args") or {}).get("correlation") in optimizer:
            cls = "optimizer"  # an optimizer's elementwise kernels (for-loop and foreach implementations)
        shares[cls] += d
        by_name[str(e.get("name", ""))] += d
    return shares, _top(by_name, steps)


def _top(by_name: dict[str, float], steps: int) -> list[dict[str, Any]]:
    total = sum(by_name.values())
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
    return [
        {
            "name": n[:160],
            "ms_per_step": round(us / 1e3 / max(steps, 1), 4),
            "share": round(us / total, 4) if total else 0.0,
        }
        for n, us in ranked
    ]


def _self_times(ops: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """(op, self time) for ops of one thread: its duration less its direct children's."""
    out: list[tuple[dict[str, Any], float]] = []
    stack: list[list[Any]] = []  # [event, end, children's time]
    for e in sorted(ops, key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0)))):
        a, b = _span(e)
        while stack and stack[-1][1] <= a:
            done = stack.pop()
            out.append((done[0], float(done[0].get("dur", 0.0)) - done[2]))
        if stack:
            stack[-1][2] += b - a
        stack.append([e, b, 0.0])
    out += [(ev, float(ev.get("dur", 0.0)) - kids) for ev, _, kids in stack]
    return out


def _outermost(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out, end = [], -math.inf
    for e in sorted(ops, key=lambda e: (float(e["ts"]), -float(e.get("dur", 0.0)))):
        a, b = _span(e)
        if a >= end:
            out.append(e)
            end = b
    return out


def _cpu_split(xs, main, inputs, steps, t0: float, t1: float) -> dict[str, float]:
    ops = [e for e in xs if e.get("cat") == "cpu_op" and (e.get("pid"), e.get("tid")) == main]
    top = [e for e in _outermost(ops) if covered(steps, *_span(e)) > 0 and not covered(inputs, *_span(e))]
    sync = [_span(e) for e in top if e.get("name") in CPU_SYNC_OPS]
    work = [_span(e) for e in top if e.get("name") not in CPU_SYNC_OPS]
    out = {"input": covered(inputs, t0, t1), "sync": covered(sync, t0, t1), "busy": covered(work, t0, t1)}
    in_steps = (
        covered(steps, t0, t1)
        - covered(inputs + sync + work, t0, t1)
        + _covered_outside(inputs + sync + work, steps, t0, t1)
    )  # step time outside any op (inputs and ops lie inside steps)
    out["launch"] = max(0.0, in_steps)
    out["other"] = max(0.0, (t1 - t0) - out["input"] - out["sync"] - out["busy"] - out["launch"])
    return out


def _cpu_classes(xs, main, inputs, t0: float, t1: float, steps: int):
    by_thread: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in xs:
        if e.get("cat") == "cpu_op" and _span(e)[1] > t0 and _span(e)[0] < t1:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    shares: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    optimizer = _optimizer_spans(xs)
    for key, ops in by_thread.items():
        for e, own in _self_times(ops):
            if own <= 0 or (key == main and covered(inputs, *_span(e)) > 0) or e.get("name") in CPU_SYNC_OPS:
                continue
            cls = kernel_class(str(e.get("name", "")), "cpu_op")
            if cls in ("norm_elementwise", "other") and covered(optimizer.get(key, []), *_span(e)) > 0:
                cls = "optimizer"
            shares[cls] += own
            by_name[str(e.get("name", ""))] += own
    return shares, _top(by_name, steps)


def _threads(xs, names, t0: float, t1: float, window: float) -> dict[str, float]:
    """Busy share of the window per host thread: the union of its ops, runtime calls and the workload's own
    ``record_function`` ranges (the capture's labels, which span whole steps, are left out)."""
    spans: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for e in xs:
        cat, name = e.get("cat"), str(e.get("name", ""))
        if cat in ("cpu_op", "cuda_runtime", "cuda_driver", "python_function") or (
            cat == "user_annotation" and not name.startswith("sweeper/")
        ):
            spans[(e.get("pid"), e.get("tid"))].append(_span(e))
    shares = {}
    for key, s in spans.items():
        label = names.get(key) or f"thread {key[1]}"
        shares[label] = round(shares.get(label, 0.0) + covered(s, t0, t1) / window, 4)
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])[:TOP_THREADS]
    return {k: v for k, v in ranked if v > 0}
