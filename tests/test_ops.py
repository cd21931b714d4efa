"""The graph's size a compile lowers (sweeper/trial/ops.py): distinct operations of one eager step, counted in the
warm-up (``graph_ops``), outside every timed number."""

from __future__ import annotations

import math

import torch
from torch import nn

from sweeper.trial.measure import measure
from sweeper.trial.ops import count_ops
from workloads.base import Workload

CPU = torch.device("cpu")


def _training(widths: list[int], optimizer: bool = True) -> Workload:
    """A stack of Linear + ReLU layers trained with AdamW (foreach), one fixed batch."""
    torch.manual_seed(0)
    model = nn.Sequential(*(m for a, b in zip(widths, widths[1:]) for m in (nn.Linear(a, b), nn.ReLU())))
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    x = torch.randn(4, widths[0])

    def step(_batch: object) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        if optimizer:
            opt.step()
        return loss

    return Workload(step=step, samples_per_step=4.0)


def _ops(work: Workload) -> int | None:
    return count_ops(lambda: work.step(None))[1]  # the first step: the optimizer's state is created in its region


def test_a_block_repeated_with_the_same_shapes_adds_no_operation_and_a_new_shape_does() -> None:
    """Inductor lowers one kernel per distinct fused group: eight identical layers are the graph of two, three of
    different widths a larger one."""
    two, eight = _ops(_training([16, 16, 16])), _ops(_training([16] * 9))
    assert two == eight and two > 0
    assert _ops(_training([16, 32, 64, 16])) > two


def test_the_optimizers_multi_tensor_kernels_are_left_out() -> None:
    """A compile of the model's step leaves the optimizer eager: its _foreach_ kernels are not counted."""
    assert _ops(_training([16, 32, 16])) == _ops(_training([16, 32, 16], optimizer=False))


def test_a_step_that_refuses_the_counter_gives_none_and_the_count_is_not_made_up() -> None:
    def refuses() -> None:
        raise RuntimeError("this step cannot run under a dispatch mode")

    assert count_ops(refuses) == (None, None)


def test_measure_records_graph_ops_only_when_asked_and_the_window_stays_the_steps_time() -> None:
    counted = measure(_training([16, 32, 16]), CPU, warmup_steps=2, steps=5, count_ops=True)
    assert counted["graph_ops"] == _ops(_training([16, 32, 16]))
    assert counted["warmup_steps"] == 2, "the counted step is the first one: no step is added"
    plain = measure(_training([16, 32, 16]), CPU, warmup_steps=2, steps=5)
    assert math.isnan(plain["graph_ops"])


def test_a_first_step_that_refuses_the_counter_runs_again_without_it() -> None:
    calls: list[bool] = []

    def step(_batch: object) -> torch.Tensor:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        counted = _get_current_dispatch_mode() is not None
        calls.append(counted)
        if counted:
            raise RuntimeError("this step cannot run under a dispatch mode")
        return torch.ones(())

    m = measure(Workload(step=step, samples_per_step=1.0), CPU, warmup_steps=2, steps=3, count_ops=True)
    assert calls[:2] == [True, False] and not any(calls[2:])
    assert math.isnan(m["graph_ops"]) and m["loss_finite"]
