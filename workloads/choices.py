"""The values of the knobs the package's helpers interpret (``workloads.common``): one place, free of torch.

The helpers (``TrainStep``, ``autocast``, ``maybe_compile``, ``memory_format``, ``optimizer_kwargs``) raise on any
other value inside a trial; the sweeper reads ``HELPER_KNOBS`` before launch, so ``knobs.precision=fp8`` is bad
input for every workload that uses the helpers, a user's own included (``sweeper.sweep.config.check_enumerations``).
"""

from __future__ import annotations

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp32-strict")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
MEMORY_FORMATS = ("contiguous", "channels_last")
OPTIMIZER_IMPLS = ("foreach", "fused", "for_loop")

# knob -> the values the helpers accept
HELPER_KNOBS: dict[str, tuple[str, ...]] = {
    "precision": PRECISIONS,
    "compile": COMPILE_MODES,
    "memory_format": MEMORY_FORMATS,
    "optimizer_impl": OPTIMIZER_IMPLS,
}
