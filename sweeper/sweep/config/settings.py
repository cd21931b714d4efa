"""The sweeper's settings (``hydra.sweeper.*``): one typed dataclass, each default written here and nowhere else.

Hydra registers :class:`KnobSweeperConf` as ``hydra/sweeper=knob`` (``hydra_plugins.knob_sweeper``) and hands the
composed node to the sweeper, which converts it once with :func:`settings_of` into the dataclass: the loop reads
attributes, never ``.get(key, default)``. A workload's YAML may set any of these for its sweeps (resnet50 declares
``expensive``); ``tests/test_settings.py`` holds the YAML files to the dataclass's keys.
This module imports nothing heavy (no torch, no Optuna): plugin discovery stays cheap.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Union

from sweeper.sweep.config.structured import build, defaults, omegaconf_schema

# torch.compile's modes as multiples of an eager trial's cost, before a study has measured them (``cost_prior``).
COMPILE_PRIOR = {"default": 4, "reduce-overhead": 5, "max-autotune-no-cudagraphs": 30, "max-autotune": 35}
# A cold compile's seconds per distinct operation of the model's eager step (``graph_ops``), by mode
# (``cost_prior_per_op``). default: cold compiles on one H200 host (16 cores, torch 2.11, 2026-12-03..05) over the
# operations the counter finds in the eager step of each model's default configuration (counted on a CPU, torch
# 2.14): ResNet-50 ~45 s / 168, ViT-B/16 ~32 s / 110, a 12-layer decoder LM ~26 s / 98, DeepLabV3-MobileNetV3
# 140 s / 351, a two-block bf16 transformer 9.9 s / 63, i.e. 0.27, 0.29, 0.27, 0.40, 0.16 s: their median.
# reduce-overhead measured the same (ResNet-50 43-54 s, the LM 23-28 s). The max-autotune modes were never
# measured to their end: the default's rate times cost_prior's ratio of their factors to the default's
# ((30 - 1) / (4 - 1), (35 - 1) / (4 - 1)).
COMPILE_S_PER_OP = {
    "default": 0.27,
    "reduce-overhead": 0.27,
    "max-autotune-no-cudagraphs": 2.6,
    "max-autotune": 3.1,
}


SamplerName = Literal["staged", "tpe", "random", "grid", "gp", "nsgaii", "qmc"]
PrunerType = Literal["none", "median", "successive_halving", "hyperband"]
Direction = Literal["maximize", "minimize"]


@dataclass
class ObjectiveConf:
    """One of ``hydra.sweeper.objectives``: a metric and the way it should go."""

    # A metric of the trial's row: throughput, peak_mem_bytes, step_ms_p50, ..., or one the workload's METRICS names
    # (no default: an objective names its metric).
    metric: str
    # maximize | minimize.
    direction: Direction = "maximize"


@dataclass
class PrunerConf:
    """``hydra.sweeper.pruner``: Optuna's pruner, fed by the running trial (``sweeper.sweep.search.prune``)."""

    # none | median | successive_halving | hyperband (Optuna's pruners; single objective throughput:maximize).
    type: PrunerType = "none"
    # median: trials finished before pruning starts...
    n_startup_trials: int = 3
    # ...and the reports skipped at the start of each trial.
    n_warmup_steps: int = 0
    # successive_halving / hyperband: the smallest number of measured steps a trial gets (auto: Optuna's estimate
    # for successive_halving, 1 for hyperband)...
    min_resource: Union[int, Literal["auto"]] = "auto"
    # ...and the factor each rung cuts the trials by.
    reduction_factor: int = 3


@dataclass
class KnobSweeperConf:
    """``hydra.sweeper``: the knob sweeper's settings (registered as ``hydra/sweeper=knob``)."""

    # The class Hydra instantiates (``hydra_plugins.knob_sweeper``).
    _target_: str = "hydra_plugins.knob_sweeper.knob_sweeper.KnobSweeper"
    # Optuna study name; null -> "<workload>" (or "<workload>-<preset>" when a preset is active).
    study_name: Optional[str] = None
    # Optuna storage URL: null -> sqlite:///<results_dir>/optuna.db; "journal:///path" for a journal file;
    # postgresql://user@host/db for several nodes.
    storage: Optional[str] = None
    # Trials this command adds to the study (a killed sweep re-run finishes its previous target instead); null:
    # with timeout_s the budget is the only limit, without it 10.
    n_trials: Optional[int] = None
    # Trials run at once when trial.resources is unset (each slot takes the next trial as soon as it is free).
    n_jobs: int = 1
    # The command's wall-clock budget in seconds, counted from its start; null = no limit. No trial starts that
    # the cost model predicts cannot end by then; at the budget plus grace_s running trials are stopped and
    # recorded as interrupted (reason budget: not counted, measured again by the same command).
    timeout_s: Optional[float] = None
    # Seconds past timeout_s that a running trial may take to finish before it is stopped.
    grace_s: float = 5.0
    # Cap a trial's timeout (trial.timeout_s) at this multiple of its own predicted wall where the cost model priced
    # it from measurements (or of its price without the declared graph-neutral knobs' warm cache, where that is
    # more), else of the slowest measured trial of its kind (the same `expensive` values) once 3 of its kind were
    # measured, never below twice its prediction; never below timeout_floor_s; null = off. On by default: a trial
    # that hangs (a warm compiled JPEG trial predicted 25 s ran until an H100 sweep's budget cut it at 139 s) must
    # not eat a user's time box; measured predictions were at most ~2.2x short over the recorded sweeps.
    timeout_factor: Optional[float] = 4.0
    # The least a capped trial timeout may be, in seconds.
    timeout_floor_s: float = 60.0
    # staged (default: cost-aware, see `expensive`), tpe, random, grid, gp, nsgaii, qmc.
    sampler: SamplerName = "staged"
    # The sampler's seed (null: random). Re-run on a study with trials, it is derived from (seed, trial count).
    seed: Optional[int] = None
    # Knobs that make a trial expensive, each with its cheap value ({knobs.compile: "off"}): the staged sampler
    # screens the other knobs with these cheap, then measures the best few screened configurations with each
    # expensive value (best expected gain per second first), then searches the whole space. Unset (null): the
    # package's own, knobs.compile with "off" cheap, where the search space gives "off" and another mode; {}: none.
    expensive: Optional[Dict[str, Any]] = None
    # What an expensive value is expected to cost before the study has measured it, as a multiple of a trial with
    # the cheap value. Measurements replace and rescale it (sweeper.sweep.search.costs); a value with no prior is
    # taken to cost as much as the dearest value measured. A workload's YAML adds or replaces entries. The default
    # prices
    # torch.compile's modes for `knobs.compile` (the package's TrainStep reads it, a user's model too): on the
    # H200 an eager ResNet-50 trial took ~15 s, a cold default compile ~60 s, and a cold
    # max-autotune-no-cudagraphs compile did not end within 375 s; a ViT-B/16's did not within 135 s (2026-12-03).
    # Under a budget of minutes the max-autotune modes never fit, and the sweep does not start them.
    cost_prior: Dict[str, Any] = field(default_factory=lambda: {"knobs.compile": dict(COMPILE_PRIOR)})
    # The same prior in seconds per distinct operation of the model's eager step (``graph_ops``, counted in the
    # study's eager trials), used in place of cost_prior's factor once the step was counted: a compile is a
    # per-model cost (what it lowers), not a multiple of the eager trial (a ViT-B/16's 1.3 s steps priced its
    # compile at 104 s, a DeepLabV3's 8 s eager trial at 25 s; they took ~30 s and 140 s). A value whose
    # cost_prior factor a YAML or the command line changed keeps that factor.
    cost_prior_per_op: Dict[str, Any] = field(default_factory=lambda: {"knobs.compile": dict(COMPILE_S_PER_OP)})
    # Knobs that never change a compiled graph: a compiled configuration that differs from a measured one of its
    # compile mode only in these finds Inductor's cache warm, and is priced so (a warm compile) from the first.
    # null: the knobs the package's helpers apply outside the compiled region (workloads.spec.OUTSIDE_COMPILE:
    # TrainStep compiles the forward and the loss only, so the optimizer's implementation, cuDNN's benchmark flag
    # and every input-pipeline knob); [] for a model that compiles its whole step. A knob so
    # declared whose change came out a cold compile is priced cold from then on.
    graph_neutral: Optional[List[str]] = None
    # Earlier studies to start from: "latest" (the most recent other study of this workload in this storage), a
    # study name, or a list of names; null = none. Their best `warm_start_k` configurations are measured again
    # first, and their measured trials join the sampler's history. Used only by a new study.
    warm_start: Any = None
    # How many of the earlier studies' best configurations are measured again first.
    warm_start_k: int = 3
    # [{metric, direction}] (ObjectiveConf); two or more make a multi-objective study (Pareto front in the report).
    objectives: List[ObjectiveConf] = field(default_factory=lambda: [ObjectiveConf("throughput")])
    # Search space: dotted config key -> choice(...) | range(...) | interval(...) | tag(log, ...) | fixed value.
    params: Dict[str, Any] = field(default_factory=dict)
    # Conditional knobs: key -> expression; the knob is sampled only when it holds, else set to null.
    conditions: Dict[str, str] = field(default_factory=dict)
    # Expressions every launched configuration must satisfy; others are skipped before launch.
    constraints: List[str] = field(default_factory=list)
    # Stop the sweep (exit 1) once this many trials of the study have failed; null = never.
    max_failures: Optional[int] = None
    # ...or once more than this fraction of its finished trials failed (checked from 5 trials on); null = never.
    max_failure_rate: Optional[float] = None
    # Pruner for single-objective throughput studies: {type: none|median|successive_halving|hyperband, ...kwargs}.
    pruner: PrunerConf = field(default_factory=PrunerConf)
    # After the search, on every device (the CPU too), measure the baseline and the k best configurations again,
    # interleaved (baseline, best, second best, ...): the repeats give the report its trial-to-trial noise estimate,
    # without which it states no speed-up with an interval. 0 = none. Inside the budget: the search keeps their
    # predicted cost in reserve.
    confirm_top_k: int = 1
    # Then measure again, once, each configuration whose step times were unstable (`step_unstable`: two speeds, or
    # a CV over 0.5, the signature of a shared CPU), best first, on what the budget has left (not reserved: the
    # search does not stop early for them). The report marks such configurations.
    confirm_unstable: bool = True
    # After the search, run the baseline and the k best configurations again with `profile_steps` more steps under
    # torch.profiler after the measured window (a trace and a breakdown of where the GPU's time went, in the
    # report); null = auto: 1 on a GPU, 0 on the CPU. These runs are the re-measurements above (profiled), so with
    # confirm_top_k=0 the baseline and the best are still measured again where profile > 0. Inside the budget.
    profile: Optional[int] = None
    # The steps each of those profiled runs adds under torch.profiler (its ``measure.profile_steps``).
    profile_steps: int = 5
    # A new study measures the workload's default knobs first (the report's baseline for speed-ups).
    baseline_first: bool = True
    # Then the configuration PyTorch's performance handbook picks from the space on this device (the fastest
    # supported reduced precision, compile default, the fused optimizer, channels_last, the largest batch, and on a
    # GPU cuDNN autotuning, pinned memory, non-blocking copies, the side-stream copy (device_prefetch) and the most
    # DataLoader workers; sweeper.sweep.search.handbook), with the baseline; after the `starts` below where the
    # workload declares some (its own recipes before generic rules).
    handbook_start: bool = True
    # These configurations ({dotted key: value}, e.g. a known-good recipe), right after the baseline, before the
    # handbook's start and the sampler's own choices.
    # Keys the space does not sample, or values outside it, are left to the sampler. Not used by the grid sampler.
    # An entry's optional `when: <expression>` keeps it only where the expression holds (workload.data == 'jpeg').
    starts: List[Any] = field(default_factory=list)
    # Measure a configuration again even when the study already has its result.
    repeat: bool = False
    # RDB heartbeat (seconds) so trials of a dead node are failed; null = off.
    heartbeat_interval: Optional[int] = None
    # Seconds without a heartbeat before a trial counts as dead (null: Optuna's 2 x heartbeat_interval).
    grace_period: Optional[int] = None


def settings_of(conf: Any) -> KnobSweeperConf:
    """The sweeper's node as Hydra composed it (a DictConfig or the keyword arguments it instantiated the sweeper
    with) -> the typed settings, defaults filled from the dataclass."""
    from omegaconf import OmegaConf

    node = OmegaConf.merge(OmegaConf.structured(omegaconf_schema(KnobSweeperConf)), OmegaConf.create(dict(conf)))
    return build(KnobSweeperConf, OmegaConf.to_container(node, resolve=True))


def register_configs(store: Any) -> None:
    """What Hydra composes from the typed dataclasses, stored in its ConfigStore ``store`` (by the plugin, at
    discovery): ``hydra/sweeper=knob`` (:class:`KnobSweeperConf`'s OmegaConf twin), and the defaults of the trial
    config's typed nodes and top-level keys (``measure_defaults``, ..., ``run_defaults``), which conf/config.yaml's
    defaults list composes. Those are plain nodes, not typed schemas, so that a bad value reaches the validation's
    one line (``sweeper.sweep.config.schema``); configs, not a group, so that --help lists no such group."""
    from sweeper.trial.conf import NODES, RunConf

    store.store(group="hydra/sweeper", name="knob", node=omegaconf_schema(KnobSweeperConf), provider="knob_sweeper")
    for node, cls in {**NODES, "run": RunConf}.items():
        store.store(name=f"{node}_defaults", node=defaults(cls), provider="knob_sweeper")


def priors_per_op(settings: Any) -> dict[str, dict[str, float]]:
    """``cost_prior_per_op`` as plain numbers, less the values whose ``cost_prior`` factor was given (differs from
    the default): a factor given for a value is what its sweep was told, and wins."""
    factors = plain(settings.cost_prior) or {}
    out = {}
    for knob, rates in (plain(settings.cost_prior_per_op) or {}).items():
        given = factors.get(knob) or {}
        default = COMPILE_PRIOR if knob == "knobs.compile" else {}
        kept = {str(v): r for v, r in (rates or {}).items()}
        out[knob] = {v: float(r) for v, r in kept.items() if v not in given or given[v] == default.get(v)}
    return out


def graph_neutral(settings: Any) -> frozenset[str]:
    """``graph_neutral`` as dotted knob names; null: ``knobs.<name>`` of ``workloads.spec.OUTSIDE_COMPILE``."""
    declared = plain(settings.graph_neutral)
    if declared is None:
        from workloads.spec import OUTSIDE_COMPILE

        return frozenset(f"knobs.{name}" for name in OUTSIDE_COMPILE)
    return frozenset(str(name) for name in declared)


def plain(value: Any) -> Any:
    """A setting of type ``Any`` as plain Python (OmegaConf containers inside dataclasses stay containers)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _number(v: Any) -> bool:
    """A real, finite number (not a bool, not NaN or infinity: either would switch a comparison with the clock
    off, or make every comparison fail)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_RULES = (
    (
        "timeout_s",
        lambda v: _number(v) and v > 0,
        "a finite number of seconds > 0 or null",
        "give the command's wall-clock budget in seconds, e.g. hydra.sweeper.timeout_s=600, or null for no limit",
    ),
    (
        "grace_s",
        lambda v: _number(v) and v >= 0,
        "a finite number of seconds >= 0",
        "give the seconds a running trial may overrun the budget, e.g. hydra.sweeper.grace_s=5",
    ),
    ("n_jobs", lambda v: isinstance(v, int) and v >= 1, "a whole number >= 1", "e.g. hydra.sweeper.n_jobs=1"),
    (
        "max_failures",
        lambda v: isinstance(v, int) and v >= 1,
        "a whole number >= 1 or null",
        "e.g. hydra.sweeper.max_failures=5, or null for no limit",
    ),
    (
        "max_failure_rate",
        lambda v: isinstance(v, (int, float)) and 0 <= v <= 1,
        "a fraction in [0, 1] or null",
        "e.g. hydra.sweeper.max_failure_rate=0.5, or null for no limit",
    ),
    (
        "confirm_top_k",
        lambda v: isinstance(v, int) and v >= 0,
        "a whole number >= 0",
        "e.g. hydra.sweeper.confirm_top_k=3, or 0 for none",
    ),
    (
        "timeout_factor",
        lambda v: _number(v) and v > 1,
        "a finite number > 1 or null",
        "e.g. hydra.sweeper.timeout_factor=4, or null to keep trial.timeout_s for every trial",
    ),
    (
        "timeout_floor_s",
        lambda v: _number(v) and v > 0,
        "a finite number of seconds > 0",
        "e.g. hydra.sweeper.timeout_floor_s=60",
    ),
    (
        "heartbeat_interval",
        lambda v: isinstance(v, int) and v >= 1,
        "a whole number of seconds >= 1 or null",
        "e.g. hydra.sweeper.heartbeat_interval=10",
    ),
)
"""The numeric settings' rules: (key, holds, what it must be, the fix). Null passes where the field is optional."""


def check_sweeper(conf: Any) -> None:
    """The sweeper's settings (``hydra.sweeper.*``, converted: a mapping of every field): one line per broken rule.
    Every number that reaches the budget or a time limit is finite: ``grace_s=nan`` would turn the budget's end
    off, ``timeout_s=nan`` make every trial look too long for it. Then each choice is one of its ``Literal``'s."""
    from sweeper.errors import ConfigError

    hints = typing.get_type_hints(KnobSweeperConf)
    for key, ok, what, fix in _RULES:
        value = conf[key]
        if value is None and type(None) in typing.get_args(hints[key]):
            continue
        if isinstance(value, bool) or not ok(value):
            raise ConfigError(f"hydra.sweeper.{key}", f"must be {what}, got {value!r}", fix)
    _check_choices(conf)


def _check_choices(conf: Any) -> None:
    """The sampler and the pruner's type are among their choices; every pruner setting has its type."""
    from sweeper.errors import ConfigError
    from workloads.spec import typed

    if conf["sampler"] not in typing.get_args(SamplerName):
        choices = ", ".join(typing.get_args(SamplerName))
        raise ConfigError("hydra.sweeper.sampler", f"{conf['sampler']!r} is not a sampler", f"use one of: {choices}")
    pruner = conf["pruner"]
    if pruner["type"] not in typing.get_args(PrunerType):
        choices = ", ".join(typing.get_args(PrunerType))
        raise ConfigError("hydra.sweeper.pruner.type", f"{pruner['type']!r} is not a pruner", f"use one of: {choices}")
    for key, problem, fix in typed.field_problems(build(PrunerConf, pruner)):
        raise ConfigError(f"hydra.sweeper.pruner.{key}", problem, fix)
