"""Whether a configuration may start: its predicted wall time against the budget's time left, the
re-measurements' reserve kept; and, when the search's own proposals no longer fit, what to spend the rest on.

Shared by the sweep loop and the CPU replays of recorded landscapes (``tests/replay.py``): both decide with this
code, the cost model (``sweeper.sweep.search.costs``) and the one :class:`~sweeper.sweep.search.budget.Budget`.

When a proposal cannot end in the time left, the time is spent where it pays, in this order (each only if it is
predicted to end within the budget):

1. a promotion of a screened configuration to an expensive value, or the best configuration's graph-neutral knobs
   on a graph already compiled (a warm compile), or an untried one-knob neighbour of the best configuration so
   far, the value with the best main effect first (never measured first): the staged sampler's
   :meth:`~sweeper.sweep.search.staged.StagedSampler.spare_plan`;
2. a repeat of one of the ``SPARE_TOP`` best configurations, the least repeated first, up to ``SPARE_REPEATS``
   each: their trial-to-trial noise is what separates them in the report.

Only when none of these fits does the search stop on the budget. A space whose every configuration is measured
spends the time left on the repeats alone (:meth:`Admission.queue_repeat`), then stops as exhausted.

One such choice waits in the queue at a time: queued behind configurations queued earlier that do not fit (a
workload's ``starts``), each of which is skipped in turn, it would otherwise be joined by another choice for each
skip, and those made for time already spent would be skipped in their turn (an H100 sweep of ResNet-50 fed from
JPEGs queued three and measured one).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from typing import Any

from optuna.trial import TrialState

from sweeper.sweep.run import remeasure
from sweeper.sweep.search import warm
from sweeper.sweep.search.budget import Budget
from sweeper.sweep.search.costs import CostModel
from sweeper.sweep.study import optuna_private as private
from sweeper.sweep.study import trials
from sweeper.sweep.study.attrs import CONFIRM_KEY, TARGET_KEY
from sweeper.sweep.study.view import StudyView

# A trial admitted against the re-measurements' reserve is priced with the study's own overrun at this quantile
# (the cost model's bar: 80 % of predictions within 30 %), once this many were priced, at most this share.
OVERRUN_QUANTILE = 0.8
OVERRUN_MIN = 3
OVERRUN_MAX = 1.0
SPARE_TOP = 2  # the best configurations a spare repeat may measure again
SPARE_REPEATS = 2  # repeats of each, at most, beyond the re-measurements after the search


class Admission:
    """Predictions against the budget for one sweep (``plan``: its ``SweepPlan``, or any object with ``study``,
    ``space``, ``defaults``, ``objectives`` and ``cfg``)."""

    def __init__(self, plan: Any, settings: Any, costs: CostModel, budget: Budget) -> None:
        self.plan, self.settings, self.costs, self.budget = plan, settings, costs, budget
        self._view: StudyView | None = None
        self._queued: dict[str, Any] | None = None  # the configuration the last spare-time choice queued
        self._queued_repeat = False  # ... as a repeat of a measured one

    @contextlib.contextmanager
    def reading(self) -> Iterator[Any]:
        """The study's trials read once for the decision that enters first (a nested call reads the same view):
        each question below reads them many times, each read a query on a database storage."""
        if self._view is not None:
            yield self._view
            return
        self._view = StudyView(self.plan.study)
        try:
            yield self._view
        finally:
            self._view = None

    def predict(self, params: Mapping[str, Any], profile: bool = False, repeat: bool = False) -> float:
        """Predicted wall seconds of a trial of ``params`` (``repeat``: measured again, warm caches; ``profile``:
        profiled too)."""
        with self.reading() as study:
            phases = self.costs.phases(study, dict(params), repeat=repeat)
            steps = int(self.settings.profile_steps)
            return phases["total"] + (remeasure.profile_cost(study, phases.get("step"), steps) if profile else 0.0)

    def fits(
        self, params: Mapping[str, Any], profile: bool = False, reserve: bool = True, repeat: bool = False
    ) -> bool:
        """A trial of ``params`` is predicted to end within the budget, keeping the re-measurements' reserve: where
        there is one, its price is taken with the study's own overrun (:meth:`overrun`), so that a trial that runs
        over its price as this study's trials ran over theirs leaves the reserve whole."""
        if self.budget.deadline is None:
            return True
        with self.reading() as study:
            kept = self.reserve() if reserve else 0.0
            predicted = self.predict(params, profile, repeat)
            return self.budget.fits(predicted * (1.0 + self.overrun(study)) if kept else predicted, kept)

    def overrun(self, study: Any) -> float:
        """The share by which this study's trials ran over prices resting on a measurement of their cost class:
        the ``OVERRUN_QUANTILE`` of actual over predicted wall, less one (0 where they ran within them, or fewer
        than ``OVERRUN_MIN`` were priced), at most ``OVERRUN_MAX``. The first trial of a class was priced by the
        prior, which says nothing of the model's error (DeepLabV3's compiled start on an H100: 104 s priced, 153-181
        s run). A 1-D convolution net on the CPU (2026-12-07): a trial admitted with 1.9 s left against a 1.4 s
        reserve ran 0.2 s over its price, and neither re-measurement ran."""
        classes, ratios = set(), []
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        for t in sorted(finished, key=lambda t: t.number):
            cls = self.costs.cost_class(t.params)
            pair = trials.price_of(t)
            if pair is not None and cls in classes:
                ratios.append(pair[1] / pair[0])
            classes.add(cls)
        if len(ratios) < OVERRUN_MIN:
            return 0.0
        ratios.sort()
        at = ratios[min(len(ratios) - 1, math.ceil(OVERRUN_QUANTILE * len(ratios)) - 1)]
        return min(OVERRUN_MAX, max(0.0, at - 1.0))

    def keep_s(self, params: Mapping[str, Any], repeat: bool = False) -> float:
        """Seconds before the budget's end a trial of ``params`` must leave to others (its stop:
        ``Scheduler.stop_at``): the re-measurements' reserve where its price rests on no measurement of its own
        class (the cost model's prior, or a cut trial's bound) once the study holds a measured trial of an
        expensive class; else 0 (the budget's end). A prior is a guess: an H100 sweep of a recommender
        (2026-12-07) priced a ``max-autotune-no-cudagraphs`` trial 90 s from the default mode's 12.6 s compile and
        the mode's prior; it ran 217 s until the budget's end cut it, and the re-measurements of the best and the
        baseline, whose time the admission had kept, did not run. Stopped where the reserve begins (never before
        its own predicted end), it ends ``interrupted`` (a lower bound for its configuration) and the
        re-measurements keep their time. Until an expensive class was measured the first such trial (the
        handbook's compiled start) is the measurement the sweep is for: it keeps none. A repeat keeps none."""
        if repeat or self.budget.deadline is None:
            return 0.0
        with self.reading() as study:
            if self.costs.phases(study, dict(params))["basis"] == "measured":
                return 0.0
            cheap = self.costs.cost_class(dict(self.costs.expensive))
            if all(s.cls == cheap for s in self.costs.seen(study)):
                return 0.0
            return self.reserve()

    def any_fits(self) -> bool:
        """Some trial may still end within the budget: the cheapest measured configuration of the cheap class (with
        nothing measured, one with the expensive knobs cheap) is predicted to."""
        if self.budget.deadline is None:
            return True
        cheap = dict(self.costs.expensive)
        with self.reading() as study:
            seen = [s.params for s in self.costs.seen(study) if s.cls == self.costs.cost_class(cheap)]
            cost = min((self.predict(p) for p in seen), default=self.predict(cheap))
            return self.budget.fits(cost, self.reserve())

    def reserve(self) -> float:
        """Seconds the re-measurements after the search are predicted to take (the baseline's and the best's, their
        configurations as they rank now, each a repeat: its compile cache warm), of those that still end within
        the budget, taken in order as the re-measurement phase takes them (on one slot: the larger reserve where
        the phase spreads them over several): one that cannot end in the time left is
        not measured, and holds none of it back (DeepLabV3's best on an H100, compiled, pays cuDNN's 84 s benchmark
        again: with 95 s left its re-measurement kept every trial out, and the sweep ended at 73 % of its budget)."""
        s, plan = self.settings, self.plan
        with self.reading() as study:
            wanted = remeasure.plan(study, plan.objectives, self.baseline(), s.confirm_top_k, self.profile_k())
            target = study.user_attrs.get(TARGET_KEY)
            if target is not None:  # a command going on with a target: those it measured again are done
                wanted = remeasure.pending(study, wanted, int(target))
            costs = {id(r): remeasure.cost_s(study, self.costs, r, int(s.profile_steps)) for r in wanted}
        kept = remeasure.that_fit(wanted, lambda r: costs[id(r)], self.budget.fits, 1)
        return sum(costs[id(r)] for r in kept)

    def profile_k(self) -> int:
        if self.settings.profile is not None:
            return int(self.settings.profile)
        return 1 if str(self.plan.cfg["device"]).startswith("cuda") else 0

    def baseline(self) -> dict[str, Any] | None:
        return warm.baseline_params(self.plan.space, self.plan.defaults) if self.settings.baseline_first else None

    # ------------------------------------------------------------------ the rest of the budget

    def spare(self) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        """What to measure instead of a proposal that does not fit: (what, params, user attrs to queue it with), or
        None when nothing that pays fits in the time left."""
        with self.reading() as study:
            return self._spare(study)

    def _spare(self, study: Any) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        sampler = self.plan.study.sampler
        if hasattr(sampler, "spare_plan"):
            plan = sampler.spare_plan(study)
            if plan:
                return "search", plan, {}
        return self._repeat(study)

    def _repeat(self, study: Any) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
        """A repeat of one of the ``SPARE_TOP`` best configurations that fits, the least repeated first."""
        repeats: dict[Any, int] = {}
        for t in study.get_trials(deepcopy=False):
            if t.user_attrs.get(CONFIRM_KEY) is not None:
                repeats[t.user_attrs[CONFIRM_KEY]] = repeats.get(t.user_attrs[CONFIRM_KEY], 0) + 1
        top = remeasure.plan(study, self.plan.objectives, None, SPARE_TOP, 0)
        extra = max(0, int(self.settings.confirm_top_k))  # the re-measurements after the search repeat these too
        for r in sorted(top, key=lambda r: repeats.get(r.of, 0)):
            if repeats.get(r.of, 0) < SPARE_REPEATS + extra and self.fits(r.params, repeat=True):
                return "repeat", r.params, {CONFIRM_KEY: r.of}
        return None

    def queue_repeat(self) -> str | None:
        """Every configuration of the space is measured: queue a repeat of a top one that fits (what separates
        them in the report); a phrase saying what was queued, or None."""
        with self.reading() as study:
            return self._queue(self._repeat(study))

    def queue_spare(self) -> str | None:
        """Queue :meth:`spare`'s choice; a phrase saying what was queued (:data:`WAITS` when the last choice still
        waits in the queue and fits), or None."""
        with self.reading() as study:
            if self._waits(study):
                return WAITS
            return self._queue(self._spare(study))

    def _waits(self, study: Any) -> bool:
        """The last spare-time choice is still queued, not started, and still predicted to end within the budget."""
        if self._queued is None:
            return False
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        repeat = self._queued_repeat  # asked as it was chosen: a repeat finds its compile cache warm
        if any(private.configuration(t) == self._queued for t in waiting) and self.fits(self._queued, repeat=repeat):
            return True
        self._queued = None
        return False

    def _queue(self, found: tuple[str, dict[str, Any], dict[str, Any]] | None) -> str | None:
        if found is None:
            return None
        what, params, attrs = found
        self.plan.study.enqueue_trial(params, user_attrs=attrs)
        self._queued, self._queued_repeat = dict(params), CONFIRM_KEY in attrs
        return {
            "search": "an untried configuration that fits",
            "repeat": f"a repeat of trial {attrs.get(CONFIRM_KEY)}",
        }[what]


WAITS = "nothing more: the configuration queued earlier fits and waits its turn"
UNLIMITED = 10**9  # the target of counted trials when the budget is the only limit
