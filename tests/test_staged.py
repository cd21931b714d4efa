"""The staged (cost-aware) strategy, called directly: screen with compile off, promote the best screened
configurations with each compile mode (best expected gain per second first), then search the whole space."""

from __future__ import annotations

import time
import warnings

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from sweeper.results.outcome import Status, TrialOutcome
from sweeper.sweep.config.space import SearchSpace, build_space
from sweeper.sweep.search import samplers
from sweeper.sweep.search.budget import Budget
from sweeper.sweep.search.staged import STAGE_KEY, StagedSampler
from sweeper.sweep.study import trials as st
from tests.faultload.costly import speed

PARAMS = {
    "knobs.level": "choice(1,2,3,4,5,6)",
    "knobs.batch": "choice(1,2)",
    "knobs.compile": "choice(off,default,max)",
}
DEFAULTS = {"knobs.level": 1, "knobs.batch": 1, "knobs.compile": "off"}
EXPENSIVE = {"knobs.compile": "off"}


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)


def _sweep(seed: int, n: int) -> list[tuple[str, dict, float]]:
    """``n`` asks of a staged study on the costly workload's formula (compile: 10 s more per trial)."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    study = optuna.create_study(
        direction="maximize", sampler=samplers.make_sampler("staged", seed, space, EXPENSIVE, DEFAULTS)
    )
    seen: set[tuple] = set()
    out = []
    for _ in range(n):
        trial = study.ask()
        v = st.sample(trial, space, DEFAULTS)
        y = speed(v["knobs.level"], v["knobs.batch"], v["knobs.compile"])
        key = tuple(v.values())
        cost = 0.0 if key in seen else 1.0 + 10.0 * (v["knobs.compile"] != "off")
        status, reason = (Status.SKIPPED, "duplicate:0") if key in seen else (Status.COMPLETE, "")
        st.tell(
            study,
            trial,
            TrialOutcome(status, reason, metrics={"throughput": y}, started_at=0.0, ended_at=cost),
            [("throughput", "maximize")],
        )
        seen.add(key)
        frozen = study.trials[-1]
        assert frozen.user_attrs["wall_s"] == cost, "each trial's cost reaches the study"
        out.append((frozen.system_attrs[STAGE_KEY], v, y))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_screen_then_promote_the_best_screened_with_each_mode_then_search(seed: int) -> None:
    trials = _sweep(seed, 30)
    stages = [s for s, _v, _y in trials]
    n_screen = stages.index("promote")
    assert n_screen >= 8 and stages[:n_screen] == ["screen"] * n_screen, "min_screen trials first, all screened"
    assert all(v["knobs.compile"] == "off" for _s, v, _y in trials[:n_screen]), "compile held cheap while screening"
    screened = [(y, v) for _s, v, y in trials[:n_screen]]
    best_screened = max(screened, key=lambda r: r[0])[1]
    promoted = [v for s, v, _y in trials if s == "promote"]
    # The best screened configuration comes first with each expensive value, in declared order.
    assert promoted[:2] == [{**best_screened, "knobs.compile": "default"}, {**best_screened, "knobs.compile": "max"}]
    assert "screen" not in stages[n_screen:], "the screen never comes back"
    searched = [v for s, v, _y in trials if s == "search"]
    assert searched and {v["knobs.compile"] for v in searched} & {"default", "max"}, "then the whole space"
    assert max(y for _s, _v, y in trials) == pytest.approx(speed(6, 2, "max")), "the best configuration is found"


def _add(study: optuna.Study, level: int, compile: str, value: float, cost: float, stage: str) -> None:
    study.add_trial(
        create_trial(
            state=TrialState.COMPLETE,
            value=value,
            params={"knobs.level": level, "knobs.batch": 1, "knobs.compile": compile},
            distributions={k: d for k, d in build_space(PARAMS, {}, [], DEFAULTS).params.items()},
            user_attrs={"wall_s": cost},
            system_attrs={STAGE_KEY: stage},
        )
    )


def test_promotions_go_by_expected_gain_per_second_and_skip_hopeless_ones() -> None:
    """default: 1.75x for 10 s, max: 1.8x for 40 s. After both were measured on the best screened configuration,
    the next screened one goes to default first (expected 17.3 for 10 s beats 17.8 for 40 s); a configuration
    that cannot reach the best even with the slack allowance is not promoted at all."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    sampler = StagedSampler(
        optuna.samplers.RandomSampler(seed=0), space, EXPENSIVE, DEFAULTS, top_k=3, min_screen=3, patience=1
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for level, value in ((6, 10.0), (5, 9.9), (1, 2.0)):
        _add(study, level, "off", value, 1.0, "screen")
    _add(study, 6, "default", 17.5, 10.0, "promote")
    _add(study, 6, "max", 18.0, 40.0, "promote")
    stage, plan = sampler.next_plan(study)
    assert (stage, plan) == ("promote", {"knobs.level": 5, "knobs.batch": 1, "knobs.compile": "default"})
    _add(study, 5, "default", 17.3, 10.0, "promote")
    assert sampler.next_plan(study) == ("promote", {"knobs.level": 5, "knobs.batch": 1, "knobs.compile": "max"})
    _add(study, 5, "max", 17.8, 40.0, "promote")
    # level 1 (2.0 screened) promoted would be ~3.6: far below 18; nothing is worth its cost, the search goes on.
    assert sampler.next_plan(study) == ("search", {})


def test_without_an_expensive_knob_in_the_space_it_is_its_base_sampler() -> None:
    params = {**PARAMS, "knobs.compile": "off"}  # pinned: every trial costs the same
    space = build_space(params, {}, [], DEFAULTS)
    staged = samplers.make_sampler("staged", 3, space, EXPENSIVE, DEFAULTS)
    base = samplers.make_sampler("staged", 3, space, {}, DEFAULTS)
    picks = []
    for sampler in (staged, base):
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for _ in range(14):
            trial = study.ask()
            v = st.sample(trial, space, DEFAULTS)
            study.tell(trial, speed(v["knobs.level"], v["knobs.batch"], "off"))
        picks.append([t.params for t in study.trials])
    assert picks[0] == picks[1]


def test_screening_ends_at_half_of_the_time_budget() -> None:
    """With hydra.sweeper.timeout_s=10, screened trials of 2 s each end the screen after 3 (6 s >= 5 s), long
    before min_screen and patience would."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    sampler = samplers.make_sampler("staged", 0, space, EXPENSIVE, DEFAULTS, budget_s=10.0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for level in (1, 2):
        _add(study, level, "off", float(level), 2.0, "screen")
    assert sampler.next_plan(study) == ("screen", EXPENSIVE)
    _add(study, 3, "off", 3.0, 2.0, "screen")
    assert sampler.next_plan(study) == ("promote", {"knobs.level": 3, "knobs.batch": 1, "knobs.compile": "default"})


def test_screening_ends_when_half_of_the_time_budget_has_passed_on_the_clock() -> None:
    """A trial still running (or the sweep's own overhead) costs wall-clock time before any wall_s is told."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    now = [time.time()]
    budget = Budget(4.0, started_at=now[0] - 0.5, clock=lambda: now[0])  # the sweep's one clock, faked
    sampler = samplers.make_sampler("staged", 0, space, EXPENSIVE, DEFAULTS, budget_s=4.0, budget=budget)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    _add(study, 2, "off", 2.0, 0.01, "screen")
    assert sampler.next_plan(study) == ("screen", EXPENSIVE)
    now[0] += 1.4  # 1.9 s of the 4 s budget: still screening
    assert sampler.next_plan(study) == ("screen", EXPENSIVE)
    now[0] += 0.2  # 2.1 s: half the budget has passed on the sweep's clock
    assert sampler.next_plan(study)[0] == "promote"


def _promoting() -> tuple[StagedSampler, optuna.Study]:
    """A staged sampler whose screen ends at once (min_screen 3, patience 1), and its study."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    sampler = StagedSampler(
        optuna.samplers.RandomSampler(seed=0), space, EXPENSIVE, DEFAULTS, top_k=3, min_screen=3, patience=1
    )
    return sampler, optuna.create_study(direction="maximize", sampler=sampler)


def _started(study: optuna.Study) -> None:
    """The sweep's queued opening: the defaults, the handbook's start (compiled, 10 s; queued trials carry no
    stage), then the start's cheap twin, screened."""
    _add(study, 1, "off", 1.0, 2.0, "screen")
    _queued(study, 3, "default", 5.0, 10.0)
    _add(study, 3, "off", 3.0, 2.0, "screen")


def test_a_fruitless_screen_ends_once_it_has_cost_a_promotion() -> None:
    """Ski-rental's rule: screened trials that bring no gain stop once they have cost what a trial of the expensive
    class costs (the start's 10 s): the fourth of 3 s ends the screen, before min_screen (8) or patience (6)."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    sampler = samplers.make_sampler("staged", 0, space, EXPENSIVE, DEFAULTS)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    _started(study)
    for level in (2, 4, 5):
        _add(study, level, "off", 2.5, 3.0, "screen")
        assert sampler.next_plan(study) == ("screen", EXPENSIVE), "9 s of fruitless screening < 10 s"
    _add(study, 6, "off", 2.5, 3.0, "screen")
    assert sampler.next_plan(study)[0] == "promote"


def test_a_mode_never_measured_is_learned_on_the_incumbents_twin() -> None:
    """The compiled start leads; its cheap twin ranks second among the screened (a neighbour measured 3.02 against
    its 3.0, within noise): the mode never measured goes on the start's configuration, its one-knob neighbour."""
    sampler, study = _promoting()
    _started(study)
    _add(study, 4, "off", 3.02, 2.0, "screen")
    assert sampler.next_plan(study) == ("promote", {"knobs.level": 3, "knobs.batch": 1, "knobs.compile": "max"})


def test_local_search_tries_the_incumbents_neighbours_best_main_effect_first() -> None:
    """With nothing expensive, a trial is a one-knob neighbour of the best configuration so far that no trial has
    measured: a value never measured first, then by the main effect of the changed value (its mean log value in
    the measurements so far), best first."""
    params = {"knobs.a": "choice(1,2,3)", "knobs.b": "choice(x,y)", "knobs.c": "choice(p,q)"}
    defaults = {"knobs.a": 1, "knobs.b": "x", "knobs.c": "p"}
    space = build_space(params, {}, [], defaults)
    study = optuna.create_study(direction="maximize", sampler=samplers.make_sampler("staged", 0, space, {}, defaults))
    measured = {(1, "x", "p"): 1.0, (2, "x", "p"): 2.0, (1, "x", "q"): 1.8, (1, "y", "p"): 0.5}
    for (a, b, c), v in measured.items():
        config = {"knobs.a": a, "knobs.b": b, "knobs.c": c}
        study.add_trial(create_trial(params=config, distributions=dict(space.params), values=[v]))
    asked = []
    for _ in range(3):
        trial = study.ask()
        v = st.sample(trial, space, defaults)
        asked.append((v["knobs.a"], v["knobs.b"], v["knobs.c"]))
        study.tell(trial, 1.0)  # below the incumbent (2, x, p): it stays the incumbent
    # a=3 was never measured; c=q (mean log of 1.8) beats c=p (of 1, 2 and 0.5); b=y (of 0.5) is worst.
    assert asked == [(3, "x", "p"), (2, "x", "q"), (2, "y", "p")]


def test_a_data_bound_incumbent_changes_its_input_pipeline_first() -> None:
    """The incumbent waited for its data (data_wait_frac 0.5): its DataLoader set its speed, so its neighbours that
    change the input pipeline's knobs come before a model knob's value never measured. Fed in time (0.0), the
    value never measured comes first, as above."""
    params = {"knobs.a": "choice(1,2,3)", "knobs.num_workers": "choice(0,4,8)"}
    defaults = {"knobs.a": 1, "knobs.num_workers": 0}
    space = build_space(params, {}, [], defaults)
    firsts = []
    for wait in (0.5, 0.0):
        sampler = samplers.make_sampler("staged", 0, space, {}, defaults)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for (a, w), v in {(1, 0): 1.0, (2, 0): 2.0, (1, 4): 1.5}.items():
            config = {"knobs.a": a, "knobs.num_workers": w}
            attrs = {"data_wait_frac": wait if (a, w) == (2, 0) else 0.0}
            study.add_trial(create_trial(params=config, distributions=dict(space.params), values=[v], user_attrs=attrs))
        v = st.sample(study.ask(), space, defaults)
        firsts.append((v["knobs.a"], v["knobs.num_workers"]))
    # workers=8 was never measured either; both pipeline values beat a=3 where the incumbent starved
    assert firsts[0][0] == 2 and firsts[0][1] in (4, 8)
    assert firsts[1] == (3, 0)


def test_a_device_bound_incumbent_moves_input_work_back_to_the_host_first() -> None:
    """The incumbent decodes half of each batch on the GPU, kept it 99 % busy and never waited for its data: its
    neighbour that decodes one share step less there comes before a model knob's value never measured and before
    the other shares. With the GPU 80 % busy, or its step waiting for data, the value never measured leads."""
    params = {"knobs.a": "choice(1,2,3)", "knobs.decode_device": "choice(cpu, cuda, hybrid)",
              "knobs.gpu_share": "choice(0.25, 0.375, 0.5, 0.75)"}  # fmt: skip
    defaults = {"knobs.a": 1, "knobs.decode_device": "cpu", "knobs.gpu_share": 0.5}
    conditions = {"knobs.gpu_share": "knobs.decode_device == 'hybrid'"}
    space = build_space(params, conditions, [], defaults)
    measured = {(1, "cpu", None): 1.0, (2, "cpu", None): 1.5, (2, "hybrid", 0.5): 2.0}
    firsts = []
    for util, wait in ((99.0, 0.001), (80.0, 0.001), (99.0, 0.05)):
        sampler = samplers.make_sampler("staged", 0, space, {}, defaults)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for (a, dev, share), v in measured.items():
            config = {"knobs.a": a, "knobs.decode_device": dev, **({"knobs.gpu_share": share} if share else {})}
            attrs = {"gpu_util_mean": util, "data_wait_frac": wait}
            dists = {k: space.params[k] for k in config}
            study.add_trial(create_trial(params=config, distributions=dists, values=[v], user_attrs=attrs))
        v = st.sample(study.ask(), space, defaults)
        firsts.append((v["knobs.a"], v["knobs.decode_device"], v.get("knobs.gpu_share")))
    assert firsts[0] == (2, "hybrid", 0.375), firsts
    assert firsts[1][0] == 3 and firsts[2][0] == 3, firsts


def test_a_device_bound_incumbent_changes_its_own_work_before_its_pipeline() -> None:
    """The incumbent kept the GPU 99 % busy and never waited, and its one step toward the host was measured: the
    device sets its speed, so a model knob's value never measured (a=3) comes before an input pipeline's value
    never measured (8 workers, or a knob that exists for the pipeline's sake: ``cuda_connections`` under a
    condition on the decoder) at every seed; a model value measured worse than the incumbent's (a=0) does not."""
    params = {"knobs.a": "choice(0,1,2,3)", "knobs.num_workers": "choice(4,8)",
              "knobs.decode_device": "choice(cpu, hybrid)", "knobs.cuda_connections": "choice(8, 32)"}  # fmt: skip
    defaults = {"knobs.a": 1, "knobs.num_workers": 4, "knobs.decode_device": "cpu", "knobs.cuda_connections": 8}
    space = build_space(params, {"knobs.cuda_connections": "knobs.decode_device != 'cpu'"}, [], defaults)
    values = {(1, "hybrid"): 1.0, (0, "hybrid"): 0.5, (2, "hybrid"): 2.0, (2, "cpu"): 1.9}
    hybrid = {"knobs.cuda_connections": 32}
    measured = [({"knobs.a": a, "knobs.num_workers": 4, "knobs.decode_device": dev}
                 | (hybrid if dev == "hybrid" else {}), v) for (a, dev), v in values.items()]  # fmt: skip
    for seed in range(8):
        asked = [v["knobs.a"] for v in _asked_after_busy(space, defaults, measured, seed, 2)]
        assert asked[0] == 3, (seed, asked)
        assert asked[1] == 2, (seed, asked)  # then the pipeline's values never measured, before a=0


def test_a_device_bound_incumbent_steps_its_batch_along_the_measured_trend() -> None:
    """The incumbent kept the GPU busy at batch 512, and batch 256 was measured slower: the model's knobs come
    first, but a batch smaller than a measured worse one is expected no better (a monotone trend), so batch 1024,
    beyond the improving end, and the other knob's unmeasured value come before batch 128 and 64 at every seed,
    and so does the pipeline's unmeasured value, in the tier below (a batch of 64 beside a busy compiled JPEG
    best cost an H100-priced replay 41 s for 4,454 img/s against 6,032)."""
    params = {"knobs.batch_size": "choice(64, 128, 256, 512, 1024)", "knobs.a": "choice(0, 1)",
              "knobs.num_workers": "choice(4, 8)"}  # fmt: skip
    defaults = {"knobs.batch_size": 256, "knobs.a": 0, "knobs.num_workers": 4}
    space = build_space(params, {}, [], defaults)
    measured = [({"knobs.batch_size": b, "knobs.a": 0, "knobs.num_workers": 4}, v) for b, v in ((256, 1.0), (512, 2.0))]
    for seed in range(8):
        keys = ("knobs.batch_size", "knobs.a", "knobs.num_workers")
        asked = [tuple(v[k] for k in keys) for v in _asked_after_busy(space, defaults, measured, seed, 3)]
        assert sorted(asked[:2]) == [(512, 1, 4), (1024, 0, 4)], (seed, asked)
        assert asked[2] == (512, 0, 8), (seed, asked)  # then the pipeline's unmeasured value, before batch 128, 64


def test_a_device_bound_incumbent_tries_tf32_after_the_knobs_that_may_pay() -> None:
    """fp16 runs best on a busy GPU, fp32 measured far slower, tf32 never: tf32 is expected no better than the
    better of them (half fp16's tensor-core rate), so the batch step along its improving trend comes first at every
    seed, then tf32 (on the H100 JPEG sweep of 2026-12-07 a tf32 trial cost 58 s for 3,242 img/s beside fp16's
    6,216, before batch 1024 was tried). Where fp32 ran nearly as fast as fp16 (a step set by launches, not the
    tensor cores) and the batch's other values ran slower, tf32 may pay: it comes with fp32 among the first two."""
    params = {"knobs.precision": "choice(fp32, tf32, fp16)", "knobs.batch_size": "choice(256, 512, 1024)"}
    defaults = {"knobs.precision": "fp32", "knobs.batch_size": 256}
    space = build_space(params, {}, [], defaults)
    keys = ("knobs.precision", "knobs.batch_size")
    from sweeper.sweep.search.staged import _expected_effect

    alone = [create_trial(params={"knobs.precision": "fp32", "knobs.batch_size": 256}, distributions=dict(space.params),
                          values=[0.3])]  # fmt: skip
    assert _expected_effect(alone, "knobs.precision", "tf32", ["fp32", "tf32", "fp16"], 1.0) == float("inf"), (
        "beside fp32 alone tf32 may be several times faster: nothing bounds it"
    )
    slow = [(("fp32", 256), 0.3), (("fp16", 256), 1.0), (("fp16", 512), 1.2)]
    near = [(("fp32", 256), 1.15), (("fp16", 256), 1.0), (("fp16", 512), 1.2), (("fp16", 1024), 1.1)]
    for seed in range(4):
        for landscape in (slow, near):
            measured = [(dict(zip(keys, c)), v) for c, v in landscape]
            asked = [tuple(v[k] for k in keys) for v in _asked_after_busy(space, defaults, measured, seed, 2)]
            if landscape is slow:
                assert asked == [("fp16", 1024), ("tf32", 512)], (seed, asked)
            else:
                assert ("tf32", 512) in asked and ("fp32", 512) in asked, (seed, asked)


def test_the_plain_local_search_tries_values_nothing_bounds_before_tf32() -> None:
    """Trials the device did not set (no GPU utilization measured: neither busy nor starved), fp16 measured
    best and fp32 far behind: the local search explores values never measured, but tf32 is bounded by the
    reduced precision measured (:func:`_expected_effect`), so channels_last, which nothing bounds, comes first
    at every seed, not tf32 (each a cold compile of a compiled best)."""
    params = {"knobs.precision": "choice(fp32, tf32, fp16)", "knobs.memory_format": "choice(contiguous, cl)",
              "knobs.batch_size": "choice(256, 512)"}  # fmt: skip
    defaults = {"knobs.precision": "fp32", "knobs.memory_format": "contiguous", "knobs.batch_size": 256}
    space = build_space(params, {}, [], defaults)
    keys = ("knobs.precision", "knobs.memory_format", "knobs.batch_size")
    landscape = [(("fp32", "contiguous", 256), 0.3), (("fp16", "contiguous", 256), 1.0),
                 (("fp16", "contiguous", 512), 1.2)]  # fmt: skip
    measured = [(dict(zip(keys, c)), v) for c, v in landscape]
    for seed in range(8):
        asked = [tuple(v[k] for k in keys) for v in _asked_after(space, defaults, measured, seed, 1, {})]
        assert asked == [("fp16", "cl", 512)], (seed, asked)


def _asked_after_busy(space: SearchSpace, defaults: dict, measured: list, seed: int, n: int) -> list[dict]:
    """The staged sampler's next ``n`` configurations after ``measured`` ((config, value) pairs), each trial of
    which kept the GPU 99 % busy and never waited for its data."""
    return _asked_after(space, defaults, measured, seed, n, {"gpu_util_mean": 99.0, "data_wait_frac": 0.001})


def _asked_after(space: SearchSpace, defaults: dict, measured: list, seed: int, n: int, attrs: dict) -> list[dict]:
    """The staged sampler's next ``n`` configurations after ``measured`` ((config, value) pairs, each trial with
    the user attributes ``attrs``)."""
    sampler = samplers.make_sampler("staged", seed, space, {}, defaults)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for config, v in measured:
        dists = {k: space.params[k] for k in config}
        study.add_trial(create_trial(params=config, distributions=dists, values=[v], user_attrs=attrs))
    asked = []
    for _ in range(n):
        trial = study.ask()
        asked.append(st.sample(trial, space, defaults))
        study.tell(trial, 1.0)
    return asked


def test_toward_host_is_one_step_along_each_split_knob() -> None:
    from workloads.spec.data import toward_host

    shares = (0.25, 0.375, 0.5, 0.75)
    assert toward_host("gpu_share", 0.5, 0.375, shares) and not toward_host("gpu_share", 0.5, 0.25, shares)
    assert not toward_host("gpu_share", 0.5, 0.75, shares) and not toward_host("gpu_share", 0.25, 0.375, shares)
    devices = ("cpu", "cuda", "hybrid")
    assert toward_host("decode_device", "cuda", "hybrid", devices)
    assert toward_host("decode_device", "hybrid", "cpu", devices)
    assert not toward_host("decode_device", "cuda", "cpu", devices)
    assert not toward_host("decode_device", "cpu", "hybrid", devices)
    assert toward_host("decode_device", "cuda", "cpu", ("cpu", "cuda")), "one step among the values the space gives"
    assert toward_host("augment_device", "cuda", "cpu", ("cpu", "cuda"))
    assert not toward_host("num_workers", 8, 4, (4, 8)), "not a split between host and device"


def test_a_data_bound_pair_measures_no_mode_and_teaches_none() -> None:
    """The compiled start and its screened twin both waited for their data (5.0 vs 5.0): the pair says nothing of
    compile's default mode, so no ratio of 1.0 is read off it, and neither mode is learned on that configuration;
    a screened configuration fed in time learns them, default first (declared order)."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    sampler = StagedSampler(
        optuna.samplers.RandomSampler(seed=0), space, EXPENSIVE, DEFAULTS, top_k=3, min_screen=3, patience=1
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    dists = dict(space.params)

    def add(level: int, compile: str, value: float, wait: float, stage: str | None) -> None:
        config = {"knobs.level": level, "knobs.batch": 1, "knobs.compile": compile}
        attrs = {"wall_s": 10.0 if compile != "off" else 2.0, "data_wait_frac": wait}
        system = {STAGE_KEY: stage} if stage else {}
        study.add_trial(
            create_trial(params=config, distributions=dists, values=[value], user_attrs=attrs, system_attrs=system)
        )

    add(1, "off", 1.0, 0.0, "screen")
    add(3, "default", 5.0, 0.6, None)  # the handbook's start, queued
    add(3, "off", 5.0, 0.6, "screen")  # its twin: the same feed
    assert sampler._effect({"knobs.compile": "default"}, study.trials, study.trials[::2], 1.0)[0] is None
    add(2, "off", 4.0, 0.0, "screen")
    add(4, "off", 3.9, 0.0, "screen")
    assert sampler.next_plan(study) == ("promote", {"knobs.level": 2, "knobs.batch": 1, "knobs.compile": "default"})


def _queued(study: optuna.Study, level: int, compile: str, value: float, cost: float, **attrs: object) -> None:
    """A trial the sweep queued (the baseline, the handbook's start, a declared start): it carries no stage."""
    study.add_trial(
        create_trial(
            state=TrialState.COMPLETE,
            value=value,
            params={"knobs.level": level, "knobs.batch": 1, "knobs.compile": compile},
            distributions={k: d for k, d in build_space(PARAMS, {}, [], DEFAULTS).params.items()},
            user_attrs={"wall_s": cost, **attrs},
        )
    )


def test_queued_trials_do_not_spend_the_screen_before_the_starts_twin() -> None:
    """Four queued trials, two of them no gain (27 s of eager trials beside a 14 s compiled start): the screen has
    not begun, so it goes on, and its first trial is the start's cheap twin."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    sampler = samplers.make_sampler("staged", 0, space, EXPENSIVE, DEFAULTS)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for level, compile, value, cost in ((4, "off", 3.0, 9.0), (1, "off", 1.0, 9.0), (3, "default", 5.0, 14.0)):
        _queued(study, level, compile, value, cost)
    _queued(study, 2, "off", 2.0, 9.0)
    assert sampler.next_plan(study) == ("screen", EXPENSIVE)
    v = st.sample(study.ask(), space, DEFAULTS)
    assert v == {"knobs.level": 3, "knobs.batch": 1, "knobs.compile": "off"}


def test_a_compile_the_cache_answered_does_not_price_the_screens_end() -> None:
    """The start found Inductor's cache warm (11 s, no graph compiled): a promotion compiles, so its price is not
    that, and 18 s of fruitless screening does not end the screen."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    sampler = samplers.make_sampler("staged", 0, space, EXPENSIVE, DEFAULTS)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    _queued(study, 1, "off", 1.0, 2.0)
    _queued(study, 3, "default", 5.0, 11.0, compile_cache_hits=2, compile_cache_misses=0)
    _add(study, 3, "off", 3.0, 9.0, "screen")
    for level in (2, 4):
        _add(study, level, "off", 2.5, 9.0, "screen")
    assert sampler.next_plan(study) == ("screen", EXPENSIVE)


def test_a_mode_whose_learning_trial_failed_is_learned_on_the_next() -> None:
    """The start's twin tried max and failed: max is then learned on the next screened configuration."""
    sampler, study = _promoting()
    _started(study)
    _add(study, 4, "off", 2.9, 2.0, "screen")
    study.add_trial(
        create_trial(
            state=TrialState.FAIL,
            params={"knobs.level": 3, "knobs.batch": 1, "knobs.compile": "max"},
            distributions=dict(build_space(PARAMS, {}, [], DEFAULTS).params),
            system_attrs={STAGE_KEY: "promote"},
        )
    )
    assert sampler.next_plan(study) == ("promote", {"knobs.level": 4, "knobs.batch": 1, "knobs.compile": "max"})


def test_local_search_reads_main_effects_where_the_study_minimizes() -> None:
    """The neighbours of the test above, step times instead of speeds (1 / value): the same order."""
    params = {"knobs.a": "choice(1,2,3)", "knobs.b": "choice(x,y)", "knobs.c": "choice(p,q)"}
    defaults = {"knobs.a": 1, "knobs.b": "x", "knobs.c": "p"}
    space = build_space(params, {}, [], defaults)
    study = optuna.create_study(direction="minimize", sampler=samplers.make_sampler("staged", 0, space, {}, defaults))
    measured = {(1, "x", "p"): 1.0, (2, "x", "p"): 2.0, (1, "x", "q"): 1.8, (1, "y", "p"): 0.5}
    for (a, b, c), v in measured.items():
        config = {"knobs.a": a, "knobs.b": b, "knobs.c": c}
        study.add_trial(create_trial(params=config, distributions=dict(space.params), values=[1.0 / v]))
    asked = []
    for _ in range(3):
        trial = study.ask()
        v = st.sample(trial, space, defaults)
        asked.append((v["knobs.a"], v["knobs.b"], v["knobs.c"]))
        study.tell(trial, 1.0)
    assert asked == [(3, "x", "p"), (2, "x", "q"), (2, "y", "p")]


def test_local_search_is_off_in_the_ablation() -> None:
    """``polish_every=0`` (bench/sampler_efficiency.py's staged-nolocal) leaves every choice to TPE."""
    space = build_space({"knobs.a": "choice(1,2,3)"}, {}, [], {"knobs.a": 1})
    sampler = StagedSampler(optuna.samplers.RandomSampler(seed=0), space, {}, {"knobs.a": 1}, polish_every=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.add_trial(create_trial(params={"knobs.a": 1}, distributions=dict(space.params), values=[1.0]))
    trial = study.ask()
    st.sample(trial, space, {"knobs.a": 1})
    assert trial.number not in sampler._plans


def test_a_spare_plan_puts_the_best_pipeline_on_a_graph_already_compiled() -> None:
    """ResNet-50 from JPEGs on an H100: the compiled start (bf16, batch 1024, CPU decoding) was data-bound; hybrid
    decoding, found eager (fp16, batch 512), became the best; its compiled promotion (a new graph, cold) did not
    fit. What fits: the compiled graph already measured with the best's input-pipeline knobs (declared
    graph-neutral), a warm compile; once queued, another plan. Without the declaration, or with a compiled best, no
    such plan."""
    params = {"knobs.precision": "choice(bf16,fp16)", "knobs.batch": "choice(512,1024)",
              "knobs.compile": "choice(off,default)", "knobs.decode": "choice(cpu,hybrid)",
              "knobs.share": "choice(0.25,0.5)"}  # fmt: skip
    defaults = {"knobs.precision": "bf16", "knobs.batch": 512, "knobs.compile": "off", "knobs.decode": "cpu",
                "knobs.share": None}  # fmt: skip
    space = build_space(params, {"knobs.share": "knobs.decode == 'hybrid'"}, [], defaults)
    sampler = StagedSampler(optuna.samplers.RandomSampler(seed=0), space, EXPENSIVE, defaults)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    start = {"knobs.precision": "bf16", "knobs.batch": 1024, "knobs.compile": "default", "knobs.decode": "cpu"}
    hybrid = {"knobs.precision": "fp16", "knobs.batch": 512, "knobs.compile": "off", "knobs.decode": "hybrid",
              "knobs.share": 0.5}  # fmt: skip
    for config, value in ((defaults, 394.0), (start, 3540.0), (hybrid, 4877.0)):
        config = {k: v for k, v in config.items() if v is not None}
        dists = {k: space.params[k] for k in config}
        study.add_trial(create_trial(params=config, distributions=dists, values=[value]))
    cold = {**hybrid, "knobs.compile": "default"}
    sampler.fits = lambda p: p.get("knobs.compile") == "off" or p.get("knobs.precision") == "bf16"  # the cold one not
    sampler.neutral = frozenset({"knobs.decode", "knobs.share"})
    assert not sampler.fits(cold)
    twin = sampler.spare_plan(study)
    assert twin == {**start, "knobs.decode": "hybrid", "knobs.share": 0.5}
    assert sampler.spare_plan(study) == twin  # nothing queued yet: the same answer
    study.enqueue_trial(twin)  # queued, not yet run (the JPEG sweep queued one spare plan three times, 2026-12-05)
    assert sampler.spare_plan(study) not in ({}, twin)
    sampler.neutral = frozenset()
    assert sampler.spare_plan(study) != twin


def test_a_spare_plan_never_queues_a_neighbour_that_cannot_reach_the_best() -> None:
    """ResNet-50 from JPEGs on an H100, replayed: with the best configuration's neighbours all measured, the spare
    plan queued neighbours of the baseline (no worker, ~330 img/s beside a best of 3,090) for the time left. A
    neighbour of a configuration behind the best must hope, from its changed value's main effect (with the slack),
    to pass the best; a value never measured always may."""
    params = {"knobs.precision": "choice(bf16,fp16)", "knobs.batch": "choice(512,1024)",
              "knobs.compile": "choice(off,default)", "knobs.workers": "choice(0,14)"}  # fmt: skip
    defaults = {"knobs.precision": "bf16", "knobs.batch": 512, "knobs.compile": "off", "knobs.workers": 0}
    space = build_space(params, {}, [], defaults)
    sampler = StagedSampler(optuna.samplers.RandomSampler(seed=0), space, EXPENSIVE, defaults)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    measured = [(("bf16", 512, 0), 300.0), (("fp16", 512, 0), 310.0), (("bf16", 512, 14), 3000.0),
                (("fp16", 512, 14), 3050.0), (("fp16", 1024, 14), 3000.0), (("bf16", 1024, 14), 2990.0)]  # fmt: skip
    for (precision, batch, workers), value in measured:
        config = {"knobs.precision": precision, "knobs.batch": batch, "knobs.compile": "off", "knobs.workers": workers}
        study.add_trial(create_trial(params=config, distributions=dict(space.params), values=[value]))
    sampler.fits = lambda p: p.get("knobs.compile") == "off"  # no compile fits the time left
    assert sampler.spare_plan(study) == {}, "batch 1024 with no worker: 300 img/s can gain 3x, not the 10x it needs"
    sampler.space.params["knobs.workers"] = optuna.distributions.CategoricalDistribution([0, 14, 8])
    best8 = {"knobs.precision": "fp16", "knobs.batch": 512, "knobs.workers": 8}
    sampler.fits = lambda p: p.get("knobs.compile") == "off" and any(p.get(k) != v for k, v in best8.items())
    plan = sampler.spare_plan(study)  # the best's own neighbour does not fit: one behind it, a value never measured
    assert plan.get("knobs.workers") == 8 and plan.get("knobs.precision") == "bf16", plan


def test_spare_time_skips_numbers_beyond_a_worsening_trend_and_neighbours_below_the_best() -> None:
    """JPEG on an H100 (2026-12-06 09:22): the best compiled at batch 1024, batches 512 and 256 measured slower, and
    the spare time went to eager trials at batch 128 and 64 (3,396 and 2,116 img/s beside 5,723). In spare time a
    number never measured beyond a measured one that was worse than the next inward is expected no better than it,
    and the best's own neighbours must hope to reach it; beyond the improving end (2048) it is still worth a try,
    and so is a number between measured ones (the search itself, outside spare time, still tries them all)."""
    params = {"knobs.batch": "choice(64,128,256,512,1024)", "knobs.compile": "choice(off,default)",
              "knobs.fused": "choice(false,true)"}  # fmt: skip
    defaults = {"knobs.batch": 256, "knobs.compile": "off", "knobs.fused": False}
    measured = [((256, "off", False), 600.0), ((512, "off", True), 4876.0), ((1024, "default", True), 5723.0),
                ((1024, "default", False), 5664.0), ((1024, "off", True), 4900.0)]  # fmt: skip

    def spare(choices: str) -> dict:
        space = build_space({**params, "knobs.batch": choices}, {}, [], defaults)
        sampler = StagedSampler(optuna.samplers.RandomSampler(seed=0), space, EXPENSIVE, defaults)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for (batch, compile_, fused), value in measured:
            config = {"knobs.batch": batch, "knobs.compile": compile_, "knobs.fused": fused}
            study.add_trial(create_trial(params=config, distributions=dict(space.params), values=[value]))
        sampler.fits = lambda p: p.get("knobs.compile") == "off"  # no compile fits the time left
        return sampler.spare_plan(study)

    plan = spare("choice(64,128,256,512,1024)")
    assert plan.get("knobs.batch") not in (64, 128), f"beyond 256, which was worse than 512: {plan}"
    assert spare("choice(64,128,256,512,1024,2048)").get("knobs.batch") == 2048, "beyond the improving end"
    assert spare("choice(64,128,256,384,512,1024)").get("knobs.batch") == 384, "between measured numbers"


def test_spare_time_skips_a_neighbour_of_the_best_whose_value_measured_worse() -> None:
    """The best is compiled and no compile fits the time left; its eager twin waits in the queue. A neighbour of
    that twin whose changed value measured worse elsewhere (c=q: 3 beside 10 and 4) cannot reach the best and is
    not queued (it was: the best's neighbours had no bound): nothing is, and the repeats of the top get the time."""
    params = {"knobs.a": "choice(1,2)", "knobs.c": "choice(p,q)", "knobs.compile": "choice(off,default)"}
    defaults = {"knobs.a": 1, "knobs.c": "p", "knobs.compile": "off"}
    space = build_space(params, {}, [], defaults)
    sampler = StagedSampler(optuna.samplers.RandomSampler(seed=0), space, EXPENSIVE, defaults)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for (a, c, compile_), value in [((1, "p", "default"), 10.0), ((2, "q", "off"), 3.0), ((2, "p", "off"), 4.0)]:
        config = {"knobs.a": a, "knobs.c": c, "knobs.compile": compile_}
        study.add_trial(create_trial(params=config, distributions=dict(space.params), values=[value]))
    study.enqueue_trial({"knobs.a": 1, "knobs.c": "p", "knobs.compile": "off"})  # the best's twin, queued
    sampler.fits = lambda p: p.get("knobs.compile") == "off"
    assert sampler.spare_plan(study) == {}


def test_a_diagnosed_step_sets_the_knobs_it_wakes_to_their_defaults_or_is_not_taken() -> None:
    """A compiled best that keeps the GPU busy without waiting: the step of its input work toward the host is
    proposed before the screen, the knobs the step makes active at the workload's defaults (hybrid -> cpu wakes
    ``device_prefetch``); a step that wakes a knob with no default among its choices (cuda -> hybrid wakes
    ``gpu_share``) is not one step on a warm graph and is left to the search."""
    params = {"knobs.compile": "choice(off,default)", "knobs.decode_device": "choice(cpu,cuda,hybrid)",
              "knobs.gpu_share": "choice(0.25,0.5)", "knobs.cpu_decoder": "choice(torchvision,pil)",
              "knobs.device_prefetch": "choice(false,true)"}  # fmt: skip
    conditions = {"knobs.gpu_share": "knobs.decode_device == 'hybrid'",
                  "knobs.cpu_decoder": "knobs.decode_device != 'cuda'",
                  "knobs.device_prefetch": "knobs.decode_device == 'cpu'"}  # fmt: skip
    defaults = {"knobs.compile": "off", "knobs.decode_device": "cpu", "knobs.gpu_share": None,
                "knobs.cpu_decoder": "torchvision", "knobs.device_prefetch": False}  # fmt: skip
    space = build_space(params, conditions, [], defaults)
    busy = {"wall_s": 40.0, "gpu_util_mean": 99.0, "data_wait_frac": 0.0}
    for best, step in (
        (
            {
                "knobs.compile": "default",
                "knobs.decode_device": "hybrid",
                "knobs.gpu_share": 0.25,
                "knobs.cpu_decoder": "pil",
            },  # fmt: skip
            {
                "knobs.compile": "default",
                "knobs.decode_device": "cpu",
                "knobs.cpu_decoder": "pil",
                "knobs.device_prefetch": False,
            },
        ),
        ({"knobs.compile": "default", "knobs.decode_device": "cuda"}, None),
    ):
        sampler = StagedSampler(optuna.samplers.RandomSampler(seed=1), space, EXPENSIVE, defaults)
        sampler.neutral = frozenset(k for k in params if k != "knobs.compile")
        study = optuna.create_study(direction="maximize", sampler=sampler)
        dists = {k: space.params[k] for k in best}
        study.add_trial(create_trial(params=best, distributions=dists, values=[100.0], user_attrs=busy))
        stage, plan = sampler.next_plan(study)
        if step is None:
            assert stage == "screen", plan
        else:
            assert (stage, plan) == ("led", step)


def test_a_data_bound_plateau_asks_for_no_step_by_noise_and_no_chain() -> None:
    """Compiled configurations that all waited for their data at the host's pace (a plateau, within 0.3 %):
    pipeline values whose main effects differ by noise ask for no diagnosed step (a replay of the resnet50 space
    ran 30-640 such steps in a row before the rule); a value whose main effect is measured 4 % above the best's
    is the step, from the best only."""
    params = {"knobs.compile": "choice(off,default)", "knobs.num_workers": "choice(4,8,12)",
              "knobs.prefetch_factor": "choice(2,4)"}  # fmt: skip
    defaults = {"knobs.compile": "off", "knobs.num_workers": 4, "knobs.prefetch_factor": 2}
    space = build_space(params, {}, [], defaults)
    starved = {"wall_s": 20.0, "gpu_util_mean": 60.0, "data_wait_frac": 0.3}
    plateau = {(4, 2): 1000.0, (8, 2): 1003.0, (8, 4): 1001.0, (12, 4): 999.0, (4, 4): 1002.0}
    measured = {(4, 2): 900.0, (8, 2): 1000.0, (8, 4): 900.0, (12, 4): 990.0, (4, 4): 880.0}
    for values, expect in ((plateau, {}), (measured, {"knobs.compile": "default", "knobs.num_workers": 12,
                                                      "knobs.prefetch_factor": 2})):  # fmt: skip
        sampler = StagedSampler(optuna.samplers.RandomSampler(seed=0), space, EXPENSIVE, defaults)
        sampler.neutral = frozenset({"knobs.num_workers", "knobs.prefetch_factor"})
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for (workers, prefetch), v in values.items():
            config = {"knobs.compile": "default", "knobs.num_workers": workers, "knobs.prefetch_factor": prefetch}
            dists = {k: space.params[k] for k in config}
            study.add_trial(create_trial(params=config, distributions=dists, values=[v], user_attrs=starved))
        trials = study.get_trials(deepcopy=False)
        assert sampler._led_step(trials, trials, 1.0) == expect


def test_a_diagnosed_step_that_wakes_a_knob_of_the_graph_is_not_taken() -> None:
    """A step toward the host that makes a model knob active (declared under a data knob's condition, not
    graph-neutral) would compile the graph anew: it is left to the search, not run first as a warm step."""
    params = {"knobs.compile": "choice(off,default)", "knobs.decode_device": "choice(cpu,hybrid)",
              "knobs.memory_format": "choice(contiguous,channels_last)"}  # fmt: skip
    conditions = {"knobs.memory_format": "knobs.decode_device == 'cpu'"}
    defaults = {"knobs.compile": "off", "knobs.decode_device": "cpu", "knobs.memory_format": "channels_last"}
    space = build_space(params, conditions, [], defaults)
    sampler = StagedSampler(optuna.samplers.RandomSampler(seed=1), space, EXPENSIVE, defaults)
    sampler.neutral = frozenset({"knobs.decode_device"})
    study = optuna.create_study(direction="maximize", sampler=sampler)
    best = {"knobs.compile": "default", "knobs.decode_device": "hybrid"}
    busy = {"wall_s": 40.0, "gpu_util_mean": 99.0, "data_wait_frac": 0.0}
    study.add_trial(create_trial(params=best, distributions={k: space.params[k] for k in best}, values=[100.0],
                                 user_attrs=busy))  # fmt: skip
    assert sampler.next_plan(study)[0] == "screen"
    sampler.neutral = frozenset({"knobs.decode_device", "knobs.memory_format"})
    assert sampler.next_plan(study) == ("led", {**best, "knobs.decode_device": "cpu",
                                                "knobs.memory_format": "channels_last"})  # fmt: skip


def _fed_start_study(wait: float | None = 0.001) -> tuple[optuna.Study, object, dict, dict]:
    """A space without an expensive knob; the handbook's deferred start wants a=2, fused, half of each batch on the
    GPU and 8 workers; the best measured (a=1, foreach, 1/2, 4 workers) kept the GPU busy, waiting ``wait``."""
    params = {"knobs.a": "choice(1, 2)", "knobs.optimizer_impl": "choice(foreach, fused)",
              "knobs.gpu_share": "choice(0.25, 0.5)", "knobs.num_workers": "choice(4, 8)"}  # fmt: skip
    defaults = {"knobs.a": 1, "knobs.optimizer_impl": "foreach", "knobs.gpu_share": 0.5, "knobs.num_workers": 4}
    space = build_space(params, {}, [], defaults)
    sampler = samplers.make_sampler("staged", 0, space, {}, defaults)
    sampler.neutral = frozenset({"knobs.optimizer_impl", "knobs.gpu_share", "knobs.num_workers"})
    sampler.deferred = {"knobs.a": 2, "knobs.optimizer_impl": "fused", "knobs.gpu_share": 0.5, "knobs.num_workers": 8}
    study = optuna.create_study(direction="maximize", sampler=sampler)
    best = dict(defaults)
    attrs = {"gpu_util_mean": 99.0, **({"data_wait_frac": wait} if wait is not None else {})}
    study.add_trial(create_trial(params=best, distributions=dict(space.params), values=[2.0], user_attrs=attrs))
    return study, space, defaults, best


def _run(study: optuna.Study, space: object, defaults: dict, value: float, wait: float) -> dict:
    trial = study.ask()
    config = st.sample(trial, space, defaults)
    trial.set_user_attr("data_wait_frac", wait)
    trial.set_user_attr("gpu_util_mean", 99.0)
    study.tell(trial, value)
    return config


def test_without_an_expensive_knob_the_diagnosed_step_then_the_start_fed_by_the_best_pipeline() -> None:
    """No expensive knob in the space: the busy best's step toward the host first, then the handbook's deferred
    start with the best's input pipeline (the step's, which beat it: 1/4 on the GPU, 4 workers) in place of the
    rules' own, its other knobs the rules' (fused, though graph-neutral too), once: after a new best on another
    pipeline, not again."""
    study, space, defaults, best = _fed_start_study()
    assert _run(study, space, defaults, 2.1, 0.05) == {**best, "knobs.gpu_share": 0.25}
    fed = _run(study, space, defaults, 1.0, 0.0)
    assert fed == {**best, "knobs.a": 2, "knobs.optimizer_impl": "fused", "knobs.gpu_share": 0.25}, fed
    eight = {**best, "knobs.gpu_share": 0.25, "knobs.num_workers": 8}
    study.add_trial(create_trial(params=eight, distributions=dict(space.params), values=[3.0],
                                 user_attrs={"gpu_util_mean": 80.0, "data_wait_frac": 0.0}))  # fmt: skip
    again = {**eight, "knobs.a": 2, "knobs.optimizer_impl": "fused"}  # the start fed by the new best's pipeline
    assert all(_run(study, space, defaults, 1.0, 0.0) != again for _ in range(3))


def test_the_start_takes_no_pipeline_from_a_best_whose_data_wait_is_unknown() -> None:
    """A best with no data wait recorded (an older row, another study's history) says nothing of its pipeline: the
    start runs with the rules' own."""
    study, space, defaults, _best = _fed_start_study(wait=None)
    assert _run(study, space, defaults, 1.0, 0.0) == study.sampler.deferred


def test_a_knob_feeds_the_pipeline_by_its_name_or_the_names_its_condition_reads() -> None:
    from sweeper.sweep.search.costs import feeds

    params = {"knobs.decode_device": "choice(cpu, hybrid)", "knobs.cuda_connections": "choice(8, 32)",
              "knobs.num_workers_x": "choice(1, 2)", "knobs.tag": "choice(a, b)",
              "knobs.b": "choice(1, 2)"}  # fmt: skip
    conditions = {"knobs.cuda_connections": "knobs.decode_device != 'cpu'", "knobs.b": "knobs.num_workers_x > 1",
                  "knobs.tag": "'knobs.num_workers' != knobs.num_workers_x"}  # fmt: skip
    defaults = {"knobs.decode_device": "cpu", "knobs.cuda_connections": 8, "knobs.num_workers_x": 1,
                "knobs.tag": "a", "knobs.b": 1}  # fmt: skip
    space = build_space(params, conditions, [], defaults)
    assert feeds(space, "knobs.decode_device") and feeds(space, "knobs.cuda_connections")
    assert not any(feeds(space, k) for k in ("knobs.num_workers_x", "knobs.b", "knobs.tag"))


def test_a_starved_best_without_workers_steps_to_workers_with_the_handbooks_prefetch() -> None:
    """A diagnosed step from a best that waited for its data and has no DataLoader workers to the worker count whose
    measured main effect beats its own wakes ``prefetch_factor`` (its condition: workers), whose default is null:
    it takes the handbook's pick (the fewest batches), so the step is one warm trial instead of none; with no
    handbook picks it is left to the search, as before."""
    params = {"knobs.a": "choice(1,2)", "knobs.num_workers": "choice(0,4)", "knobs.prefetch_factor": "choice(2,4)"}
    defaults = {"knobs.a": 1, "knobs.num_workers": 0, "knobs.prefetch_factor": None}
    space = build_space(params, {"knobs.prefetch_factor": "knobs.num_workers > 0"}, [], defaults)
    steps = []
    for picks in ({"knobs.prefetch_factor": 2}, {}):
        sampler = samplers.make_sampler("staged", 0, space, {}, defaults)
        sampler.neutral, sampler.handbook = frozenset(params), picks
        study = optuna.create_study(direction="maximize", sampler=sampler)
        measured = {(1, 0, None): (1.0, 0.5), (1, 4, 4): (1.6, 0.0), (2, 0, None): (2.0, 0.5)}
        for (a, w, pf), (v, wait) in measured.items():
            config = {"knobs.a": a, "knobs.num_workers": w, **({"knobs.prefetch_factor": pf} if pf else {})}
            dists = {k: space.params[k] for k in config}
            study.add_trial(create_trial(params=config, distributions=dists, values=[v],
                                         user_attrs={"data_wait_frac": wait}))  # fmt: skip
        trials = study.get_trials(deepcopy=False)
        steps.append(sampler._led_step(trials, trials, 1.0))
    assert steps[0] == {"knobs.a": 2, "knobs.num_workers": 4, "knobs.prefetch_factor": 2}
    assert steps[1] == {}


def test_a_neighbour_that_wakes_a_knob_sets_it_as_the_handbook_would() -> None:
    """The local search's neighbour of a best with no DataLoader workers, to 4 workers, wakes ``prefetch_factor``
    (its condition: workers): it takes the handbook's pick where there is one, else the workload's default where
    that is among its choices, else it is left to the base sampler (not a random draw from a sampler that knows
    nothing of it, where a rule says which value to try)."""
    params = {"knobs.a": "choice(1,2)", "knobs.num_workers": "choice(0,4)", "knobs.prefetch_factor": "choice(2,4)"}
    conditions = {"knobs.prefetch_factor": "knobs.num_workers > 0"}
    plans = []
    for picks, default in (({"knobs.prefetch_factor": 4}, 2), ({}, 2), ({}, None)):
        defaults = {"knobs.a": 1, "knobs.num_workers": 0, "knobs.prefetch_factor": default}
        space = build_space(params, conditions, [], defaults)
        sampler = samplers.make_sampler("staged", 0, space, {}, defaults)
        sampler.handbook = picks
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for (a, w), v in {(1, 0): 1.0, (2, 0): 2.0}.items():
            config = {"knobs.a": a, "knobs.num_workers": w}
            dists = {k: space.params[k] for k in config}
            study.add_trial(create_trial(params=config, distributions=dists, values=[v]))
        plans.append(sampler._polish(study))
    assert plans[0] == {"knobs.a": 2, "knobs.num_workers": 4, "knobs.prefetch_factor": 4}
    assert plans[1] == {"knobs.a": 2, "knobs.num_workers": 4, "knobs.prefetch_factor": 2}
    assert plans[2] == {"knobs.a": 2, "knobs.num_workers": 4}


def test_a_woken_knob_left_to_the_search_leaves_what_it_wakes_too() -> None:
    """The neighbour to JPEG data wakes ``num_workers``, whose workload default (2) is not among its choices: it is
    left to the base sampler, and so is ``prefetch_factor``, which only its value wakes or not (filled from the
    default 2 > 0, the plan would name a knob a zero-worker trial never samples: measured, it would still look
    untried and come again)."""
    params = {"knobs.a": "choice(1,2)", "knobs.data": "choice(synthetic,jpeg)", "knobs.num_workers": "choice(0,4)",
              "knobs.prefetch_factor": "choice(2,4)"}  # fmt: skip
    conditions = {"knobs.num_workers": "knobs.data == 'jpeg'", "knobs.prefetch_factor": "knobs.num_workers > 0"}
    defaults = {"knobs.a": 1, "knobs.data": "synthetic", "knobs.num_workers": 2, "knobs.prefetch_factor": 2}
    space = build_space(params, conditions, [], defaults)
    sampler = samplers.make_sampler("staged", 0, space, {}, defaults)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for (a, data), v in {(1, "synthetic"): 1.0, (2, "synthetic"): 2.0}.items():
        config = {"knobs.a": a, "knobs.data": data}
        study.add_trial(create_trial(params=config, distributions={k: space.params[k] for k in config}, values=[v]))
    assert sampler._polish(study) == {"knobs.a": 2, "knobs.data": "jpeg"}


def test_a_busy_best_never_steps_to_less_input_capacity() -> None:
    """A best fed by 14 workers kept the GPU busy without waiting: 4 workers (between the measured 0 and 14, so
    nothing bounds its main effect) cannot speed a step the device sets, and is not its neighbour; with its other
    neighbours measured, none is left (on an H100, 2026-12-07, the JPEG sweep spent 22 s of its last minute on 4
    workers beside such a best: 1,865 img/s against 6,101). More workers stay neighbours."""
    params = {"knobs.num_workers": "choice(0, 4, 14, 16)", "knobs.a": "choice(0, 1)"}
    defaults = {"knobs.num_workers": 0, "knobs.a": 0}
    space = build_space(params, {}, [], defaults)
    busy = {"gpu_util_mean": 99.0, "data_wait_frac": 0.001}
    plans = []
    first = {(14, 0): 2.0, (0, 0): 0.2, (14, 1): 1.5}
    for measured in (first, {**first, (16, 0): 1.9}):
        sampler = samplers.make_sampler("staged", 0, space, {}, defaults)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for (workers, a), v in measured.items():
            config = {"knobs.num_workers": workers, "knobs.a": a}
            study.add_trial(create_trial(params=config, distributions=dict(space.params), values=[v], user_attrs=busy))
        plans.append(sampler._polish(study))
    assert plans == [{"knobs.num_workers": 16, "knobs.a": 0}, {}], plans
