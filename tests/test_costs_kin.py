"""The cost model where a compile finds its kernels built by another mode of the same graph (``KERNEL_KIN``):
``reduce-overhead`` after ``default`` misses Inductor's graph cache but builds no kernel, so it pays its cold
compile less the first's wait for its kernels (``kernel_wait_s``). The numbers are ResNet-50's on an H100
(2026-12-07): default's compilers 45 s cold, reduce-overhead after it 28 s; a warm repeat 5 s."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from sweeper.sweep.config.settings import KnobSweeperConf
from sweeper.sweep.search.costs import KERNEL_KIN, CostModel

STEP_S = 0.1
SETUP_S = 3.0


def _model() -> CostModel:
    s = KnobSweeperConf()
    return CostModel({"knobs.compile": "off"}, s.cost_prior, measure={"warmup_steps": 5, "steps": 20})


def _trial(study: optuna.Study, mode: str, batch: int, compiler: float, wait: float | None) -> None:
    """A trial whose first step took ``compiler`` seconds compiling, ``wait`` of them waiting for its kernels."""
    params = {"knobs.compile": mode, "knobs.batch_size": batch, "knobs.precision": "fp16"}
    excess = compiler + 0.5 if mode != "off" else 0.5  # lazy initialization beyond the compile
    first = excess + STEP_S
    attrs = {"status": "complete", "setup_s": SETUP_S, "first_step_s": first, "compile_s": excess,
             "compiler_s": compiler if mode != "off" else 0.0, "measured_s": 20 * STEP_S,
             "step_ms_mean": STEP_S * 1e3, "warmup_steps": 5, "steps_measured": 20,
             "wall_s": SETUP_S + first + 24 * STEP_S}  # fmt: skip
    if wait is not None:
        attrs["kernel_wait_s"] = wait
    dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
    study.add_trial(create_trial(params=params, distributions=dists, values=[5000.0], user_attrs=attrs))


def _compile(model: CostModel, study: optuna.Study, mode: str, batch: int) -> float:
    return model.phases(study, {"knobs.compile": mode, "knobs.batch_size": batch, "knobs.precision": "fp16"})["compile"]


def _study(wait: float | None) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    _trial(study, "off", 512, 0.0, 0.0)
    _trial(study, "default", 512, 45.0, wait)
    return study


def test_a_mode_of_the_same_kernels_on_a_compiled_graph_pays_the_cold_compile_less_the_kernels_wait() -> None:
    model, study = _model(), _study(wait=17.0)
    kin = _compile(model, study, "reduce-overhead", 512)
    assert kin == pytest.approx(45.0 - 17.0 + 0.5, abs=0.6), "the kernels were built: 28 s, not the cold 45 s"
    uncounted = _compile(model, _study(wait=None), "reduce-overhead", 512)
    assert uncounted > 40.0, "a row without the wait is priced as before (the cold compile's prior)"


def test_another_graph_or_a_mode_of_other_kernels_builds_its_kernels() -> None:
    model, study = _model(), _study(wait=17.0)
    assert _compile(model, study, "reduce-overhead", 1024) > 40.0, "batch 1024: another graph, its kernels unbuilt"
    autotuned = _compile(model, study, "max-autotune-no-cudagraphs", 512)
    assert autotuned > 45.0, "max-autotune builds (and tunes) other kernels"


def test_a_compile_that_found_its_kernels_built_prices_other_graphs_as_the_cold_compile_it_would_have_been() -> None:
    """reduce-overhead measured at 28 s after default built its kernels: reduce-overhead on a graph nothing compiled
    (batch 1024) takes the 45 s it would have cost cold, not 28 s; on a graph default compiled too, 28 s again."""
    model, study = _model(), _study(wait=17.0)
    _trial(study, "reduce-overhead", 512, 28.0, 0.4)
    _trial(study, "default", 1024, 46.0, 17.5)
    assert _compile(model, study, "reduce-overhead", 256) == pytest.approx(28.0 + 17.0, abs=1.0)
    assert _compile(model, study, "reduce-overhead", 1024) == pytest.approx(46.0 - 17.5 + 0.5, abs=0.6)


def test_the_kin_groups_are_torch_compiles_modes_that_differ_only_in_cuda_graphs() -> None:
    """``KERNEL_KIN`` read off PyTorch's own table of its modes' Inductor options: its groups are exactly the modes
    whose options are the same but for ``triton.cudagraphs`` (a mode alone in its group, ``lite``, has no kin)."""
    from torch._inductor import list_mode_options

    groups: dict[str, set[str]] = {}
    for mode, options in list_mode_options().items():
        rest = {k: v for k, v in options.items() if k != "triton.cudagraphs"}
        groups.setdefault(repr(sorted(rest.items())), set()).add(mode)
    kin = sorted(sorted(g) for g in groups.values() if len(g) > 1)
    assert kin == sorted(sorted(g) for g in KERNEL_KIN["compile"])
