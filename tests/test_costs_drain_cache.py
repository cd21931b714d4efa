"""The cost model on the default sweeps of 2026-12-05 on an H200 (``timeout_s=300``, torch 2.11, one GPU): a data
pipeline's drain is part of the warm-up, not of the trial's start, and a compile cache stays warm across knobs the
study saw leave the compiled graph unchanged. The trials are those sweeps' rows (their knobs, wall and phases)."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from sweeper.report.diagnose import DATA_WAIT
from sweeper.sweep.config.settings import KnobSweeperConf, graph_neutral, priors_per_op
from sweeper.sweep.search.costs import DATA_BOUND_WAIT, CostModel
from tests.test_replay import HAND, seg

EXPENSIVE = {"knobs.compile": "off"}
PHASES = ("wall_s", "setup_s", "compile_s", "first_step_s", "measured_s", "step_ms_mean", "warmup_steps",
          "warmup_drain_steps", "steps_measured")  # fmt: skip


def _study(rows: list[tuple], launch_s: float = 0.0) -> optuna.Study:
    """A study of measured trials: (knobs, (wall, setup, compile, first step, window, step ms, warm-up steps, drain
    steps, measured steps)[, more attributes]); ``launch_s``: what the sweeper saw beyond each row's wall
    (``spent_s``)."""
    study = optuna.create_study(direction="maximize")
    for params, values, *more in rows:
        attrs = {"status": "complete", **dict(zip(PHASES, values)), **(more[0] if more else {})}
        if launch_s:
            attrs["spent_s"] = values[0] + launch_s
        dists = {k: CategoricalDistribution([v]) for k, v in params.items()}
        study.add_trial(create_trial(params=params, distributions=dists, values=[1.0], user_attrs=attrs))
    return study


def _model(**measure: Any) -> CostModel:
    return CostModel(EXPENSIVE, KnobSweeperConf().cost_prior, measure={"warmup_steps": 5, **measure})


SEG_DEFAULTS = seg().defaults  # the recorded H200 sweep's defaults and handbook start (tests/test_replay.py)
SEG_START = HAND["seg"]
SEG = [
    (SEG_DEFAULTS, (8.297, 5.747, 0.0, 0.819, 1.378, 68.866, 5, 0, 20)),
    (SEG_START, (194.115, 11.964, 140.33, 140.609, 5.577, 278.809, 26, 104, 20)),  # 26 + 104 steps at 0.279 s
]


def test_a_data_pipelines_drain_is_priced_as_warm_up_not_as_the_trials_start() -> None:
    """DeepLabV3 fed by 12 DataLoader workers: its compiled trial warmed up 26 steps and drained 104 more at 0.279 s
    (36 s). Those seconds belong to the warm-up (the configuration and its neighbours pay them again), not to the
    start every trial pays: the start stays the launch overhead (1.7 s seen by the sweeper), and the configuration
    is priced at its measured wall, its repeat with the drain's 36 s."""
    study = _study(SEG, launch_s=1.7)
    model = _model(steps=20, min_time_s=1.0)
    out = model.phases(study, SEG_START)
    assert out["start"] <= 2.0, out
    assert abs(out["warmup"] - 130 * 0.279) <= 0.1 * 130 * 0.279, out
    assert abs(out["total"] - (194.115 + 1.7)) <= 0.05 * 194.115, out
    neighbour = model.phases(study, {**SEG_START, "knobs.cudnn_benchmark": False})  # the nearest recorded drains
    assert abs(neighbour["warmup"] / neighbour["step"] - 130) < 1e-6, neighbour
    eager = model.phases(study, {**SEG_DEFAULTS, "knobs.batch_size": 32})  # no workers: the configured warm-up
    assert eager["start"] <= 2.0 and abs(eager["warmup"] / eager["step"] - 5) < 1e-6, eager


def test_a_neighbours_drain_follows_the_dataloaders_buffer() -> None:
    """DeepLabV3's handbook start (12 workers x prefetch 2 = a 24-batch buffer) warmed up 26 steps and drained 104.
    The same configuration without workers has no buffer to drain: 5 steps (it was priced with the start's 130);
    with 4 workers (8 batches) it warms up 10 steps and drains a third of 104; the defaults with 12 workers, whose
    nearest measured neighbour (the defaults) had none, warm up 26 steps and drain 8 (a pipeline that keeps up)."""
    model = _model(steps=20, min_time_s=1.0)
    study = _study(SEG, launch_s=1.7)

    def steps(params: dict) -> float:
        out = model.phases(study, params)
        return out["warmup"] / out["step"]

    assert steps({**SEG_START, "knobs.num_workers": 0}) == pytest.approx(5)
    assert steps({**SEG_START, "knobs.num_workers": 4}) == pytest.approx(10 + round(104 * 8 / 24))
    assert steps({**SEG_DEFAULTS, "knobs.num_workers": 12, "knobs.batch_size": 32}) == pytest.approx(26 + 8)
    assert steps({**SEG_START, "knobs.cudnn_benchmark": False}) == pytest.approx(130), "the same buffer: as recorded"


def test_the_warm_up_is_never_fewer_steps_than_measure_asks() -> None:
    """A configuration whose neighbours warmed up 5 steps, under ``measure.warmup_steps=50``, warms up 50."""
    study = _study(SEG[:1])
    out = _model(warmup_steps=50, steps=20).phases(study, {**SEG_DEFAULTS, "knobs.batch_size": 32})
    assert abs(out["warmup"] / out["step"] - 50) < 1e-6, out


GPT = {"knobs.precision": "bf16", "knobs.compile": "default", "knobs.batch_size": 128, "knobs.optimizer_impl": "fused"}
GPT_ROWS = [
    ({**GPT, "knobs.precision": "fp32", "knobs.compile": "off", "knobs.batch_size": 16,
      "knobs.optimizer_impl": "foreach"}, (7.136, 4.593, 0.0, 0.498, 1.437, 143.627, 5, 0, 10)),
    (GPT, (37.712, 8.82, 27.087, 27.203, 1.19, 118.911, 5, 0, 10)),
    ({**GPT, "knobs.compile": "off"}, (7.671, 4.806, 0.0, 0.497, 1.671, 167.079, 5, 0, 10)),
    ({**GPT, "knobs.compile": "reduce-overhead"}, (33.284, 8.059, 23.246, 23.362, 1.186, 118.525, 5, 0, 10)),
    ({**GPT, "knobs.compile": "reduce-overhead", "knobs.optimizer_impl": "foreach"},
     (14.447, 9.27, 3.204, 3.321, 1.205, 120.44, 5, 0, 10)),  # trial 10: the cache of trial 9 warm
]  # fmt: skip


def test_a_compile_cache_is_warm_across_knobs_learned_graph_neutral() -> None:
    """A GPT: trial 10 (reduce-overhead, foreach) compiled in 3.2 s after trial 9 (the same but fused) in 23.2 s,
    so the optimizer's implementation leaves the graph unchanged; trial 12 (default, foreach), a new configuration
    that differs from trial 1 (default, fused: 27.1 s cold) only there, compiled in 3.2 s (12.7 s in all) where the
    sweep had predicted 38 s. It is priced warm now; a knob never seen to leave the cache warm (precision: trial
    13, fp16, compiled cold in 24.2 s) keeps the cold compile."""
    model = _model(steps=10, min_time_s=1.0)
    before = _study(GPT_ROWS[:-1])
    foreach = {**GPT, "knobs.optimizer_impl": "foreach"}
    assert model.phases(before, foreach)["compile"] >= 23.0  # nothing learned yet: cold
    study = _study(GPT_ROWS)
    out = model.phases(study, foreach)
    assert out["compile"] <= 0.2 * 27.087, out
    assert abs(out["total"] - 12.701) <= 0.3 * 12.701, out
    assert model.phases(study, {**GPT, "knobs.precision": "fp16"})["compile"] >= 24.0


def test_a_graph_neutral_knob_learned_on_one_configuration_holds_for_others() -> None:
    """ViT-B/16: trial 10 (bf16, foreach) compiled in 4.3 s after trial 1 (bf16, fused) in 35.8 s; fp16 fused
    (trial 9) compiled cold in 33.5 s, so fp16 foreach finds its cache warm: priced at the warm share."""
    vit = {"knobs.precision": "bf16", "knobs.compile": "default", "knobs.batch_size": 256}
    rows = [
        ({**vit, "knobs.precision": "fp32", "knobs.compile": "off", "knobs.batch_size": 64,
          "knobs.optimizer_impl": "foreach"}, (11.023, 5.99, 0.0, 0.747, 3.546, 177.273, 5, 0, 20)),
        ({**vit, "knobs.optimizer_impl": "fused"}, (49.061, 11.349, 35.757, 35.832, 1.534, 76.676, 5, 0, 20)),
        ({**vit, "knobs.compile": "off", "knobs.optimizer_impl": "fused"},
         (8.803, 5.485, 0.0, 0.605, 2.217, 110.806, 5, 0, 20)),
        ({**vit, "knobs.precision": "fp16", "knobs.optimizer_impl": "fused"},
         (44.331, 8.859, 33.516, 33.591, 1.537, 76.798, 5, 0, 20)),
        ({**vit, "knobs.optimizer_impl": "foreach"}, (18.003, 11.69, 4.323, 4.4, 1.558, 77.898, 5, 0, 20)),
    ]  # fmt: skip
    model = _model(steps=20, min_time_s=1.0)
    out = model.phases(_study(rows), {**vit, "knobs.precision": "fp16", "knobs.optimizer_impl": "foreach"})
    assert abs(out["compile"] - 33.516 * 4.323 / 35.757) <= 0.5, out
    assert (
        model.phases(_study(rows), {**vit, "knobs.batch_size": 512, "knobs.optimizer_impl": "fused"})["compile"] >= 33.0
    )  # a batch size never seen graph-neutral: cold


def _declared(**measure: Any) -> CostModel:
    """The model as a default sweep builds it: the package's graph-neutral knobs declared."""
    s = KnobSweeperConf()
    return CostModel(EXPENSIVE, s.cost_prior, measure={"warmup_steps": 5, **measure}, neutral=graph_neutral(s))


def test_a_declared_graph_neutral_knob_is_priced_warm_from_its_first_change() -> None:
    """TrainStep compiles the forward and the loss only: the optimizer's implementation never reaches the graph.
    Declared so (the default ``hydra.sweeper.graph_neutral``), the GPT's first compile that changed only it (trial
    10: reduce-overhead, foreach, 14.4 s after trial 9's cold 23.2 s) is priced warm before any such change was
    measured, and so is trial 12 (default, foreach: 12.7 s); without the declaration both are priced cold (34-38 s,
    what the sweep predicted)."""
    before = _study(GPT_ROWS[:-1])
    for model, warm in ((_declared(steps=10, min_time_s=1.0), True), (_model(steps=10, min_time_s=1.0), False)):
        for params, actual in (({**GPT, "knobs.compile": "reduce-overhead", "knobs.optimizer_impl": "foreach"}, 14.447),
                               ({**GPT, "knobs.optimizer_impl": "foreach"}, 12.701)):  # fmt: skip
            total = model.predict(before, params)
            assert (abs(total - actual) <= 0.3 * actual) is warm, (params, total)
    assert _declared(steps=10).phases(before, {**GPT, "knobs.precision": "fp16"})["compile"] >= 23.0  # not declared


def test_a_declared_knob_whose_change_compiled_cold_is_priced_cold_again() -> None:
    """A model that compiles its whole step, optimizer included, with the default declaration: its first change of
    the optimizer's implementation compiled cold (the row's counters: misses), so the next such change is priced
    cold; ``hydra.sweeper.graph_neutral=[]`` declares nothing from the start."""
    counted = {"compile_cache_hits": 0, "compile_cache_misses": 2}
    cold = ({**GPT, "knobs.compile": "reduce-overhead", "knobs.optimizer_impl": "foreach"},
            (33.0, 9.27, 23.1, 23.2, 1.205, 120.44, 5, 0, 10), counted)  # fmt: skip
    study = _study([*GPT_ROWS[:-1], cold])
    foreach = {**GPT, "knobs.optimizer_impl": "foreach"}
    assert _declared(steps=10).phases(study, foreach)["compile"] >= 23.0
    assert _declared(steps=10).phases(_study(GPT_ROWS[:-1]), foreach)["compile"] <= 0.2 * 27.087
    assert graph_neutral(KnobSweeperConf(graph_neutral=[])) == frozenset()
    assert {"knobs.optimizer_impl", "knobs.num_workers", "knobs.pin_memory"} <= graph_neutral(KnobSweeperConf())
    assert not {"knobs.precision", "knobs.batch_size", "knobs.memory_format"} & graph_neutral(KnobSweeperConf())


JPEG = {"knobs.precision": "bf16", "knobs.compile": "off", "knobs.batch_size": 512, "knobs.num_workers": 14,
        "knobs.decode_device": "cpu", "knobs.pin_memory": True}  # fmt: skip


@pytest.mark.parametrize("wait", [0.46, 0.05])
def test_fewer_workers_than_a_data_bound_trial_had_are_priced_at_their_share_of_its_feed(wait: float) -> None:
    """ResNet-50 fed from JPEGs decoded on the CPU: with 14 workers the step waited for data (3,533 img/s, 0.145 s a
    batch of 512). A trial with no worker (the main process decodes: ~250 img/s) was priced from that neighbour's
    step, 21 s for 180 s, and ran 90 s past the budget's end. The workers' share of the feed is now the least step:
    0 workers 14x, 4 workers 3.5x; a trial decoding on the GPU (another data path), or a neighbour that did not
    wait for data, sets no such floor: the GPU-decoding trial steps at what the model took of the step."""
    rows = [(JPEG, (20.0, 6.0, 0.5, 0.645, 2.9, 145.0, 65, 0, 20), {"data_wait_frac": wait})]
    model, study = _model(steps=20, min_time_s=0.0), _study(rows)
    step = {w: model.phases(study, {**JPEG, "knobs.num_workers": w})["step"] for w in (0, 4, 14)}
    gpu = model.phases(study, {**JPEG, "knobs.num_workers": 0, "knobs.decode_device": "cuda"})["step"]
    half = model.phases(study, {**JPEG, "knobs.num_workers": 0, "knobs.batch_size": 256})["step"]
    if wait >= DATA_WAIT:
        assert step[0] == pytest.approx(14 * 0.145) and step[4] == pytest.approx(3.5 * 0.145)
        assert half == pytest.approx(7 * 0.145)
    else:
        assert step[0] == pytest.approx(0.145) and step[4] == pytest.approx(0.145)
    assert step[14] == pytest.approx(0.145)
    # another data path: the model's own share of the step (what it did while not waiting), no feed of these
    assert gpu == pytest.approx(0.145 * (1 - wait) if wait >= DATA_WAIT else 0.145)
    assert DATA_BOUND_WAIT == DATA_WAIT  # the report's data-bound


# The H100 JPEG sweep of 2026-12-05 (15:50 UTC): its defaults (no worker, fp32, batch 256) and its handbook start
# (compiled bf16, batch 1024, 14 workers), both waiting for their data; then the start's eager twin without workers.
JPEG_PIPE = {"knobs.grad_accum_steps": 1, "knobs.activation_checkpointing": "off", "knobs.persistent_workers": False,
             "knobs.decode_device": "cpu", "knobs.cpu_decoder": "torchvision", "knobs.transfer_dtype": "float32",
             "knobs.augment_device": "cpu", "knobs.device_prefetch": False}  # fmt: skip
JPEG_DEFAULTS = {**JPEG_PIPE, "knobs.precision": "fp32", "knobs.memory_format": "contiguous", "knobs.compile": "off",
                 "knobs.cudnn_benchmark": False, "knobs.batch_size": 256, "knobs.optimizer_impl": "foreach",
                 "knobs.num_workers": 0, "knobs.pin_memory": False, "knobs.non_blocking": False}  # fmt: skip
JPEG_START = {**JPEG_DEFAULTS, "knobs.precision": "bf16", "knobs.memory_format": "channels_last",
              "knobs.compile": "default", "knobs.cudnn_benchmark": True, "knobs.batch_size": 1024,
              "knobs.optimizer_impl": "fused", "knobs.num_workers": 14, "knobs.prefetch_factor": 2,
              "knobs.pin_memory": True, "knobs.non_blocking": True, "knobs.worker_nice": 10}  # fmt: skip
JPEG_ROWS = [
    (JPEG_DEFAULTS, (25.257, 1.511, 0.0, 1.871, 17.312, 865.569, 5, 0, 20), {"data_wait_frac": 0.841}),
    (JPEG_START, (132.592, 5.996, 108.514, 108.695, 6.859, 336.756, 30, 11, 20), {"data_wait_frac": 0.494}),
]


def test_a_data_bound_trials_feed_floors_other_models_knobs_on_the_same_data_path() -> None:
    """The start's eager twin with no worker (main-process decoding, batch 1024) stepped at 2.96 s and ran 78.6 s;
    it was priced 21 s from the start's 0.34 s step, since every configuration measured with its data path differed
    from it in model knobs too (precision, layout, compile, batch, optimizer) or in the transfer (pinned, non-blocking
    copies), which the floor matched on. The feed is the data path's: the defaults, as many workers (none), fed
    256 samples in 0.87 s, so 1024 take 3.5 s; without them, the start's 14 workers' share is the floor."""
    twin = {k: v for k, v in JPEG_START.items() if k not in ("knobs.prefetch_factor", "knobs.worker_nice")}
    twin.update({"knobs.compile": "off", "knobs.num_workers": 0})
    s = KnobSweeperConf()
    model = CostModel(EXPENSIVE, s.cost_prior, measure={"warmup_steps": 5, "steps": 20}, neutral=graph_neutral(s))
    out = model.phases(_study(JPEG_ROWS), twin)
    assert out["step"] == pytest.approx(0.866 * 1024 / 256, rel=0.01), out
    assert abs(out["total"] - 78.551) <= 0.3 * 78.551, out
    share = model.phases(_study(JPEG_ROWS[1:]), twin)["step"]
    assert share == pytest.approx(14 * 0.3368, rel=0.01)  # only the 14 workers measured: their share
    hybrid = model.phases(_study(JPEG_ROWS), {**twin, "knobs.decode_device": "hybrid", "knobs.gpu_share": 0.5})
    assert hybrid["step"] < 0.866, "another data path: no floor from these"


def test_another_data_path_is_priced_by_the_models_time_not_the_feed_it_leaves() -> None:
    """The same sweep's next proposal, the eager hybrid decode (half the images decoded on the GPU, fp16, batch 512),
    ran 21.0 s on that H100 (the 12:52 UTC sweep's trial 2: 0.105 s a step, no wait for data). It was priced 45.7 s
    from the start's 0.34 s step, which its 14 CPU workers' feed set (a 0.49 wait), and with 118 s left and the
    re-measurements' reserve kept it did not fit. A data-bound trial's wait says nothing of another data path: the
    model's own time (its step less the wait) is what the model knobs scale, and a feed floors only its own path."""
    hybrid = {**JPEG_START, "knobs.compile": "off", "knobs.precision": "fp16", "knobs.batch_size": 512,
              "knobs.prefetch_factor": 4, "knobs.decode_device": "hybrid", "knobs.gpu_share": 0.5,
              "knobs.transfer_dtype": "uint8", "knobs.cuda_connections": 32}  # fmt: skip
    s = KnobSweeperConf()
    measure = {"warmup_steps": 5, "steps": 20, "min_time_s": 1.0}
    model = CostModel(EXPENSIVE, s.cost_prior, measure=measure, neutral=graph_neutral(s))
    out = model.phases(_study(JPEG_ROWS), hybrid)
    assert abs(out["total"] - 21.016) <= 0.3 * 21.016, out
    twin = {**JPEG_START, "knobs.compile": "off"}  # the start's own data path: still its feed
    assert model.phases(_study(JPEG_ROWS), twin)["step"] >= 0.3368 * 0.99


def test_a_profiled_re_measurements_profile_is_not_priced_as_every_trials_start() -> None:
    """ViT-B/16's profiled re-measurement of the defaults (trial 17) spent 2.8 s profiling (``prof_s``); those
    seconds are priced by the admission for profiled trials alone, not in the start every trial pays (the sweeper saw
    0.5 s beyond each row's wall)."""
    defaults = {"knobs.precision": "fp32", "knobs.compile": "off", "knobs.batch_size": 64}
    study = _study(
        [
            ({**defaults, "knobs.optimizer_impl": "foreach"}, (11.023, 5.99, 0.0, 0.747, 3.546, 177.273, 5, 0, 20)),
            (
                {**defaults, "knobs.optimizer_impl": "foreach"},
                (13.585, 5.906, 0.0, 0.608, 3.544, 177.186, 5, 0, 20),
                {"prof_s": 2.778, "confirm_of": 0},
            ),
        ],
        launch_s=0.5,
    )
    out = _model(steps=20, min_time_s=1.0).phases(study, {**defaults, "knobs.batch_size": 128})
    assert out["start"] <= 0.7, out


def test_a_compile_found_in_another_nights_cache_does_not_price_new_configurations_warm() -> None:
    """A nightly sweep sharing TORCHINDUCTOR_CACHE_DIR: the decoder LM's handbook start compiled in 3.2 s, its
    graphs in the cache from the night before (the row's counters: 2 hits, no miss). Taken as the class's cold
    compile, every new compiled configuration was priced at 3.2 s of compile; the counters mark it warm, so a new
    configuration is priced by the model's count (0.27 s x 98 operations), and the start's own repeat at 3.2 s."""
    rows = [
        (GPT_ROWS[0][0], GPT_ROWS[0][1], {"graph_ops": 98}),
        (GPT, (13.9, 8.82, 3.2, 3.32, 1.19, 118.911, 5, 0, 10), {"compile_cache_hits": 2, "compile_cache_misses": 0}),
    ]
    s = KnobSweeperConf()
    model = CostModel(EXPENSIVE, s.cost_prior, priors_per_op(s), measure={"warmup_steps": 5, "steps": 10})
    new = {**GPT, "knobs.precision": "fp16"}
    assert model.phases(_study(rows), new)["compile"] == pytest.approx(0.27 * 98, rel=0.01)
    assert model.phases(_study(rows), GPT, repeat=True)["compile"] == pytest.approx(3.2, abs=0.05)
    unmarked = [rows[0], (*rows[1][:2], {})]  # the same rows without the counters: the old guess
    assert model.phases(_study(unmarked), new)["compile"] == pytest.approx(3.2, abs=0.05)


def test_a_data_bound_configuration_without_a_worker_knob_keeps_its_feed() -> None:
    """A workload whose DataLoader's workers are not a knob: a trial stepped at 0.5 s, 0.8 of it waiting for data.
    Its repeat, and a neighbour on the same data path (another precision), are priced at that feed, not at the
    model's 0.1 s: the model knobs cannot speed a step the input pipeline sets."""
    params = {"knobs.precision": "fp32", "knobs.compile": "off", "knobs.batch_size": 64}
    rows = [(params, (20.0, 2.0, 0.0, 0.6, 10.0, 500.0, 5, 0, 20), {"data_wait_frac": 0.8})]
    model, study = _declared(steps=20, min_time_s=0.0), _study(rows)  # the default graph-neutral (pipeline) knobs
    assert model.phases(study, params, repeat=True)["step"] == pytest.approx(0.5)
    assert model.phases(study, {**params, "knobs.precision": "bf16"})["step"] >= 0.5
