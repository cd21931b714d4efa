"""One process's trial: set the device and threads, build the workload, measure it, add setup and compile facts.

Runs in the isolated trial process, or in each rank of a distributed trial (``sweeper.trial.ranks``), or in the
Hydra job itself with ``trial.isolate=false``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

import workloads
from sweeper.trial.fingerprint import fingerprint
from sweeper.trial.measure import measure
from sweeper.trial.profile import profile_trial
from sweeper.trial.threads import trial_threads


def execute(cfg: dict[str, Any], report=None, measured=None) -> dict[str, Any]:
    """Build and measure the configured workload in this process; returns the flat metrics dict (with the
    fingerprint). ``measured(metrics)``: handed the measured window's metrics, its setup and compile facts, before a
    profile starts (a profile cut by the sweep's budget leaves them to the sweeper; the isolated trial passes it,
    through its ranks' agent for a distributed one (``sweeper.trial.ranks``); an in-process trial does not)."""
    t0 = time.perf_counter()
    device = torch.device(cfg["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    threads = trial_threads(cfg.get("cpu_threads"))
    torch.set_num_threads(threads)
    wl = cfg["workload"]
    t_load = time.perf_counter()
    module = workloads.load(wl["name"], wl.get("module"))
    t_build = time.perf_counter()
    work = module.build(cfg, device)
    setup_s = time.perf_counter() - t0
    split = {"setup_load_s": t_build - t_load, "setup_build_s": t0 + setup_s - t_build}
    m = cfg["measure"]
    fp = fingerprint(device.type)
    try:
        metrics = measure(
            work,
            device,
            warmup_steps=int(m["warmup_steps"]),
            steps=int(m["steps"]),
            min_time_s=float(m["min_time_s"]),
            max_steps=m["max_steps"],
            rel_precision=m["rel_precision"],
            # the watchdog ends its process: only a trial's own one, never a sweeper running it in-process
            stall_s=m["stall_s"] if cfg["trial"]["isolate"] else None,
            report=report,
            gpu_name=fp["gpu_name"] or None,
            count_ops=bool(m.get("count_ops")) and _countable(cfg),
            end_at=m.get("end_at"),
        )
        metrics.update(_facts(cfg, metrics, setup_s, threads, fp), **split)
        if measured is not None and int(m.get("profile_steps") or 0) > 0:
            measured(dict(metrics))
        metrics.update(profile_trial(work, device, cfg))  # after the window: its numbers are untouched
    finally:
        work.close()
    return metrics


def _facts(
    cfg: dict[str, Any], metrics: dict[str, Any], setup_s: float, threads: int, fp: dict[str, Any]
) -> dict[str, Any]:
    """The trial's setup and compile facts and the machine's fingerprint, beside its measured window. Of
    ``setup_s``, the workload module's import in this process (``setup_load_s``) and its ``build``
    (``setup_build_s``) are kept apart by ``execute``; the rest is the device's start and the threads."""
    out: dict[str, Any] = {"setup_s": setup_s, "cpu_threads": threads}
    if cfg["knobs"].get("compile") not in (None, "off"):  # null turns a knob off
        out["compile_s"] = max(0.0, metrics["first_step_s"] - metrics["step_ms_p50"] / 1e3)
        out["graph_breaks"] = _graph_breaks()
        out.update(_compile_cache())
    else:
        out["compile_s"], out["graph_breaks"] = 0.0, 0
        out["compile_cache_hits"], out["compile_cache_misses"] = 0, 0
    out.update(fp)
    return out


def _countable(cfg: dict[str, Any]) -> bool:
    """Whether this process may count its step's operations: an eager step (a compiled one hides them) of one
    process (ranks that fell out of step over a refused count would pair the wrong collectives)."""
    single = not (torch.distributed.is_available() and torch.distributed.is_initialized())
    return single and cfg["knobs"].get("compile") in (None, "off")


def _compile_cache() -> dict[str, int]:
    """Inductor's FX graph cache in this trial's process: the graphs it found compiled (``compile_cache_hits``: a
    warm compile, from an earlier trial of this study or another night's that shares ``TORCHINDUCTOR_CACHE_DIR``)
    and those it compiled (``compile_cache_misses``): whether the trial's compile was warm, measured, not guessed."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return {"compile_cache_hits": int(inductor["fxgraph_cache_hit"]),
            "compile_cache_misses": int(inductor["fxgraph_cache_miss"])}  # fmt: skip


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))
