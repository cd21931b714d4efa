"""Warm start across runs (``hydra.sweeper.warm_start``): a new study begins where earlier ones ended.

``warm_start: latest`` names the most recent other study of the same workload (same data source and preset) in the
same storage; a name or a list of names picks studies explicitly. For a new study:

* the ``warm_start_k`` best configurations of those studies are queued first: measured again here (this node,
  tonight), never copied;
* every measured trial of theirs (complete or out of memory) whose configuration this search space can give is
  added to the new study's history (``Study.add_trials``), so the sampler starts from what they learned. Such a
  trial carries the user attribute ``warm_start_from`` ("<study>#<trial>"); it is not one of this study's trials:
  it is not counted toward ``n_trials``, never answers a duplicate, and has no Parquet row here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState, create_trial

from sweeper.errors import ConfigError
from sweeper.results.outcome import Status
from sweeper.sweep.config.space import SearchSpace
from sweeper.sweep.search.staged import is_staged, started
from sweeper.sweep.study.attrs import COST_KEY, DEFERRED_KEY, QUEUED_KEY, STAGE_KEY, WORKLOAD_KEY, status_of
from sweeper.sweep.study.attrs import WARM_KEY as FROM_KEY  # "<study>#<trial>" a seeded trial was measured as
from sweeper.sweep.study.faults import fault_point
from sweeper.sweep.study.optuna_private import CONSTRAINTS_KEY

log = logging.getLogger(__name__)


def _asked(study: optuna.Study) -> bool:
    return any(t.state != TrialState.WAITING and FROM_KEY not in t.user_attrs for t in study.get_trials(deepcopy=False))


def resolve(storage: Any, spec: Any, current: str, workload: str) -> list[str]:
    """The studies ``spec`` names (null/[] = none, "latest", a name, or a list of names); bad names exit 2."""
    if spec in (None, "", [], ()):
        return []
    names = [spec] if isinstance(spec, str) else [str(s) for s in spec]
    summaries = {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    out: list[str] = []
    for name in names:
        if name == "latest":
            same = [
                s
                for s in summaries.values()
                if s.study_name != current
                and s.datetime_start is not None
                and (s.user_attrs.get(WORKLOAD_KEY) or s.study_name) == workload
            ]
            if not same:
                log.info("warm start: no earlier study of %s in this storage; starting cold", workload)
                continue
            out.append(max(same, key=lambda s: s.datetime_start).study_name)
        elif name == current:
            raise ConfigError(
                "hydra.sweeper.warm_start", f"{name!r} is this study itself", "name an earlier study, or use latest"
            )
        elif name not in summaries:
            known = ", ".join(sorted(n for n in summaries if n != current)) or "none"
            raise ConfigError(
                "hydra.sweeper.warm_start",
                f"no study {name!r} in this storage (studies: {known})",
                "name a study of this storage, or use latest",
            )
        else:
            other = summaries[name].user_attrs.get(WORKLOAD_KEY)
            if other and other != workload:
                log.warning(
                    "warm start: study %s swept %s, not %s; only the knobs both spaces share are used",
                    name,
                    other,
                    workload,
                )
            out.append(name)
    return list(dict.fromkeys(out))


def _measured(t: FrozenTrial) -> bool:
    """Measured in its study: complete or out of memory (not a duplicate answered from another, not seeded)."""
    return (
        t.state == TrialState.COMPLETE
        and status_of(t) in (Status.COMPLETE, Status.INFEASIBLE)
        and FROM_KEY not in t.user_attrs
        and bool(t.values)
        and all(math.isfinite(v) for v in t.values)
    )


def _in_space(params: Mapping[str, Any], space: SearchSpace, defaults: Mapping[str, Any]) -> dict[str, Any] | None:
    """The knobs of ``params`` this space samples, or None when one of them holds a value it cannot give."""
    kept, dropped = space.fix(params, defaults)
    if any("outside" in why for why in dropped.values()):
        return None
    return kept


def gather(
    storage: Any, sources: list[str], study: optuna.Study, space: SearchSpace, defaults: Mapping[str, Any], k: int
) -> tuple[list[dict[str, Any]], list[FrozenTrial]]:
    """The sources' ``k`` best distinct configurations (by the first objective), for the sweep to measure first,
    and their measured trials as trials for ``study``'s history (``Study.add_trials``). Sources with other
    objectives are left out."""
    seeded: dict[str, FrozenTrial] = {}
    ranked: list[tuple[float, dict[str, Any]]] = []
    sign = 1.0 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else -1.0
    for name in sources:
        source = optuna.load_study(study_name=name, storage=storage)
        if source.directions != study.directions:
            log.warning("warm start: study %s has other objectives; not used", name)
            continue
        for t in source.get_trials(deepcopy=False):
            origin = str(t.user_attrs.get(FROM_KEY) or f"{name}#{t.number}")
            if origin in seeded or not (_measured(t) or t.user_attrs.get(FROM_KEY)):
                continue
            params = _in_space(t.params, space, defaults)
            if params is None or not params:
                continue
            seeded[origin] = create_trial(
                state=TrialState.COMPLETE,
                values=t.values,
                params=params,
                distributions={n: space.params[n] for n in params},
                user_attrs={FROM_KEY: origin, **{a: v for a, v in t.user_attrs.items() if a == COST_KEY}},
                system_attrs={
                    a: v for a, v in t.system_attrs.items() if a.startswith(CONSTRAINTS_KEY) or a == STAGE_KEY
                },
            )
            feasible = all(c <= 0 for c in t.constraints.values())
            if status_of(t) is Status.COMPLETE and feasible and FROM_KEY not in t.user_attrs:
                ranked.append((sign * t.values[0], params))
    best: list[dict[str, Any]] = []
    for _v, params in sorted(ranked, key=lambda r: -r[0]):
        if params not in best and len(best) < k:
            best.append(params)
    if seeded:
        log.info(
            "warm start from %s: %d measured trials in the sampler's history, %d best measured first",
            ", ".join(sources),
            len(seeded),
            len(best),
        )
    return best, list(seeded.values())


def queue_first(plan: Any, k: int, baseline_first: bool = True) -> None:
    """A new study measures the warm-start studies' ``k`` best first, then the workload's defaults (the baseline the
    report compares against), then the declared ``starts`` (the workload's own known-good recipes), then the
    configuration the handbook's generic rules pick from the space on this device (``plan.handbook``:
    ``sweeper.sweep.search.handbook``; without starts it comes right after the defaults), before the sampler's own
    choices. A recipe measured for the workload comes before the rules: on an H100 (2026-12-06) ResNet-50's
    handbook start on JPEGs decoded by the CPU (compiled, batch 1024) cost 95 s of a 300 s budget for 3,405 img/s
    and put its declared hybrid-decode start, the sweep's best (5,881), at 206 s. The warm-start studies' trials
    join the sampler's history. A study with trials is left as it is. ``plan`` is the sweep's ``SweepPlan`` (not
    imported: the plan module imports this one).

    Idempotent: a command killed while queueing leaves the study without ``QUEUED_KEY``, and the next command
    queues what is missing (Optuna's ``skip_if_exists``; history trials already added are not added again)."""
    if plan.study.user_attrs.get(QUEUED_KEY) or not plan.space.params:
        return
    if (
        plan.study.trials
        and not any(
            t.state == TrialState.WAITING or FROM_KEY in t.user_attrs for t in plan.study.get_trials(deepcopy=False)
        )
        and _asked(plan.study)
    ):
        plan.study.set_user_attr(QUEUED_KEY, True)  # a study of an earlier version: its first trials ran
        return
    best, history = gather(plan.storage, plan.warm_sources, plan.study, plan.space, plan.defaults, k)
    enqueued: list[dict[str, Any]] = list(best)  # the earlier studies' best, measured again first
    if baseline_first:
        baseline = baseline_params(plan.space, plan.defaults)
        if baseline is not None and baseline not in enqueued:
            enqueued.append(baseline)
    left: dict[tuple[str, str], list[str]] = {}  # (knob, why) -> the starts that leave it to the sampler
    for key, params, dropped in plan.starts:
        for name, why in dropped.items():
            left.setdefault((name, why), []).append(key.removeprefix("hydra.sweeper."))
        if params and params not in enqueued:
            enqueued.append(params)
    start = getattr(plan, "handbook", None) if baseline_first else None  # the handbook's rules on the space
    if start and start not in enqueued:
        if deferred_start(plan, baseline_first):
            plan.study.set_user_attr(DEFERRED_KEY, start)  # a later command with another sampler queues it
        else:
            enqueued.append(start)
    by_starts: dict[tuple[str, ...], list[str]] = {}  # one notice per set of starts, not one per knob and start
    for (name, why), keys in left.items():
        by_starts.setdefault(tuple(keys), []).append(f"{name} ({why})")
    for keys, knobs in by_starts.items():
        log.info("hydra.sweeper %s: not fixed by the start, left to the sampler: %s", ", ".join(keys), "; ".join(knobs))
    for i, params in enumerate(enqueued):  # several sweepers starting one new study together queue each once
        plan.study.enqueue_trial(params, skip_if_exists=True)
        if i == 0:
            fault_point("queued")
    have = {t.user_attrs.get(FROM_KEY) for t in plan.study.get_trials(deepcopy=False) if FROM_KEY in t.user_attrs}
    plan.study.add_trials([t for t in history if t.user_attrs.get(FROM_KEY) not in have])  # after the queue
    plan.study.set_user_attr(QUEUED_KEY, True)


def deferred_start(plan: Any, baseline_first: bool = True) -> dict[str, Any]:
    """The handbook's start where the staged sampler proposes it (``StagedSampler.deferred``) instead of the queue:
    the workload declared starts (its own recipes, measured first) and the sampler is the staged one. Once they
    ran, the best one's diagnosis may ask for warm steps worth more than the generic rules' cold compile: on an
    H100 (2026-12-06) ResNet-50 from JPEGs spent 64 s on the handbook's CPU-fed start (5,604 img/s) before the
    step of its best's GPU decoding share toward the host that gave 5,951 in 20 s. Empty otherwise."""
    start = getattr(plan, "handbook", None) if baseline_first else None
    if not start or not any(params for _key, params, _dropped in plan.starts) or not is_staged(plan.study.sampler):
        return {}
    return dict(start)


def queue_deferred(plan: Any, baseline_first: bool = True) -> None:
    """The handbook's start an earlier command on this study left to the staged sampler (``DEFERRED_KEY``), queued
    where this command's sampler does not propose it (another sampler, or no starts now) and it did not run, as
    it is or as the staged sampler runs it (``started``)."""
    start = plan.study.user_attrs.get(DEFERRED_KEY)
    if not start or not baseline_first or deferred_start(plan, baseline_first):
        return
    if not started(start, plan.study.get_trials(deepcopy=False)):
        plan.study.enqueue_trial(start, skip_if_exists=True)


def baseline_params(space: SearchSpace, defaults: Mapping[str, Any], say: bool = True) -> dict[str, Any] | None:
    """The defaults as the sampler would give them (knobs inactive under their condition left out); None when a
    default lies outside its search space (said once, where ``say``: not while the plan is made, before the
    sweep's console is live)."""
    values = {k: defaults[k] for k in space.params if defaults.get(k) is not None}
    params, dropped = space.fix(values, dict(defaults))
    for name, why in dropped.items():
        if "outside" in why:
            told = vars(space).setdefault("_told", set())  # asked at each phase of a sweep: said once
            if say and name not in told:
                told.add(name)
                log.info("no baseline trial: the default %s=%r is outside its search space", name, values[name])
            return None
    return params
