"""A sweep's plan: everything resolved from the command before the first trial, in one dataclass.

``prepare`` checks the sweeper's settings, resolves the search space and the trial config of the defaults,
validates the config schemas, cuts the node into slots and opens (or resumes) the Optuna study. Bad input is
a :class:`ConfigError` (one line, exit 2) raised here, before any trial starts.
"""

from __future__ import annotations

import dataclasses
import math
import uuid
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from omegaconf import DictConfig

from sweeper.errors import ConfigError
from sweeper.sweep.config import schema, secrets
from sweeper.sweep.config.settings import COMPILE_PRIOR, COMPILE_S_PER_OP, check_sweeper, plain
from sweeper.sweep.config.space import ExpressionError, SearchSpace, check_known, evaluate
from sweeper.sweep.config.trial_config import check_enumerations, check_results_dir
from sweeper.sweep.run import launch
from sweeper.sweep.run.scheduler import process_start
from sweeper.sweep.run.slots import NodeSlots, Slot, make_slots, node_lock_dir
from sweeper.sweep.search import samplers, warm
from sweeper.sweep.search.handbook import cpu_bf16, start_params
from sweeper.sweep.search.prune import make_pruner
from sweeper.sweep.study import trials as studies
from sweeper.trial import gpu
from workloads.base import DeviceInfo

COMPILE_KNOB = "knobs.compile"  # torch.compile's mode (workloads.spec.training.TrainingKnobs.compile)
KNOWN_METRICS = (
    "throughput",
    "peak_mem_bytes",
    "peak_mem_reserved_bytes",
    "step_ms_p50",
    "step_ms_p10",
    "step_ms_p90",
    "step_ms_mean",
    "step_cv",
    "data_wait_frac",
    "data_wait_host_frac",
    "host_step_frac",
    "achieved_tflops",
    "mfu",
    "gpu_util_mean",
    "gpu_util_p10",
    "first_step_s",
    "setup_s",
    "compile_s",
    "measured_s",
    "world_size",
    "step_ms_p50_rank_min",
    "comm_frac",
    "comm_ms_per_step",
    "launch_s",
)
Start = tuple[str, dict[str, Any], dict[str, str]]  # (config key, the sampled knobs it fixes, {knob: why not})


@dataclasses.dataclass
class SweepPlan:
    """What one sweep command resolved to; fixed for the sweep's life."""

    cfg: dict[str, Any]  # the trial config of the defaults (preset and device applied, plain overrides in)
    space: SearchSpace  # what the sampler samples (params, fixed values, conditions, constraints)
    defaults: dict[str, Any]  # the defaults as flat dotted keys
    fixed_args: list[str]  # the plain (non-sweep) overrides every trial gets
    workload: str  # the workload's name
    starts: list[Start]  # hydra.sweeper.starts, checked against the space
    slots: list[Slot]  # trials at once on this node, each with its GPUs and cores
    node: NodeSlots  # the slots' cores and GPUs, locked across every sweeper process on the node
    objectives: list[tuple[str, str]]  # (metric, maximize | minimize)
    trials_dir: Path  # <results_dir>/trials: one Parquet file per trial
    study_name: str
    storage_url: str
    storage: Any  # the Optuna storage
    study: optuna.Study
    max_failures: int | None  # the failure budget: a count...
    max_failure_rate: float | None  # ...or a fraction of finished trials
    pruner_conf: dict[str, Any]  # hydra.sweeper.pruner as a plain dict (sent to each trial)
    workload_key: str = ""  # <workload>[-<data>][-<preset>]: which earlier studies a warm start may read
    warm_sources: list[str] = dataclasses.field(default_factory=list)  # hydra.sweeper.warm_start, resolved
    study_id: str = ""  # the study's random id (studies.study_id): rows and file names of two storages keep apart
    expensive: dict[str, Any] = dataclasses.field(default_factory=dict)  # hydra.sweeper.expensive (cost classes)
    created: bool = False  # this command created the study (else it continues one)
    handbook: dict[str, Any] | None = None  # the handbook's start on this device (hydra.sweeper.handbook_start)
    # the handbook's picks on the trials' device whether or not its start is measured: a knob a diagnosed step wakes
    # takes its value there (sweeper.sweep.search.staged.StagedSampler.handbook)
    rules: dict[str, Any] | None = None
    # this command's random id, written on each trial it asks (COMMAND_KEY): its own trials' failures by the
    # workload's answer are not run again by it (sweeper.sweep.search.dedup)
    command: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)


def prepare(settings: Any, config: DictConfig, launcher: Any, arguments: list[str], budget: Any = None) -> SweepPlan:
    """The plan of the sweep that the sweeper's ``settings`` (``sweeper.sweep.config.settings.KnobSweeperConf``),
    Hydra's ``config`` and the command's ``arguments`` say; ``budget``: the sweep's ``Budget`` (the staged sampler's
    clock)."""
    c = dataclasses.asdict(settings)  # the rule checks and the space read keys by name
    _check_budget(settings)
    check_sweeper(c)
    cfg, space, defaults, fixed_args = launch.resolve_space(config, c, arguments)
    check_results_dir(cfg["results_dir"])
    schema.validate(cfg)  # measure, trial, distributed: once, before the first trial
    workload = cfg["workload"]["name"]
    starts = _parse_starts(plain(settings.starts), space, defaults, cfg)
    slots = make_slots(cfg["trial"]["resources"], int(settings.n_jobs or 1), gpu.device_info().count)
    launch.check_concurrent(launcher, config, len(slots))
    node = NodeSlots(node_lock_dir(cfg), slots, gpu.device_info().count)
    objectives = [(str(o.metric), str(o.direction)) for o in settings.objectives]
    _check_workload(cfg, space, objectives, fixed_args)
    results_dir = Path(cfg["results_dir"])
    workload_key = _workload_key(cfg)
    study_name = settings.study_name or workload_key
    storage_url, storage = _open_storage(settings, results_dir)
    fixed_args = fixed_args + secrets.hide_config_password(settings.storage)  # a password from a YAML file
    expensive = _expensive(settings.expensive, space)
    _check_cost_prior(plain(settings.cost_prior) or {}, expensive)
    _check_cost_prior(plain(settings.cost_prior_per_op) or {}, expensive, per_op=True)
    sampler = _make_sampler(settings, storage, study_name, space, expensive, defaults, budget)
    # resolved before the study exists: a bad name creates nothing
    warm_sources = warm.resolve(storage, plain(settings.warm_start), study_name, workload_key)
    study, created = _open_study(storage, storage_url, study_name, objectives, sampler)
    if not study.trials:
        study.set_user_attr(warm.WORKLOAD_KEY, workload_key)
    study_id = studies.study_id(study, created)
    rules = _handbook_picks(cfg, space, defaults)
    return SweepPlan(
        handbook=rules if settings.handbook_start and settings.baseline_first else None,
        rules=rules,
        cfg=cfg,
        space=space,
        defaults=defaults,
        fixed_args=fixed_args,
        workload=workload,
        starts=starts,
        slots=slots,
        node=node,
        objectives=objectives,
        trials_dir=results_dir / "trials",
        study_name=study_name,
        storage_url=storage_url,
        storage=storage,
        study=study,
        max_failures=settings.max_failures,
        max_failure_rate=settings.max_failure_rate,
        pruner_conf=_checked_pruner(settings, objectives),
        workload_key=workload_key,
        warm_sources=warm_sources,
        study_id=study_id,
        created=created,
        expensive=expensive,
    )


def _handbook_picks(cfg: dict[str, Any], space: SearchSpace, defaults: dict[str, Any]) -> dict[str, Any] | None:
    """The handbook's picks from ``space`` for the device the trials run on: the host's GPU, unless they run on
    the CPU (a CPU trial refuses the GPU's picks, ``device_prefetch``); None where they are the defaults."""
    on_gpu = str(cfg["device"]).startswith("cuda")
    device = gpu.device_info() if on_gpu else DeviceInfo(kind="cpu")
    baseline = warm.baseline_params(space, defaults, say=False)
    return start_params(space, defaults, baseline, device, native_bf16=on_gpu or cpu_bf16())


def _check_workload(
    cfg: dict[str, Any], space: SearchSpace, objectives: list[tuple[str, str]], fixed_args: list[str]
) -> None:
    """The objectives are metrics the workload produces, the space's choices values it accepts, and the command's
    fixed values a configuration it does not refuse."""
    workload, module = cfg["workload"]["name"], cfg["workload"].get("module")
    _check_objectives(objectives, workload, module)
    check_enumerations({k: list(getattr(d, "choices", ())) for k, d in space.params.items()}, workload, module)
    _check_fixed(cfg, fixed_args)


def _make_sampler(
    settings: Any,
    storage: Any,
    study_name: str,
    space: SearchSpace,
    expensive: dict[str, Any],
    defaults: dict[str, Any],
    budget: Any,
) -> Any:
    """The sampler ``hydra.sweeper.sampler`` names, with this command's seed (``samplers.resumed_seed``)."""
    seed = samplers.resumed_seed(storage, study_name, settings.seed, str(settings.sampler))
    return samplers.make_sampler(str(settings.sampler), seed, space, expensive, defaults, settings.timeout_s, budget)


def _open_storage(settings: Any, results_dir: Path) -> tuple[str, Any]:
    """The Optuna storage's URL (default: SQLite in ``results_dir``) and the storage, whose waits to open end
    with the sweep's budget too."""
    storage_url = studies.storage_url(settings.storage, results_dir)
    deadline = None if settings.timeout_s is None else process_start() + float(settings.timeout_s)  # the budget's
    storage = studies.make_storage(storage_url, settings.heartbeat_interval, settings.grace_period, deadline)
    return storage_url, storage


def _check_budget(settings: Any) -> None:
    """``hydra.sweeper.n_trials``, ``timeout_s`` and ``grace_s``: a count >= 1, seconds > 0, seconds >= 0."""
    if settings.n_trials is not None and settings.n_trials < 1:
        raise ConfigError(
            "hydra.sweeper.n_trials",
            f"must be >= 1, got {settings.n_trials}",
            "give the number of trials this command should add",
        )
    if settings.timeout_s is not None and float(settings.timeout_s) <= 0:
        raise ConfigError(
            "hydra.sweeper.timeout_s",
            f"must be > 0 seconds, got {settings.timeout_s}",
            "give the command's wall-clock budget in seconds, or null for no limit",
        )
    if settings.grace_s < 0:
        raise ConfigError(
            "hydra.sweeper.grace_s",
            f"must be >= 0 seconds, got {settings.grace_s}",
            "give the seconds a running trial may overrun the budget, e.g. 5",
        )


def _workload_key(cfg: dict[str, Any]) -> str:
    """<workload>[-<data>][-<preset>]: which earlier studies a warm start may read, and the default study name."""
    data = cfg["workload"].get("data")  # resnet50-jpeg(-tiny): synthetic and JPEG trials never share a study
    return (
        cfg["workload"]["name"]
        + (f"-{data}" if data not in (None, "synthetic") else "")
        + (f"-{cfg['preset']}" if cfg["preset"] else "")
    )


def _open_study(
    storage: Any, storage_url: str, study_name: str, objectives: list[tuple[str, str]], sampler: Any
) -> tuple[optuna.Study, bool]:
    """The study (created if missing, its metrics named) and whether this command created it; a study of other
    objectives, or a storage that refuses, is bad input."""
    try:
        created = studies.create_if_missing(storage, study_name, [d for _m, d in objectives])
        study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)  # no second notice
    except ValueError as e:
        raise ConfigError(
            "hydra.sweeper.objectives",
            str(e).splitlines()[0],
            "use the study's original objectives or a new hydra.sweeper.study_name",
        ) from None
    except Exception as e:  # noqa: BLE001 - the database refused (sqlalchemy.exc.*): a line, no password
        from sweeper.results.store import disk_full_in

        if disk_full_in(e) is not None:
            raise  # a full disk, however wrapped: recovery.guarded says it in one line, exit 1
        first = secrets.scrub((str(e).strip().splitlines() or [type(e).__name__])[0][:200], storage_url, withhold=True)
        raise ConfigError(
            "hydra.sweeper.storage", f"the study could not be opened ({first})", "check the storage and the study name"
        ) from None
    with warnings.catch_warnings():  # optuna-dashboard shows "throughput", not "Objective 0"
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([m for m, _d in objectives])
    return study, created


def _checked_pruner(settings: Any, objectives: list[tuple[str, str]]) -> dict[str, Any]:
    """``hydra.sweeper.pruner`` as a plain dict (sent to each trial), validated; pruning needs one objective,
    throughput:maximize."""
    pruner_conf = dataclasses.asdict(settings.pruner)
    make_pruner(settings.pruner)  # validates
    if settings.pruner.type != "none" and objectives != [("throughput", "maximize")]:
        raise ConfigError(
            "hydra.sweeper.pruner.type",
            "pruning needs the single objective throughput:maximize",
            "set hydra.sweeper.pruner.type=none for this study",
        )
    return pruner_conf


def _check_fixed(cfg: dict[str, Any], fixed_args: list[str]) -> None:
    """A value the command fixes for every trial, which the workload's ``check`` names when it refuses the defaults'
    configuration, is bad input (as in a single run), not a sweep of skipped trials."""
    from sweeper.sweep.run.job import device_check, named_in, refusal

    reason = device_check(cfg, gpu.device_info())
    if reason and named_in(reason, fixed_args):
        raise refusal(reason, fixed_args, cfg["device"])


def _check_objectives(objectives: list[tuple[str, str]], workload: str, module_name: str | None) -> None:
    from sweeper.sweep.config.trial_config import load_workload

    module = load_workload({"name": workload, "module": module_name})
    known = set(KNOWN_METRICS) | set(getattr(module, "METRICS", ()))
    if not objectives:
        raise ConfigError("hydra.sweeper.objectives", "is empty", "name at least one metric, e.g. throughput")
    for i, (metric, direction) in enumerate(objectives):
        if metric not in known:
            raise ConfigError(
                f"hydra.sweeper.objectives[{i}].metric",
                f"{metric!r} is not a metric workload {workload!r} produces",
                f"use one of: {', '.join(sorted(known))}",
            )
        if direction not in ("maximize", "minimize"):
            raise ConfigError(
                f"hydra.sweeper.objectives[{i}].direction",
                f"{direction!r} is not a direction",
                "use maximize or minimize",
            )


def _parse_starts(starts: Any, space: SearchSpace, defaults: dict[str, Any], cfg: dict[str, Any]) -> list[Start]:
    """``hydra.sweeper.starts``, checked; an entry whose ``when`` expression does not hold for this command's
    config (``workload.data == 'jpeg'``) is left out."""
    starts = starts or []
    if not isinstance(starts, list):
        raise ConfigError(
            "hydra.sweeper.starts",
            f"must be a list of configurations, got {starts!r}",
            "write it as [{knobs.precision: bf16, knobs.num_workers: 8}]",
        )
    out = []
    for i, start in enumerate(starts):
        if isinstance(start, Mapping) and "when" in start:
            start = dict(start)
            when = str(start.pop("when"))
            try:
                keep = evaluate(when, {**defaults, **space.fixed})
            except ExpressionError as e:
                raise ConfigError(
                    f"hydra.sweeper.starts[{i}].when",
                    str(e),
                    "write an expression over config keys, e.g. \"workload.data == 'jpeg'\"",
                ) from None
            if not keep:
                continue
        out.append(_start_params(i, start, space, defaults))
    return out


def _expensive(given: Any, space: SearchSpace) -> dict[str, Any]:
    """``hydra.sweeper.expensive`` as given; unset, ``knobs.compile`` with ``"off"`` cheap where the search space
    gives "off" and a compiled mode: a compiled trial pays its compile before its first step (8-140 s on an H200
    against an eager trial's seconds), the package's knob, whoever wrote the workload. A CPU sweep of a GRU of a
    user's own that searched compile without declaring it (2026-12-07) priced 13 of 34 trials within 30 %."""
    if given is not None:
        return dict(plain(given))
    dist = space.params.get(COMPILE_KNOB)
    choices = list(getattr(dist, "choices", ()))
    return {COMPILE_KNOB: "off"} if "off" in choices and len(choices) > 1 else {}


def _check_cost_prior(prior: Mapping[str, Any], expensive: Mapping[str, Any], per_op: bool = False) -> None:
    """``hydra.sweeper.cost_prior``: {expensive knob: {value: factor > 0}}; ``cost_prior_per_op`` (``per_op``):
    {expensive knob: {value: seconds > 0}}."""
    name, default = ("cost_prior_per_op", COMPILE_S_PER_OP) if per_op else ("cost_prior", COMPILE_PRIOR)
    for key, values in prior.items():
        where = f"hydra.sweeper.{name}.{key}"
        if key not in expensive and not (key == "knobs.compile" and values == default):  # the default: unused
            raise ConfigError(
                where,
                "is not a knob of hydra.sweeper.expensive",
                "give priors for the expensive knobs only, e.g. knobs.compile",
            )
        if not isinstance(values, Mapping):
            raise ConfigError(
                where,
                f"must map values to {'seconds' if per_op else 'factors'}, got {values!r}",
                "e.g. {default: 0.27}" if per_op else "e.g. {default: 4, max-autotune: 40}",
            )
        for value, factor in values.items():
            if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not 0 < factor < math.inf:
                raise ConfigError(
                    f"{where}.{value}",
                    f"must be a number > 0, got {factor!r}",
                    "give the seconds of a cold compile per distinct operation of the eager step, e.g. 0.27"
                    if per_op
                    else "give how many times a cheap trial this value costs, e.g. 4",
                )


def _start_params(index: int, start: Any, space: SearchSpace, defaults: dict[str, Any]) -> Start:
    """One ``starts`` entry: its config key, the sampled knobs it fixes, and {key: why} for those it does not
    (pinned, inactive under their condition, outside the space: see ``SearchSpace.fix``)."""
    key = f"hydra.sweeper.starts[{index}]"
    if not isinstance(start, Mapping):
        raise ConfigError(
            key,
            f"must be a mapping of config keys to values, got {start!r}",
            "write it as {knobs.precision: bf16, knobs.num_workers: 8}",
        )
    for name in start:
        check_known(str(name), defaults, where=f"{key}.{name}")
    space_params, dropped = space.fix(start, defaults)
    return key, space_params, dropped
