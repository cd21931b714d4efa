"""A model's first compile is priced by the size of its graph (``graph_ops``: the distinct operations of its eager
step, ``sweeper.trial.ops``) times ``hydra.sweeper.cost_prior_per_op``, not as a multiple of its eager trial: on
the H200 a ViT-B/16's 1.3 s eager steps priced its compile at 104 s, and a DeepLabV3's 8 s eager trial at 25 s;
they compiled in ~30 s and 140 s. The trials are the first rows of the 2026-12-05 H200 sweeps
(tests/test_costs_drain_cache.py), each with the count of its default configuration's step (on a CPU)."""

from __future__ import annotations

from typing import Any

import pytest

from sweeper.sweep.config.settings import COMPILE_S_PER_OP, KnobSweeperConf, priors_per_op
from sweeper.sweep.search.costs import CostModel
from tests.test_costs_drain_cache import EXPENSIVE, GPT, GPT_ROWS, SEG, SEG_START, _study

VIT = {"knobs.precision": "bf16", "knobs.compile": "default", "knobs.batch_size": 256, "knobs.optimizer_impl": "fused"}
VIT_BASELINE = ({**VIT, "knobs.precision": "fp32", "knobs.compile": "off", "knobs.batch_size": 64,
                 "knobs.optimizer_impl": "foreach"}, (11.023, 5.99, 0.0, 0.747, 3.546, 177.273, 5, 0, 20))  # fmt: skip
# the first compiled trial of each sweep, its recorded cold compile (s), and the baseline's count
CASES = {
    "vit": (VIT_BASELINE, VIT, 35.757, 110),
    "gpt": (GPT_ROWS[0], GPT, 27.087, 98),
    "seg": (SEG[0], SEG_START, 140.33, 351),
}


def _model(settings: KnobSweeperConf | None = None) -> CostModel:
    s = settings or KnobSweeperConf()
    return CostModel(EXPENSIVE, s.cost_prior, priors_per_op(s), measure={"warmup_steps": 5, "steps": 20})


def _counted(row: tuple, ops: int | None, step_scale: float = 1.0) -> Any:
    """A study of one eager trial (``row``) that counted ``ops`` operations; ``step_scale`` slows its steps."""
    params, values = row
    wall, setup, comp, first, window, step_ms, *rest = values
    slow = (wall + (step_scale - 1) * (first + window + 4 * step_ms / 1e3), setup, comp, first * step_scale,
            window * step_scale, step_ms * step_scale, *rest)  # fmt: skip
    return _study([(params, slow, {"graph_ops": ops} if ops else {})])


@pytest.mark.parametrize("case", ["vit", "gpt"])
def test_a_first_compile_is_predicted_from_the_models_count_within_30_percent(case: str) -> None:
    """Before any compile was measured: the baseline alone, and its count."""
    baseline, compiled, actual, ops = CASES[case]
    predicted = _model().phases(_counted(baseline, ops), compiled)["compile"]
    assert abs(predicted - actual) <= 0.3 * actual, (predicted, actual)


def test_the_segmentation_models_compile_is_priced_nearer_and_its_miss_is_stated() -> None:
    """DeepLabV3-MobileNetV3 compiled at 0.40 s an operation, the slowest rate of the models measured (their median
    0.27): the count prices it at 95 s, a third under its 140 s, where its 8 s eager trial priced it at 25 s."""
    baseline, compiled, actual, ops = CASES["seg"]
    by_count = _model().phases(_counted(baseline, ops), compiled)["compile"]
    by_trial = _model().phases(_counted(baseline, None), compiled)["compile"]
    assert by_count == pytest.approx(COMPILE_S_PER_OP["default"] * ops)
    assert abs(by_count - actual) < 0.35 * actual < abs(by_trial - actual), (by_count, by_trial)


def test_the_prior_follows_the_graph_and_not_the_eager_steps_time() -> None:
    """The same model with eager steps 10 x slower (an fp32 batch-512 trial) is priced the same compile; a model with
    three times the operations, three times the compile."""
    baseline, compiled, _actual, ops = CASES["vit"]
    model = _model()
    fast = model.phases(_counted(baseline, ops), compiled)["compile"]
    slow = model.phases(_counted(baseline, ops, step_scale=10.0), compiled)["compile"]
    assert slow == pytest.approx(fast)
    assert model.phases(_counted(baseline, 3 * ops), compiled)["compile"] == pytest.approx(3 * fast)
    # without a count: the old prior, a multiple of the eager trial, which grows with it
    assert model.phases(_counted(baseline, None, step_scale=10.0), compiled)["compile"] > 3 * fast


def test_a_measured_compile_rescales_the_other_modes_priors() -> None:
    """Once the default mode was measured at 1.5 x its count's prior, a mode never measured is priced at 1.5 x its
    own count-based prior (the model compiles slower than the rate says)."""
    baseline, compiled, _actual, ops = CASES["gpt"]
    default = 1.5 * COMPILE_S_PER_OP["default"] * ops
    row = (compiled, (default + 12.0, 8.8, default, default + 0.1189, 1.19, 118.9, 5, 0, 10))  # first = compile + step
    params, values = baseline
    study = _study([(params, values, {"graph_ops": ops}), row])
    out = _model().phases(study, {**compiled, "knobs.compile": "max-autotune-no-cudagraphs"})
    assert out["compile"] == pytest.approx(1.5 * COMPILE_S_PER_OP["max-autotune-no-cudagraphs"] * ops, rel=1e-6)


def test_a_factor_given_for_a_mode_is_what_the_sweep_was_told_and_wins() -> None:
    """A workload's YAML that prices the default compile at 10 x an eager trial keeps that price; the other modes keep
    their rate."""
    settings = KnobSweeperConf()
    settings.cost_prior = {"knobs.compile": {**settings.cost_prior["knobs.compile"], "default": 10}}
    kept = priors_per_op(settings)["knobs.compile"]
    assert "default" not in kept and kept["reduce-overhead"] == COMPILE_S_PER_OP["reduce-overhead"]
    baseline, compiled, _actual, ops = CASES["vit"]
    study = _counted(baseline, ops)
    eager = study.trials[0].user_attrs["wall_s"]
    assert _model(settings).phases(study, compiled)["compile"] == pytest.approx(9 * eager)
