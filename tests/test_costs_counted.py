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

from sweeper.sweep.config.settings import KnobSweeperConf, graph_neutral
from sweeper.sweep.search.costs import CostModel

STEP_S = 0.3


def _model(neutral: frozenset[str] = frozenset()) -> CostModel:
    return CostModel({"knobs.compile": "off"}, KnobSweeperConf().cost_prior, neutral=neutral)


def _trial(
    study: optuna.Study, compile_mode: str, benchmark: bool, excess: float, compiler: float | None, **counted: int
) -> None:
    """A trial of batch 128 whose first step took ``excess`` beyond a step, ``compiler`` of it compiling (and
    Inductor's cache counters, where given)."""
    params = {"knobs.compile": compile_mode, "knobs.cudnn_benchmark": benchmark, "knobs.batch_size": 128}
    first = excess + STEP_S
    attrs = {"status": "complete", "setup_s": 8.0, "first_step_s": first, "compile_s": excess,
             "measured_s": 20 * STEP_S, "step_ms_mean": STEP_S * 1e3, "warmup_steps": 5, "steps_measured": 20,
             "wall_s": 8.0 + first + 24 * STEP_S}  # fmt: skip
    if compiler is not None:
        attrs["compiler_s"] = compiler
    attrs.update(counted)
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


WARM = {"compile_cache_hits": 2, "compile_cache_misses": 0}
COLD = {"compile_cache_hits": 0, "compile_cache_misses": 2}


def _lstm(warm: bool = True) -> optuna.Study:
    """A 2-layer LSTM's compiles on an H100 (2026-12-05): default cold 2.9 s (2.67 s compiling), max-autotune cold
    14.36 s (14.12 s compiling: its autotuning), and default again with the benchmark changed, from the cache: 1.65 s
    (1.40 s compiling)."""
    study = optuna.create_study(direction="maximize")
    _trial(study, "off", True, 0.3, None)
    _trial(study, "default", True, 2.9, 2.67, **COLD)
    _trial(study, "max-autotune", True, 14.36, 14.12, **COLD)
    if warm:
        _trial(study, "default", False, 1.65, 1.40, **WARM)
    return study


def test_a_warm_compile_pays_the_warm_compilers_seconds_measured_not_a_share_of_its_modes_cold_one() -> None:
    """A warm compile traces the graph and loads its kernels whatever the mode; what the cache saves is the mode's
    own compiling (max-autotune's autotuning). Max-autotune from the cache took 1.9 s in that sweep; the share
    the default mode's warm compile showed (1.40 / 2.67) priced it 0.52 x 14.12 = 7.4 s."""
    target = {"knobs.compile": "max-autotune", "knobs.cudnn_benchmark": False, "knobs.batch_size": 128}
    out = _model(frozenset({"knobs.cudnn_benchmark"})).phases(_lstm(), target)
    assert out["compile"] == pytest.approx(0.24 + 1.40, abs=0.1), out
    study = _lstm()  # a warm compile of its own class measured: that one's seconds
    _trial(study, "max-autotune", False, 1.90, 1.63, **WARM)
    out = _model(frozenset({"knobs.cudnn_benchmark"})).phases(study, {**target, "knobs.cudnn_benchmark": True})
    assert out["compile"] == pytest.approx(0.3 + 1.63, abs=0.1), out


def test_cudnns_benchmark_is_declared_graph_neutral_by_default() -> None:
    """cuDNN's benchmark picks an algorithm as the kernel runs; Inductor's cache key leaves the flag out: the
    LSTM's max-autotune with it off after a cold compile with it on found the cache warm (1.9 s for 14.4 s). A
    default sweep prices that change warm before measuring one; declaring nothing prices it cold."""
    study = _lstm(warm=False)
    target = {"knobs.compile": "max-autotune", "knobs.cudnn_benchmark": False, "knobs.batch_size": 128}
    assert "knobs.cudnn_benchmark" in graph_neutral(KnobSweeperConf())
    assert _model(graph_neutral(KnobSweeperConf())).phases(study, target)["compile"] < 0.2 * 14.36
    assert _model().phases(study, target)["compile"] >= 14.0


def test_an_eager_first_step_is_priced_from_one_of_its_precision_first() -> None:
    """cuDNN's and cuBLAS's kernels differ by dtype: DeepLabV3's eager first step without the benchmark took 0.5-1.3 s
    beyond a step in fp32 and 4.5-5.3 s in fp16 on an H100 (2026-12-05 to 12-07, batch 16-64). An fp16 configuration
    is priced from the measured fp16 one, not from the fp32 defaults it shares more other knob values with."""
    study = optuna.create_study(direction="maximize")
    measured = (("fp32", "contiguous", "foreach", 0.6), ("fp16", "channels_last", "fused", 4.6))
    for precision, layout, optimizer, excess in measured:
        params = {"knobs.compile": "off", "knobs.precision": precision, "knobs.memory_format": layout,
                  "knobs.optimizer_impl": optimizer, "knobs.cudnn_benchmark": False,
                  "knobs.batch_size": 16}  # fmt: skip
        attrs = {"status": "complete", "setup_s": 1.0, "first_step_s": excess + STEP_S, "compile_s": 0.0,
                 "measured_s": 20 * STEP_S, "step_ms_mean": STEP_S * 1e3, "warmup_steps": 5, "steps_measured": 20,
                 "wall_s": 1.0 + excess + 25 * STEP_S}  # fmt: skip
        dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
        study.add_trial(create_trial(params=params, distributions=dists, values=[200.0], user_attrs=attrs))
    target = {**study.trials[0].params, "knobs.precision": "fp16"}
    assert _model().phases(study, target)["compile"] == pytest.approx(4.6, rel=0.01)
