"""What a workload hands back, checked before it lands in a row or an Optuna attribute.

``build``'s numbers (``samples_per_step``, ``flops_per_step``, ``conv_flops_frac``) make the throughput and the MFU;
``extra_metrics()`` adds columns of the workload's own. A number that would rank nonsense, or a metric that would
take a name the sweeper writes itself (the row's identity, a measured metric, an attribute it reads back), is a
``ValueError`` with one line naming it: the trial fails with that line, the sweep goes on.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from workloads.base import Workload


def check_workload(work: Workload) -> None:
    """The numbers a workload's ``build`` hands back that land in the row (a throughput, an MFU): a
    ``samples_per_step`` or ``flops_per_step`` that is not a finite number > 0 would rank the trial by a negative
    or infinite throughput (0 FLOPs: unknown, no MFU); refused before anything runs (``ValueError``, one line
    naming the field)."""

    def bad(value: Any) -> bool:  # numbers.Real: numpy's scalars too
        return isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf

    if bad(work.samples_per_step):
        raise ValueError(
            f"the workload's samples_per_step is {work.samples_per_step!r}: give the items of work "
            "one step does, a finite number > 0"
        )
    if work.flops_per_step not in (None, 0) and bad(work.flops_per_step):
        raise ValueError(
            f"the workload's flops_per_step is {work.flops_per_step!r}: give one step's model FLOPs, "
            "a finite number > 0, or None (0: unknown)"
        )
    if (
        isinstance(work.conv_flops_frac, bool)
        or not isinstance(work.conv_flops_frac, numbers.Real)
        or not 0 <= work.conv_flops_frac <= 1
    ):
        raise ValueError(
            f"the workload's conv_flops_frac is {work.conv_flops_frac!r}: give the share of "
            "flops_per_step in convolutions, a number in [0, 1]"
        )
    for name in ("throughput_unit", "precision"):
        if not isinstance(getattr(work, name), str):
            raise ValueError(f"the workload's {name} is {getattr(work, name)!r}: give a string")


def checked_extra(extra: Any, measured: dict[str, Any]) -> dict[str, Any]:
    """A workload's own metrics (``extra_metrics()``), refused (``ValueError``, one line naming it) when one takes
    the name of a measured metric or of a column or attribute the sweeper writes itself
    (:func:`sweeper.results.rows.reserved`): ``trial`` would rename the row, ``throughput`` replace the measured
    one, ``confirm_of`` make the trial a re-measurement that never counts."""
    from sweeper.results.rows import reserved

    if not isinstance(extra, dict):
        raise ValueError(f"the workload's extra_metrics() returned {type(extra).__name__}, not a dict of metrics")
    for name in extra:
        if not isinstance(name, str) or not name:
            raise ValueError(f"the workload's extra_metrics() returned the metric name {name!r}: give it a name")
        if name in measured or reserved(name):
            raise ValueError(
                f"the workload's extra_metrics() returned {name!r}, a name the sweeper measures or writes itself: "
                f"rename it (e.g. {'workload_' + name!r})"
            )
    return extra
