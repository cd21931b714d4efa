"""What NVML says about the GPU: device detection without CUDA, utilization sampling, clocks, and peak FLOP/s.

The sweeper process never initializes CUDA (``device_info`` reads NVML only); the trial process samples
utilization during its measured window in a background thread.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

from workloads.base import DeviceInfo

# Dense (no sparsity) peak TFLOP/s by precision. "fp32" is the plain FP32 rate (no tensor cores); "tf32" the
# tensor-core rate for float32 matmuls. Matched on the NVML name, first hit wins (specific names first).
PEAK_TFLOPS: list[tuple[str, dict[str, float], str]] = [
    # https://www.nvidia.com/en-us/data-center/h200/  (H200 SXM; NVL is lower, listed first)
    ("H200 NVL", {"fp32": 60.0, "tf32": 417.5, "fp16": 835.0, "bf16": 835.0},
     "https://www.nvidia.com/en-us/data-center/h200/"),
    ("H200", {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
     "https://www.nvidia.com/en-us/data-center/h200/"),
    # https://www.nvidia.com/en-us/data-center/h100/  (PCIe and NVL parts are slower than SXM)
    ("H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0},
     "https://www.nvidia.com/en-us/data-center/h100/"),
    ("H100 NVL", {"fp32": 60.0, "tf32": 417.5, "fp16": 835.0, "bf16": 835.0},
     "https://www.nvidia.com/en-us/data-center/h100/"),
    ("H100", {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
     "https://www.nvidia.com/en-us/data-center/h100/"),
    # https://www.nvidia.com/en-us/data-center/a100/  (SXM and PCIe share the tensor rates)
    ("A100", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
     "https://www.nvidia.com/en-us/data-center/a100/"),
    # https://www.nvidia.com/en-us/data-center/l4/  (datasheet tensor numbers are with sparsity: halved here)
    ("L4", {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0},
     "https://www.nvidia.com/en-us/data-center/l4/"),
    # Ada whitepaper, RTX 4090: FP16/BF16 tensor with FP32 accumulate (PyTorch's default)
    ("RTX 4090", {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2},
     "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"),
]


def _peak_entry(gpu_name: str | None) -> tuple[str, dict[str, float], str] | None:
    if not gpu_name:
        return None
    return next((entry for entry in PEAK_TFLOPS if entry[0].lower() in gpu_name.lower()), None)


def peak_tflops(gpu_name: str | None, precision: str) -> float:
    """Dense peak for this GPU and precision; NaN for an unknown GPU or the CPU (never a wrong peak)."""
    entry = _peak_entry(gpu_name)
    return entry[1].get(precision, math.nan) if entry else math.nan


def mfu_peak(gpu_name: str | None, precision: str, *, tf32_matmul: bool, tf32_conv: bool,
             conv_flops_frac: float = 0.0) -> tuple[float, str]:
    """(peak TFLOP/s, its short name) for the math that ran: the peak MFU is taken against.

    fp16/bf16: their tensor-core peak. Float32 (``fp32``, ``tf32``, ``fp32-strict``, as the workload sets
    PyTorch's flags): convolutions run on TF32 tensor cores where ``torch.backends.cudnn.allow_tf32`` (PyTorch's
    default), matmuls where ``torch.backends.cuda.matmul.allow_tf32``; ``conv_flops_frac`` of the FLOPs are
    convolutions. With a share ``s`` of the FLOPs allowed TF32 the peak is the time-weighted mean
    ``1 / (s / tf32 + (1 - s) / fp32)``: the time the step's FLOPs take at each rate. NaN and "" for an unknown GPU.
    """
    entry = _peak_entry(gpu_name)
    if entry is None:
        return math.nan, ""
    key, peaks, _source = entry
    sheet = f"{key} datasheet"
    if precision not in ("fp32", "tf32", "fp32-strict"):
        return peaks.get(precision, math.nan), f"{precision} tensor core ({sheet})"
    conv = min(max(float(conv_flops_frac or 0.0), 0.0), 1.0)
    share = (conv if tf32_conv else 0.0) + ((1.0 - conv) if tf32_matmul else 0.0)
    if share >= 0.999:
        return peaks["tf32"], f"tf32 tensor core ({sheet})"
    if share <= 0.001:
        return peaks["fp32"], f"fp32, no tensor cores ({sheet})"
    what = "convolutions" if tf32_conv and not tf32_matmul else "matmuls"
    peak = 1.0 / (share / peaks["tf32"] + (1.0 - share) / peaks["fp32"])
    return peak, f"tf32 tensor core for {share:.0%} of FLOPs ({what}), fp32 for the rest ({sheet})"


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no driver, no GPU, or no nvidia-ml-py: the CPU path
        return None


def _visible_handles(nv) -> list[Any]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    handles = []
    for tok in [t.strip() for t in visible.split(",") if t.strip()]:
        try:
            handles.append(nv.nvmlDeviceGetHandleByUUID(tok) if tok.startswith(("GPU-", "MIG-")) else
                           nv.nvmlDeviceGetHandleByIndex(int(tok)))
        except Exception:
            break  # CUDA stops enumerating at the first invalid entry; so do we
    return handles


def device_info() -> DeviceInfo:
    """The visible GPUs (respecting CUDA_VISIBLE_DEVICES), from NVML alone; ``kind='cpu'`` when there are none."""
    nv = _nvml()
    if nv is None:
        return DeviceInfo(kind="cpu")
    try:
        handles = _visible_handles(nv)
        if not handles:
            return DeviceInfo(kind="cpu")
        h = handles[0]
        name = nv.nvmlDeviceGetName(h)
        cc = tuple(nv.nvmlDeviceGetCudaComputeCapability(h))
        mem = nv.nvmlDeviceGetMemoryInfo(h).total
        return DeviceInfo(kind="cuda", name=name if isinstance(name, str) else name.decode(), count=len(handles),
                          compute_capability=(int(cc[0]), int(cc[1])), memory_bytes=int(mem))
    except Exception:
        return DeviceInfo(kind="cpu")


MIN_WINDOW_S = 1.0  # measured windows shorter than this get no gpu_util (see UtilizationSampler.stop)

_THROTTLE_BITS = {
    0x1: "gpu_idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
    0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks",
}


class UtilizationSampler:
    """Samples NVML GPU utilization every ``interval_s`` between ``start()`` and ``stop()`` (a daemon thread).

    ``stop()`` returns ``gpu_util_mean``/``gpu_util_p10`` (percent) over the window, plus clocks, temperature,
    power and throttle reasons read at the end of the window. Empty dict on the CPU.
    """

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self._nv = _nvml()
        handles = _visible_handles(self._nv) if self._nv else []
        self._h = handles[0] if handles else None
        self._samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._h is None:
            return
        self._t0 = time.perf_counter()
        self._samples.clear()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._samples.append(int(self._nv.nvmlDeviceGetUtilizationRates(self._h).gpu))
            except Exception:
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> dict[str, Any]:
        if self._h is None or self._thread is None:
            return {}
        self._stop.set()
        self._thread.join()
        # NVML's utilization is the busy share of its own sample period (up to ~1 s, driver-defined): samples from
        # a shorter window still describe the time before it, so they are not reported.
        s = sorted(self._samples) if time.perf_counter() - self._t0 >= MIN_WINDOW_S else []
        out: dict[str, Any] = {
            "gpu_util_mean": sum(s) / len(s) if s else math.nan,
            "gpu_util_p10": s[int(0.1 * (len(s) - 1))] if s else math.nan,
            "gpu_util_samples": len(s),
        }
        out.update(self.environment())
        return out

    def environment(self) -> dict[str, Any]:
        """Clocks (MHz), temperature (C), power (W) and active throttle reasons, read now."""
        nv, h, out = self._nv, self._h, {}
        reads = {
            "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "gpu_temp_c": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "power_w": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
        }
        for key, read in reads.items():
            try:
                out[key] = read()
            except Exception:
                out[key] = math.nan
        try:
            bits = nv.nvmlDeviceGetCurrentClocksEventReasons(h)
        except Exception:
            try:
                bits = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            except Exception:
                bits = None
        out["throttle_reasons"] = "" if bits is None else ",".join(n for b, n in _THROTTLE_BITS.items() if bits & b)
        return out
