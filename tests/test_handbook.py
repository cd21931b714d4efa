"""The handbook's start: derived from a workload's own declared space and the device, no per-model ``starts``."""

from __future__ import annotations

from sweeper.sweep.handbook import start_params
from sweeper.sweep.space import build_space
from sweeper.sweep.warm import baseline_params
from workloads.base import DeviceInfo

CPU = DeviceInfo(kind="cpu")
H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", count=1, compute_capability=(9, 0))
T4 = DeviceInfo(kind="cuda", name="Tesla T4", count=1, compute_capability=(7, 5))
CNN = {
    "knobs.precision": "choice(fp32, tf32, fp16, bf16)",
    "knobs.memory_format": "choice(contiguous, channels_last)",
    "knobs.compile": "choice(off, default, reduce-overhead)",
    "knobs.batch_size": "choice(64, 128, 256)",
    "knobs.cudnn_benchmark": "choice(false, true)",
    "knobs.optimizer_impl": "choice(foreach, fused)",
    "knobs.num_workers": "choice(0, 4, 8)",
    "knobs.pin_memory": "choice(false, true)",
    "knobs.seed_of_mine": "choice(1, 2)",
}
DEFAULTS = {"knobs.precision": "fp32", "knobs.memory_format": "contiguous", "knobs.compile": "off",
            "knobs.batch_size": 64, "knobs.cudnn_benchmark": False, "knobs.optimizer_impl": "foreach",
            "knobs.num_workers": 0, "knobs.pin_memory": False, "knobs.seed_of_mine": 1}  # fmt: skip


def _start(params: dict, defaults: dict, device: DeviceInfo) -> dict | None:
    space = build_space(params, {}, [], defaults)
    return start_params(space, defaults, baseline_params(space, defaults), device)


def test_the_handbook_start_on_a_gpu_takes_every_rule_the_space_allows() -> None:
    start = _start(CNN, DEFAULTS, H200)
    assert start == {"knobs.precision": "bf16", "knobs.memory_format": "channels_last", "knobs.compile": "default",
                     "knobs.batch_size": 256, "knobs.cudnn_benchmark": True, "knobs.optimizer_impl": "fused",
                     "knobs.num_workers": 8, "knobs.pin_memory": True, "knobs.seed_of_mine": 1}  # fmt: skip
    assert _start(CNN, DEFAULTS, T4)["knobs.precision"] == "fp16", "no bf16 before compute capability 8.0"


def test_the_handbook_start_on_the_cpu_takes_bf16_and_compile_and_leaves_the_gpu_rules() -> None:
    start = _start(CNN, DEFAULTS, CPU)
    assert start is not None
    assert start["knobs.precision"] == "bf16" and start["knobs.compile"] == "default"
    assert start["knobs.batch_size"] == 256 and start["knobs.memory_format"] == "channels_last"
    assert start["knobs.cudnn_benchmark"] is False and start["knobs.num_workers"] == 0
    assert start["knobs.pin_memory"] is False


def test_a_space_without_handbook_knobs_has_no_handbook_start() -> None:
    assert _start({"knobs.seed_of_mine": "choice(1, 2)"}, {"knobs.seed_of_mine": 1}, H200) is None
    only_fp32 = {"knobs.precision": "choice(fp32, tf32)", "knobs.batch_size": "choice(8)"}
    assert _start(only_fp32, {"knobs.precision": "fp32", "knobs.batch_size": 8}, CPU) is None, "tf32: no CPU gain"
