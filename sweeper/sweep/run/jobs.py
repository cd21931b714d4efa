"""A trial's job: the overrides and the context the sweeper hands Hydra's launcher for one trial."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sweeper.results import lookup
from sweeper.results.keys import override_string
from sweeper.sweep.config.secrets import mask
from sweeper.sweep.config.settings import priors_per_op
from sweeper.sweep.config.space import value_types
from sweeper.sweep.run.job import encode_context
from sweeper.sweep.run.settle import facts, is_baseline
from sweeper.sweep.run.slots import slot_overrides
from sweeper.sweep.search.costs import derived_timeout, wants_count
from sweeper.sweep.study.attrs import CONFIRM_KEY, PREDICTED_KEY


def overrides(plan: Any, settings: Any, run: Any, sweep_dir: Path, stop_at: float | None) -> list[str]:
    """The launch overrides of ``run`` (a ``scheduler.Running``): the fixed and sampled knobs, its slot, a derived
    timeout, the profile steps of a profiled re-measurement, and the context (``trial.context``) last."""
    trial, values = run.trial, run.values
    out = plan.fixed_args + [override_string(k, v) for k, v in {**plan.space.fixed, **values}.items()]
    out += slot_overrides(run.slot)
    if run.slot.cpus is None and len(plan.slots) > 1 and plan.cfg.get("cpu_threads") is None:
        from sweeper.trial.threads import default_threads, physical_cores  # unpinned trials share the cores

        cpus = os.sched_getaffinity(0)
        out.append(f"cpu_threads={default_threads(len(cpus), physical_cores(cpus), len(plan.slots))}")
    cap = derived_timeout(
        plan.study,
        values,
        plan.expensive,
        float(plan.cfg["trial"]["timeout_s"]),
        settings.timeout_factor,
        settings.timeout_floor_s,
        run.extra.get(PREDICTED_KEY),
    )
    if cap is not None:
        out.append(f"trial.timeout_s={cap}")
    if run.extra.get("profile"):
        out.append(f"measure.profile_steps={int(settings.profile_steps)}")
    if run.extra.get("end_at") is not None:  # where the re-measurements' reserve begins (Scheduler.window_end_at)
        out.append(f"measure.end_at={run.extra['end_at']:.3f}")
    if wants_count(plan.study, priors_per_op(settings), plan.space):  # a first compile is priced by the count
        out.append("measure.count_ops=true")
    ctx = {**context(plan, trial, values, sweep_dir, stop_at), "overrides": out}
    return out + [f"trial.context={encode_context(ctx)}"]


def context(plan: Any, trial: Any, values: dict[str, Any], sweep_dir: Path, stop_at: float | None) -> dict[str, Any]:
    """What the task needs to know of the sweep, passed as one override (no Hydra singletons: thread safe)."""
    types = lookup.column_types(value_types(plan.space), plan.defaults)
    return {
        "study": plan.study_name,
        "study_id": plan.study_id,
        "number": trial.number,
        "storage": mask(plan.storage_url),  # the trial reveals it from the environment (sweep.secrets)
        "objectives": [f"{m}:{d}" for m, d in plan.objectives],
        "log_dir": str(sweep_dir / str(trial.number)),
        "column_types": {c: str(t) for c, t in types.items()},
        "pruner": dict(plan.pruner_conf),
        "baseline": is_baseline(plan, values),
        "confirm_of": trial.user_attrs.get(CONFIRM_KEY),
        "facts": facts(plan),
        "stop_at": stop_at,  # the budget's end + grace (or before it: keep_s): stopped then (sweeper.trial.isolate)
        "predicted_wall_s": trial.user_attrs.get(PREDICTED_KEY),  # the cost model's, beside the row's wall_s
    }
