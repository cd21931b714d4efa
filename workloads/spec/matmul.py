"""matmul's knobs (:class:`MatmulKnobs`) and its check before launch. Torch-free: read by the sweeper process."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from workloads.base import DeviceInfo

Dtype = Literal["fp32", "tf32", "fp16", "bf16"]
DTYPES: tuple[str, ...] = typing.get_args(Dtype)


@dataclasses.dataclass(frozen=True)
class MatmulKnobs:
    """The GEMM's operand dtype and cuBLAS flags."""

    dtype: Dtype = "bf16"
    """Operand dtype; tf32 is float32 operands on TF32 tensor cores."""
    allow_tf32: bool = False
    """Let fp32 matmuls use TF32 tensor cores (``torch.backends.cuda.matmul.allow_tf32``)."""
    fp16_reduced_precision: bool = True
    """``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction``."""
    bf16_reduced_precision: bool = True
    """``torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction``."""
    transpose_a: bool = False
    """A given as a transposed view (column-major)."""
    transpose_b: bool = False
    """B given as a transposed view (column-major)."""


Knobs = MatmulKnobs


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    """Why this configuration cannot run on ``device`` (skipped before launch), or None."""
    dtype = cfg["knobs"]["dtype"]
    cc = device.compute_capability
    if device.kind == "cuda" and cc is not None and dtype in ("bf16", "tf32") and cc < (8, 0):
        return f"{dtype} matmul needs compute capability >= 8.0, {device.name} has {cc[0]}.{cc[1]}"
    return None
