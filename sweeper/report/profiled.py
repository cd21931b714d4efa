"""A profiled configuration read from its row's ``prof_*`` columns: its latest profile and the limit it names.

Each column is defined in ``sweeper.trial.trace_analysis``; :mod:`sweeper.report.profile_section` draws them.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from sweeper.report.blocks import pct

BUSY = "prof_gpu_busy_frac"
CAUSES = {
    "input": "waiting for input",
    "sync": "waiting on a host synchronisation",
    "launch": "in launch gaps (host behind)",
    "other": "idle for other reasons",
}
CLASSES = {
    "matmul": "matmul/convolution",
    "attention": "attention",
    "norm_elementwise": "norm/elementwise",
    "optimizer": "optimizer",
    "memcpy": "memory copies",
    "comm": "communication",
    "other": "other kernels",
}
PERFETTO = "https://ui.perfetto.dev"
IDLE_NAMED = 0.20  # idle at least this share of the window: the largest idle cause names the limit


def _f(value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return math.nan
    return v


def profiles(ok: pd.DataFrame, keys: pd.Series) -> pd.DataFrame:
    """Each configuration's latest profiled row (index: configuration key); empty when none was profiled."""
    if BUSY not in ok:
        return pd.DataFrame()
    prof = ok[pd.to_numeric(ok[BUSY], errors="coerce").notna()]
    if prof.empty:
        return pd.DataFrame()
    order = prof.sort_values("started_at") if "started_at" in prof else prof
    last = order.groupby(keys.loc[order.index], sort=False).tail(1)
    return last.set_axis(keys.loc[last.index])


def device_name(p: Any) -> str:
    return "CPU" if str(p.get("prof_device", "cuda")) == "cpu" else "GPU"


def profile_diagnosis(p: Any) -> str:
    """What limits a profiled configuration: idle >= IDLE_NAMED names its largest cause (data-bound,
    sync-bound, launch-bound, idle), else the largest kernel class of the busy time (compute-bound for
    matmul/attention, memory-bound for norm/elementwise and optimizer, copy-bound, communication-bound)."""
    idle = 1.0 - _f(p.get(BUSY))
    causes = {c: _f(p.get(f"prof_idle_{c}_frac")) for c in CAUSES}
    if idle >= IDLE_NAMED:
        cause = max(causes, key=lambda c: -1 if math.isnan(causes[c]) else causes[c])
        name = {"input": "data-bound", "sync": "sync-bound", "launch": "launch-bound", "other": "idle"}[cause]
        return f"{name} (profile: {pct(causes[cause])} {cause})"
    shares = {c: _f(p.get(f"prof_k_{c}_frac")) for c in CLASSES}
    top = max(shares, key=lambda c: -1 if math.isnan(shares[c]) else shares[c])
    name = {
        "matmul": "compute-bound",
        "attention": "compute-bound",
        "memcpy": "copy-bound",
        "comm": "communication-bound",
    }.get(top, "memory-bound")
    return f"{name} (profile: {CLASSES[top]} {pct(shares[top])})"
