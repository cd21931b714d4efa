"""Pruning: Optuna's pruners, fed from inside a running trial.

The trial process reports its throughput so far between blocks of measured steps; the task (parent of the
trial process) forwards each report to the Optuna trial through the shared storage and answers "prune" when
the pruner says so. Works under any launcher that can reach the storage.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

import optuna

from sweeper.errors import ConfigError
from sweeper.sweep.config.settings import PrunerConf, PrunerType
from sweeper.sweep.config.structured import build

PRUNERS: tuple[str, ...] = typing.get_args(PrunerType)


def pruner_conf(conf: PrunerConf | Mapping[str, Any] | None) -> PrunerConf:
    """``hydra.sweeper.pruner`` as the typed :class:`PrunerConf` (a mapping, as the trial's context carries it, or
    None: the defaults)."""
    return conf if isinstance(conf, PrunerConf) else build(PrunerConf, dict(conf or {}))


def make_pruner(conf: PrunerConf | Mapping[str, Any] | None) -> optuna.pruners.BasePruner:
    """The pruner that ``hydra.sweeper.pruner`` describes (see :class:`PrunerConf` for the keys)."""
    c = pruner_conf(conf)
    if c.type == "none":
        return optuna.pruners.NopPruner()
    if c.type == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=int(c.n_startup_trials), n_warmup_steps=int(c.n_warmup_steps)
        )
    if c.type == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=c.min_resource, reduction_factor=int(c.reduction_factor)
        )
    if c.type == "hyperband":  # Optuna's HyperbandPruner takes no "auto": its smallest resource is then 1 step
        min_resource = 1 if c.min_resource == "auto" else c.min_resource
        return optuna.pruners.HyperbandPruner(min_resource=min_resource, reduction_factor=int(c.reduction_factor))
    raise ConfigError("hydra.sweeper.pruner.type", f"{c.type!r} is not a pruner", f"use one of: {', '.join(PRUNERS)}")


def reporter(context: dict[str, Any]) -> Callable[[int, float], bool] | None:
    """``report(step, value) -> prune?`` for the trial named in the sweeper's context, or None (no pruning)."""
    pruner = pruner_conf(context.get("pruner"))
    if pruner.type == "none" or context.get("number") is None:
        return None
    from sweeper.sweep.config.secrets import reveal
    from sweeper.sweep.study.optuna_private import study_id
    from sweeper.sweep.study.trials import make_storage

    storage = make_storage(reveal(context["storage"]))
    study = optuna.load_study(study_name=context["study"], storage=storage, pruner=make_pruner(pruner))
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id(study), int(context["number"]))
    trial = optuna.trial.Trial(study, trial_id)

    def report(step: int, value: float) -> bool:
        trial.report(value, step)  # throughput so far (pruning needs the single objective throughput:maximize)
        return trial.should_prune()

    return report
