"""The Hydra task function: one trial. Checks the device can run it, runs it isolated, writes its Parquet row.

Runs wherever Hydra's launcher puts it (in the sweeper process, a joblib worker, a SLURM job), so it writes
its own row: results land even when the sweeper is on another machine. Under a sweep, what it needs of the
sweep comes in one override, ``trial.context`` (JSON), never from Hydra's process-wide singletons: the sweeper
runs trials from several threads at once.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution

from sweeper.errors import ConfigError
from sweeper.results import lookup, rows, store
from sweeper.results.keys import flatten
from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.config import schema
from sweeper.sweep.config.space import parse_param, sweep_facts, value_types
from sweeper.sweep.config.trial_config import as_dict, load_workload, preset_params, trial_config
from sweeper.sweep.run.slots import Occupancy, node_lock_dir, trial_units
from sweeper.sweep.study.attrs import NODE_SHARED_KEY
from sweeper.trial import gpu, trace_analysis
from workloads.base import DeviceInfo

log = logging.getLogger(__name__)


def _single_run_context(tcfg: dict[str, Any]) -> dict[str, Any]:
    """No sweep: the run's own output folder, the configured objectives, knob types from the declared space."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    objectives = [f"{o['metric']}:{o['direction']}" for o in hc.sweeper.get("objectives") or []]  # ObjectiveConf
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
    types = lookup.column_types(value_types(dists), values)
    # A run with no knob given on the command line runs the workload's defaults: the baseline of its study.
    knob_args = [o for o in hc.overrides.task if o.lstrip("+~").startswith(("knobs.", "distributed."))]
    return {"study": f"{tcfg['workload']['name']}-runs", "number": None, "log_dir": hc.runtime.output_dir,
            "objectives": objectives or ["throughput:maximize"], "column_types": {c: str(t) for c, t in types.items()},
            "baseline": not knob_args, "facts": sweep_facts(dists, {} if knob_args else values)}


def _inactive_to_null(tcfg: dict[str, Any], conditions: Any) -> None:
    """A single run means what the same configuration means in a sweep: a knob whose declared condition does not
    hold (``knobs.fp16_reduced_precision`` when the dtype is bf16) is null, as the sweep's sampler leaves it."""
    from sweeper.results.keys import set_dotted
    from sweeper.sweep.config.space import ExpressionError, evaluate

    ns = flatten({k: v for k, v in tcfg.items() if k in ("knobs", "workload", "measure", "data", "distributed")})
    for key, expr in dict(conditions).items():
        try:
            if not evaluate(str(expr), ns):
                set_dotted(tcfg, key, None)
                ns[key] = None
        except (ExpressionError, KeyError):
            continue  # the sweep's check reports a broken condition; a single run keeps the value it was given


def encode_context(ctx: dict[str, Any]) -> str:
    """The sweep's context as one override value that Hydra passes on unchanged, whatever characters the study
    name, folders or knob values hold (quotes, backslashes, non-ASCII): URL-safe base64 of its JSON."""
    return "b64:" + base64.urlsafe_b64encode(
        json.dumps(ctx, separators=(",", ":"), default=str).encode()
    ).decode().rstrip("=")


def decode_context(raw: str) -> dict[str, Any]:
    text = str(raw)
    if text.startswith("b64:"):
        text = base64.urlsafe_b64decode(text[4:] + "=" * (-len(text[4:]) % 4)).decode()
    return json.loads(text)


def _arrow_types(names: dict[str, str]) -> dict[str, pa.DataType]:
    return {col: pa.type_for_alias(name) for col, name in names.items()}


def _run_recorded(tcfg: dict[str, Any], context: dict[str, Any]) -> tuple[TrialOutcome, list[str]]:
    """Run the trial, isolated or here, noting it in the node's occupancy record; returns its outcome and the
    other trials that ran on its cores or GPUs meanwhile (``slots.Occupancy``)."""
    if tcfg["trial"]["isolate"]:
        from sweeper.trial.isolate import preload_workload, ready

        preload_workload(tcfg)  # a launcher's worker process starts its forkserver at its first trial
        # ... and waits for its imports here, before the trial is noted as running (never past the budget's end)
        ready(context.get("stop_at"))
    with Occupancy(node_lock_dir(tcfg), trial_units(tcfg), context["study"], context["number"]) as occupancy:
        if tcfg["trial"]["isolate"]:
            from sweeper.sweep.search.prune import reporter
            from sweeper.trial.isolate import run_isolated

            outcome = run_isolated(
                tcfg,
                float(tcfg["trial"]["timeout_s"]),
                Path(context["log_dir"]) / "trial.log",
                on_report=reporter(context),
                stop_at=context.get("stop_at"),
            )
        else:
            from sweeper.trial.child import run_here

            outcome = run_here(tcfg)
        occupancy.ran(outcome.started_at, outcome.ended_at)
        shared = occupancy.shared_with(time.time())
        outcome.metrics[NODE_SHARED_KEY] = bool(shared)  # the study's too: an OOM beside another trial may pass
        return outcome, shared


_SAID: set[tuple[str, str, str]] = set()


def _first(context: dict[str, Any], cause: str) -> bool:
    """True the first time ``cause`` comes up for a sweep's study in this process (always for a single run): one
    notice per cause, not one per trial."""
    key = (str(context["study"]), str(context.get("study_id")), cause)
    if context["number"] is not None and key in _SAID:
        return False
    _SAID.add(key)
    return True


class CheckFailed(Exception):
    """The workload's own ``check()`` raised: that trial fails (one line naming where), the sweep goes on."""

    def outcome(self) -> TrialOutcome:
        now = time.time()
        return TrialOutcome(Status.FAILED, Reason.CHECK.tag(), str(self), started_at=now, ended_at=now)


def device_check(tcfg: dict[str, Any], info: DeviceInfo) -> str | None:
    """Why the workload cannot run this trial config on the device described by ``info``, or None; a ``check()``
    that raises is :class:`CheckFailed`."""
    module = load_workload(tcfg["workload"])
    target = info if tcfg["device"].startswith("cuda") else DeviceInfo(kind="cpu")  # what the trial will run on
    if not hasattr(module, "check"):
        return None
    try:
        return module.check(tcfg, target)
    except Exception as e:  # noqa: BLE001 - the workload's code: whatever it raises is this trial's failure
        import traceback

        frame = traceback.extract_tb(e.__traceback__)[-1]
        text = (str(e).strip().splitlines() or [""])[0]
        raise CheckFailed(f"the workload's check() raised {type(e).__name__}: {text} "
                          f"({frame.filename}:{frame.lineno})") from None


def named_in(reason: str, given: list[str]) -> list[str]:
    """The knob and workload keys among the overrides ``given`` that ``reason`` names (``knobs.act`` or ``act``)."""
    import re

    keys = [o.split("=", 1)[0].lstrip("+~") for o in given if "=" in o]
    knobs = [k for k in keys if k.startswith(("knobs.", "workload.", "distributed."))]
    return [k for k in knobs if re.search(rf"(?<![\w.]){re.escape(k.rsplit('.', 1)[-1])}\b", reason) or k in reason]


def refusal(reason: str, given: list[str], device: str) -> ConfigError:
    """The workload's ``check`` refused the configuration a command fixed: bad input for that command (one line,
    exit 2), named by the given key the reason names (else the first knob given)."""
    keys = [o.split("=", 1)[0].lstrip("+~") for o in given if "=" in o]
    knobs = [k for k in keys if k.startswith(("knobs.", "workload.", "distributed."))]
    key = (named_in(reason, given) or knobs or ["knobs"])[0]
    return ConfigError(key, f"the workload's check() refuses it on {device}: {reason}", "give a value it accepts")


def run_trial(cfg: DictConfig) -> dict[str, Any]:
    """Run the trial described by ``cfg``; returns the outcome as a dict (never raises for a trial's failure)."""
    info = gpu.device_info()
    raw = OmegaConf.select(cfg, "trial.context")
    if raw:
        context = decode_context(raw)
        tcfg = trial_config(as_dict(cfg), info, context.get("overrides") or [])
    else:
        from hydra.core.hydra_config import HydraConfig

        tcfg = trial_config(as_dict(cfg), info, list(HydraConfig.get().overrides.task))
        schema.validate(tcfg)  # a single run: checked here, before it starts (a sweep checked it before its first)
        _inactive_to_null(tcfg, HydraConfig.get().sweeper.get("conditions") or {})
        context = _single_run_context(tcfg)
    if int(tcfg["measure"]["profile_steps"]) > 0 and context["number"] is not None:
        tcfg["trial"]["trace"] = trace_analysis.trace_relpath(context["study"], context["number"])
    try:
        reason = device_check(tcfg, info)  # the sweeper checked before launch; a job on another node checks again
    except CheckFailed as e:
        reason, outcome = str(e), e.outcome()
    else:
        if reason and not raw:  # a single run: the one configuration asked for cannot run, as a bad knob value
            from hydra.core.hydra_config import HydraConfig

            raise refusal(reason, list(HydraConfig.get().overrides.task), tcfg["device"])
        if reason:
            now = time.time()
            outcome = TrialOutcome(Status.SKIPPED, Reason.INVALID.tag(reason), reason, started_at=now, ended_at=now)
    if not reason:
        outcome, shared = _run_recorded(tcfg, context)
    if outcome.metrics.get("window_capped") and _first(context, "window_capped"):
        log.warning(
            "trial %s: measure.max_steps stopped the window at %.3g s, before measure.min_time_s=%s s; "
            "raise measure.max_steps (preset=nightly does); said once, each row says window_capped",
            context["number"],
            outcome.metrics.get("measured_s", 0.0),
            tcfg["measure"]["min_time_s"],
        )  # once per study and process: later trials' rows say window_capped
    objectives = [tuple(o.split(":", 1)) for o in context["objectives"]]
    outcome = outcome.checked(objectives)  # an inf or NaN objective: failed in the row and in Optuna alike
    row = rows.make_row(
        outcome,
        study=context["study"],
        trial=context["number"],
        cfg=tcfg,
        objectives=objectives,
        study_id=context.get("study_id"),
    )
    row["baseline"] = bool(context.get("baseline", False))
    row["confirm_of"] = context.get("confirm_of")
    row["predicted_wall_s"] = context.get("predicted_wall_s")  # the sweeper's prediction at launch
    row.update(lookup.facts_columns(context.get("facts") or {}))
    if not reason:
        row["node_shared"], row["node_shared_with"] = bool(shared), ",".join(shared)
    store.write_trial(
        Path(tcfg["results_dir"]) / "trials", context["study"], context["number"], context.get("study_id"), row,
        {**_arrow_types(context.get("column_types") or {}), "confirm_of": pa.int64(),
         "predicted_wall_s": pa.float64()},
    )
    return outcome.to_dict()
