"""The handbook's start: the configuration PyTorch's performance guidance picks from a workload's own declared
space, measured right after the baseline (``hydra.sweeper.handbook_start``), so the search starts near the ceiling
of any model, with no per-model ``starts``.

Each rule reads a knob of the package's training-step vocabulary (``workloads.spec.training``, the data knobs of
the package's loaders) by its last name, wherever the workload declares it, and picks only among the values the
space gives, on the device the sweep runs on:

* ``precision``: the fastest reduced precision the device supports: bf16 (a GPU of compute capability 8.0 or
  later, or a CPU that computes it natively: :func:`cpu_bf16`), else fp16 (a GPU), else tf32 (a GPU of 8.0 or
  later). A CPU without bf16 instructions emulates it: on a 2-core AVX2 VM (torch 2.14.1, 2026-12-07) a Transformer
  encoder's eager bf16 step at batch 128 ran 23 samples/s against fp32's 211, and a sweep whose start was bf16
  spent its whole 150 s budget on that one trial;
* ``compile``: ``default`` (CUDA graphs and autotuning are left to the search: they cost minutes to compile);
* ``optimizer_impl``: ``fused`` (where the device supports it);
* ``memory_format``: ``channels_last`` (a workload declares it where its model has convolutions);
* a batch size (``batch_size``, ``*_batch_size``): the largest the space gives (one that does not fit in memory is
  an infeasible trial; the search goes on around it);
* on a GPU: ``cudnn_benchmark``, ``pin_memory`` and ``non_blocking`` on; ``num_workers``: the most the space gives
  (a DataLoader's workers; a workload declares the knob only where it has one); ``device_prefetch`` on (the copy
  of host-decoded batches to the device, and their normalization, on a side stream a few batches ahead: the
  handbook's streams, copies overlapping kernels): ResNet-50 compiled, from JPEGs decoded on an H100's host, ran
  6,040 img/s with it against 6,000 without, waiting 0.1 % of the window against 3.2 % (2026-12-06 22:20);
* with workers: ``prefetch_factor`` the fewest batches the space gives (PyTorch's default is 2: a deeper buffer
  lengthens every trial's warm-up and decodes more images while the first step compiles) and ``worker_nice`` the
  most (the workers yield the cores to the trial's own process: its compile, its launches). On an H100 the JPEG
  start's first compile took 39 s with 14 workers at nice 10 prefetching 2 batches each, 58 s at nice 0 with 4
  (2026-12-06, two hosts of one kind).

A knob the picks make active and no rule names (its condition held not at the baseline) takes the workload's
default where the space gives it, else is left to the sampler: the start is one configuration, not a draw.

cuDNN's benchmark costs every trial process's first step (62-75 s of DeepLabV3-MobileNetV3's at batch 128 on an
H100; a compiled step runs it beside its compile, ``workloads.prime``: that first step 87 s instead of 123 s) and
gained nothing measurable on ResNet-50 or ConvNeXt-Tiny, but the same start without it ran at 348 img/s against 431
on DeepLabV3 (H100, 2026-12-06): its gain is the model's, so the start measures it on.

Values a device check refuses (``workloads.spec.training.check_common``) are left at the baseline's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from optuna.distributions import CategoricalDistribution

from sweeper.sweep.config.space import SearchSpace
from workloads.base import DeviceInfo
from workloads.spec.training import check_common

# CPU flags of native bf16 arithmetic: x86's AVX512-BF16 and AMX, Arm's BF16 extension (/proc/cpuinfo's names)
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """This host's CPU computes bf16 natively (one of ``BF16_CPU_FLAGS`` among its flags); True where its flags
    cannot be read (not Linux), as before the rule read them."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return True
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, Arm
            flags.update(value.split())
    return bool(flags & BF16_CPU_FLAGS) if flags else True


def start_params(
    space: SearchSpace,
    defaults: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    device: DeviceInfo,
    native_bf16: bool = True,
) -> dict[str, Any] | None:
    """The handbook's configuration of ``space`` on ``device``, or None when it is the baseline itself
    (``native_bf16``: a CPU device computes bf16 natively, :func:`cpu_bf16`)."""
    if baseline is None:
        return None
    gpu = device.kind == "cuda"
    picks: dict[str, Any] = {}
    for name, dist in space.params.items():
        if not isinstance(dist, CategoricalDistribution):
            continue
        value = _rule(name.rsplit(".", 1)[-1], list(dist.choices), gpu, device, native_bf16)
        if value is not None and value != baseline.get(name):
            knobs = {n.rsplit(".", 1)[-1]: v for n, v in {**baseline, **picks, name: value}.items()}
            if check_common(knobs, device) is None:
                picks[name] = value
    if not picks:
        return None
    woken = {n: defaults[n] for n in space.params if n not in baseline and n not in picks and n in defaults}
    params, _dropped = space.fix({**baseline, **woken, **picks}, dict(defaults))
    return params if params != dict(baseline) else None


def _rule(leaf: str, choices: list[Any], gpu: bool, device: DeviceInfo, native_bf16: bool = True) -> Any:
    if leaf == "precision":
        cc = device.compute_capability
        ampere = (cc is None or cc >= (8, 0)) if gpu else native_bf16
        order = (["bf16"] if ampere else []) + (["fp16"] if gpu else []) + (["tf32"] if gpu and ampere else [])
        return next((p for p in order if p in choices), None)
    if leaf == "compile":
        return "default" if "default" in choices else None
    if leaf == "optimizer_impl":
        return "fused" if "fused" in choices else None
    if leaf == "memory_format":
        return "channels_last" if "channels_last" in choices else None
    if leaf == "batch_size" or leaf.endswith("_batch_size"):
        numbers = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        return max(numbers) if numbers else None
    if gpu and leaf in ("cudnn_benchmark", "pin_memory", "non_blocking", "device_prefetch"):
        return True if True in choices else None
    numbers = [c for c in choices if isinstance(c, int) and not isinstance(c, bool)]
    if gpu and leaf == "num_workers":
        return max(numbers) if numbers else None
    if leaf == "prefetch_factor":
        return min(numbers) if numbers else None
    if leaf == "worker_nice":
        return max(numbers) if numbers else None
    return None


def smaller_batch(
    space: SearchSpace, start: Mapping[str, Any] | None, params: Mapping[str, Any], marked: bool = False
) -> dict | None:
    """The handbook's start again with the next smaller batch the space gives, after ``params`` ran out of memory:
    "the largest batch that fits". ``params`` is the start (or such a retry) where it equals it apart from the
    batch, or where the trial is ``marked`` as the start (``sweeper.sweep.study.attrs.is_start``: the staged
    sampler runs it fed by the best's pipeline, which the retry keeps). None for any other configuration, or no
    smaller batch."""
    if not start:
        return None
    names = [n for n in start if n.rsplit(".", 1)[-1] == "batch_size" or n.endswith("_batch_size")]
    if not names or not isinstance(space.params.get(names[0]), CategoricalDistribution):
        return None
    name = names[0]
    same = {k: v for k, v in params.items() if k != name and v is not None}
    if not marked and same != {k: v for k, v in start.items() if k != name and v is not None}:
        return None
    now = params.get(name)
    numbers = [c for c in space.params[name].choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    below = [c for c in numbers if isinstance(now, (int, float)) and c < now]
    return {**same, name: max(below)} if below else None
