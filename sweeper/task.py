"""The Hydra task function: one trial. Checks the device can run it, runs it isolated, writes its Parquet row.

Runs wherever Hydra's launcher puts it (in the sweeper process, a joblib worker, a SLURM job), so it writes
its own row: results land even when the sweeper is on another machine. Under a sweep, what it needs of the
sweep comes in one override, ``trial.context`` (JSON), never from Hydra's process-wide singletons: the sweeper
runs trials from several threads at once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution

from sweeper import gpu, store
from sweeper.config import plain as config_plain, preset_params, trial_config
from sweeper.errors import ConfigError
from sweeper.outcome import Status, TrialOutcome
from sweeper.space import flatten, parse_param, value_types
import workloads
from workloads.base import DeviceInfo


def _single_run_context(tcfg: dict[str, Any]) -> dict[str, Any]:
    """No sweep: the run's own output folder, the configured objectives, knob types from the declared space."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    objectives = [f"{o['metric']}:{o.get('direction', 'maximize')}" for o in hc.sweeper.get("objectives") or []]
    params = OmegaConf.to_container(hc.sweeper.params, resolve=True) if "params" in hc.sweeper else {}
    dists = {}
    for key, text in {**(params or {}), **preset_params(tcfg)}.items():
        try:
            parsed = parse_param(key, text)
        except ConfigError:
            continue
        if isinstance(parsed, BaseDistribution):
            dists[key] = parsed
    values = flatten({k: v for k, v in tcfg.items() if k in ("knobs", "workload", "distributed")})
    types = store.column_types(value_types(dists), values)
    # A run with no knob given on the command line runs the workload's defaults: the baseline of its study.
    knob_args = [o for o in hc.overrides.task if o.lstrip("+~").startswith(("knobs.", "distributed."))]
    return {"study": f"{tcfg['workload']['name']}-runs", "number": None, "log_dir": hc.runtime.output_dir,
            "objectives": objectives or ["throughput:maximize"], "column_types": {c: str(t) for c, t in types.items()},
            "baseline": not knob_args, "facts": store.sweep_facts(dists, {} if knob_args else values)}


def _arrow_types(names: dict[str, str]) -> dict[str, pa.DataType]:
    return {col: pa.type_for_alias(name) for col, name in names.items()}


def device_check(tcfg: dict[str, Any], info: DeviceInfo) -> str | None:
    """Why the workload cannot run this trial config on the device described by ``info``, or None."""
    wl = tcfg["workload"]
    module = workloads.load(wl["name"], wl.get("module"))
    target = info if tcfg["device"].startswith("cuda") else DeviceInfo(kind="cpu")  # what the trial will run on
    return module.check(tcfg, target) if hasattr(module, "check") else None


def run_trial(cfg: DictConfig) -> dict[str, Any]:
    """Run the trial described by ``cfg``; returns the outcome as a dict (never raises for a trial's failure)."""
    info = gpu.device_info()
    raw = OmegaConf.select(cfg, "trial.context")
    if raw:
        ctx = json.loads(raw)
        tcfg = trial_config(config_plain(cfg), info, ctx.get("overrides") or [])
    else:
        from hydra.core.hydra_config import HydraConfig

        tcfg = trial_config(config_plain(cfg), info, list(HydraConfig.get().overrides.task))
        ctx = _single_run_context(tcfg)
    reason = device_check(tcfg, info)  # the sweeper checked before launch; a job on another node checks again
    if reason:
        now = time.time()
        outcome = TrialOutcome(Status.SKIPPED, f"invalid:{reason}", reason, started_at=now, ended_at=now)
    elif tcfg["trial"].get("isolate", True):
        from sweeper.prune import reporter
        from sweeper.runner import run_isolated

        outcome = run_isolated(tcfg, float(tcfg["trial"]["timeout_s"]), Path(ctx["log_dir"]) / "trial.log",
                               on_report=reporter(ctx))
    else:
        from sweeper.trial import run_here

        outcome = run_here(tcfg)
    objectives = [tuple(o.split(":", 1)) for o in ctx["objectives"]]
    row = store.make_row(outcome, study=ctx["study"], trial=ctx["number"], cfg=tcfg, objectives=objectives)
    row["baseline"] = bool(ctx.get("baseline", False))
    row["confirm_of"] = ctx.get("confirm_of")
    row.update(store.facts_columns(ctx.get("facts") or {}))
    path = store.trial_path(Path(tcfg["results_dir"]) / "trials", ctx["study"], ctx["number"])
    store.write_row(path, row, {**_arrow_types(ctx.get("column_types") or {}), "confirm_of": pa.int64()})
    return outcome.to_dict()
