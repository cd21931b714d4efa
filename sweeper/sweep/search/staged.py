"""Cost-aware staged search (``hydra.sweeper.sampler=staged``, the default).

Some knobs make a trial much dearer than others: a cold ``torch.compile`` costs ~40 s against ~10 s for an eager
ResNet-50 trial. A workload declares them with the value that is cheap::

    hydra.sweeper.expensive: {knobs.compile: "off"}

and the search runs in three stages, each derived from the study's own history (so a resumed sweep, or several
sweepers on one study, pick up where it stands):

1. **screen**: the base sampler (TPE) searches the other knobs with the expensive ones held at their cheap value,
   until the best screened value has not improved by ``min_gain`` for ``patience`` screened trials (and at least
   ``min_screen`` were measured), or the screened trials have cost ``screen_share`` of the sweep's time budget,
   or those since the last gain have cost what a measured trial of the expensive class costs on average (ski
   rental: screening on never costs more than twice the better of it and promoting now);
2. **promote**: the ``top_k`` best screened configurations are measured with each expensive value, in order of
   expected gain per second: one first with every expensive value (which measures what each value multiplies the
   speed by and what it costs): the incumbent's cheap twin where it ranks among them (the handbook's start, whose
   neighbour each value is), else the best, then the others by (expected value - best so far) / expected cost,
   leaving out those whose expected value (with a ``slack`` allowance for config-dependent gains) cannot reach
   the best so far;
3. **search**: the base sampler continues over the whole space, with everything measured so far in its history;
   a promotion that becomes worth its cost (a new screened configuration ranks in the top ``top_k``) goes first.

In the screen and the search, a trial is first a step of a **local search** around the incumbent (the best
configuration so far; while screening, the best screened one with its expensive knobs left cheap): the one-knob
neighbour no trial has measured whose changed value has the best main effect so far (a value never measured first,
unless a measured trend bounds it: :func:`_expected_effect`).
The base sampler proposes the trial when the incumbent's neighbourhood is measured out. Knob effects on training
throughput are largely multiplicative, so climbing one knob at a time from the baseline reaches the best region
fast, and TPE's global model escapes where the climb stops (``bench/sampler_efficiency.py``: on the H200 JPEG
landscape, 80 seeds, the median fell from 21.5 to 12 configurations, the p90 from 57 to 18).

Trials queued by the sweep loop (the baseline, ``starts``, warm-start configurations) run as queued. Without an
expensive knob in the sampled space the strategy is the local search and its base sampler.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from sweeper.sweep.config.space import SearchSpace, evaluate
from sweeper.sweep.search.budget import Budget
from sweeper.sweep.search.costs import DATA_BOUND_WAIT, PIPELINE, _leaf, feeds
from sweeper.sweep.search.costs import _cache as compile_cache
from sweeper.sweep.study import optuna_private as private
from sweeper.sweep.study.attrs import CONFIRM_KEY, COST_KEY, DATA_WAIT_KEY, GPU_UTIL_KEY, STAGE_KEY, WARM_KEY, is_start
from workloads.spec.data import less_capacity, moves_a_stage, toward_host

# A step whose device was busy BUSY_UTIL of its window (NVML's utilization, percent: the report's busy GPU,
# sweeper.report.diagnose.BUSY_UTIL, not imported: the report's package brings pandas and SciPy into the sweeper)
# while it waited for its data less than FED_WAIT of it: the device sets its speed, and input work the device does
# beside the model is worth moving back to the host.
BUSY_UTIL = 95.0
FED_WAIT = 0.02


class StagedSampler(BaseSampler):
    """Screen with expensive knobs cheap, promote the best few with each expensive value, then search freely."""

    def __init__(
        self,
        base: BaseSampler,
        space: SearchSpace,
        expensive: Mapping[str, Any],
        defaults: Mapping[str, Any] | None = None,
        *,
        top_k: int = 3,
        patience: int = 6,
        min_screen: int = 8,
        min_gain: float = 0.01,
        slack: float = 0.1,
        budget_s: float | None = None,
        budget: Budget | None = None,
        screen_share: float = 0.5,
        polish_every: int = 0,
        seed: int | None = None,
    ) -> None:
        self.base = base
        self.space = space
        self.defaults = dict(defaults or {})
        self.expensive = {k: v for k, v in expensive.items() if k in space.params}  # pinned ones cost the same
        self.top_k, self.patience, self.min_screen = top_k, patience, min_screen
        self.min_gain, self.slack = min_gain, slack
        # the sweep's wall-clock budget (timeout_s) and its clock: the one the scheduler reads
        self.budget = budget if budget is not None else Budget(budget_s)
        self.budget_s, self.screen_share = self.budget.budget_s, screen_share
        self.alternatives = _alternatives(space.params, self.expensive)
        self._plans: dict[int, dict[str, Any]] = {}  # trial number -> the knobs this sampler fixes for it
        self.polish_every = polish_every
        self._rng = random.Random(seed)
        # Set by the sweep loop under a budget: whether a configuration is predicted to end in the time left.
        # Promotions and local-search steps that would not are not proposed.
        self.fits: Callable[[dict[str, Any]], bool] | None = None
        # Set by the sweep loop: the knobs that never change a compiled graph (hydra.sweeper.graph_neutral).
        self.neutral: frozenset[str] = frozenset()
        # Set by the sweep loop where the workload declares starts: the handbook's start, which this sampler
        # proposes once they ran and the best one's diagnosed steps (``_led_step``) are measured, instead of the
        # queue (sweeper.sweep.search.warm.deferred_start).
        self.deferred: dict[str, Any] = {}
        # Set by the sweep loop: the handbook's picks on the trials' device (``SweepPlan.rules``, whether or not its
        # start is measured), whose values a knob a diagnosed step wakes takes (:meth:`_woken_defaults`).
        self.handbook: dict[str, Any] = {}

    # ------------------------------------------------------------------ the sampler interface

    def reseed_rng(self) -> None:
        self.base.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        plan = self._plans.get(trial.number, {})
        if plan and all(k in plan for k in search_space):
            return {k: plan[k] for k in search_space}  # a promotion: nothing left for the base sampler
        params = self.base.sample_relative(study, trial, search_space)
        params.update({k: v for k, v in plan.items() if k in search_space})
        return params

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        plan = self._plans.get(trial.number, {})
        if param_name in plan:
            return plan[param_name]
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)
        if trial.system_attrs.get(private.FIXED_PARAMS_KEY):
            return  # the sweep loop queued this configuration
        if not self.expensive:  # the diagnosed step, the handbook's deferred start, then the local search
            trials = study.get_trials(deepcopy=False)
            sign = 1.0 if study.directions[0] == StudyDirection.MAXIMIZE else -1.0
            measured = [t for t in trials if _feasible(t)]
            plan = self._led_step(trials, measured, sign)
            if not plan and (plan := self._deferred_plan(trials, measured, sign)):
                private.storage_of(study).set_trial_system_attr(private.trial_id(trial), STAGE_KEY, "start")
            plan = plan or self._polish(study)
            if plan:
                self._plans[trial.number] = plan
            return
        stage, plan = self.next_plan(study)
        if stage == "screen":
            plan = {**plan, **(self._cheap_twin(study) or self._polish(study, screening=True))}
        elif not plan:
            plan = self._polish(study)
        if plan:
            self._plans[trial.number] = plan
        private.storage_of(study).set_trial_system_attr(private.trial_id(trial), STAGE_KEY, stage)  # for good

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        self._plans.pop(trial.number, None)
        self.base.after_trial(study, trial, state, values)

    # ------------------------------------------------------------------ the stages

    def next_plan(self, study: Study) -> tuple[str, dict[str, Any]]:
        """The stage of the next trial and the knobs it fixes: ("led", the best's diagnosed step, while screening;
        "search" after it: the screen does not come back), ("start", the handbook's deferred start), ("screen",
        the cheap values), ("promote", a whole configuration) or ("search", {}). Only "promote" and "search" end
        the screen for good."""
        trials = study.get_trials(deepcopy=False)
        sign = 1.0 if study.directions[0] == StudyDirection.MAXIMIZE else -1.0
        measured = [t for t in trials if _feasible(t)]
        screened = [t for t in measured if self._is_cheap(t.params)]
        screening = self._screening(trials, sign)
        led = self._led_step(trials, measured, sign, compiled_only=screening)
        if led:
            return ("led" if screening else "search"), led
        deferred = self._deferred_plan(trials, measured, sign)
        if deferred:
            return "start", deferred
        if screening:
            return "screen", dict(self.expensive)
        plan = self._next_promotion(trials, measured, screened, sign)
        return ("promote", plan) if plan else ("search", {})

    def _deferred_plan(self, trials: list[FrozenTrial], measured: list[FrozenTrial], sign: float) -> dict[str, Any]:
        """The handbook's deferred start (``deferred``), once, with the best configuration's input pipeline (its
        graph-neutral knobs that feed it, :func:`~sweeper.sweep.search.costs.feeds`) where this study measured
        that one fed (its data wait recorded, below a fifth): the starts and the diagnosed steps measured what
        feeds this host, the handbook's pipeline values are its rules' guess, so the start tests the handbook's
        model side (its precision, batch, compile, memory format, optimizer) where its speed can show. On an H100
        (2026-12-06 22:13) the JPEG start fed by its own pipeline (14 workers, float32 crops) ran 85 s for 4,060
        img/s, data-bound, beside a best of 5,804 decoding a share on the GPU. Empty once the start ran
        (:func:`started`), or where it does not fit."""
        if not self.deferred or started(self.deferred, trials, self._plans.values()):
            return {}
        tried = self._tried(trials)
        plan: dict[str, Any] | None = dict(self.deferred)
        here = [t for t in measured if self._measured_here(t)]
        best = max(here, key=lambda t: sign * t.values[0]) if here else None
        wait = best.user_attrs.get(DATA_WAIT_KEY) if best is not None else None
        if isinstance(wait, (int, float)) and wait < DATA_BOUND_WAIT and self.neutral:
            moved = {k: v for k, v in best.params.items() if k in self.neutral and feeds(self.space, k)}
            plan = self._woken_defaults(self._promoted(self.deferred, moved) or {}) or plan
        return dict(plan) if plan and self._untried(tried, plan) else {}

    def _untried(self, tried: list[dict[str, Any]], plan: Mapping[str, Any]) -> bool:
        """No configuration of ``tried`` (:meth:`_tried`) has ``plan``'s values, and it fits."""
        return not any(_same(plan, p, keys=plan) for p in tried) and self._affordable(plan)

    def _led_step(
        self, trials: list[FrozenTrial], measured: list[FrozenTrial], sign: float, compiled_only: bool = False
    ) -> dict[str, Any]:
        """Before the handbook's deferred start, a promotion or the screen (``compiled_only``: only where the best
        is compiled; an eager best's screen climbs from it anyway), the step the best configuration's diagnosis
        asks for, where it leaves the compiled graph as it is (a graph-neutral knob: the cache holds the graph, so
        it costs a warm trial, not a compile): where the best waited for its data, an input-pipeline value whose
        measured main effect beats its own; where it kept the device busy and never waited, one step of its input
        work from the device back to the host (:func:`toward_host`; the diagnosis, not the main effect, says it
        pays: a host decoding value's main effect holds the baseline's worker-less trials). JPEG on an H100
        (2026-12-06): the compiled best decoding half of each batch on the GPU kept it 99 % busy; the step to 3/8
        ran 20 s for +1.4 %, after the handbook's start (a cold compile, 64 s, -4.5 %) and an unmeasured compile
        mode's promotion (44 s, -1.1 %). The steps go on from a configuration as good as the best (within
        ``min_gain``) where its own diagnosis asks: on another H100 host that evening 3/8 ran as fast as 1/2
        (5,790 and 5,804 img/s), and further on, 1/4 5,930, nothing decoded on the GPU 6,000 (bench/host_ladder.sh).
        Empty when none fits."""
        if not self.neutral or not measured:
            return {}
        top = max(sign * t.values[0] for t in measured)
        level = top - self.min_gain * abs(top)  # within min_gain of the best: as good, for the trial-to-trial noise
        bases: list[dict[str, Any]] = []
        tried = self._tried(trials)
        for t in sorted(measured, key=lambda t: -sign * t.values[0]):
            if sign * t.values[0] < level:
                break
            if (compiled_only and self._is_cheap(t.params)) or any(_same(t.params, b) for b in bases):
                continue
            bases.append(dict(t.params))
            plan = self._led_from(tried, measured, bases[-1], sign, first=len(bases) == 1)
            if plan:
                return plan
        return {}

    def _led_from(
        self, tried: list[dict[str, Any]], measured: list[FrozenTrial], base: dict[str, Any], sign: float, first: bool
    ) -> dict[str, Any]:
        """:meth:`_led_step`'s step from ``base`` (the best, ``first``, or one as good): the diagnosis of its trials
        asks for it, it changes one graph-neutral knob (a knob it wakes takes the handbook's value, else the
        workload's default, and must be graph-neutral too: :meth:`_woken_defaults`), it fits and is untried; the
        changed value's main effect best first. A pipeline value for a base that waited for its data must beat its
        value's main effect by ``min_gain`` (noise is no reason), and only from the best: on a plateau of
        data-bound configurations every step lands as good as the best again, and steps from each of them would
        never end; the steps toward the host end where the split does. Toward the host, a step that leaves none of
        a stage on the device (``decode_device`` hybrid -> cpu) comes before one that trims a share (``gpu_share``
        1/2 -> 3/8): one trial measures whether the host alone feeds the model (its data wait says by how much it
        falls short, and the shares come next from the best); on the H100 hosts of 2026-12-06 and 12-07 it did,
        and three 26 s steps of the share came before it (bench/host_ladder.sh: 1/2 5,780, 1/4 5,930, the host
        6,040 img/s)."""
        alike = [t for t in measured if _same(t.params, base)]
        starved, busy = first and any(map(_fed_slowly, alike)), all(map(_device_busy, alike))
        options, noise = [], math.log1p(self.min_gain)
        for name, dist in self.space.params.items():
            if name not in self.neutral or name not in base or not isinstance(dist, CategoricalDistribution):
                continue
            here = base[name]
            for value in dist.choices:
                gain = _main_effect(measured, name, value, sign) - _main_effect(measured, name, here, sign)
                home = busy and toward_host(_leaf(name), here, value, dist.choices)
                led = (starved and _leaf(name) in PIPELINE and math.isfinite(gain) and gain > noise) or home
                plan = self._promoted(base, {name: value}) if led and value != here else None
                plan = self._woken_defaults(plan) if plan else None
                if plan and self._untried(tried, plan):
                    options.append((home and moves_a_stage(_leaf(name), value), gain, self._rng.random(), plan))
        return max(options, key=lambda o: o[:3])[3] if options else {}

    def _woken_defaults(self, plan: dict[str, Any], strict: bool = True) -> dict[str, Any] | None:
        """``plan`` (a configuration with one knob changed) with each knob the change made active set as the
        handbook's start sets it (``handbook``: its rule's value, else the workload's default; ``decode_device``
        hybrid -> cpu wakes ``device_prefetch``: on, on a GPU); None where that value is not among its choices
        (cuda -> hybrid wakes ``gpu_share``, whose default is none): the base sampler would draw it, and the trial
        would not be one step on a warm graph; None too where a woken knob is not graph-neutral. On an H100
        (2026-12-07) the step to host decoding woke it at the workload's default (off) and ran 5,806 img/s, waiting
        3.8 % of its window, below the 1/4 share it stepped from (5,909). Not ``strict`` (a neighbour that may
        compile anew): a woken knob without such a value is left to the base sampler, graph-neutral or not, and so
        is every woken knob after it (its value decides what it wakes)."""
        out, ns = dict(plan), {**self.defaults, **self.space.fixed}
        picks = {**self.defaults, **{k: v for k, v in self.handbook.items() if v is not None}}
        drawn = False  # a woken knob left to the base sampler: what it wakes in turn is unknown here
        for name, dist in self.space.params.items():  # dependency order, as :meth:`_promoted` walks it
            cond = self.space.conditions.get(name)
            if cond is not None and not evaluate(cond, ns):
                ns[name] = None
                continue
            if name not in out:
                default = picks.get(name)
                known = isinstance(dist, CategoricalDistribution) and default is not None and default in dist.choices
                if drawn or not known:
                    if strict:
                        return None
                    drawn = True
                    continue
                if strict and name not in self.neutral:  # a knob of the model's graph: the step compiles anew
                    return None
                out[name] = default
            ns[name] = out[name]
        return out

    def _cheap_twin(self, study: Study) -> dict[str, Any]:
        """While screening: the best configuration measured so far with its expensive knobs cheap, when it is not
        cheap itself and its twin is untried (the handbook's start, compiled, leads the screen: the climb starts
        there, and the pair measures what compile brings)."""
        trials = study.get_trials(deepcopy=False)
        measured = [t for t in trials if _feasible(t)]
        if not measured:
            return {}
        sign = 1.0 if study.directions[0] == StudyDirection.MAXIMIZE else -1.0
        best = max(measured, key=lambda t: sign * t.values[0])
        if self._is_cheap(best.params):
            return {}
        twin = self._promoted(best.params, self.expensive) or {}
        tried = self._tried(trials)
        return {} if not twin or any(_same(twin, p, keys=twin) for p in tried) else twin

    def spare_plan(self, study: Study, top: int = 3) -> dict[str, Any]:
        """A configuration that fits the time left when the search's own proposal does not: a promotion that is
        now worth its cost, else the best configuration's graph-neutral knobs on a graph already compiled
        (:meth:`_warm_twin`), else an untried one-knob neighbour of one of the ``top`` best configurations (each
        also with its expensive knobs cheap), the changed value with the best main effect first (a value never
        measured first, unless a measured trend bounds it: :func:`_expected_effect`). Empty when none fits."""
        trials = study.get_trials(deepcopy=False)
        sign = 1.0 if study.directions[0] == StudyDirection.MAXIMIZE else -1.0
        measured = [t for t in trials if _feasible(t)]
        if not measured:
            return {}
        if self.expensive:
            screened = [t for t in measured if self._is_cheap(t.params)]
            plan = self._next_promotion(trials, measured, screened, sign) or self._warm_twin(trials, measured, sign)
            if plan:
                return plan
        ranked = sorted(measured, key=lambda t: -sign * t.values[0])
        bases: dict[tuple, tuple[dict[str, Any], float | None]] = {}  # base -> (base, what a neighbour must gain)
        for t in ranked:
            # its twin too: as far behind as it (the expensive values' gain aside); the best's neighbours must hope
            # to reach it (a spare trial measures where it pays; the repeats that separate the top come next)
            need = 0.0 if t is ranked[0] else _behind(ranked[0], t, sign)
            for base in (dict(t.params), self._promoted(t.params, self.expensive) or {}):
                key = tuple(sorted((k, repr(v)) for k, v in base.items()))
                if base and (key not in bases or bases[key][1] is None):  # a bound wins over none
                    bases[key] = (base, need)
            if len(bases) >= 2 * top:
                break
        for base, need in bases.values():
            plan = self._neighbour(trials, measured, base, sign, screening=False, need=need)
            if plan:
                return plan
        return {}

    def _warm_twin(self, trials: list[FrozenTrial], measured: list[FrozenTrial], sign: float) -> dict[str, Any]:
        """When the best configuration so far has its expensive knobs cheap (it was not compiled) and its
        compiled promotion does not fit: a compiled configuration already measured, the best first, with the
        best one's graph-neutral knob values (its input pipeline, its optimizer's implementation). The graph is
        one Inductor's cache holds, so its compile is a warm one: what the best's pipeline gives with compile's
        gain, at the price the cache leaves (JPEG on an H100: hybrid decoding found eager at 163 s, its cold
        compile priced 101 s with 135 s left, the compiled CPU-decoding graph beside it). Empty when none fits."""
        best = max(measured, key=lambda t: sign * t.values[0])
        if not self.neutral or not self._is_cheap(best.params):
            return {}
        ranked = sorted((t for t in measured if not self._is_cheap(t.params)), key=lambda t: -sign * t.values[0])
        tried = self._tried(trials)
        moved = {k: v for k, v in best.params.items() if k in self.neutral}
        for compiled in ranked:
            plan = self._promoted(compiled.params, moved)
            if plan and self._untried(tried, plan):
                return plan
        return {}

    def _polish(self, study: Study, screening: bool = False) -> dict[str, Any]:
        """Local search around the incumbent, every ``polish_every``-th measured trial: the one-knob neighbour of
        the best configuration so far (the best screened one while screening, its expensive knobs left cheap)
        that no trial has measured, the one whose changed knob value has the best main effect in the measurements
        so far (a value never measured first, unless a measured trend bounds it: :func:`_expected_effect`; ties at
        random). Empty when none is left or it is not the turn:
        the base sampler then proposes the trial."""
        if self.polish_every <= 0:
            return {}
        trials = study.get_trials(deepcopy=False)
        measured = [t for t in trials if _feasible(t) and (not screening or self._is_cheap(t.params))]
        if not measured or len(measured) % self.polish_every:
            return {}
        sign = 1.0 if study.directions[0] == StudyDirection.MAXIMIZE else -1.0
        best = max(measured, key=lambda t: sign * t.values[0])
        return self._neighbour(trials, measured, dict(best.params), sign, screening)

    def _neighbour(
        self,
        trials: list[FrozenTrial],
        measured: list[FrozenTrial],
        best: dict[str, Any],
        sign: float,
        screening: bool,
        need: float | None = None,
    ) -> dict[str, Any]:
        """The untried one-knob neighbour of ``best`` that fits (a knob the change wakes set as the handbook's start
        sets it, where it can be: :meth:`_woken_defaults`), the changed value's main effect best first; where
        ``best`` waited for its data, a change of its input pipeline's knobs first (the model's cannot speed a step
        the DataLoader sets); where it kept the device busy and never waited, a step of its input work from the
        device back to the host first (``workloads.spec.data.toward_host``: a JPEG pipeline decoding half of each
        batch on an H100 kept it 99 % busy with no wait, its host decoding the other half with cores to spare),
        then its own work's values, not one measured worse or beyond a worse one (:func:`_expected_effect`), and
        never less input capacity (``workloads.spec.data.less_capacity``: fewer workers or prefetched batches; on
        an H100, 2026-12-07, 4 workers beside a busy best fed by 14 spent 22 s of the last minute for 1,865 img/s
        against 6,101).
        ``need``: the log gain a neighbour must hope for (its value's main effect over the base's, with the
        ``slack`` allowance) to pass the best so far; a value never measured may (but tf32 beside a measured fp16
        or bf16, and a number beyond a worse one: :func:`_expected_effect`; a baseline's neighbours
        with no worker, 330 img/s beside a best of 3,090, were queued as spare time)."""
        tried = self._tried(trials)
        alike = [t for t in measured if _same(t.params, best)]
        starved = any(_fed_slowly(t) for t in alike)
        busy = bool(alike) and all(_device_busy(t) for t in alike)
        options = []
        for name, dist in self.space.params.items():
            if name not in best or not isinstance(dist, CategoricalDistribution):
                continue
            if screening and name in self.expensive:
                continue
            for value in dist.choices:
                if value == best[name] or (busy and less_capacity(_leaf(name), best[name], value)):
                    continue  # the device set a busy best's step: less input capacity cannot speed it
                plan = self._promoted(best, {name: value})
                plan = self._woken_defaults(plan, strict=False) if plan else None
                if plan and self._untried(tried, plan):
                    here = _main_effect(measured, name, best[name], sign)
                    # the search explores a value never measured first, unless a measured trend bounds it
                    gain = _expected_effect(measured, name, value, dist.choices, sign) - here
                    if need is not None and gain + math.log1p(self.slack) < need:
                        continue  # cannot reach the best so far: not worth the time left
                    rank = gain
                    if starved:  # the DataLoader set the step: its knobs first
                        tier = int(feeds(self.space, name))
                    elif busy:  # the device set it: input work back to the host, then its own work's knobs
                        toward = toward_host(_leaf(name), best[name], value, dist.choices)
                        tier = 2 if toward else int(rank >= 0 and not feeds(self.space, name))  # none known worse
                    else:
                        tier = 0
                    options.append((tier, rank, self._rng.random(), plan))
        return max(options, key=lambda o: o[:3])[3] if options else {}

    def _tried(self, trials: list[FrozenTrial]) -> list[dict[str, Any]]:
        """The configurations measured, running, or queued (a waiting trial's fixed params: a spare plan queued
        once is not proposed again while it waits), and those this sampler fixed for trials being sampled."""
        return [c for c in map(private.configuration, trials) if c] + list(self._plans.values())

    def _affordable(self, plan: Mapping[str, Any]) -> bool:
        return self.fits is None or self.fits(dict(plan))

    def _is_cheap(self, params: Mapping[str, Any]) -> bool:
        return all(params.get(k, cheap) == cheap for k, cheap in self.expensive.items())

    def _screening(self, trials: list[FrozenTrial], sign: float) -> bool:
        """Screening goes on until ``patience`` screening trials in a row bring no gain of ``min_gain`` (a repeat
        the sweep answered from the study, a failure or an OOM brings none), or until this command's screening
        trials cost, or its wall clock reaches, ``screen_share`` of ``budget_s``; once a trial was promoted or
        searched, it is over for good."""
        if any(t.system_attrs.get(STAGE_KEY) in ("promote", "search") for t in trials):
            return False
        tried = sorted(
            (t for t in trials if t.state.is_finished() and t.params and self._is_cheap(t.params)),
            key=lambda t: t.number,
        )
        if self.budget_s:  # this command's budget: its own trials' cost, and the wall clock since it started
            mine = [
                t
                for t in tried
                if WARM_KEY not in t.user_attrs
                and (t.datetime_start is None or t.datetime_start.timestamp() >= self.budget.started_at)
            ]
            spent = max(sum(_cost(t) or 0.0 for t in mine), self.budget.elapsed())
            if spent >= self.screen_share * self.budget_s:
                return False
        best, since, idle_s = -math.inf, 0, 0.0
        for t in tried:
            v = sign * t.values[0] if _feasible(t) else -math.inf
            if v > -math.inf and (best == -math.inf or v > best + self.min_gain * abs(best)):
                best, since, idle_s = v, 0, 0.0
            else:
                if t.system_attrs.get(STAGE_KEY) == "screen" and WARM_KEY not in t.user_attrs:  # the screen's own
                    idle_s += _cost(t) or 0.0  # (not queued ones: the start's twin comes first; not another night's)
                best, since = max(best, v), since + 1
        cold = [t for t in trials if self._measured_here(t) and not self._is_cheap(t.params)]
        promoted = _mean([_cost(t) for t in cold if compile_cache(t.user_attrs) is not True])  # a promotion compiles
        if since and promoted is not None and idle_s >= promoted:
            return False  # the fruitless screen has cost a promotion: ski-rental's rule, at most twice the better
        return len(tried) < self.min_screen or since < self.patience

    def _measured_here(self, t: FrozenTrial) -> bool:
        """A trial this study measured for the search (not another night's warm start, not a re-measurement)."""
        return _feasible(t) and WARM_KEY not in t.user_attrs and CONFIRM_KEY not in t.user_attrs

    def _next_promotion(
        self, trials: list[FrozenTrial], measured: list[FrozenTrial], screened: list[FrozenTrial], sign: float
    ) -> dict[str, Any] | None:
        ranked: list[FrozenTrial] = []
        for t in sorted(screened, key=lambda t: -sign * t.values[0]):
            if not any(_same(t.params, r.params) for r in ranked):
                ranked.append(t)
        ranked = ranked[: self.top_k]
        if not ranked:
            return None
        tried = self._tried(trials)
        best = max(sign * t.values[0] for t in measured)
        # an expensive value never measured is learned on the incumbent's cheap twin where it ranks among them (the
        # handbook's start, compiled: its neighbour in that knob), else on the best screened configuration; never on
        # one that waited for its data (its DataLoader, not the model, set its speed: the pair would measure nothing)
        # (one whose trial with that value was tried already, and failed, hands it to the next)
        incumbent = max(measured, key=lambda t: sign * t.values[0])
        own = self._promoted(incumbent.params, self.expensive) or {}
        fed = [r for r, c in enumerate(ranked) if not _fed_slowly(c)]
        order = sorted(fed, key=lambda r: not _same(ranked[r].params, own))  # the incumbent's twin first
        screen_cost = _mean([_cost(t) for t in screened])
        options: list[tuple[float, dict[str, Any]]] = []
        for rank, cand in enumerate(ranked):
            for i, alt in enumerate(self.alternatives):
                plan = self._promoted(cand.params, alt)
                if plan is None or not self._untried(tried, plan):
                    continue
                ratio, cost = self._effect(alt, measured, screened, sign)
                if ratio is None:  # unmeasured: learn it on one configuration first
                    if rank == self._learner(ranked, order, alt, tried):
                        options.append((math.inf - i, plan))  # declared order among the unmeasured
                    continue
                expected = ratio * sign * cand.values[0]
                hoped = expected + self.slack * abs(expected)  # config-dependent gains: a margin above the mean
                if hoped < best:
                    continue  # cannot reach the best so far: not worth its cost
                per_s = (hoped - best) / max(cost or screen_cost or 1.0, 1e-9)
                options.append((per_s, plan))
        if not options:
            return None
        return max(options, key=lambda o: o[0])[1]

    def _learner(
        self, ranked: list[FrozenTrial], order: list[int], alt: Mapping[str, Any], tried: list[dict[str, Any]]
    ) -> int | None:
        """The rank that learns the unmeasured ``alt``: the first in ``order`` whose trial with it was not tried."""
        for r in order:
            plan = self._promoted(ranked[r].params, alt)
            if plan is not None and not any(_same(plan, p, keys=plan) for p in tried):
                return r
        return None

    def _promoted(self, params: Mapping[str, Any], alt: Mapping[str, Any]) -> dict[str, Any] | None:
        """``params`` with the expensive values ``alt``, walked in dependency order: a knob whose condition no
        longer holds is dropped, one that becomes active is left to the base sampler."""
        ns = {**self.defaults, **self.space.fixed}
        plan: dict[str, Any] = {}
        for name in self.space.params:
            cond = self.space.conditions.get(name)
            if cond is not None and not evaluate(cond, ns):
                ns[name] = None
                continue
            value = alt[name] if name in alt else params.get(name)
            if value is None:
                continue
            plan[name] = ns[name] = value
        return plan or None

    def _effect(
        self, alt: Mapping[str, Any], measured: list[FrozenTrial], screened: list[FrozenTrial], sign: float
    ) -> tuple[float | None, float | None]:
        """What ``alt`` multiplies a screened configuration's value by, and what its trials cost (seconds), from
        pairs measured both ways; (None, None) before any pair."""
        ratios, costs = [], []
        for t in measured:
            if not all(t.params.get(k) == v for k, v in alt.items()):
                continue
            costs.append(_cost(t))
            base = next((s for s in screened if _same(s.params, t.params, skip=alt)), None)
            if base is not None and base.values[0] != 0 and not _fed_slowly(base):
                ratios.append(t.values[0] / base.values[0])
        return (_mean(ratios) if ratios else None), _mean(costs)


def started(start: Mapping[str, Any], trials: Sequence[FrozenTrial], plans: Iterable[Mapping[str, Any]] = ()) -> bool:
    """Whether the handbook's ``start`` ran or runs: a trial (or one of ``plans``, being sampled) has its own
    configuration, or this study's trial carries its mark (``is_start``: the staged sampler's start, fed by the
    best's pipeline, or its retry at a smaller batch) with a configuration or still to run (not a surplus trial
    failed before it was sampled; not another study's trial, copied as history)."""
    for t in trials:
        config = private.configuration(t)
        if config and _same(start, config, keys=start):
            return True
        live = t.state in (TrialState.RUNNING, TrialState.WAITING)
        if is_start(t) and WARM_KEY not in t.user_attrs and (config or live):
            return True
    return any(_same(start, p, keys=start) for p in plans)


def _alternatives(params: Mapping[str, BaseDistribution], expensive: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the expensive knobs' values except the all-cheap one, in declared order."""
    choices = []
    for name, cheap in expensive.items():
        dist = params[name]
        values = list(dist.choices) if isinstance(dist, CategoricalDistribution) else [cheap]
        choices.append([(name, v) for v in values])
    combos = [dict(c) for c in itertools.product(*choices)]
    return [c for c in combos if any(c[k] != cheap for k, cheap in expensive.items())]


def _main_effect(measured: list[FrozenTrial], name: str, value: Any, sign: float) -> float:
    """The mean log value of the measured trials with ``name == value`` (its main effect, up to a constant; negated
    where the study minimizes); +inf for a value no trial has measured (try it: nothing says it is worse)."""
    logs = [sign * math.log(t.values[0]) for t in measured if t.params.get(name) == value and t.values[0] > 0]
    return sum(logs) / len(logs) if logs else math.inf


def _expected_effect(measured: list[FrozenTrial], name: str, value: Any, choices: Sequence[Any], sign: float) -> float:
    """:func:`_main_effect`, with one bound for a number never measured beyond the measured ones of an ordered
    knob (a batch size): where the measured value nearest it is worse than the next one inward, it is expected no
    better than that nearest one (a monotone trend: beyond a worse value, worse), instead of +inf. A number
    between measured ones, or beyond an end that was improving, stays +inf: worth trying. (JPEG on an H100: with
    batch 1024 best and 512 and 256 measured worse, eager trials at batch 128 and 64 were spare time's choices.)

    And one for ``precision`` tf32 never measured where fp16 or bf16 was: it runs fp32's kernels, its matrix
    products and convolutions on tensor cores at half the rate of fp16's and bf16's, its activations twice their
    bytes: it is expected no better than the best of the reduced precisions measured and fp32 (where casts or
    launches set the step). With neither measured it stays +inf: beside fp32 alone tf32 may be several times faster
    (an H100's dense fp32 67 TFLOP/s against tf32's 495). (The same H100
    JPEG sweep, 2026-12-07: with fp16 best at 6,216 img/s, a tf32 trial cost 58 s for 3,242, chosen before batch
    1024 because nothing was known of it; in the recorded sweeps tf32 ran 0.41-0.52x fp16 or bf16 with the other
    knobs alike: ConvNeXt, the decoder LM, ResNet-50.)"""
    effect = _main_effect(measured, name, value, sign)
    if effect == math.inf and _leaf(name) == "precision" and value == "tf32":
        reduced = [_main_effect(measured, name, c, sign) for c in ("fp16", "bf16") if c in choices]
        reduced = [e for e in reduced if e != math.inf]
        fp32 = _main_effect(measured, name, "fp32", sign) if "fp32" in choices else math.inf
        return max(reduced + ([fp32] if fp32 != math.inf else [])) if reduced else effect
    numeric = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if effect != math.inf or value not in numeric or len(numeric) != len(choices):
        return effect
    known = sorted((c, e) for c in numeric if (e := _main_effect(measured, name, c, sign)) != math.inf)
    if len(known) < 2 or known[0][0] < value < known[-1][0]:
        return effect
    (_, e_near), (_, e_next) = (known[0], known[1]) if value < known[0][0] else (known[-1], known[-2])
    return e_near if e_near < e_next else effect


def _behind(best: FrozenTrial, t: FrozenTrial, sign: float) -> float | None:
    """How far ``t`` is behind ``best`` in log value (sign-adjusted): None for the best itself (or values the log
    cannot compare); infinitely far for a value <= 0 below a positive best (a study that maximizes)."""
    if t is best:
        return None
    if best.values[0] > 0 and t.values[0] <= 0 and sign > 0:
        return math.inf
    if not (best.values[0] > 0 and t.values[0] > 0):
        return None
    return sign * (math.log(best.values[0]) - math.log(t.values[0]))


def _fed_slowly(t: FrozenTrial) -> bool:
    """Its step waited for its data (``data_wait_frac`` >= ``DATA_BOUND_WAIT``): the input pipeline set its speed,
    so a pair it is the cheap side of says nothing of what an expensive value does to the model."""
    wait = t.user_attrs.get(DATA_WAIT_KEY)
    return isinstance(wait, (int, float)) and wait >= DATA_BOUND_WAIT


def _device_busy(t: FrozenTrial) -> bool:
    """Its device was busy (``gpu_util_mean`` >= ``BUSY_UTIL``) and its step did not wait for its data (``FED_WAIT``):
    the device, not the host, set its speed. False where either was not measured (a CPU trial)."""
    util, wait = t.user_attrs.get(GPU_UTIL_KEY), t.user_attrs.get(DATA_WAIT_KEY)
    numbers_ = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (util, wait))
    return numbers_ and util >= BUSY_UTIL and wait < FED_WAIT


def _feasible(t: FrozenTrial) -> bool:
    """A measured trial (COMPLETE, within memory): screened, ranked and compared."""
    if t.state != TrialState.COMPLETE or not t.values or not all(math.isfinite(v) for v in t.values):
        return False
    return all(c <= 0 for c in t.constraints.values())


def _same(a: Mapping[str, Any], b: Mapping[str, Any], keys: Any = None, skip: Mapping[str, Any] = ()) -> bool:
    names = set(keys) if keys is not None else set(a) | set(b)
    return all(a.get(k) == b.get(k) for k in names if k not in skip)


def _cost(t: FrozenTrial) -> float | None:
    cost = t.user_attrs.get(COST_KEY)
    return float(cost) if isinstance(cost, (int, float)) and cost > 0 else None


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def is_staged(sampler: optuna.samplers.BaseSampler) -> bool:
    return isinstance(sampler, StagedSampler)
