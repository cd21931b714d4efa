"""A few more steps under torch.profiler after the measured window: the trace beside the rows, and its columns.

``measure.profile_steps`` > 0 runs that many steps of the built workload (any workload, a user's own included:
only ``next_batch`` and ``step`` are called) under ``torch.profiler`` once the window's numbers are taken, so
they are untouched. CPU activities on the CPU, CPU and CUDA on a GPU; no shapes, stacks or memory (they cost
more than the steps). The host's timeline is labelled (``trace_analysis.WINDOW_LABEL``, ``STEP_LABEL``,
``INPUT_LABEL``) so the analysis tells waiting for input from launching and synchronising; one unlabelled step
runs first, so the window opens on a queue in its steady state, not on the one the synchronisation emptied. The trace is
written gzipped (Chrome/Perfetto JSON, opens in https://ui.perfetto.dev) to ``<results_dir>/<trace>``
(``trace_analysis.trace_relpath``), and :func:`sweeper.trial.trace_analysis.analyse` reads it into the
``prof_*`` columns, with ``prof_trace`` (the path relative to ``results_dir``), ``prof_steps`` and ``prof_s``
(the seconds the profiling cost: steps, export, analysis). A profile that fails leaves ``prof_error`` and the
trial's measured numbers as they were.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from sweeper.trial import trace_analysis as ta


def trace_for(cfg: dict[str, Any], rank: int | None) -> str:
    """The trace's path relative to ``results_dir``: the one the job chose (``trial.trace``), rank-suffixed in
    a distributed trial, else a single run's (``<workload>-runs``, stamped)."""
    chosen = cfg["trial"]["trace"]
    if not chosen:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
        chosen = ta.trace_relpath(f"{cfg['workload']['name']}-runs", None, stamp=stamp)
    if rank is not None:
        stem = chosen[: -len(".json.gz")] if chosen.endswith(".json.gz") else chosen
        chosen = f"{stem}.rank{rank}.json.gz"
    return chosen


def _rank() -> int | None:
    """This process's rank in a distributed trial of more than one rank, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist.get_rank()
    return None


def profile_trial(work: Any, device: torch.device, cfg: dict[str, Any]) -> dict[str, Any]:
    """The ``prof_*`` columns of ``measure.profile_steps`` profiled steps (nothing when 0); never raises."""
    steps = int(cfg["measure"]["profile_steps"])
    if steps <= 0:
        return {}
    t0 = time.perf_counter()
    rel = trace_for(cfg, _rank())
    try:
        out = capture(work, device, steps, Path(cfg["results_dir"]) / rel)  # a trial config: every key present
        out["prof_trace"] = rel
    except Exception as exc:  # noqa: BLE001 - the measured window is kept; the profile says why it is missing
        out = {"prof_error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    out["prof_s"] = time.perf_counter() - t0
    return out


def capture(work: Any, device: torch.device, steps: int, trace_file: Path) -> dict[str, Any]:
    """Profile ``steps`` steps of ``work``, write the gzipped trace to ``trace_file``, return its columns."""
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if not cuda:
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # else Kineto logs an error for the missing GPU
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync()
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": expected, one cycle
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=activities) as prof:
            # One step before the window: the synchronize above drained the GPU's queue, and a window opened on an
            # empty queue would count the first launches' ramp as idle time that the measured steps never have.
            # Its kernels still running when the window opens are inside the trace and count as busy there.
            work.step(work.next_batch())
            with record_function(ta.WINDOW_LABEL):
                for i in range(steps):
                    with record_function(f"{ta.STEP_LABEL}#{i}"):
                        with record_function(ta.INPUT_LABEL):
                            batch = work.next_batch()
                        work.step(batch)
                sync()
    trace_file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sweeper-trace-") as d:
        raw = os.path.join(d, "trace.json")
        prof.export_chrome_trace(raw)
        with open(raw, encoding="utf-8") as f:
            events = json.load(f).get("traceEvents", [])
        tmp = trace_file.with_name(trace_file.name + ".tmp")
        with open(raw, "rb") as src, gzip.open(tmp, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, trace_file)  # a reader never sees half a trace
    return ta.analyse(events, steps)
