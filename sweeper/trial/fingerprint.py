"""Hardware/software fingerprint of the machine a trial ran on: the columns that let nights and GPUs be compared."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ranges(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the cores this trial process may run on)."""
    out, i = [], 0
    while i < len(cores):
        j = i
        while j + 1 < len(cores) and cores[j + 1] == cores[j] + 1:
            j += 1
        out.append(str(cores[i]) if i == j else f"{cores[i]}-{cores[j]}")
        i = j + 1
    return ",".join(out)


def fingerprint(device_kind: str) -> dict[str, Any]:
    """GPU model/count/compute capability/driver, CUDA and torch versions, CPU model and cores, hostname."""
    import torch

    fp: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_cores": len(os.sched_getaffinity(0)),
        "cpu_affinity": _ranges(sorted(os.sched_getaffinity(0))),
        "torch_version": str(torch.__version__),  # a TorchVersion would import torch where unpickled
        "cuda_version": torch.version.cuda or "",
        "python_version": platform.python_version(),
        "device": device_kind,
        "gpu_name": "",
        "gpu_count": 0,
        "gpu_cc": "",
        "gpu_mem_bytes": None,
        "driver_version": "",
        "gpu_indices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }
    if device_kind == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        fp.update(gpu_name=props.name, gpu_count=torch.cuda.device_count(), gpu_cc=f"{props.major}.{props.minor}",
                  gpu_mem_bytes=int(props.total_memory))
        try:
            import pynvml

            pynvml.nvmlInit()
            drv = pynvml.nvmlSystemGetDriverVersion()
            fp["driver_version"] = drv if isinstance(drv, str) else drv.decode()
        except Exception:
            pass
    return fp
