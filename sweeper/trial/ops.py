"""The size of a training step's graph, as a compile sees it: ``graph_ops``, counted in one eager warm-up step.

A cold ``torch.compile`` of a step costs about the same per distinct operation it lowers (Inductor generates,
compiles and caches a kernel per distinct fused group; a block repeated with the same shapes reuses its kernels),
so the count prices a model's first compile before the study has measured one (``sweeper.sweep.search.costs``).
It is not a multiple of the eager step's time: a ViT-B/16 (110 distinct operations) and a DeepLabV3-MobileNetV3
(351) compile in ~30 s and ~140 s on one H200 host whatever their batch.

What counts: each ATen operation the step dispatches (forward, backward, the loss), told apart by its name and its
tensor inputs' shapes and dtypes; a ``torch.optim`` optimizer's step (its profiler region) and any multi-tensor or
fused kernel (``_foreach_*``, ``_fused_*``) are left out: ``torch.compile`` of a model's step leaves the optimizer
eager. Counted with PyTorch's dispatch-mode
hook (``TorchDispatchMode``, what ``torch.utils.flop_counter`` is built on): one Python call per operation, a few
milliseconds for a step of thousands, in the first step (lazy initialization's and compilation's place, outside the
measured window).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

LEFT_OUT = ("_foreach_", "_fused_")  # the optimizer's kernels: not in a compiled model's graph
OPTIMIZER_REGION = "Optimizer."  # torch.optim's profiler regions ("Optimizer.step#AdamW.step"): left out whole


def _signature(func: Any, args: tuple, kwargs: dict) -> tuple:
    shapes = []
    for a in (*args, *kwargs.values()):
        for t in a if isinstance(a, (list, tuple)) else (a,):
            if isinstance(t, torch.Tensor):
                shapes.append((tuple(t.shape), t.dtype))
    return (str(func), tuple(shapes))


def count_ops(step: Callable[[], Any]) -> tuple[Any, int | None]:
    """Run ``step()`` once under an operation counter; its result and the distinct operations it dispatched. A step
    that raises under the counter (one the workload compiled itself may refuse the mode) gives ``(None, None)``: the
    caller runs it again without the counter, where a step that fails on its own fails again."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[tuple] = set()
    regions: list[bool] = []  # the profiler regions open now: whether each is an optimizer's

    class _Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            kwargs = kwargs or {}
            name = func.overloadpacket.__name__
            if func.namespace == "profiler":  # torch.optim marks its step and zero_grad as profiler regions
                if name == "_record_function_enter_new":
                    regions.append(bool(args) and str(args[0]).startswith(OPTIMIZER_REGION))
                elif name == "_record_function_exit" and regions:
                    regions.pop()
            elif not any(regions) and not name.startswith(LEFT_OUT):
                seen.add(_signature(func, args, kwargs))
            return func(*args, **kwargs)

    try:
        with _Counter():
            out = step()
    except Exception:  # noqa: BLE001 (the mode's failure, or the step's own: the next step shows the latter)
        return None, None
    return out, len(seen)
