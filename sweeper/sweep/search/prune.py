"""Pruning: Optuna's pruners, fed from inside a running trial.

The trial process reports its throughput so far between blocks of measured steps; the task (parent of the
trial process) forwards each report to the Optuna trial through the shared storage and answers "prune" when
the pruner says so. Works under any launcher that can reach the storage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna

from sweeper.errors import ConfigError

PRUNERS = ("none", "median", "successive_halving", "hyperband")


def make_pruner(conf: dict[str, Any] | None) -> optuna.pruners.BasePruner:
    """The pruner that ``hydra.sweeper.pruner`` describes (see PrunerConf for the keys)."""
    conf = dict(conf or {})
    kind = conf.get("type", "none") or "none"
    if kind == "none":
        return optuna.pruners.NopPruner()
    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=int(conf.get("n_startup_trials", 3)),
                                           n_warmup_steps=int(conf.get("n_warmup_steps", 0)))
    if kind == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=conf.get("min_resource", "auto"),
                                                      reduction_factor=int(conf.get("reduction_factor", 3)))
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=conf.get("min_resource", 1) if conf.get(
            "min_resource", "auto") != "auto" else 1, reduction_factor=int(conf.get("reduction_factor", 3)))
    raise ConfigError("hydra.sweeper.pruner.type", f"{kind!r} is not a pruner", f"use one of: {', '.join(PRUNERS)}")


def reporter(context: dict[str, Any]) -> Callable[[int, float], bool] | None:
    """``report(step, value) -> prune?`` for the trial named in the sweeper's context, or None (no pruning)."""
    pruner_conf = context.get("pruner") or {}
    if (pruner_conf.get("type") or "none") == "none" or context.get("number") is None:
        return None
    from sweeper.sweep.config.secrets import reveal
    from sweeper.sweep.study.optuna_private import study_id
    from sweeper.sweep.study.trials import make_storage

    storage = make_storage(reveal(context["storage"]))
    study = optuna.load_study(study_name=context["study"], storage=storage, pruner=make_pruner(pruner_conf))
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id(study), int(context["number"]))
    trial = optuna.trial.Trial(study, trial_id)

    def report(step: int, value: float) -> bool:
        trial.report(value, step)  # throughput so far (pruning needs the single objective throughput:maximize)
        return trial.should_prune()

    return report
