"""The cost model where a compiled trial primed cuDNN's benchmark from an eager copy while it compiled
(``workloads.prime``; its row's ``prime_s``): the benchmark then hides in the compile's seconds, and a first step's
rest beyond the compilers no longer says what the configuration pays eager. The numbers are DeepLabV3-MobileNetV3's
at batch 128, bf16, on an H100 (2026-12-06): the sweep's primed compiled start spent 95.1 s in its first step, 79.6 s
of it counted by the compilers; the same model's priming took 54.9 s in the bench's primed arm; the eager twin's
first step then took 59.4 s (priced 34.2 s), and the start's warm repeat was cut by the budget after 68.7 s (priced
51.6 s)."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from sweeper.sweep.config.settings import KnobSweeperConf, graph_neutral
from sweeper.sweep.search.costs import CostModel

STEP_S = 0.297
PRIMED = {"knobs.compile": "default", "knobs.cudnn_benchmark": True, "knobs.batch_size": 128, "knobs.precision": "bf16",
          "knobs.optimizer_impl": "fused"}  # fmt: skip
EAGER_TWIN = {**PRIMED, "knobs.compile": "off"}


def _model() -> CostModel:
    return CostModel({"knobs.compile": "off"}, KnobSweeperConf().cost_prior, neutral=graph_neutral(KnobSweeperConf()))


def _trial(study: optuna.Study, params: dict, excess: float, compiler: float, prime: float | None = None) -> None:
    """A trial whose first step took ``excess`` beyond a step, ``compiler`` of it compiling, ``prime`` the priming's
    thread (None: no priming)."""
    first = excess + STEP_S
    attrs = {"status": "complete", "setup_s": 6.6, "first_step_s": first, "compile_s": excess, "compiler_s": compiler,
             "measured_s": 20 * STEP_S, "step_ms_mean": STEP_S * 1e3, "warmup_steps": 26, "steps_measured": 20,
             "wall_s": 6.6 + first + 45 * STEP_S}  # fmt: skip
    if prime is not None:
        attrs["prime_s"] = prime
    dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
    study.add_trial(create_trial(params=params, distributions=dists, values=[431.0], user_attrs=attrs))


def _study(prime: float | None = 54.9) -> optuna.Study:
    """The defaults (eager, no benchmark, batch 16: 0.6 s of first step) and the primed compiled start."""
    study = optuna.create_study(direction="maximize")
    _trial(study, {**PRIMED, "knobs.compile": "off", "knobs.cudnn_benchmark": False, "knobs.batch_size": 16}, 0.6, 0.0)
    _trial(study, PRIMED, 94.8, 79.6, prime)
    return study


def test_an_eager_twins_first_step_is_priced_from_the_priming_not_the_rest_beyond_the_compilers() -> None:
    """The start's first step less its compilers' seconds is 15.2 s: the wait for the copy, not the benchmark. Its
    eager twin pays the benchmark itself (59.4 s measured): priced from the priming's 54.9 s, within 10 %."""
    assert _model().phases(_study(), EAGER_TWIN)["compile"] == pytest.approx(59.4, rel=0.1)
    unrecorded = _model().phases(_study(prime=None), EAGER_TWIN)["compile"]
    assert unrecorded == pytest.approx(94.8 - 79.6, rel=0.01), "a row without prime_s is priced as before"


def test_a_warm_repeat_of_a_primed_configuration_pays_the_priming_again() -> None:
    """No cache holds cuDNN's choices across processes: the repeat primes again (54.9 s) while its compile finds
    Inductor's cache warm, and the budget cut it after 68.7 s of wall; priced above that, not at the 51.6 s that
    let it start with 62 s left."""
    study = _study()
    repeat = _model().predict_repeat(study, PRIMED)
    assert repeat > 68.7
    assert _model().predict_repeat(_study(prime=None), PRIMED) < 68.7, "the rest beyond the compilers alone"


def test_a_cold_compile_priced_from_a_primed_one_does_not_add_the_benchmark_after_the_compile() -> None:
    """fp16 beside the primed bf16 start (another graph: a cold compile), with the eager twin measured (59.4 s):
    the primed start's whole first step (94.8 s) and the little the twin's benchmark took beyond the priming, not
    the compilers' 79.6 s and the twin's 59.4 s in series (139 s)."""
    study = _study()
    _trial(study, EAGER_TWIN, 59.4, 0.0)
    fp16 = {**PRIMED, "knobs.precision": "fp16"}
    assert _model().phases(study, fp16)["compile"] == pytest.approx(94.8 + (59.4 - 54.9), rel=0.02)
    not_benchmarked = {**fp16, "knobs.cudnn_benchmark": False}
    assert _model().phases(study, not_benchmarked)["compile"] < 94.8, "no benchmark, no priming: the compilers'"


def test_the_compiled_graph_without_the_benchmark_pays_no_priming() -> None:
    """cuDNN's benchmark off leaves the graph alone (graph-neutral: a warm compile on the primed start's graph) and
    primes nothing: the warm share of the compilers' seconds and at most the start's 15 s wait for its copy, not the
    copy's 54.9 s."""
    target = {**PRIMED, "knobs.cudnn_benchmark": False}
    assert _model().phases(_study(), target)["compile"] < 0.13 * 79.6 + 15.5 + 1.0


def test_a_primed_warm_compile_is_recognised_by_its_compilers_seconds() -> None:
    """A graph-neutral change of the primed start (the optimizer's implementation) compiled warm (10 s in its
    compilers) but its first step waited for the copy (61 s, over half the cold 95 s): rows without the cache's
    counters are read by the compilers' seconds, so the knob stays graph-neutral and the next such change is priced
    warm (the priming and a warm compile, ~65 s), not as a cold compile (95 s)."""
    study = _study()
    _trial(study, {**PRIMED, "knobs.optimizer_impl": "foreach"}, 61.4, 10.3, 54.9)
    target = {**PRIMED, "knobs.optimizer_impl": "for_loop"}
    assert _model().phases(study, target)["compile"] < 70.0


def _resnet_study() -> optuna.Study:
    """ResNet-50 on an H100 (2026-12-07): the defaults, then the primed compiled start at fp16, batch 1024 (a first
    step's excess of 52.3 s, 51.1 s of it its compilers', the priming 6.7 s beside them)."""
    study = optuna.create_study(direction="maximize")
    start = {**PRIMED, "knobs.precision": "fp16", "knobs.batch_size": 1024}
    _trial(study, {**start, "knobs.compile": "off", "knobs.cudnn_benchmark": False, "knobs.batch_size": 256}, 0.5, 0.0)
    _trial(study, start, 52.3, 51.1, 6.7)
    return study


def test_a_warm_repeat_primes_beside_its_compile_not_after_it() -> None:
    """The start's repeat found Inductor's cache warm: its compilers counted 6.0 s (the wait for the copy among
    them), the priming 6.0 s, its first step's excess 7.3 s. Priced as the priming and the warm compile side by side
    and the graph's 1.2 s after them, within 30 %; the two in series (13.4 s) are not."""
    study = _resnet_study()
    start = study.trials[1].params
    assert _model().phases(study, start, repeat=True)["compile"] == pytest.approx(7.3, rel=0.3)
    assert _model().phases(study, start, repeat=True)["compile"] < 0.13 * 51.1 + 6.7


def test_a_graph_neutral_change_of_a_primed_warm_compile_pays_what_that_one_paid() -> None:
    """After the warm repeat (7.3 s: 6.0 s counted by its compilers, 6.0 s priming), another optimizer on the same
    graph, batch and benchmark is priced at the repeat's measured excess, not its compilers' seconds and its
    priming added (12 s)."""
    study = _resnet_study()
    start = study.trials[1].params
    _trial(study, start, 7.3, 6.0, 6.0)
    target = {**start, "knobs.optimizer_impl": "foreach"}
    assert _model().phases(study, target)["compile"] == pytest.approx(7.3, rel=0.05)
