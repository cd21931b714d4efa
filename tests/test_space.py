"""The parsed search space: a pinned knob keeps its declared condition."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution

from sweeper.sweep.config.space import build_space
from sweeper.sweep.search.samplers import make_sampler
from sweeper.sweep.study.trials import sample


def test_a_pinned_knob_keeps_its_condition() -> None:
    defaults = {"workload.data": "jpeg", "knobs.num_workers": 0, "knobs.pin_memory": False}
    conditions = {"knobs.pin_memory": "workload.data == 'jpeg' and knobs.num_workers > 0"}
    space = build_space({"knobs.num_workers": "choice(0, 4)", "knobs.pin_memory": "true"}, conditions, [], defaults)
    assert space.params["knobs.pin_memory"] == CategoricalDistribution([True]) and not space.fixed
    study = optuna.create_study(sampler=make_sampler("grid", 0, space))  # the sweeper's grid sampler
    seen = set()
    for _ in range(2):
        trial = study.ask()
        values = sample(trial, space, defaults)
        study.tell(trial, 1.0)
        seen.add((values["knobs.num_workers"], values["knobs.pin_memory"]))
    assert seen == {(0, None), (4, True)}, "pinned true with workers, inactive (null) without"


def test_a_knob_pinned_to_null_needs_no_condition() -> None:
    defaults = {"knobs.num_workers": 0, "knobs.prefetch_factor": None}
    space = build_space(
        {"knobs.num_workers": "choice(0, 4)", "knobs.prefetch_factor": "null"},
        {"knobs.prefetch_factor": "knobs.num_workers > 0"},
        [],
        defaults,
    )
    assert space.fixed == {"knobs.prefetch_factor": None} and "knobs.prefetch_factor" not in space.conditions


def test_a_condition_false_for_the_whole_run_takes_the_knob_out_of_the_grid() -> None:
    """Data knobs on synthetic data: null for every trial, so a grid does not multiply by their choices; their
    column types still come from the choices (rows of both data sources stay readable together)."""
    from sweeper.sweep.config.space import value_types

    params = {
        "knobs.precision": "choice(fp32, bf16)",
        "knobs.num_workers": "choice(0, 4)",
        "knobs.prefetch_factor": "choice(2, 4)",
    }
    conditions = {
        "knobs.num_workers": "workload.data == 'jpeg'",
        "knobs.prefetch_factor": "workload.data == 'jpeg' and knobs.num_workers > 0",
    }
    defaults = {
        "workload.data": "synthetic",
        "knobs.precision": "fp32",
        "knobs.num_workers": 0,
        "knobs.prefetch_factor": None,
    }
    space = build_space(params, conditions, [], defaults)
    assert list(space.params) == ["knobs.precision"] and space.size() == 2
    assert space.fixed == {"knobs.num_workers": None, "knobs.prefetch_factor": None}
    assert value_types(space) == {"knobs.precision": str, "knobs.num_workers": int, "knobs.prefetch_factor": int}
    jpeg = build_space(params, conditions, [], {**defaults, "workload.data": "jpeg"})
    assert list(jpeg.params) == ["knobs.precision", "knobs.num_workers", "knobs.prefetch_factor"]
    assert jpeg.conditions == conditions


def test_contains_respects_types_and_steps() -> None:
    from optuna.distributions import IntDistribution

    from sweeper.sweep.config.space import contains

    assert contains(CategoricalDistribution([False, True]), True)
    assert not contains(CategoricalDistribution([False, True]), 1), "1 == True, but 1 is not a choice here"
    assert not contains(CategoricalDistribution([0, 1]), True)
    steps = IntDistribution(64, 256, step=64)
    assert contains(steps, 192) and not contains(steps, 100) and not contains(steps, 320)
    assert not contains(IntDistribution(1, 8), 2.5)


def test_a_start_fixes_knobs_in_dependency_order() -> None:
    """What a start fixes: a knob outside the space does not switch on the knobs that depend on it."""
    defaults = {
        "knobs.num_workers": 0,
        "knobs.prefetch_factor": None,
        "knobs.compile": "off",
        "knobs.precision": "fp32",
    }
    space = build_space(
        {
            "knobs.num_workers": "choice(0, 2)",
            "knobs.prefetch_factor": "choice(2, 4)",
            "knobs.precision": "choice(fp32, bf16)",
            "knobs.compile": "off",
        },
        {"knobs.prefetch_factor": "knobs.num_workers > 0"},
        [],
        defaults,
    )
    recipe = {
        "knobs.prefetch_factor": 4,
        "knobs.num_workers": 14,
        "knobs.precision": "bf16",
        "knobs.compile": "default",
    }
    kept, dropped = space.fix(recipe, defaults)
    assert kept == {"knobs.precision": "bf16"}
    assert set(dropped) == {"knobs.num_workers", "knobs.prefetch_factor", "knobs.compile"}
    assert "outside" in dropped["knobs.num_workers"] and "inactive" in dropped["knobs.prefetch_factor"]
    assert "pinned" in dropped["knobs.compile"]
    kept, _ = space.fix({**recipe, "knobs.num_workers": 2}, defaults)
    assert kept == {"knobs.num_workers": 2, "knobs.prefetch_factor": 4, "knobs.precision": "bf16"}
