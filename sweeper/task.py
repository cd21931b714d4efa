"""The Hydra task function: one trial. Checks the device can run it, runs it isolated, writes its Parquet row.

Runs wherever Hydra's launcher puts it (in the sweeper process, a joblib worker, a SLURM job), so it writes
its own row: results land even when the sweeper is on another machine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sweeper import gpu, store
from optuna.distributions import BaseDistribution

from sweeper.config import plain as config_plain, preset_params, trial_config
from sweeper.errors import ConfigError
from sweeper.space import parse_param, value_types
from sweeper.outcome import Status, TrialOutcome
import workloads


def objectives_of(hydra_sweeper_cfg: Any) -> list[tuple[str, str]]:
    objs = getattr(hydra_sweeper_cfg, "objectives", None) or [{"metric": "throughput", "direction": "maximize"}]
    return [(str(o["metric"]), str(o.get("direction", "maximize"))) for o in objs]


def _hydra_info() -> tuple[Path, list[tuple[str, str]], dict[str, Any]]:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    params = OmegaConf.to_container(hc.sweeper.params, resolve=True) if "params" in hc.sweeper else {}
    return Path(hc.runtime.output_dir), objectives_of(hc.sweeper), params or {}


def _column_types(params: dict[str, Any]) -> dict[str, Any]:
    """Arrow types of knob columns, from the search space (a knob inactive under a condition is null)."""
    dists = {}
    for key, text in params.items():
        try:
            parsed = parse_param(key, text)
        except ConfigError:
            continue
        if isinstance(parsed, BaseDistribution):
            dists[key] = parsed
    return store.column_types(value_types(dists))


def run_trial(cfg: DictConfig) -> dict[str, Any]:
    """Run the trial described by ``cfg``; returns the outcome as a dict (never raises for a trial's failure)."""
    plain = config_plain(cfg)
    info = gpu.device_info()
    tcfg = trial_config(plain, info)
    output_dir, objectives, params = _hydra_info()
    wl = tcfg["workload"]
    module = workloads.load(wl["name"], wl.get("module"))
    reason = module.check(tcfg, info) if hasattr(module, "check") else None
    if reason:
        now = time.time()
        outcome = TrialOutcome(Status.SKIPPED, f"invalid:{reason}", reason, started_at=now, ended_at=now)
    elif tcfg["trial"].get("isolate", True):
        from sweeper.runner import run_isolated

        outcome = run_isolated(tcfg, float(tcfg["trial"]["timeout_s"]), output_dir / "trial.log")
    else:
        from sweeper.trial import run_here

        outcome = run_here(tcfg)
    study = tcfg["trial"].get("study") or f"{wl['name']}-runs"
    number = tcfg["trial"].get("number")
    row = store.make_row(outcome, study=study, trial=number, cfg=tcfg, objectives=objectives)
    types = _column_types({**params, **preset_params(tcfg)})
    store.write_row(store.trial_path(Path(tcfg["results_dir"]) / "trials", study, number), row, types)
    return outcome.to_dict()
