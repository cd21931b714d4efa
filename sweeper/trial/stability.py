"""Is a measured window's step time one steady value? Flags for steps that switch between two speeds (a shared
CPU where the intra-op threads sometimes run together and sometimes wait for a descheduled one: ~0.05 ms or
~8 ms per step) or scatter widely. Pure Python: the trial calls it on its step times, tests on synthetic ones.

Bimodal: sort the step times and find the largest ratio between neighbours. It is a gap when the slower side is
at least ``GAP_RATIO`` times the faster and each side holds at least ``MIN_SIDE`` of the steps (two steps at
least): two clusters, so the mean describes neither. A normal spread (CV 10 %) has neighbour ratios near 1;
one slow outlier (a page fault, a GC pause) is a side too small to count.
Unstable: bimodal, or a coefficient of variation of the step times above ``MAX_CV``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

GAP_RATIO = 2.0  # the slower cluster's fastest step / the faster cluster's slowest step
MIN_SIDE = 0.1  # share of the steps each cluster must hold
MAX_CV = 0.5  # step-time standard deviation / mean above which the window is unstable


def step_gap(step_s: Sequence[float]) -> tuple[float, float]:
    """(largest neighbour ratio among the sorted step times with enough steps on each side, the share of steps
    on its slow side); (1.0, 0.0) with fewer than 4 steps."""
    x = sorted(v for v in step_s if v > 0 and math.isfinite(v))
    n = len(x)
    least = max(2, math.ceil(MIN_SIDE * n))
    best, slow = 1.0, 0.0
    for i in range(least, n - least + 1):  # the gap between x[i-1] and x[i]: i steps below, n-i above
        r = x[i] / x[i - 1]
        if r > best:
            best, slow = r, (n - i) / n
    return best, slow


def stability(step_s: Sequence[float]) -> dict[str, object]:
    """``step_gap_ratio``, ``step_bimodal``, ``step_unstable`` of a window's per-step times (seconds)."""
    ratio, _ = step_gap(step_s)
    bimodal = ratio >= GAP_RATIO
    mean = statistics.fmean(step_s) if step_s else math.nan
    cv = statistics.pstdev(step_s) / mean if len(step_s) > 1 and mean > 0 else math.nan
    return {
        "step_gap_ratio": ratio,
        "step_bimodal": bimodal,
        "step_unstable": bool(bimodal or (math.isfinite(cv) and cv > MAX_CV)),
    }
