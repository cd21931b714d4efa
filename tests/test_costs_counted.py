"""The cost model where compiled trials counted their compilers' seconds (``compiler_s``): the rest of a compiled
first step (cuDNN's benchmark, lazy initialization) is what the configuration pays eager, so a compile priced from
another configuration takes the compilers' seconds from it and the rest from what the target pays eager. The
numbers are DeepLabV3's on an H100 (2026-12-05): the benchmark ~84 s at batch 128, its compilers ~65 s, ~1 s of
first step without the benchmark."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from sweeper.sweep.config.settings import KnobSweeperConf
from sweeper.sweep.search.costs import CostModel

STEP_S = 0.3


def _model(neutral: frozenset[str] = frozenset()) -> CostModel:
    return CostModel({"knobs.compile": "off"}, KnobSweeperConf().cost_prior, neutral=neutral)


def _trial(study: optuna.Study, compile_mode: str, benchmark: bool, excess: float, compiler: float | None) -> None:
    """A trial of batch 128 whose first step took ``excess`` beyond a step, ``compiler`` of it compiling."""
    params = {"knobs.compile": compile_mode, "knobs.cudnn_benchmark": benchmark, "knobs.batch_size": 128}
    first = excess + STEP_S
    attrs = {"status": "complete", "setup_s": 8.0, "first_step_s": first, "compile_s": excess,
             "measured_s": 20 * STEP_S, "step_ms_mean": STEP_S * 1e3, "warmup_steps": 5, "steps_measured": 20,
             "wall_s": 8.0 + first + 24 * STEP_S}  # fmt: skip
    if compiler is not None:
        attrs["compiler_s"] = compiler
    dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
    study.add_trial(create_trial(params=params, distributions=dists, values=[400.0], user_attrs=attrs))


def _study() -> optuna.Study:
    """An eager trial with the benchmark on (84 s of first step) and a compiled one without it (65 s compiling)."""
    study = optuna.create_study(direction="maximize")
    _trial(study, "off", True, 84.0, None)
    _trial(study, "default", False, 66.0, 65.0)
    return study


TARGET = {"knobs.compile": "default", "knobs.cudnn_benchmark": True, "knobs.batch_size": 128}


def test_a_cold_compile_takes_the_compilers_seconds_and_what_the_target_pays_eager() -> None:
    """Priced as the nearest cold compile's whole first step, the benchmarked compile was 66 s; it pays the same
    compilers' 65 s and the 84 s benchmark its eager twin paid."""
    out = _model().phases(_study(), TARGET)
    assert out["compile"] == pytest.approx(65.0 + 84.0, rel=0.01), out
    uncounted = optuna.create_study(direction="maximize")
    _trial(uncounted, "off", True, 84.0, None)
    _trial(uncounted, "default", False, 66.0, None)
    assert _model().phases(uncounted, TARGET)["compile"] == pytest.approx(66.0, rel=0.01), "uncounted: as before"


def test_a_warm_compile_of_a_neighbour_pays_what_it_pays_eager_beyond_the_caches_share() -> None:
    """A knob the compiled graph does not see (here declared so, as a study can learn cuDNN's benchmark to be) puts
    the target on the cached graph: it pays the warm share of the compilers' 65 s and its own eager first step's
    84 s, not the 1 s its cached neighbour paid beside them (9.5 s)."""
    out = _model(frozenset({"knobs.cudnn_benchmark"})).phases(_study(), TARGET)
    assert out["compile"] == pytest.approx(84.0 + 0.13 * 65.0, rel=0.01), out


def test_the_warm_share_is_learned_on_the_compilers_seconds_where_both_were_counted() -> None:
    """A warm repeat counted 6.5 of its compilers' seconds against the cold 65 (a share of 0.10); its first step's
    7.5 s against 66 would say 0.114, the benchmark-free rest counted twice."""
    study = _study()
    _trial(study, "default", False, 7.5, 6.5)  # the repeat: graphs cached
    out = _model(frozenset({"knobs.cudnn_benchmark"})).phases(study, TARGET)
    assert out["compile"] == pytest.approx(84.0 + 0.10 * 65.0, rel=0.005), out
