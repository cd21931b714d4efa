"""C = A @ B for configurable M, N, K and dtype; throughput in TFLOP/s.

Knobs: dtype (fp32, tf32, fp16, bf16), allow_tf32, the fp16/bf16 reduced-precision-reduction flags,
transposed operands. Inputs rotate over ``buffers`` sets so that repeated steps do not time the L2 cache.
"""

from __future__ import annotations

from typing import Any

import torch

from workloads.base import Workload
from workloads.spec.matmul import Knobs, MatmulKnobs, check  # noqa: F401 (the workload's contract)
from workloads.spec.typed import of

_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    p, knobs = cfg["workload"], of(MatmulKnobs, cfg["knobs"])
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    dtype_name = knobs.dtype
    if dtype_name not in _DTYPES:
        raise ValueError(f"knobs.dtype must be one of {tuple(_DTYPES)}, got {dtype_name!r}")
    dtype = _DTYPES[dtype_name]
    torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32" or knobs.allow_tf32
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = knobs.fp16_reduced_precision
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = knobs.bf16_reduced_precision

    torch.manual_seed(0)
    n_buf = max(1, int(p.get("buffers", 1)))

    def operand(rows: int, cols: int, transposed: bool) -> torch.Tensor:
        # Random data drawn on the device (zeros would time faster than real data); fp32 first, then cast.
        shape = (cols, rows) if transposed else (rows, cols)
        t = torch.randn(shape, device=device, dtype=torch.float32).to(dtype)
        return t.t() if transposed else t  # a transposed view: the GEMM reads it column-major

    bufs = [
        (operand(m, k, knobs.transpose_a), operand(k, n, knobs.transpose_b))
        for _ in range(n_buf)
    ]
    out = torch.empty((m, n), device=device, dtype=dtype)
    counter = [0]

    def step(_batch: Any) -> None:
        a, b = bufs[counter[0] % n_buf]
        counter[0] += 1
        torch.matmul(a, b, out=out)

    flops = 2.0 * m * n * k
    return Workload(
        step=step, samples_per_step=flops / 1e12, flops_per_step=flops, throughput_unit="TFLOP/s", precision=dtype_name
    )


# ---------------------------------------------------------------- recipe snippets (sweeper.report --recipe)
RECIPE = {  # a literal, read from the source by the report (see workloads.common.RECIPE for the spelling)
    "dtype": {
        "tf32": ["torch.backends.cuda.matmul.allow_tf32 = True"],
        "tf32@cpu": [],
        "bf16": ["a, b = a.bfloat16(), b.bfloat16()"],
        "fp16": ["a, b = a.half(), b.half()"],
    },
    "allow_tf32": {"true": ["torch.backends.cuda.matmul.allow_tf32 = True"], "true@cpu": []},
    "fp16_reduced_precision": {
        "true": ["torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True"],
        "false": ["torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False"],
        "*@cpu": [],
    },
    "bf16_reduced_precision": {
        "true": ["torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True"],
        "false": ["torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False"],
        "*@cpu": [],
    },
    "transpose_a": {"true": ["a = a.t().contiguous().t()  # column-major A"]},
    "transpose_b": {"true": ["b = b.t().contiguous().t()  # column-major B"]},
}
