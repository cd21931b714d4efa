"""The handbook's start where the workload declares starts: the staged sampler proposes it after them (and after
the best one's diagnosed warm steps) instead of the queue; a later command on the study that would not propose
it (another sampler, no starts) queues it, once."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from sweeper.sweep.config.space import build_space
from sweeper.sweep.search import samplers, warm
from sweeper.sweep.study import trials as st

PARAMS = {"knobs.precision": "choice(fp32,bf16)", "knobs.compile": "choice(off,default)",
          "knobs.batch_size": "choice(64,256)", "knobs.num_workers": "choice(0,4)"}  # fmt: skip
DEFAULTS = {"knobs.precision": "fp32", "knobs.compile": "off", "knobs.batch_size": 64, "knobs.num_workers": 0}
HANDBOOK = {"knobs.precision": "bf16", "knobs.compile": "default", "knobs.batch_size": 256, "knobs.num_workers": 4}
START = {"knobs.precision": "bf16", "knobs.compile": "off", "knobs.batch_size": 64, "knobs.num_workers": 0}


@pytest.fixture(autouse=True)
def _quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)


def _command(storage: optuna.storages.BaseStorage, sampler_name: str, starts: list[dict]) -> SimpleNamespace:
    """One command's queueing on study "s", as the sweep loop does it (its sampler wired the same way)."""
    space = build_space(PARAMS, {}, [], DEFAULTS)
    sampler = samplers.make_sampler(sampler_name, 0, space, {"knobs.compile": "off"}, DEFAULTS)
    study = optuna.create_study(study_name="s", storage=storage, load_if_exists=True, direction="maximize",
                                sampler=sampler)  # fmt: skip
    declared = [(f"starts[{i}]", p, {}) for i, p in enumerate(starts)]
    plan = SimpleNamespace(study=study, space=space, storage=storage, warm_sources=[], defaults=DEFAULTS,
                           starts=declared, handbook=HANDBOOK)  # fmt: skip
    if hasattr(sampler, "deferred"):
        sampler.deferred = warm.deferred_start(plan)
    warm.queue_first(plan, 3)
    warm.queue_deferred(plan)
    return plan


def _queued(study: optuna.Study) -> list[dict]:
    return [t.system_attrs["fixed_params"] for t in study.get_trials(states=(TrialState.WAITING,))]


def test_with_starts_the_staged_sampler_proposes_the_handbooks_start_after_them() -> None:
    storage = optuna.storages.InMemoryStorage()
    plan = _command(storage, "staged", [START])
    assert HANDBOOK not in _queued(plan.study) and START in _queued(plan.study)
    for _ in range(2):  # the baseline, the start
        trial = plan.study.ask()
        st.sample(trial, plan.space, DEFAULTS)
        plan.study.tell(trial, 1.0)
    trial = plan.study.ask()
    assert st.sample(trial, plan.space, DEFAULTS) == HANDBOOK
    plan.study.tell(trial, 2.0)
    trial = plan.study.ask()
    assert st.sample(trial, plan.space, DEFAULTS) != HANDBOOK, "proposed once"


def test_without_starts_or_with_another_sampler_it_is_queued() -> None:
    for sampler_name, starts in (("staged", []), ("tpe", [START])):
        plan = _command(optuna.storages.InMemoryStorage(), sampler_name, starts)
        assert HANDBOOK in _queued(plan.study), sampler_name


@pytest.mark.parametrize(("sampler_name", "starts"), [("tpe", [START]), ("staged", [])])
def test_a_later_command_that_would_not_propose_it_queues_it_once(sampler_name: str, starts: list[dict]) -> None:
    """The first command left it to the staged sampler and ended before it ran (killed, or its n_trials reached);
    the next one, with another sampler or no starts, queues it; a third finds it queued and adds none."""
    storage = optuna.storages.InMemoryStorage()
    first = _command(storage, "staged", [START])
    assert HANDBOOK not in _queued(first.study)
    later = _command(storage, sampler_name, starts)
    assert _queued(later.study).count(HANDBOOK) == 1
    again = _command(storage, sampler_name, starts)
    assert _queued(again.study).count(HANDBOOK) == 1


def test_a_later_staged_command_with_starts_leaves_it_to_its_sampler_and_none_once_measured() -> None:
    storage = optuna.storages.InMemoryStorage()
    first = _command(storage, "staged", [START])
    space = first.space
    first.study.add_trial(create_trial(params=HANDBOOK, distributions={k: space.params[k] for k in HANDBOOK},
                                       values=[3.0]))  # fmt: skip
    for sampler_name, starts in (("staged", [START]), ("tpe", [START])):
        assert HANDBOOK not in _queued(_command(storage, sampler_name, starts).study), sampler_name


def test_a_start_the_sampler_ran_fed_by_the_best_pipeline_is_not_queued_again() -> None:
    """The staged sampler ran the start with the best one's input pipeline (no worker, where the rules give 4;
    marked as the start): a later command with another sampler does not queue the rules' configuration again,
    nor does a staged one propose it. Another trial with its model side (not the start: a data-bound baseline, a
    declared start, another night's) leaves it to run."""
    from sweeper.sweep.study.attrs import STAGE_KEY

    fed = {**HANDBOOK, "knobs.num_workers": 0}
    other = optuna.storages.InMemoryStorage()
    space = _command(other, "staged", [START]).space
    dists = {k: space.params[k] for k in fed}
    optuna.load_study(study_name="s", storage=other).add_trial(create_trial(params=fed, distributions=dists,
                                                                            values=[3.0]))  # fmt: skip
    assert HANDBOOK in _queued(_command(other, "tpe", [START]).study), "not marked: the start has not run"
    storage = optuna.storages.InMemoryStorage()
    first = _command(storage, "staged", [START])
    first.study.add_trial(create_trial(params=fed, distributions=dists, values=[3.0],
                                       system_attrs={STAGE_KEY: "start"}))  # fmt: skip
    assert HANDBOOK not in _queued(_command(storage, "tpe", [START]).study)
    later = _command(storage, "staged", [START])
    for _ in range(3):  # the baseline, the start, then the sampler's own
        trial = later.study.ask()
        assert st.sample(trial, later.space, DEFAULTS) != HANDBOOK
        later.study.tell(trial, 1.0)
