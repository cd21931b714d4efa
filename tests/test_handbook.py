"""The handbook's start: derived from a workload's own declared space and the device, no per-model ``starts``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from sweeper.sweep.config.space import build_space
from sweeper.sweep.search.handbook import cpu_bf16, start_params
from sweeper.sweep.search.warm import baseline_params
from workloads.base import DeviceInfo

CPU = DeviceInfo(kind="cpu")
H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", count=1, compute_capability=(9, 0))
T4 = DeviceInfo(kind="cuda", name="Tesla T4", count=1, compute_capability=(7, 5))
CNN = {
    "knobs.precision": "choice(fp32, tf32, fp16, bf16)",
    "knobs.memory_format": "choice(contiguous, channels_last)",
    "knobs.compile": "choice(off, default, reduce-overhead)",
    "knobs.batch_size": "choice(64, 128, 256)",
    "knobs.cudnn_benchmark": "choice(false, true)",
    "knobs.optimizer_impl": "choice(foreach, fused)",
    "knobs.num_workers": "choice(0, 4, 8)",
    "knobs.pin_memory": "choice(false, true)",
    "knobs.device_prefetch": "choice(false, true)",
    "knobs.seed_of_mine": "choice(1, 2)",
}
DEFAULTS = {"knobs.precision": "fp32", "knobs.memory_format": "contiguous", "knobs.compile": "off",
            "knobs.batch_size": 64, "knobs.cudnn_benchmark": False, "knobs.optimizer_impl": "foreach",
            "knobs.num_workers": 0, "knobs.pin_memory": False, "knobs.device_prefetch": False,
            "knobs.seed_of_mine": 1}  # fmt: skip


def _start(params: dict, defaults: dict, device: DeviceInfo) -> dict | None:
    space = build_space(params, {}, [], defaults)
    return start_params(space, defaults, baseline_params(space, defaults), device)


def test_the_handbook_start_on_a_gpu_takes_every_rule_the_space_allows() -> None:
    start = _start(CNN, DEFAULTS, H200)
    assert start == {"knobs.precision": "bf16", "knobs.memory_format": "channels_last", "knobs.compile": "default",
                     "knobs.batch_size": 256, "knobs.cudnn_benchmark": True, "knobs.optimizer_impl": "fused",
                     "knobs.num_workers": 8, "knobs.pin_memory": True, "knobs.device_prefetch": True,
                     "knobs.seed_of_mine": 1}  # fmt: skip
    assert _start(CNN, DEFAULTS, T4)["knobs.precision"] == "fp16", "no bf16 before compute capability 8.0"


def test_the_handbook_start_on_the_cpu_takes_bf16_and_compile_and_leaves_the_gpu_rules() -> None:
    start = _start(CNN, DEFAULTS, CPU)
    assert start is not None
    assert start["knobs.precision"] == "bf16" and start["knobs.compile"] == "default"
    assert start["knobs.batch_size"] == 256 and start["knobs.memory_format"] == "channels_last"
    assert start["knobs.cudnn_benchmark"] is False and start["knobs.num_workers"] == 0
    assert start["knobs.pin_memory"] is False and start["knobs.device_prefetch"] is False


def test_a_cpu_without_bf16_instructions_starts_in_fp32_with_the_other_rules(tmp_path: Path) -> None:
    """bf16 is the CPU's reduced precision where the CPU computes it (AVX512-BF16, AMX, Arm's BF16); an AVX2 CPU
    emulates it (a Transformer encoder: 23 samples/s against fp32's 211), so its start keeps fp32."""
    space = build_space(CNN, {}, [], DEFAULTS)
    start = start_params(space, DEFAULTS, baseline_params(space, DEFAULTS), CPU, native_bf16=False)
    assert start is not None and start["knobs.precision"] == "fp32"
    assert start["knobs.compile"] == "default" and start["knobs.batch_size"] == 256
    assert start_params(space, DEFAULTS, baseline_params(space, DEFAULTS), H200, native_bf16=False) == _start(
        CNN, DEFAULTS, H200
    ), "a GPU's bf16 is its compute capability's"
    avx2, genoa, graviton = tmp_path / "avx2", tmp_path / "genoa", tmp_path / "arm"
    avx2.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu avx avx2\n")
    genoa.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n")
    graviton.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n")
    assert not cpu_bf16(avx2) and cpu_bf16(genoa) and cpu_bf16(graviton)
    assert cpu_bf16(tmp_path / "absent"), "flags unknown: bf16, as the rule was"


def test_a_space_without_handbook_knobs_has_no_handbook_start() -> None:
    assert _start({"knobs.seed_of_mine": "choice(1, 2)"}, {"knobs.seed_of_mine": 1}, H200) is None
    only_fp32 = {"knobs.precision": "choice(fp32, tf32)", "knobs.batch_size": "choice(8)"}
    assert _start(only_fp32, {"knobs.precision": "fp32", "knobs.batch_size": 8}, CPU) is None, "tf32: no CPU gain"


def test_a_handbook_start_out_of_memory_is_measured_again_at_the_next_smaller_batch(tmp_path) -> None:
    """ "The largest batch that fits": the start (batch 256) runs out of memory; the sweep settles it and queues the
    start at batch 128, and that at 64 if it does not fit either; any other configuration out of memory is left."""
    import optuna

    from sweeper.results.outcome import Status, TrialOutcome
    from sweeper.sweep.run.settle import Settler
    from sweeper.sweep.study.attrs import STAGE_KEY, START_KEY
    from sweeper.sweep.study.optuna_private import storage_of

    space = build_space(CNN, {}, [], DEFAULTS)
    start = start_params(space, DEFAULTS, baseline_params(space, DEFAULTS), H200)
    study = optuna.create_study(direction="maximize")
    cfg = {"workload": {"name": "cnn"}, "knobs": {}, "preset": None, "device": "cuda"}
    plan = SimpleNamespace(study=study, space=space, defaults=DEFAULTS, handbook=start, trials_dir=tmp_path / "trials",
                           study_name="s", study_id="id", cfg=cfg, objectives=[("throughput", "maximize")])  # fmt: skip
    settler = Settler(plan)

    def out_of_memory(params: dict, mark: tuple = ()) -> None:
        trial = study.ask()
        if mark == ("stage", "start"):  # the staged sampler's mark on the start it proposes
            storage_of(study).set_trial_system_attr(trial._trial_id, STAGE_KEY, "start")
        elif mark:
            trial.set_user_attr(*mark)
        for name in params:
            trial.suggest_categorical(name, list(space.params[name].choices))  # type: ignore[attr-defined]
        settler.settle(trial._trial_id, trial.number, params, TrialOutcome(Status.INFEASIBLE, "oom", "out of memory"),
                       launched=False)  # fmt: skip

    def queued() -> list:
        return [t.system_attrs["fixed_params"] for t in study.get_trials(states=(optuna.trial.TrialState.WAITING,))]

    study.enqueue_trial(start)
    out_of_memory(start)
    assert queued() == [{**start, "knobs.batch_size": 128}]
    out_of_memory({**start, "knobs.batch_size": 128})
    assert queued() == [{**start, "knobs.batch_size": 64}]
    out_of_memory({**start, "knobs.batch_size": 64})
    assert queued() == [], "no smaller batch in the space"
    out_of_memory({**DEFAULTS, "knobs.batch_size": 256})
    assert queued() == [], "not the handbook's start"
    fed = {**start, "knobs.num_workers": 4, "knobs.pin_memory": False}  # the staged sampler's: the best's pipeline
    out_of_memory(fed)
    assert queued() == [], "the start's model side on another pipeline, not marked: another configuration"
    out_of_memory(fed, ("stage", "start"))
    assert queued() == [{**fed, "knobs.batch_size": 128}], "the start fed otherwise keeps its pipeline"
    (retry,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert retry.user_attrs == {START_KEY: True}
    out_of_memory({**fed, "knobs.batch_size": 128}, (START_KEY, True))  # the retry, popped from the queue
    assert queued() == [{**fed, "knobs.batch_size": 64}]


def test_the_knobs_a_start_wakes_are_fixed_not_drawn() -> None:
    """The start's workers make their prefetch depth, niceness and any other knob under ``num_workers > 0`` active,
    none of which the baseline (no worker) fixes: the start takes the fewest prefetched batches and the most
    niceness, and the workload's default for a knob no rule names, so that it is one configuration, not a draw of
    the sampler (two H100 JPEG sweeps measured their starts at prefetch 2 and nice 10, and at 4 and 0)."""
    params = {
        "knobs.precision": "choice(fp32, bf16)",
        "knobs.num_workers": "choice(0, 4, 8)",
        "knobs.prefetch_factor": "choice(2, 4)",
        "knobs.worker_nice": "choice(0, 10)",
        "knobs.persistent": "choice(false, true)",
        "knobs.shuffle_seed": "choice(1, 2)",
    }
    conditions = {k: "knobs.num_workers > 0" for k in
                  ("knobs.prefetch_factor", "knobs.worker_nice", "knobs.persistent", "knobs.shuffle_seed")}  # fmt: skip
    defaults = {"knobs.precision": "fp32", "knobs.num_workers": 0, "knobs.prefetch_factor": None,
                "knobs.worker_nice": 0, "knobs.persistent": True, "knobs.shuffle_seed": None}  # fmt: skip
    space = build_space(params, conditions, [], defaults)
    baseline = baseline_params(space, defaults)
    assert "knobs.prefetch_factor" not in baseline and "knobs.worker_nice" not in baseline
    start = start_params(space, defaults, baseline, H200)
    assert start == {"knobs.precision": "bf16", "knobs.num_workers": 8, "knobs.prefetch_factor": 2,
                     "knobs.worker_nice": 10, "knobs.persistent": True}, start  # fmt: skip
    # no default and no rule: the sampler's (knobs.shuffle_seed); on the CPU no worker is picked, nothing wakes
    assert start_params(space, defaults, baseline, CPU) == {"knobs.precision": "bf16", "knobs.num_workers": 0}
