"""The typed schemas of the config nodes a trial runs on: ``measure`` and ``trial`` (``distributed`` is
:class:`workloads.spec.distributed.DistributedConf`, torch-free beside the other knob classes).

Plain dataclasses with a docstring per field, importing nothing heavy: the sweep registers them in Hydra's
ConfigStore and checks a command's config against them before any trial starts (``sweeper.sweep.config.schema``).
Each default is written here and nowhere else: ``conf/config.yaml`` composes these nodes from them
(``measure_defaults@measure``, ...) and a trial config holds every key (``sweeper.sweep.config.trial_config``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from workloads.spec.distributed import DistributedConf


@dataclasses.dataclass
class MeasureConf:
    """How long a trial measures (``measure:``); see ``sweeper.trial.measure``."""

    warmup_steps: int = 5
    """Steps run before the measured window, excluded from the numbers (the first, with compilation, is reported
    apart as ``first_step_s``)."""
    steps: int = 20
    """Measured steps, at least."""
    min_time_s: float = 0.0
    """Keep measuring until the window lasts this many seconds..."""
    rel_precision: float | None = None
    """...and the mean step time's 95 % CI half-width is within this fraction of it (e.g. 0.01); null: no
    precision target."""
    max_steps: int | None = None
    """...but no more steps than this; null: 100 x ``steps`` when adaptive, else ``steps``."""
    end_at: float | None = None
    """Unix seconds after which the measured window ends at its next block, with what it measured (the row says
    ``window_cut``); set by a sweep with a budget: where its re-measurements' reserve begins (never before the
    trial's predicted end). A configuration far slower than its price is then measured on fewer steps instead of
    holding the reserve until the budget stops it unmeasured. null: off."""
    stall_s: float | None = 120
    """Once the first step is done (with its compilation): a step or a first batch that takes this long and 20x
    the warm-up's step time ends the trial as ``failed (stalled)``, every thread's stack in its log
    (``faulthandler``), instead of holding the sweep's budget until ``trial.timeout_s``; null: off. Off with
    ``trial.isolate=false``: the process it would end is the sweeper's."""
    profile_steps: int = 0
    """After the measured window (its numbers untouched), run this many more steps under torch.profiler, keep the
    trace (``<results_dir>/traces/<study>/<study>-<trial>.json.gz``) and add the ``prof_*`` columns (where the
    GPU's time went, why it idled); 0: off. See ``sweeper.trial.profile``."""
    count_ops: bool = False
    """Count the distinct operations of an eager trial's first step (``graph_ops``: what a compile would lower;
    ``sweeper.trial.ops``). A sweep turns it on while its study has no count: the cost model prices the model's
    first compile by it. Its first use imports torch._dynamo (about a second on a CPU)."""

    def problems(self) -> list[tuple[str, str, str]]:
        """(key, problem, fix) for every value out of its range; empty when the node is valid."""
        out = _infinite(self, ("min_time_s", "rel_precision", "stall_s"))
        if self.warmup_steps < 0:
            out.append(("warmup_steps", f"must be >= 0, got {self.warmup_steps}", "give 0 or more steps"))
        if self.steps < 1:
            out.append(("steps", f"must be >= 1, got {self.steps}", "give the number of measured steps"))
        if self.min_time_s < 0:  # NaN compares false everywhere: refused above
            out.append(("min_time_s", f"must be >= 0 seconds, got {self.min_time_s}", "give 0 for no minimum"))
        if self.rel_precision is not None and self.rel_precision <= 0:
            out.append(
                (
                    "rel_precision",
                    f"must be > 0, got {self.rel_precision}",
                    "give a fraction such as 0.01, or null for no precision target",
                )
            )
        if self.profile_steps < 0:
            out.append(("profile_steps", f"must be >= 0, got {self.profile_steps}", "give 0 (off) or a step count"))
        if self.stall_s is not None and self.stall_s <= 0:
            out.append(("stall_s", f"must be > 0 seconds, got {self.stall_s}", "give seconds, or null for no watchdog"))
        if self.max_steps is not None and self.max_steps < 1:
            out.append(("max_steps", f"must be >= 1, got {self.max_steps}", "give a step count, or null"))
        return out


@dataclasses.dataclass
class ResourcesConf:
    """What one trial needs of the node (``trial.resources``); null/null: one trial at a time owning the node."""

    gpus: int | None = None
    """GPUs per trial: the node is cut into slots of this many (``CUDA_VISIBLE_DEVICES``)."""
    cpus: int | None = None
    """CPU cores per trial, pinned by CPU affinity (a DataLoader never takes another trial's cores)."""
    # Their ranges depend on the node (GPUs visible, cores usable): ``sweeper.sweep.run.slots`` checks them.


@dataclasses.dataclass
class TrialConf:
    """How a trial runs (``trial:``); see ``sweeper.trial.isolate``."""

    timeout_s: float = 900
    """A trial still running after this many seconds is killed (status failed, reason timeout)."""
    isolate: bool = True
    """Run each trial in its own child process (false: in the Hydra job's process, for debugging; there nothing
    can stop a trial that hangs: ``timeout_s``, ``measure.stall_s`` and the sweep's budget all end a process)."""
    resources: ResourcesConf = dataclasses.field(default_factory=ResourcesConf)
    """What one trial needs of the node (see :class:`ResourcesConf`)."""
    lock_dir: str | None = None
    """Where sweepers on one node lock each core and GPU of a slot (``sweeper.sweep.run.slots``), one folder per host;
    null: the node-wide ``$KNOB_SWEEPER_LOCK_DIR``, else ``<temp dir>/knob-sweeper-<user>/locks``
    (``sweeper.sweep.run.slots.default_lock_dir``), whatever ``results_dir`` is. Sweepers coordinate when they share
    it."""
    context: str | None = None
    """Set by the sweeper for each trial (study, trial number, storage, ...) as JSON; never by hand."""
    trace: str | None = None
    """Set by the Hydra job for a profiled trial (``measure.profile_steps``): its trace's path relative to
    ``results_dir``; never by hand."""

    def problems(self) -> list[tuple[str, str, str]]:
        out = _infinite(self, ("timeout_s",))
        if self.timeout_s <= 0:
            out.append(("timeout_s", f"must be > 0 seconds, got {self.timeout_s}", "give the seconds a trial may run"))
        return out


def _infinite(node: object, names: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(key, problem, fix) for each of ``names`` that is NaN or infinite: a time limit of NaN is never reached
    (every comparison with it is false) and an infinite one is not a limit."""
    out = []
    for name in names:
        value = getattr(node, name)
        if isinstance(value, float) and not math.isfinite(value):
            fix = "give a finite number" + (", or null" if name in ("rel_precision", "stall_s") else "")
            out.append((name, f"must be a finite number, got {value}", fix))
    return out


@dataclasses.dataclass
class RunConf:
    """The top-level keys of the config a trial runs on (``device``, ``preset``, ...); see
    ``sweeper.sweep.config.trial_config`` (device and preset resolved, the environment built)."""

    device: str = "auto"
    """auto: the first visible GPU, else the CPU. Or cpu, cuda, cuda:N."""
    preset: str | None = "auto"
    """auto: the workload's ``tiny`` preset on the CPU, none on a GPU. Or none, or a preset name."""
    results_dir: str = "results"
    """Parquet rows go to ``<results_dir>/trials/``, the default Optuna storage to ``<results_dir>/optuna.db``."""
    compile_cache_dir: str | None = "${results_dir}/inductor_cache"
    """Shared by every trial of a sweep, so a compiled graph is compiled once (``TORCHINDUCTOR_CACHE_DIR``)."""
    env: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Extra environment variables for the trial process."""
    cpus: list[int] | None = None
    """CPU cores the trial process is pinned to (null: all the process may use). Set per trial by the sweeper
    when ``trial.resources`` cuts the node into slots."""
    gpus: list[Any] | None = None
    """GPUs the trial may see (``CUDA_VISIBLE_DEVICES`` tokens; null: all). Set per trial like ``cpus``."""
    cpu_threads: int | None = None
    """torch intra-op threads in the trial (null: one per core it may use)."""


NODES: dict[str, type] = {"measure": MeasureConf, "trial": TrialConf, "distributed": DistributedConf}
"""The typed nodes of a trial's config: node -> its dataclass (``distributed`` is
:class:`workloads.spec.distributed.DistributedConf`, torch-free beside the knob classes)."""
"""The typed nodes of a trial's config: node -> its dataclass (``distributed`` is
:class:`workloads.spec.distributed.DistributedConf`, torch-free beside the knob classes)."""
