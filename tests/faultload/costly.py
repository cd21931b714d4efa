"""A workload whose expensive knob is expensive by construction, for the search-strategy tests (lives in tests/).

A step sleeps ``base_ms / speed``: ``knobs.level`` (1..6) and ``knobs.batch`` set the speed, and ``knobs.compile``
multiplies it by a factor that grows with the batch (like ``torch.compile``: more gain on bigger work) but costs
``knobs.compile_cost_s`` of sleep in ``build`` (like a cold compile: ~4x an eager trial). Sleeping makes throughput
nearly independent of the machine's load, so the tests' landscapes are the same on any CPU.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from workloads.base import Workload

FACTORS = {"off": 1.0, "default": 1.5, "max": 1.7}  # speed-up of a compiled step at batch 1; more at batch 2


def speed(level: int, batch: int, compile: str) -> float:
    """Samples per millisecond of a configuration (what the measurement will find, up to sleep jitter)."""
    gain = FACTORS[compile] * (1.0 + 0.2 * (batch - 1) * (compile != "off"))
    return level * batch / (1.0 + 0.5 * (batch - 1)) * gain


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    knobs = cfg["knobs"]
    level, batch, mode = int(knobs["level"]), int(knobs["batch"]), str(knobs["compile"])
    if mode != "off":
        time.sleep(float(knobs["compile_cost_s"]))
    step_s = float(knobs["base_ms"]) / 1e3 * batch / speed(level, batch, mode)

    def step(_batch: Any) -> None:
        time.sleep(step_s)

    return Workload(step=step, samples_per_step=float(batch))
