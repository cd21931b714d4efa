"""Samplers by name: the staged default (cost-aware, ``sweeper.sweep.search.staged``) and Optuna's own, with the study's
resumed seed."""

from __future__ import annotations

import typing
import warnings
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from sweeper.errors import ConfigError
from sweeper.sweep.config.settings import SamplerName
from sweeper.sweep.config.space import SearchSpace, contains

SAMPLERS: tuple[str, ...] = typing.get_args(SamplerName)  # the choices of KnobSweeperConf.sampler


class _GridSampler(optuna.samplers.GridSampler):
    """GridSampler for ask/tell: it calls ``study.stop()`` when the grid is exhausted, which Optuna only allows
    inside ``optimize``; the sweep loop checks ``is_exhausted`` itself, so that call is dropped here."""

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Any) -> None:
        try:
            super().after_trial(study, trial, state, values)
        except RuntimeError:
            pass


def make_sampler(
    name: str,
    seed: int | None,
    space: SearchSpace,
    expensive: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
    budget_s: float | None = None,
    budget: Any = None,
) -> optuna.samplers.BaseSampler:
    """Sampler by name. OOM trials reach tpe, gp and nsgaii as violated constraints (``Trial.set_constraint``).

    ``staged`` (the default) is cost-aware: the knobs of ``expensive`` ({key: its cheap value}) are held cheap
    while TPE screens the others (for at most half of ``budget_s``, the sweep's seconds), then the best screened
    configurations are promoted (see ``sweeper.sweep.search.staged``). ``budget``: the sweep's
    :class:`~sweeper.sweep.search.budget.Budget` (its clock), else one of ``budget_s`` from now.
    """
    check_expensive(expensive or {}, space, defaults or {})
    if name == "staged":
        from sweeper.sweep.search.staged import StagedSampler

        return StagedSampler(
            _tpe(seed, **STAGED_TPE),
            space,
            expensive or {},
            defaults,
            budget_s=budget_s,
            budget=budget,
            seed=seed,
            **STAGED,
        )
    if name == "tpe":
        return _tpe(seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        return _GridSampler(space.grid(), seed=seed)
    if name in ("gp", "qmc"):
        _needs_scipy(name)
    if name == "gp":  # conditional knobs are sampled independently by design: no warning per trial
        return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)
    if name == "nsgaii":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed)
    raise ConfigError("hydra.sweeper.sampler", f"{name!r} is not a sampler", f"use one of: {', '.join(SAMPLERS)}")


def _needs_scipy(name: str) -> None:
    import importlib.util

    if importlib.util.find_spec("scipy") is None:
        raise ConfigError(
            "hydra.sweeper.sampler",
            f"{name} needs scipy, which is not installed",
            "pip install 'torch-knob-sweeper[report]' (it brings scipy), or use sampler=staged",
        )


def resumed_seed(storage: Any, study_name: str, seed: int | None, sampler: str) -> int | None:
    """The sampler's seed for this command. With a fixed seed, a study that already has trials gets a seed derived
    from (seed, its trial count): the same command run again continues with new configurations instead of
    replaying its first samples (which would all be duplicates). Reproducible: the same history gives the same
    seed. QMC keeps its seed: its sequence already continues from the study's trial count."""
    if seed is None or sampler == "qmc":
        return seed
    try:
        n = len(storage.get_all_trials(storage.get_study_id_from_name(study_name), deepcopy=False))
    except KeyError:  # a new study
        return seed
    if n == 0:
        return seed
    import numpy as np

    return int(np.random.SeedSequence([int(seed), n]).generate_state(1)[0])


# The staged strategy's TPE (chosen on the replays in bench/sampler_efficiency.py, the same for every workload).
STAGED_TPE: dict[str, Any] = {"n_startup_trials": 3}
# Local search around the incumbent on every trial whose neighbourhood is not exhausted (TPE proposes the others):
# on the H200 JPEG landscape, 80 seeds, the median fell from 21.5 to 12 configurations and the p90 from 57 to 18
# (bench/sampler_efficiency.py; README, Measured).
STAGED: dict[str, Any] = {"polish_every": 1}


def _tpe(seed: int | None, **options: Any) -> optuna.samplers.TPESampler:
    """TPE over the joint space (multivariate, grouped by conditions), running trials told as liars."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True, **options)


def check_expensive(expensive: Mapping[str, Any], space: SearchSpace, defaults: Mapping[str, Any]) -> None:
    """``hydra.sweeper.expensive`` names knobs of the config, each with a value its search space can give."""
    from sweeper.sweep.config.space import check_known

    for key, cheap in expensive.items():
        where = f"hydra.sweeper.expensive.{key}"
        check_known(str(key), defaults, where=where)
        dist = space.params.get(key)
        if dist is not None and not contains(dist, cheap):
            given = ", ".join(map(str, dist.choices)) if isinstance(dist, CategoricalDistribution) else str(dist)
            raise ConfigError(
                where,
                f"the cheap value {cheap!r} is not one its search space gives ({given})",
                'give the value that makes a trial cheap, e.g. knobs.compile: "off"',
            )
