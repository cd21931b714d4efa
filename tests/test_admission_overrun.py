"""The re-measurements' reserve against the study's own overruns: a trial admitted beside the reserve is priced as
this study's trials ran over their prices (``Admission.overrun``), so that an overrun like theirs leaves the
re-measurements of the baseline and the best their time. The numbers are a 1-D convolution net's on the 2-core CPU
VM (2026-12-07): trials of 1.4-3 s, priced at launch, some running 20-75 % over their price."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from sweeper.sweep.config.settings import KnobSweeperConf, graph_neutral
from sweeper.sweep.run.admission import Admission
from sweeper.sweep.search.budget import Budget
from sweeper.sweep.search.costs import CostModel

BASE = {"knobs.compile": "off", "knobs.precision": "fp32", "knobs.batch_size": 32}
OBJECTIVES = [("throughput", "maximize")]
MEASURE = {"warmup_steps": 5, "steps": 20, "min_time_s": 0.0}


def _add(study: optuna.Study, params: dict, step_s: float, throughput: float, over: float | None) -> None:
    """A complete eager trial stepping at ``step_s``, launched at a price ``over`` times below what it spent (None:
    priced 0, before anything was measured)."""
    params = {**BASE, **params}
    wall = 0.05 + 26 * step_s
    row = {"status": "complete", "setup_s": 0.05, "first_step_s": step_s, "compile_s": 0.0, "measured_s": 20 * step_s,
           "step_ms_mean": step_s * 1e3, "warmup_steps": 5, "steps_measured": 20, "wall_s": wall, "spent_s": wall,
           "predicted_wall_s": round(wall / over, 2) if over else 0.0, "device": "cpu"}  # fmt: skip
    dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
    study.add_trial(create_trial(params=params, distributions=dists, values=[throughput], user_attrs=row))


def _admission(over: float) -> tuple[Admission, list[float]]:
    """Five trials that ran ``over`` times their prices; the clock is the list's one item (seconds since the
    start of a 120 s budget)."""
    study = optuna.create_study(direction="maximize")
    _add(study, {}, 0.047, 680.0, over)
    for batch, step, thr in ((128, 0.090, 1420.0), (64, 0.067, 955.0), (128, 0.094, 1360.0), (16, 0.020, 800.0)):
        _add(study, {"knobs.precision": "bf16", "knobs.batch_size": batch}, step, thr, over)
    settings = KnobSweeperConf(timeout_s=120)
    model = CostModel({"knobs.compile": "off"}, settings.cost_prior, measure=MEASURE, neutral=graph_neutral(settings))
    plan = SimpleNamespace(study=study, space=None, defaults={}, objectives=OBJECTIVES, cfg={"device": "cpu"})
    now = [0.0]
    admission = Admission(plan, settings, model, Budget(120, started_at=0.0, clock=lambda: now[0]))
    admission.baseline = lambda: dict(BASE)
    return admission, now


@pytest.mark.parametrize("over", [1.0, 1.25])
def test_a_trial_beside_the_reserve_is_priced_with_the_studys_own_overrun(over: float) -> None:
    """With 10 % of a proposal's price to spare beyond the reserve, it is admitted where the study's trials ran
    at their prices, and kept out where they ran 25 % over them."""
    admission, now = _admission(over)
    proposal = {**BASE, "knobs.precision": "bf16", "knobs.batch_size": 32}
    reserve, price = admission.reserve(), admission.predict(proposal)
    assert reserve > 2.0 and price > 0.5  # the baseline's and the best's repeats
    now[0] = 120.0 - reserve - 1.1 * price
    assert admission.reserve() == pytest.approx(reserve)
    assert admission.overrun(admission.plan.study) == pytest.approx(over - 1.0, abs=0.01)
    assert admission.fits(proposal) is (over < 1.1)
    assert admission.fits(proposal, reserve=False)  # nothing kept: its price alone


def test_the_first_trial_of_a_cost_class_priced_by_the_prior_is_not_the_models_overrun() -> None:
    """The defaults (priced before anything was measured), then a compiled start priced by the prior that ran 75 %
    over it (DeepLabV3's on an H100: 104 s priced, 181 s run), then three eager trials priced from measurements of
    their class, at their prices: no overrun. Two repeats of the start, priced from it, are the model's, and
    count."""
    admission, _now = _admission(1.0)
    study = optuna.create_study(direction="maximize")
    admission.plan.study = study
    _add(study, {}, 0.047, 680.0, None)
    compiled = {**BASE, "knobs.compile": "default", "knobs.precision": "bf16", "knobs.batch_size": 128}
    row = {"status": "complete", "wall_s": 30.0, "spent_s": 30.0, "predicted_wall_s": round(30.0 / 1.75, 2)}
    dists = {k: CategoricalDistribution([v]) for k, v in compiled.items()}
    study.add_trial(create_trial(params=compiled, distributions=dists, values=[1500.0], user_attrs=row))
    for batch in (16, 64, 128):
        _add(study, {"knobs.batch_size": batch}, 0.02 * batch / 16, 900.0, 1.0)
    assert admission.overrun(study) == pytest.approx(0.0, abs=0.01)
    for _ in range(2):
        study.add_trial(create_trial(params=compiled, distributions=dists, values=[1500.0], user_attrs=row))
    assert admission.overrun(study) == pytest.approx(0.75, abs=0.01)
