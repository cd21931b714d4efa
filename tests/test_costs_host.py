"""The cost model on rows measured on the CPU: a DataLoader without workers loads between the steps, and a warm
compile equally near to two earlier cold ones. The numbers are a 1-D convolution net's own workload
(``bench/own_model/audio_bench.py``) on the 2-core CPU VM (2026-12-07, torch 2.14.1)."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from sweeper.sweep.config.settings import KnobSweeperConf, graph_neutral
from sweeper.sweep.search.costs import CostModel

BASE = {"knobs.compile": "off", "knobs.precision": "bf16", "knobs.batch_size": 32, "knobs.optimizer_impl": "fused",
        "knobs.num_workers": 0, "knobs.pin_memory": False}  # fmt: skip


def _model() -> CostModel:
    conf = KnobSweeperConf()
    measure = {"warmup_steps": 5, "steps": 20, "min_time_s": 0.0}
    return CostModel({"knobs.compile": "off"}, conf.cost_prior, measure=measure, neutral=graph_neutral(conf))


def _add(study: optuna.Study, params: dict, step_s: float, excess: float, device: str = "cpu", **attrs) -> None:
    """A complete trial of ``params``: a first step ``excess`` beyond ``step_s`` (counted by the compilers where
    compiled), 20 measured steps, the row's ``device``."""
    params = {**BASE, **params}
    compiled = params["knobs.compile"] != "off"
    row = {"status": "complete", "setup_s": 0.05, "first_step_s": excess + step_s, "compile_s": excess,
           "compiler_s": excess if compiled else 0.0, "measured_s": 20 * step_s, "step_ms_mean": step_s * 1e3,
           "warmup_steps": 5, "steps_measured": 20, "wall_s": 0.05 + excess + 25 * step_s, "device": device,
           **attrs}  # fmt: skip
    dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
    study.add_trial(create_trial(params=params, distributions=dists, values=[1000.0], user_attrs=row))


@pytest.mark.parametrize("device", ["cpu", "cuda:0"])
def test_a_loader_without_workers_feeds_at_its_wait_on_the_cpu_and_at_its_step_on_a_gpu(device: str) -> None:
    """fp32 batch 32 with no worker stepped in 47 ms, 25.7 % of it waiting for its batch (data-bound). On the CPU
    the loading runs between the steps: batch 128 is fed in at least 4 x 12 ms, and stepped in 97 ms (priced
    189 ms as four times the whole step). A GPU runs the step while the process loads the next batch: there the
    whole step is the feed (on the CPU the step itself is then its share of the samples: 140 ms)."""
    study = optuna.create_study(direction="maximize")
    _add(study, {"knobs.precision": "fp32"}, 0.047, 0.03, device, data_wait_frac=0.257)
    step = _model().phases(study, {**BASE, "knobs.precision": "fp32", "knobs.batch_size": 128})["step"]
    if device == "cpu":  # its own step at four times the samples (4 x 35 ms busy), above the floor of its feed
        assert 4 * 0.047 * 0.257 < step < 4 * 0.047
    else:
        assert step == pytest.approx(4 * 0.047, rel=0.01)


def test_a_warm_compile_equally_near_two_cold_ones_learns_what_explains_it() -> None:
    """Batch 128 without pinned memory compiled cold (13.1 s), batch 32 with it cold (7.6 s); batch 32 without it
    found the cache warm (1.2 s). It differs from each in one knob: the declared graph-neutral one (pinned memory)
    explains the warm cache, not the batch size. Batch 16's compile is then cold (6.1 s measured), not priced as
    a warm one (2.3 s when the batch size was taken to leave the graph alone)."""
    study = optuna.create_study(direction="maximize")
    _add(study, {}, 0.047, 0.03)
    compiled = {"knobs.compile": "default"}
    cold = {"compile_cache_hits": 0, "compile_cache_misses": 2}
    warm = {"compile_cache_hits": 2, "compile_cache_misses": 0}
    _add(study, {**compiled, "knobs.batch_size": 128}, 0.086, 13.1, **cold)
    _add(study, {**compiled, "knobs.pin_memory": True}, 0.023, 7.6, **cold)
    _add(study, compiled, 0.023, 1.2, **warm)
    assert _model().phases(study, {**BASE, **compiled, "knobs.batch_size": 16})["compile"] > 6.0
    assert _model().phases(study, {**BASE, **compiled, "knobs.optimizer_impl": "foreach"})["compile"] < 2.0


def test_a_cold_compile_is_priced_from_cold_ones_after_the_sweeps_first() -> None:
    """The sweep's first compile (bf16 batch 128) took 12.4 s cold, building what every later compile finds in the
    cache; fp32 batch 64 then compiled cold in 6.0 s. fp32 batch 128 (cold, 5.7 s measured) is priced from the
    later one, not from the first, which shares its batch. With the first alone, the first prices it."""
    study = optuna.create_study(direction="maximize")
    _add(study, {}, 0.047, 0.03)
    compiled = {"knobs.compile": "default"}
    cold = {"compile_cache_hits": 0, "compile_cache_misses": 2}
    _add(study, {**compiled, "knobs.batch_size": 128}, 0.086, 12.4, **cold)
    target = {**BASE, **compiled, "knobs.precision": "fp32", "knobs.batch_size": 128}
    assert _model().phases(study, target)["compile"] >= 12.4
    _add(study, {**compiled, "knobs.precision": "fp32", "knobs.batch_size": 64}, 0.05, 6.0, **cold)
    assert _model().phases(study, target)["compile"] < 0.7 * 12.4


def test_a_worker_count_measured_unbound_is_not_floored_by_a_share_of_another() -> None:
    """On two cores, two workers fed bf16 batch 128 in 124 ms a step, 24 % of it waiting (data-bound); one worker
    fed it without making it wait (98 ms, 12 %). With foreach AdamW and one worker (127 ms measured) the step is
    not floored at twice the two workers' feed (249 ms): one worker was measured feeding faster than that."""
    study = optuna.create_study(direction="maximize")
    _add(study, {"knobs.precision": "fp32"}, 0.047, 0.03, data_wait_frac=0.25)
    bf16 = {"knobs.batch_size": 128}
    _add(study, {**bf16, "knobs.num_workers": 2}, 0.124, 0.03, data_wait_frac=0.24)
    _add(study, {**bf16, "knobs.num_workers": 1}, 0.098, 0.03, data_wait_frac=0.117)
    step = _model().phases(study, {**BASE, **bf16, "knobs.num_workers": 1, "knobs.optimizer_impl": "foreach"})["step"]
    assert step < 0.15


def test_on_the_cpu_a_step_takes_its_share_of_the_samples() -> None:
    """A text encoder on the CPU (2026-12-07): the defaults (fp32, batch 32) stepped in 91 ms, the compiled bf16
    batch-128 start in 501 ms. fp32 batch 64 stepped in 183 ms: on the CPU twice the defaults' step, its share of
    the samples (priced 2.6 s for a 4.7 s trial from the knobs' fitted effects); batch 16 in 48 ms."""
    study = optuna.create_study(direction="maximize")
    _add(study, {"knobs.precision": "fp32"}, 0.091, 0.04)
    _add(study, {"knobs.compile": "default", "knobs.batch_size": 128}, 0.501, 19.2)
    fp32 = {**BASE, "knobs.precision": "fp32"}
    for batch, measured in ((64, 0.183), (16, 0.048)):
        assert _model().phases(study, {**fp32, "knobs.batch_size": batch})["step"] == pytest.approx(measured, rel=0.1)
