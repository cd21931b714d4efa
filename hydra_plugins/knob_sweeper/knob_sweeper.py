"""The Hydra Sweeper plugin that Hydra discovers (it must be defined in the ``hydra_plugins`` namespace).

A thin wrapper: the config dataclass registered in Hydra's ConfigStore as ``hydra/sweeper=knob``, and a class
that hands ``setup``/``sweep`` to ``sweeper.sweep.loop.SweepImpl`` (imported lazily, so plugin discovery stays cheap).
"""


from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper


@dataclass
class PrunerConf:
    # none | median | successive_halving | hyperband (Optuna's pruners; single objective throughput:maximize).
    type: str = "none"
    # median: trials finished before pruning starts, and reports skipped at the start of each trial.
    n_startup_trials: int = 3
    n_warmup_steps: int = 0
    # successive_halving / hyperband: the smallest number of measured steps a trial gets, and the cut factor.
    min_resource: Any = "auto"
    reduction_factor: int = 3


@dataclass
class KnobSweeperConf:
    _target_: str = "hydra_plugins.knob_sweeper.knob_sweeper.KnobSweeper"
    # Optuna study name; null -> "<workload>" (or "<workload>-<preset>" when a preset is active).
    study_name: Optional[str] = None
    # Optuna storage URL: null -> sqlite:///<results_dir>/optuna.db; "journal:///path" for a journal file;
    # postgresql://user@host/db for several nodes.
    storage: Optional[str] = None
    # Trials this command adds to the study (a killed sweep re-run finishes its previous target instead).
    n_trials: int = 10
    # Trials run at once when trial.resources is unset (each slot takes the next trial as soon as it is free).
    n_jobs: int = 1
    # Seconds after which no new trial starts (running ones finish; a later run continues); null = no limit.
    timeout_s: Optional[float] = None
    # Cap a trial's timeout (trial.timeout_s) at this multiple of the slowest measured trial of its kind (the same
    # `expensive` values), never below timeout_floor_s, once 3 of its kind were measured; null = off.
    timeout_factor: Optional[float] = None
    timeout_floor_s: float = 60.0
    # staged (default: cost-aware, see `expensive`), tpe, random, grid, gp, nsgaii, qmc.
    sampler: str = "staged"
    seed: Optional[int] = None
    # Knobs that make a trial expensive, each with its cheap value ({knobs.compile: "off"}): the staged sampler
    # screens the other knobs with these cheap, then measures the best few screened configurations with each
    # expensive value (best expected gain per second first), then searches the whole space.
    expensive: Dict[str, Any] = field(default_factory=dict)
    # Earlier studies to start from: "latest" (the most recent other study of this workload in this storage), a
    # study name, or a list of names; null = none. Their best `warm_start_k` configurations are measured again
    # first, and their measured trials join the sampler's history. Used only by a new study.
    warm_start: Any = None
    warm_start_k: int = 3
    # [{metric, direction}]; two or more make a multi-objective study (Pareto front in the report).
    objectives: List[Any] = field(default_factory=lambda: [{"metric": "throughput", "direction": "maximize"}])
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
    # After the sweep, measure the k best configurations again (repeats give the report a noise estimate).
    confirm_top_k: int = 0
    # A new study measures the workload's default knobs first (the report's baseline for speed-ups).
    baseline_first: bool = True
    # Then these configurations ({dotted key: value}, e.g. a known-good recipe), before the sampler's own choices.
    # Keys the space does not sample, or values outside it, are left to the sampler. Not used by the grid sampler.
    starts: List[Any] = field(default_factory=list)
    # Measure a configuration again even when the study already has its result.
    repeat: bool = False
    # RDB heartbeat (seconds) so trials of a dead node are failed; null = off.
    heartbeat_interval: Optional[int] = None
    grace_period: Optional[int] = None


ConfigStore.instance().store(group="hydra/sweeper", name="knob", node=KnobSweeperConf, provider="knob_sweeper")


class KnobSweeper(Sweeper):
    def __init__(self, **conf: Any) -> None:
        from sweeper.sweep.loop import SweepImpl

        self._impl = SweepImpl(**conf)

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        self._impl.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        return self._impl.sweep(arguments)
