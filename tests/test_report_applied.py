"""The recipe applied to one's own script: two own models are "swept" here (their batch size, each configuration
measured five times, interleaved, through the package's ``TrainStep``, one torch thread as ``cpu_threads`` says),
the report states each recipe's speed-up with its interval and the thread count it was measured at; a plain
training loop of one's own, at that thread count with the recipe's batch size, then measures a speed-up inside the
stated interval (the median of five back-to-back pairs, so one load spike of a shared CPU moves one pair). All in
this process, in seconds."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from report_rows import frame, row
from torch import nn

from workloads import common

MIN_S = 0.05  # measured seconds per measurement (after 3 warm-up steps)
REPEATS = 5  # measurements of each configuration in the sweep
APPLIED = 5  # default / recipe pairs of one's own script, each pair measured back to back


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 10))


def convnet() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 12 * 12, 10))


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], dict[str, int]]] = {
    # name: (build, input shape of one sample, {"default": batch, "tuned": batch})
    "own-mlp": (mlp, (64,), {"default": 8, "tuned": 128}),
    "own-conv": (convnet, (1, 12, 12), {"default": 4, "tuned": 64}),
}


def samples_per_s(step: Callable[[], object], batch: int) -> tuple[float, float, int]:
    """(samples/s, step-time CV, steps) of ``step`` over at least ``MIN_S`` seconds of this thread's CPU time: with
    one torch thread the step runs in this thread, and the other test process on a shared 2-core machine (which
    stretches wall time by whatever it does meanwhile) moves neither the sweep's measurements nor the script's."""
    for _ in range(3):
        step()
    times: list[float] = []
    start = time.thread_time()
    while time.thread_time() - start < MIN_S:
        t0 = time.thread_time()
        step()
        times.append(time.thread_time() - t0)
    t = np.array(times)
    return batch / float(t.mean()), float(t.std() / t.mean()), len(t)


def sweep_step(name: str, batch: int) -> Callable[[], object]:
    """A trial of the own model through the package's knob helpers."""
    build, shape, _ = MODELS[name]
    torch.manual_seed(0)
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    knobs = {"precision": "fp32", "compile": "off", "grad_accum_steps": 1, "batch_size": batch}
    train = common.TrainStep(model, F.cross_entropy, opt, knobs, torch.device("cpu"))
    x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))
    return lambda: train((x, y))


def own_script_step(name: str, batch: int) -> Callable[[], object]:
    """One's own training loop, written by hand: what the recipe's lines are applied to."""
    build, shape, _ = MODELS[name]
    torch.manual_seed(1)
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))

    def step() -> None:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


@pytest.fixture
def one_thread():
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def test_an_applied_recipe_speeds_up_ones_own_script_within_the_stated_interval(one_thread) -> None:
    from sweeper.report.analysis import analyse
    from sweeper.report.recipe import recipe_of

    torch.set_num_threads(1)  # the sweep's trials: cpu_threads=1
    rows, trial = [], 0
    for _ in range(REPEATS):  # interleaved: each model's two configurations, again and again
        for name, (_b, _s, batches) in MODELS.items():
            for which in ("default", "tuned"):
                value, cv, steps = samples_per_s(sweep_step(name, batches[which]), batches[which])
                rows.append(
                    row(
                        name,
                        trial,
                        {"batch_size": batches[which]},
                        value,
                        workload=name,
                        defaults={"batch_size": batches["default"]},
                        module="own_models.py",
                        metrics={"cpu_threads": 1, "step_cv": cv, "steps_measured": steps},
                    )
                )
                trial += 1
    df = frame(rows)
    recipes = {}
    for name in MODELS:
        study = df[df["workload"] == name].reset_index(drop=True)
        r = recipe_of(analyse(study), study)
        assert r is not None and r.knobs == {"batch_size": MODELS[name][2]["tuned"]}, r
        assert r.conditions["cpu_threads"] == 1 and r.lines[0].startswith("torch.set_num_threads(1)")
        assert r.speedup is not None and r.speedup_lo is not None and r.speedup_hi is not None, r
        recipes[name] = r

    torch.set_num_threads(recipes["own-mlp"].conditions["cpu_threads"])  # as the recipe's first line says
    measured: dict[str, list[tuple[float, float]]] = {name: [] for name in MODELS}
    for _ in range(APPLIED):  # the own script, default and with the recipe, interleaved
        for name, (_b, _s, batches) in MODELS.items():
            tuned = recipes[name].knobs["batch_size"]
            base, _cv, _n = samples_per_s(own_script_step(name, batches["default"]), batches["default"])
            new, _cv, _n = samples_per_s(own_script_step(name, tuned), tuned)
            measured[name].append((base, new))
    for name, pairs in measured.items():
        r = recipes[name]
        speedup = float(np.median([n / b for b, n in pairs]))  # a load spike on the shared CPU moves one pair
        print(f"{name}: stated {r.speedup:.2f}x ({r.speedup_lo:.2f}-{r.speedup_hi:.2f}), applied {speedup:.2f}x")
        assert r.speedup_lo <= speedup <= r.speedup_hi, (name, speedup, r.speedup, r.speedup_lo, r.speedup_hi)
