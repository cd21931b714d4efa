"""What a trial will cost, in wall-clock seconds, before it starts: the scheduler's cost model, by phases.

A trial's wall time (launch to end, as the sweeper saw it: ``spent_s``) is the sum of phases its row records:

    start (process, launcher, teardown) + setup (``setup_s``: build the model, the data) + compile (the first step
    less one step: ``compile_s`` where compiled; in an eager trial lazy initialization and cuDNN's benchmark, as
    its nearest measured configuration's, alike in cuDNN's benchmark first, a compiled one's less the seconds its
    compilers counted, ``compiler_s``, scaled by the samples a step takes: their ratio's square root where both
    ran the benchmark, else the ratio) +
    warm-up (``warmup_steps`` steps, the first one's step included, then ``warmup_drain_steps``: a DataLoader's
    prefetched buffer used up) + the measured window (``measured_s``)

and each is predicted from the study's own measured trials (warm-start history left out: another night's caches):

* start: the median of the trials' start (their wall less the phases they recorded, and less a profiled
  re-measurement's ``prof_s``: the admission prices profiling on its own);
* setup: the median of the trials of the same cost class (``hydra.sweeper.expensive`` values), else of all;
* the step time: that of the measured configurations nearest to this one (most knob values in common, the same
  cost class first), scaled by the knob values' fitted effects (on the CPU the batch size and accumulation by
  their share of the samples), the median of equals; the window is then ``measure.*`` applied to it (``steps`` steps, at
  least ``min_time_s``, at most ``max_steps``), the warm-up as many steps of it as the nearest configurations'
  warm-ups and drains recorded (the most of them; never fewer than ``measure.warmup_steps``): a data pipeline's
  buffer grows with its workers, and its drain is part of the trial, not of its start. A measured trial that
  waited for its data (``data_wait_frac`` >= 0.2) was stepped at its DataLoader's feed (on the CPU, a loader without
  workers loads between the steps: its wait alone), whatever its model knobs:
  a configuration on the same data path (the input pipeline's knobs alike, the transfer's aside) with as many
  workers or fewer is fed at most their share of it, for the samples its step takes; that step is the least (a
  worker count never measured says nothing through the neighbours' step; a trial with as many workers that did
  not wait caps it at its own step). Where this configuration's DataLoader
  buffer differs from a neighbour's (the knobs ``num_workers`` x ``prefetch_factor``, PyTorch's default 2,
  wherever the space declares them), the warm-up is the one that buffer asks (``buffer + 2`` steps, as the trial
  runs it) and the neighbour's drain scaled by the buffers' ratio (from a neighbour without a buffer: a pipeline
  that keeps up, ``min(buffer, 8)`` steps); without workers, no drain;
* compile, per cost class (per ``torch.compile`` mode): the cold compile of the nearest configuration measured in
  that class, the sweep's first compile left out where a later cold one was measured (the first into a fresh cache
  builds what every later one finds there; where it counted its compilers' seconds, those and what this
  configuration pays eager beyond a step: cuDNN's benchmark is in every first step that runs it, compiled or not;
  most knob values in common; the slowest of equals: a per-model cost that does not grow with the
  eager window, but differs by precision and batch: a ResNet-50's bf16 batch-1024 compile took 59 s on an H100,
  fp16 batch 1024 47 s, fp16 batch 512 44 s); a class never measured takes, per expensive knob, the
  slowest compile measured with that value, else its prior rescaled by how the measured values of that knob
  compared with their priors. The prior: where the study counted the model's eager step (``graph_ops``, the
  distinct operations a compile lowers: ``sweeper.trial.ops``), ``hydra.sweeper.cost_prior_per_op`` seconds per
  operation, of the nearest counted configuration; else ``hydra.sweeper.cost_prior``'s multiples of an eager trial,
  ``(factor - 1)`` x the median cheap trial. A repeat of a measured configuration (a re-measurement) finds the
  compile cache its first trial filled: it pays the warm share of its cold compile, as measured on this study's
  warm compiles, else ``WARM_COMPILE_SHARE``, and at least what its eager twin's first step pays beyond a step
  (cuDNN's benchmark, allocations: no cache holds them); where the cold trial counted its compilers' seconds
  (``compiler_s``), the rest of its first step (alone where alike in ``FIRST_STEP_KNOBS`` and the samples a step
  takes: the eager twin's can hold what a compiled one does not pay) and the compilers' seconds this study's warm
  compiles counted (those of its class first: a warm compile traces and loads, whatever the mode), else the warm
  share of those;
* graph-neutral knobs, declared (``hydra.sweeper.graph_neutral``; by default the knobs the package's helpers
  apply outside the compiled forward and loss: the optimizer's implementation, the input pipeline's) or learned: a
  configuration that differs from a measured compiled one of its class only in such knobs pays the warm share, as
  a repeat does (a declared knob whose change came out a cold compile is dropped). Learned: a compiled trial of a
  new configuration whose compile took at most ``WARM_COMPILE_MAX_SHARE`` of its class's slowest cold compile
  measured before it found Inductor's cache warm, so the knobs in which it differs from the nearest earlier
  compiled configuration of its class (most knob values in common; of equally near ones, those it differs from in
  declared knobs only) do not change the compiled graph. Any other knob keeps the cold compile (the conservative
  side);
* primed: a compiled trial that ran cuDNN's benchmark in an eager copy beside its compile (``workloads.prime``; its
  row's ``prime_s``) hides the benchmark in its compile's seconds: its first step's rest beyond the compilers is
  at least the priming's seconds (what its eager twin and its warm repeat pay: no cache holds cuDNN's choices), and
  a cold compile alike in the benchmark priced from it takes its whole first-step excess, not its compilers' and
  the benchmark in series; a warm compile of it alike in the benchmark and the samples a step takes primes again
  beside its compile: the longer of the two (a warm compile's compilers count the wait for the copy) and the
  graph's rest after its compilers as the cold one paid it;
* warm or cold, as counted: a compiled trial's row says how many graphs Inductor's cache held compiled and how many
  it compiled (``compile_cache_hits``, ``compile_cache_misses``); where recorded they decide, over the guess above,
  whether its compile was warm. A warm one with no cold compile of its class before it found another night's cache
  (a shared ``TORCHINDUCTOR_CACHE_DIR``): it prices its own repeats, never a new configuration, which takes the
  prior, and teaches no graph-neutral knob.

A trial cut by the budget before its end (``interrupted``, reason ``budget``) says its configuration costs at
least what it ran: a lower bound on that configuration's prediction. Trials without recorded phases (a failed
start, an older study) are predicted as before: their class's slowest wall, or the cheap class's median times the
prior. With nothing measured at all, a cheap trial is predicted to fit (it starts, and teaches the model) and
``first_trial_s`` stands for its cost in the predictions of the others.

The prediction is what the scheduler compares with the time left (``Scheduler.fits``); the sweep records it beside
each trial's actual wall time (``predicted_wall_s``) and states the error in its summary. ``derived_timeout`` caps a
trial's timeout at a multiple of its class's measured cost (``hydra.sweeper.timeout_factor``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sweeper.results.outcome import Reason, Status
from sweeper.sweep.study.attrs import (
    CACHE_HITS_KEY,
    CACHE_MISSES_KEY,
    COST_KEY,
    DATA_WAIT_KEY,
    GRAPH_OPS_KEY,
    PREDICTED_KEY,  # noqa: F401 (re-exported)
    SPENT_KEY,
    WARM_KEY,
    reason_of,
    status_of,
)
from workloads.spec.data import DataKnobs

if TYPE_CHECKING:
    from sweeper.sweep.config.space import SearchSpace

MIN_MEASURED = 3  # trials of a cost class measured before its timeout is derived
FIRST_TRIAL_S = 30.0  # the cheap class's cost before any trial was measured (a process start, a few steps)
# What a warm re-run of a compiled configuration pays of its cold compile before the study measured one: the median
# of the H200's measurements (ResNet-50 42 s -> 7-8 s in DESIGN.md's facts, 45.3 s -> 5.7 s on 2026-12-04; ViT-B/16
# 29.3 s -> 2.8 s, bench/results/h200-2026-12-04T*-budget-*); the study's own warm compiles replace it.
WARM_COMPILE_SHARE = 0.13
# A new configuration's compile at most this share of its class's slowest cold compile found the cache warm: warm
# shares measured 0.09-0.16 (above; ViT-B/16 35.8 s -> 4.3 s, a GPT 27.1 s -> 3.2 s on 2026-12-05), while the cold
# compiles of one class's configurations stay within a few tens of per cent of each other (a GPT's 23-28 s).
WARM_COMPILE_MAX_SHARE = 0.5
# The drain of a DataLoader that keeps up with the model: sweeper.trial.measure's _drain stops after its ready count
# held for min(buffer, 8) steps.
KEEPING_UP_DRAIN_STEPS = 8
# A trial that waited for data a fifth of its window or more was fed by its DataLoader: the report's data-bound
# (sweeper.report.diagnose.DATA_WAIT).
DATA_BOUND_WAIT = 0.20
# The knobs a DataLoader's feeding rate is scaled by, not matched on (:meth:`CostModel._loader_floor`): the
# workers, their prefetch, and the samples a step takes (batch x micro-batches).
LOADER_SCALED = frozenset({"num_workers", "prefetch_factor", "batch_size", "grad_accum_steps"})
# The knobs whose product is the samples a step takes: on the CPU a neighbour's step is scaled by the share of the
# samples (:func:`_samples_slope`).
SAMPLES_KNOBS = frozenset({"batch_size", "grad_accum_steps"})
# The knobs that move a batch to the device after the workers produced it: the producers' rate does not depend on
# them, so they are not matched on either.
LOADER_TRANSFER = frozenset({"pin_memory", "non_blocking", "device_prefetch"})
# The input pipeline's knobs (the shared helpers' DataLoader, workloads.spec.DataKnobs): among the declared
# graph-neutral knobs, those two configurations must share to be fed alike.
PIPELINE = frozenset(f.name for f in dataclasses.fields(DataKnobs))
# Knobs (by last name) that decide what a first step does beyond a step: cuDNN's benchmark times each
# convolution's algorithms at its first call of each shape (DeepLabV3 at batch 128 on an H100: 81 s of a 142 s
# compiled first step, its compilers 61 s; 1.1 s without it). An eager first step is priced from one alike in them.
FIRST_STEP_KNOBS = frozenset({"cudnn_benchmark"})


@dataclass
class Seen:
    """One measured trial of the study, in phases (``phased`` False: only its wall is known)."""

    number: int
    params: dict[str, Any]
    cls: tuple
    key: tuple
    total: float
    phased: bool = False
    start_s: float = 0.0
    setup_s: float = 0.0
    compile_s: float = 0.0
    step_s: float = 0.0
    window_s: float = 0.0
    steps: int = 0
    warmup_steps: int = 0  # the warm-up's steps, the first one and the data pipeline's drain included
    drain_steps: int = 0  # of which the data pipeline's drain
    repeat: bool = False  # an earlier trial measured the same configuration: its compile found the cache warm
    warm: bool = False  # its compile found the cache warm: a repeat, or a change of graph-neutral knobs only
    cold_of: Seen | None = None  # a warm compile's nearest earlier cold one (of a graph-neutral change)
    neutral: frozenset[str] = frozenset()  # the knobs its warm compile showed graph-neutral
    graph_ops: float | None = None  # distinct operations of its eager step (counted in eager trials only)
    cache: bool | None = None  # Inductor's cache, as its row counted it: True warm (hits, no miss), False cold
    data_wait: float | None = None  # the share of its window spent waiting for data (data_wait_frac)
    compiler_s: float | None = None  # of its first step, the seconds inside torch.compile's compilers (counted)
    prime_s: float | None = None  # its eager copy's priming of cuDNN's benchmark, beside the compile (prime_s)
    host: bool = False  # it ran on the CPU: a loader without workers loads between its steps, not beside them

    @property
    def busy_s(self) -> float:
        """Its step time less its wait for data where that wait made it data-bound (``DATA_BOUND_WAIT``): what the
        model's own step took, the part its other knobs act on (a data-bound trial's step is its workers' feed,
        priced by :meth:`CostModel._loader_floor` for the configurations that share its data path)."""
        if self.data_wait is None or self.data_wait < DATA_BOUND_WAIT:
            return self.step_s
        return self.step_s * max(0.0, 1.0 - self.data_wait)

    def init_s(self, cheap: tuple) -> float | None:
        """Its first step's excess that is no compile: lazy initialization, cuDNN's benchmark of each convolution
        (an eager trial's whole excess; a compiled one's less its counted compiler seconds, and at least its
        priming's, where an eager copy ran the benchmark beside the compile: the benchmark is then hidden in the
        compile's seconds; None uncounted). DeepLabV3-MobileNetV3 primed on an H100 (2026-12-06): a first step of
        95 s, 80 s of it counted by the compilers; its eager twin's first step then took 59 s."""
        if self.cls == cheap:
            return self.compile_s
        if self.compiler_s is None:
            return None
        return max(self.compile_s - self.compiler_s, self.prime_s or 0.0, 0.0)


class CostModel:
    """Predicts a configuration's wall seconds from the study's measured trials, phase by phase, and the priors."""

    def __init__(
        self,
        expensive: Mapping[str, Any],
        prior: Mapping[str, Mapping[str, float]] | None = None,
        per_op: Mapping[str, Mapping[str, float]] | None = None,
        first_trial_s: float = FIRST_TRIAL_S,
        measure: Mapping[str, Any] | None = None,
        neutral: Iterable[str] = (),
    ) -> None:
        self.expensive = dict(expensive)
        self.prior = {k: {str(v): float(f) for v, f in (vals or {}).items()} for k, vals in (prior or {}).items()}
        self.per_op = {k: {str(v): float(r) for v, r in (vals or {}).items()} for k, vals in (per_op or {}).items()}
        self.first_trial_s = float(first_trial_s)
        self.measure = dict(measure or {})
        self.declared = frozenset(neutral)  # graph-neutral knobs declared (hydra.sweeper.graph_neutral)

    def cost_class(self, params: Mapping[str, Any]) -> tuple:
        return tuple(params.get(k, cheap) if params.get(k) is not None else cheap for k, cheap in self._order())

    def _order(self) -> list[tuple[str, Any]]:
        return sorted(self.expensive.items())

    def _cheap(self) -> tuple:
        return tuple(c for _k, c in self._order())

    # ------------------------------------------------------------------ what the study measured

    def seen(self, study: optuna.Study) -> list[Seen]:
        """The study's own measured trials (complete, out of memory, failed: their time was spent too), in order."""
        out: list[Seen] = []
        keys: set[tuple] = set()
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        for t in sorted(trials, key=lambda t: t.number):
            total = _cost(t)
            if total is None or WARM_KEY in t.user_attrs or status_of(t) not in _MEASURED:
                continue
            key = config_key(t.params)
            s = Seen(t.number, dict(t.params), self.cost_class(t.params), key, total, repeat=key in keys)
            s.cache = _cache(t.user_attrs) if s.cls != self._cheap() else None
            s.warm = s.repeat if s.cache is None else s.cache  # the counters, where recorded, over the guess
            keys.add(key)
            ops = t.user_attrs.get(GRAPH_OPS_KEY)
            s.graph_ops = float(ops) if _counted(ops) and ops > 0 else None  # 0: a step of no operation
            _phases(s, t.user_attrs)
            out.append(s)
        self._learn_neutral(out)
        return out

    def _learn_neutral(self, seen: list[Seen]) -> None:
        """Mark the compiled trials of new configurations whose compile found the cache warm (its row's counters
        say so; without them, at most ``WARM_COMPILE_MAX_SHARE`` of their class's slowest cold compile before
        them), and the knobs each showed graph-neutral: those in which it differs from the nearest earlier cold
        compile of its class (of equally near ones, those it differs from in declared graph-neutral knobs only,
        else all; the knobs in which it differs from each of them). A 1-D convolution net on the CPU (2026-12-07):
        bf16 batch 32 without pinned memory compiled warm after batch 128 without it and batch 32 with it, and
        taken as batch 128's, taught that the batch size leaves the graph alone; the next batch's compile was
        priced warm, 2.3 s, and ran cold, 6.1 s. A warm compile with no cold one of its class before it found
        another night's cache: nothing is learned from it. A primed compile waits for its copy's benchmark however
        warm its cache: where it and the cold ones counted their compilers' seconds, those are compared."""
        cheap = self._cheap()
        for i, s in enumerate(seen):
            if not s.phased or s.repeat or s.cls == cheap or s.cache is False:
                continue
            cold = [e for e in seen[:i] if e.phased and e.cls == s.cls and not e.warm]
            counted = s.prime_s is not None and all(e.compiler_s is not None for e in [s, *cold])
            seconds = (lambda e: e.compiler_s or 0.0) if counted else (lambda e: e.compile_s)
            slowest = max((seconds(e) for e in cold), default=0.0)
            guessed = slowest > 1.0 and seconds(s) <= WARM_COMPILE_MAX_SHARE * slowest
            if not cold or not (s.cache or guessed):
                continue
            top = max(len(_same(e.params, s.params)) for e in cold)
            tied = [e for e in cold if len(_same(e.params, s.params)) == top]
            # of equally near ones, those it differs from in declared knobs only explain the warm cache best;
            # what is learned holds whichever of them it found: the knobs in which it differs from each
            near = [e for e in tied if _differ(e.params, s.params) <= self.declared] or tied
            s.warm, s.cold_of = True, max(near, key=lambda e: e.compile_s)
            s.neutral = frozenset.intersection(*(frozenset(_differ(e.params, s.params)) for e in near))

    def measured(self, study: optuna.Study) -> dict[tuple, list[float]]:
        """Wall seconds of the study's own measured trials, by cost class."""
        out: dict[tuple, list[float]] = {}
        for s in self.seen(study):
            out.setdefault(s.cls, []).append(s.total)
        return out

    def bounds(self, study: optuna.Study) -> dict[tuple, float]:
        """Lower bounds by configuration: the longest run of each configuration the budget cut before its end."""
        out: dict[tuple, float] = {}
        for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            if status_of(t) is not Status.INTERRUPTED or reason_of(t) is not Reason.BUDGET:
                continue
            ran = _cost(t)
            if ran is not None and WARM_KEY not in t.user_attrs:
                key = config_key(t.params)
                out[key] = max(out.get(key, 0.0), ran)
        return out

    # ------------------------------------------------------------------ predictions

    def predict(self, study: optuna.Study, params: Mapping[str, Any]) -> float:
        """Predicted wall seconds of a trial of ``params``."""
        return self.phases(study, params)["total"]

    def predict_repeat(self, study: optuna.Study, params: Mapping[str, Any]) -> float:
        """Predicted wall seconds of measuring a configuration again (its compile cache warm where it was measured).
        The re-measurements' reserve rests on it."""
        return self.phases(study, params, repeat=True)["total"]

    def phases(self, study: optuna.Study, params: Mapping[str, Any], repeat: bool = False) -> dict[str, Any]:
        """The predicted phases of a trial of ``params`` (seconds), their ``total`` and its ``basis``
        (measured | prior | bound)."""
        seen = self.seen(study)
        out = self._phases_from(seen, params, repeat)
        bound = self.bounds(study).get(config_key(params))
        if bound is not None and bound > out["total"]:
            out.update(total=bound, basis="bound")
        return out

    def _phases_from(self, seen: list[Seen], params: Mapping[str, Any], repeat: bool) -> dict[str, Any]:
        mine, cheap = self.cost_class(params), self._cheap()
        if not seen:
            if mine == cheap:
                return {"total": 0.0, "basis": "prior"}  # nothing measured: the cheapest trial starts and teaches
            compile_s = self._compile_prior(seen, mine, self.first_trial_s)
            return {"total": self.first_trial_s + compile_s, "compile": compile_s, "basis": "prior"}
        phased = [s for s in seen if s.phased]
        if not phased:
            return self._by_wall(seen, params, repeat)
        start = statistics.median(s.start_s for s in phased)
        same = [s for s in phased if s.cls == mine]
        setup = statistics.median(s.setup_s for s in (same or phased))
        step, nearest = self._step(phased, params, mine)
        step = max(step, self._loader_floor(phased, params))
        window, warmup = self._window(step, nearest, params)
        compile_s, basis = self._compile(phased, seen, params, mine, repeat)
        total = start + setup + compile_s + warmup + window
        return {
            "total": total,
            "start": start,
            "setup": setup,
            "compile": compile_s,
            "warmup": warmup,
            "window": window,
            "step": step,
            "basis": basis,
        }

    def _by_wall(self, seen: list[Seen], params: Mapping[str, Any], repeat: bool) -> dict[str, Any]:
        """Only walls known: the class's slowest (a repeat: its fastest, the caches warm), else the cheap class's
        median plus the compile the priors give (a measured class's compile: its wall less that median)."""
        mine = self.cost_class(params)
        same = [s.total for s in seen if s.cls == mine]
        if same:
            return {"total": min(same) if repeat else max(same), "basis": "measured"}
        cheap = [s.total for s in seen if s.cls == self._cheap()] or [s.total for s in seen]
        base = statistics.median(cheap)
        walls = [dataclasses.replace(s, phased=True, compile_s=max(0.0, s.total - base)) for s in seen]
        return {"total": base + self._compile_prior(walls, mine, base, _graph_ops(seen, params)), "basis": "prior"}

    def _step(self, phased: list[Seen], params: Mapping[str, Any], mine: tuple) -> tuple[float, list[Seen]]:
        """The step time of ``params``: from each of the nearest measured configurations (most knob values shared,
        the same class first), scaled by what the knob values that differ do to the step time, read off every
        trial measured so far (effects are largely multiplicative: a ridge fit of the log step time on the knob
        values, an unmeasured value counting 1; on the CPU the samples knobs by their share of the samples,
        :func:`_samples_slope`); the median of those, and the nearest (the slowest first)."""
        names = sorted({k for s in phased for k in s.params} | set(params))

        def rank(s: Seen) -> tuple:
            return (sum(1 for k in names if s.params.get(k) == params.get(k)), s.cls == mine)

        top = max(rank(s) for s in phased)
        nearest = [s for s in phased if rank(s) == top]
        effects = _log_effects(phased, names)
        estimates = []
        for s in nearest:
            log_step = math.log(max(s.busy_s, 1e-9))
            for k in names:
                mine_v, theirs_v = params.get(k), s.params.get(k)
                if mine_v == theirs_v:
                    continue
                slope = _samples_slope(k, s.host)
                if slope is not None and _positive(mine_v, theirs_v):  # its share of the samples
                    log_step += slope * math.log(mine_v / theirs_v)
                else:
                    log_step += effects.get((k, repr(mine_v)), 0.0) - effects.get((k, repr(theirs_v)), 0.0)
            estimates.append(math.exp(log_step))
        return statistics.median(estimates), sorted(nearest, key=lambda s: -s.step_s)

    def _loader_floor(self, phased: list[Seen], params: Mapping[str, Any]) -> float:
        """The least step time the DataLoader of ``params`` allows. A measured trial that waited for its data
        (``data_wait_frac`` >= ``DATA_BOUND_WAIT``) was stepped at its workers' feed: ``max(1, workers)`` workers
        produced its samples a step in its step time, whatever the model did with them. A configuration with the
        same data path (:meth:`_same_pipeline`) and as many workers or fewer is fed at most that share of it, for
        its own samples a step; the measured trials with the nearest worker count (at least its own) set it, so a
        trial with as many workers wins over a share taken from more. With only fewer workers measured, the most
        of them set it, their feed scaled up in proportion: more workers feed at most that much faster (the H100's
        JPEG start, 14 workers, stepped at 0.34 s a batch of 1024 after the defaults' main process fed 256 in
        0.87 s: at most 0.25 s). The neighbours' step says nothing of a worker count never measured (JPEG decoding
        with no worker stepped 8x slower than with 14) nor of a compiled data-bound trial's eager twin (its model's
        speed is not what bound it). Where the workers are not a knob, a data-bound trial on the same data path
        floors it at its own feed, for the samples a step takes. On the CPU a DataLoader without workers loads in
        the trial's own process between its steps (no device runs the step meanwhile): its feed is the wait alone,
        not the step (a 1-D convolution net fed from memory on the 2-core VM, 2026-12-07: batch 32 stepped in
        47 ms, 12 ms of it loading; batch 128 in 97 ms, priced 189 ms as four times the whole step). A trial with
        as many workers on the same data path that did not wait was fed faster than it stepped: the floor is at
        most its step, for the samples a step takes (the same net: two workers, competing with the trial for two
        cores, made batch 128 wait at 124 ms a step; one worker did not, at 98 ms; one worker was floored at
        249 ms, twice the two's feed, and stepped in 127 ms). 0.0 where no such trial was measured."""
        mine = _leaf_int(params, "num_workers")
        fed: dict[int, float] = {}  # by the measured trial's workers: the least step their share allows
        alike = 0.0  # workers not a knob: the same data path's feed
        cap = math.inf  # as many workers, not data-bound: fed faster than it stepped
        for s in phased:
            if s.data_wait is None or not self._same_pipeline(s.params, params):
                continue
            theirs = _leaf_int(s.params, "num_workers")
            mine_n, theirs_n = _samples(params), _samples(s.params)
            ratio = mine_n / theirs_n if mine_n and theirs_n else 1.0
            if s.data_wait < DATA_BOUND_WAIT:
                if mine is not None and theirs == mine:
                    cap = min(cap, s.step_s * ratio)
                continue
            feed = s.step_s * s.data_wait if theirs == 0 and s.host else s.step_s  # (the wait: its loading)
            if mine is None or theirs is None:
                alike = max(alike, feed * ratio)
            else:
                fed[theirs] = max(fed.get(theirs, 0.0), feed * max(1, theirs) / max(1, mine) * ratio)
        if alike or not fed:
            return alike
        more = [n for n in fed if n >= mine]
        return min(fed[min(more) if more else max(fed)], cap)

    def _same_pipeline(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        """Whether two configurations produce their batches alike: every knob of the input pipeline (the declared
        graph-neutral ones, ``hydra.sweeper.graph_neutral``, of the shared DataLoader's knobs; none of those
        declared: every knob but the expensive ones) has the same value where both have one, the scaled and
        transfer knobs aside."""
        keys = (set(a) | set(b)) - set(self.expensive)
        pipeline = {k for k in self.declared if k.rsplit(".", 1)[-1] in PIPELINE}
        if pipeline:
            keys &= pipeline
        skip = LOADER_SCALED | LOADER_TRANSFER
        return all(
            a.get(k) == b.get(k)
            for k in keys
            if k.rsplit(".", 1)[-1] not in skip and a.get(k) is not None and b.get(k) is not None
        )

    def _window(self, step: float, nearest: list[Seen], params: Mapping[str, Any]) -> tuple[float, float]:
        """The measured window and the warm-up (seconds) of a trial stepping at ``step`` under ``measure.*``: the
        warm-up as many steps as the nearest configurations recorded (drain included), at least
        ``measure.warmup_steps``."""
        m, near = self.measure, nearest[0]
        recorded = max(self._warmup_of(s, params) for s in nearest)
        warmup_steps = max(int(m.get("warmup_steps") or 0), recorded)
        warmup = max(1, warmup_steps) * step  # the first step's own step, then the rest of the warm-up
        if not m:
            return max(near.steps, 1) * step, warmup
        steps = int(m.get("steps") or 1)
        min_time = float(m.get("min_time_s") or 0.0)
        adaptive = bool(min_time) or m.get("rel_precision") is not None
        limit = max(steps, int(m.get("max_steps") or (100 * steps if adaptive else steps)))
        window = min(max(steps * step, min_time), limit * step)
        if m.get("rel_precision") is not None:
            window = max(window, min(near.steps, limit) * step)  # the precision target: as many steps as before
        return window, warmup

    def _warmup_of(self, s: Seen, params: Mapping[str, Any]) -> int:
        """The warm-up steps (drain included) of ``params`` read off the measured ``s``: its own, unless their
        DataLoader buffers differ (:func:`_buffer`); then the warm-up the trial runs for that buffer (at least
        ``buffer + 2`` steps) and ``s``'s drain scaled by the buffers' ratio (``s`` without one: ``min(buffer, 8)``,
        the drain of a pipeline that keeps up; ``params`` without one: none)."""
        mine, theirs = _buffer(params), _buffer(s.params)
        if mine is None or theirs is None or mine == theirs:
            return s.warmup_steps
        configured = max(int(self.measure.get("warmup_steps") or 0), mine + 2 if mine else 0)
        drain = s.drain_steps * mine / theirs if theirs else min(mine, KEEPING_UP_DRAIN_STEPS)
        return configured + round(drain)

    def _compile(
        self, phased: list[Seen], seen: list[Seen], params: Mapping[str, Any], mine: tuple, repeat: bool
    ) -> tuple[float, str]:
        """The compile phase of ``params`` (seconds) and whether it rests on a measurement or the prior."""
        if mine == self._cheap():
            return self._first_step_excess(phased, params)
        key = config_key(params)
        cold = [s for s in phased if s.cls == mine and not s.warm]
        if repeat and any(s.key == key for s in phased):
            warm = [s.compile_s for s in phased if s.key == key and s.warm]
            if warm:
                return min(warm), "measured"
            first = max((s for s in phased if s.key == key and not s.repeat), key=lambda s: s.compile_s)
            return self._warm(phased, first, params, self._warm_share(phased)), "measured"
        neutral = self._neutral(phased)
        cached = [s for s in phased if s.cls == mine and s.key != key and _differ(s.params, params) <= neutral]
        if cached and mine != self._cheap():  # the graph of a measured configuration: its cache is warm
            share = self._warm_share(phased)
            return min(self._cached(phased, s, params, share) for s in cached), "measured"
        if cold:  # the nearest cold compile of its class (most knob values in common; the slowest of equals)
            cold = _past_first(phased, cold, self._cheap())
            top = max(len(_same(s.params, params)) for s in cold)
            return max(self._cold(phased, s, params) for s in cold if len(_same(s.params, params)) == top), "measured"
        eager = [s.total for s in phased if s.cls == self._cheap()] or [s.total for s in phased]
        return self._compile_prior(phased, mine, statistics.median(eager), _graph_ops(seen, params)), "prior"

    def _first_step_excess(self, phased: list[Seen], params: Mapping[str, Any]) -> tuple[float, str]:
        """An eager configuration's first step beyond a step (lazy initialization, cuDNN's benchmark of each
        convolution where ``cudnn_benchmark`` is on: 5-10 s for a ResNet-50 at batch 512 on the H200): that of the
        nearest measured configurations (alike in ``FIRST_STEP_KNOBS`` first, then in precision: the libraries'
        kernels differ by dtype, DeepLabV3's eager first step without the benchmark 0.5-1.3 s in fp32, 4.5-5.3 s in
        fp16 on an H100; then most knob values in common, the expensive knobs aside, an eager one of equals; the
        most of equals), an eager one's whole excess, a compiled one's less the seconds its compilers counted
        (``compiler_s``: DeepLabV3's compiled start on an H100 spent 142.6 s in its first step, 61.4 s of it
        compiling), scaled by the samples a step takes (allocations and the benchmark run at the step's shapes:
        ConvNeXt-Tiny's 17.4 s at batch 512, 9.2 s at 128; with the benchmark on both sides by the square root of
        their ratio). Nothing is cached across trial processes, so a repeat
        pays it again."""
        cheap = self._cheap()
        known = [(s, x) for s in phased if (x := s.init_s(cheap)) is not None]
        if not known:
            return 0.0, "prior"
        plain = {k: v for k, v in params.items() if k not in self.expensive}

        def rank(s: Seen) -> tuple[bool, bool, int, bool]:  # the benchmark, the precision, most values shared, eager
            shared = _same(s.params, plain) - set(self.expensive)
            alike = all(k in shared for k in params if _leaf(k) in FIRST_STEP_KNOBS)
            dtype = all(k in shared for k in params if _leaf(k) == "precision")
            return alike, dtype, len(shared), s.cls == cheap

        top = max(rank(s) for s, _x in known)
        n = _samples(params)
        # both benchmarked: a cost per convolution shape and algorithm beside one that grows with the batch
        # (ConvNeXt-Tiny: 17.6 s at batch 512, 9.2 s at 128; DeepLabV3: 84 s at 128, 46 s at 16): the square root
        # of the samples' ratio, within its own factor of either; else allocations, in proportion
        power = 0.5 if top[0] and any(v is True for k, v in params.items() if _leaf(k) in FIRST_STEP_KNOBS) else 1.0

        def scaled(s: Seen, excess: float) -> float:
            theirs = _samples(s.params)
            return excess * ((n / theirs) ** power if n and theirs else 1.0)

        return max(scaled(s, x) for s, x in known if rank(s) == top), "measured"

    def _neutral(self, phased: list[Seen]) -> frozenset[str]:
        """The graph-neutral knobs: those learned, and those declared that no cold compile contradicted (a compiled
        trial of a new configuration whose compile was cold although it differs from an earlier compiled one of its
        class only in declared knobs: those knobs change its graph after all)."""
        learned = frozenset().union(*(s.neutral for s in phased))
        contradicted: set[str] = set()
        for i, s in enumerate(phased):
            if s.cls == self._cheap() or s.repeat or s.warm:
                continue
            for e in phased[:i]:
                differ = _differ(e.params, s.params)
                if e.cls == s.cls and differ and differ <= self.declared:
                    contradicted |= differ
        return learned | (self.declared - contradicted)

    def _warm(self, phased: list[Seen], cold: Seen, params: Mapping[str, Any], share: float) -> float:
        """A warm compile's first-step excess, from the cold one ``cold``: where its compilers' seconds were counted,
        the rest of its first step (cuDNN's benchmark, allocations: no cache holds them; :meth:`_rest`) and
        ``share`` of those seconds; else ``share`` of its excess, and never less than the first step of ``params``
        run eager pays (its eager twin's excess as :meth:`_first_step_excess` prices it). ConvNeXt-Tiny on an H100
        (2026-12-05): warm reduce-overhead first steps of 22-23 s, its eager twin's 17-20 s, 13 % of its cold
        compile 8 s; ResNet-50 on the H200: 5.8 s warm, its twin's 3.3 s, 13 % of the cold 5.9 s."""
        rest = cold.init_s(self._cheap())
        if cold.compiler_s is not None and rest is not None:
            seconds = self._warm_compiler_s(phased, cold.cls)
            warm = share * cold.compiler_s if seconds is None else min(seconds, cold.compiler_s)
            if _primed_alike(cold, params):  # the copy primes beside the warm compile, not after it
                return max(cold.prime_s or 0.0, warm) + max(0.0, cold.compile_s - cold.compiler_s)
            return self._rest(phased, cold, rest, params) + warm
        return min(cold.compile_s, max(self._eager_excess(phased, params), share * cold.compile_s))

    def _cached(self, phased: list[Seen], s: Seen, params: Mapping[str, Any], share: float) -> float:
        """A compile of ``params`` on the graph ``s`` compiled (they differ in graph-neutral knobs only): a warm
        ``s``'s own excess (where it counted its compilers' seconds, those and the rest of its first step,
        :meth:`_rest`), else the warm price of ``s``'s cold compile (:meth:`_warm`)."""
        if not s.warm:
            return self._warm(phased, s, params, share)
        rest = s.init_s(self._cheap())
        if s.compiler_s is None or rest is None or _primed_alike(s, params):
            return s.compile_s  # primed alike: its excess is the priming and the compile side by side, measured
        return s.compiler_s + self._rest(phased, s, rest, params)

    def _rest(self, phased: list[Seen], s: Seen, rest: float, params: Mapping[str, Any]) -> float:
        """What the first step of ``params``, compiled on the graph ``s`` compiled, pays beyond its compilers:
        ``rest``, what ``s``'s own paid, where the two are alike in ``FIRST_STEP_KNOBS`` and the samples a step takes
        (the same convolutions benchmarked at the same shapes); else the most of that and what ``params`` pays
        eager. The eager twin's first step can pay what a compiled one does not: ResNet-50 fed from JPEGs on an H100
        (2026-12-06 12:09), the study's first hybrid-decoded trial, eager, 11.4 s; the compiled ones on that
        pipeline after it 5.1-5.4 s beyond their compilers. A primed ``s`` (``prime_s``) benchmarked in its copy:
        a first step unlike it (cuDNN's benchmark off: no priming) pays at most ``s``'s wait, not its priming."""
        alike = _samples(s.params) == _samples(params) and _alike_first_step(s.params, params)
        if alike:
            return rest
        if s.prime_s is not None and s.compiler_s is not None:
            rest = max(0.0, s.compile_s - s.compiler_s)
        return max(rest, self._eager_excess(phased, params))

    def _cold(self, phased: list[Seen], s: Seen, params: Mapping[str, Any]) -> float:
        """A cold compile of ``params`` priced from the measured cold compile ``s``: where ``s`` counted its
        compilers' seconds, those and what ``params`` pays eager beyond a step (its cuDNN benchmark, whatever
        ``s`` ran with); else ``s``'s whole first-step excess. Where ``s`` primed the benchmark beside its compile
        (``prime_s``) and ``params`` runs the benchmark as it did: ``s``'s whole excess (the compile, slowed by the
        copy, and the wait for it), and what the benchmark of ``params`` would take beyond ``s``'s priming."""
        if s.compiler_s is None:
            return s.compile_s
        eager = self._eager_excess(phased, params)
        if s.prime_s is not None and _alike_first_step(s.params, params):
            return s.compile_s + max(0.0, eager - s.prime_s)
        return s.compiler_s + eager

    def _eager_excess(self, phased: list[Seen], params: Mapping[str, Any]) -> float:
        """The first-step excess of ``params`` with its expensive knobs cheap (its eager twin), priced from the
        nearest measured eager configurations; 0.0 where none was measured."""
        twin = {**params, **self.expensive}
        return self._first_step_excess(phased, twin)[0]

    def _warm_compiler_s(self, phased: list[Seen], cls: tuple) -> float | None:
        """The compilers' seconds of a compile that finds Inductor's cache warm, as this study's warm compiles
        counted them: the median of those of class ``cls``, else of any compiled class; None before one. A warm
        compile traces the model and loads its kernels: a cost of the model's graph, not of the mode, whose
        autotuning is what the cache saves (a 2-layer LSTM on an H100, 2026-12-05: cold compiles of 2-16 s by mode
        and batch, every warm one 1.0-1.6 s; a share of the cold compile, 0.07-0.7, priced max-autotune's 7.6 s)."""
        counted = [s for s in phased if s.cls != self._cheap() and s.warm and s.compiler_s is not None]
        mine = [s.compiler_s for s in counted if s.cls == cls] or [s.compiler_s for s in counted]
        return statistics.median(mine) if mine else None

    def _warm_share(self, phased: list[Seen]) -> float:
        """What a warm compile pays of the cold one: measured on this study's repeats and graph-neutral changes
        against their cold first compile (a repeat whose cache stayed cold, e.g. no shared cache folder, counts
        too: its share is what a repeat pays), else the prior share."""
        shares = []
        for s in phased:
            if s.cls != self._cheap() and (s.warm or s.repeat):
                first = s.cold_of or next((f for f in phased if f.key == s.key and not f.repeat), None)
                if first is not None and first is not s and not first.warm and first.compile_s > 1.0:
                    counted = s.compiler_s is not None and (first.compiler_s or 0.0) > 1.0  # both: compilers'
                    ratio = s.compiler_s / first.compiler_s if counted else s.compile_s / first.compile_s
                    shares.append(min(1.0, ratio))
        return statistics.median(shares) if shares else WARM_COMPILE_SHARE

    def _compile_prior(self, seen: list[Seen], mine: tuple, eager_s: float, ops: float | None = None) -> float:
        """Per expensive knob not at its cheap value: the slowest cold compile measured with its value (in any
        class), else its prior (:meth:`_prior_s`) rescaled by how the knob's measured values compared with theirs."""
        total = 0.0
        for i, (name, cheap_value) in enumerate(self._order()):
            value = mine[i]
            if value == cheap_value:
                continue
            with_value = [s.compile_s for s in seen if s.phased and s.cls[i] == value and not s.warm]
            if with_value:
                total += max(with_value)
                continue
            scales, known = [], []
            for s in seen:
                if not s.phased or s.warm or s.cls[i] == cheap_value:
                    continue
                known.append(s.compile_s)
                p = self._prior_s(name, s.cls[i], eager_s, ops)
                if p:
                    scales.append(max(s.compile_s, 1e-3) / p)
            scale = math.exp(sum(math.log(x) for x in scales) / len(scales)) if scales else 1.0
            own = self._prior_s(name, value, eager_s, ops)
            if own is not None:
                total += own * scale
            else:
                values = set(self.prior.get(name, {})) | set(self.per_op.get(name, {}))
                priced = (self._prior_s(name, v, eager_s, ops) for v in values)
                candidates = [p * scale for p in priced if p is not None] + known
                total += max(candidates) if candidates else 0.0
        return total

    def _prior_s(self, name: str, value: Any, eager_s: float, ops: float | None) -> float | None:
        """A value's prior compile seconds: its ``cost_prior_per_op`` times the model's counted operations where
        both are known, else its ``cost_prior`` factor's ``(factor - 1)`` x ``eager_s``; None without either."""
        rate = self.per_op.get(name, {}).get(str(value))
        if rate is not None and ops:
            return rate * ops
        factor = self.prior.get(name, {}).get(str(value))
        return max(0.0, factor - 1) * eager_s if factor is not None else None

    def explain(self, study: optuna.Study, params: Mapping[str, Any], repeat: bool = False) -> str:
        """One phrase: the predicted cost and whether it rests on a measurement, the prior or a cut trial."""
        out = self.phases(study, params, repeat)
        basis = "at least: the budget cut it before its end" if out["basis"] == "bound" else out["basis"]
        return f"{out['total']:.0f} s ({basis})"


# a failed trial's time was spent too (timeouts above all)
_MEASURED = (Status.COMPLETE, Status.INFEASIBLE, Status.FAILED)


def wants_count(study: optuna.Study, per_op: Mapping[str, Mapping[str, float]], space: Any) -> bool:
    """Whether a new trial should count its step's operations (``measure.count_ops``): the space offers a value
    priced per operation (a compile to price) and none of the study's own trials recorded the count yet."""
    offered = {
        str(v)
        for knob, rates in per_op.items()
        if knob in space.params
        for v in getattr(space.params[knob], "choices", ())
        if str(v) in rates
    }
    if not offered:
        return False
    return not any(
        _counted(t.user_attrs.get(GRAPH_OPS_KEY)) and WARM_KEY not in t.user_attrs
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    )


def _cache(attrs: Mapping[str, Any]) -> bool | None:
    """A compiled trial's compile by its row's counters: True warm (graphs found in Inductor's cache, none
    compiled), False cold (a graph compiled), None where not recorded."""
    hits, misses = attrs.get(CACHE_HITS_KEY), attrs.get(CACHE_MISSES_KEY)
    if not (_counted(hits) and _counted(misses)):
        return None
    if misses > 0:
        return False
    return True if hits > 0 else None  # neither: the cache is off


def _counted(value: Any) -> bool:
    """A count was made (NaN: the trial did not count; 0: a step without operations, counted)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf


def config_key(params: Mapping[str, Any]) -> tuple:
    return tuple(sorted((str(k), repr(v)) for k, v in params.items() if v is not None))


def _buffer(params: Mapping[str, Any]) -> int | None:
    """Batches a configuration's DataLoader holds ready: its ``num_workers`` x ``prefetch_factor`` (PyTorch's
    default 2; 0 without workers), None where the configuration has no ``num_workers`` knob."""
    if not any(str(k).rsplit(".", 1)[-1] == "num_workers" for k in params):
        return None
    workers, prefetch = _leaf_int(params, "num_workers"), _leaf_int(params, "prefetch_factor")
    if workers is None or workers <= 0:
        return 0
    return workers * (prefetch if prefetch is not None and prefetch > 0 else 2)


def _samples_slope(knob: str, host: bool) -> float | None:
    """How the log step time grows with the log of a samples knob's value (``SAMPLES_KNOBS``): 1 on the CPU, whose
    step computes each sample in turn (a 1-D convolution net's batch 64 stepped in 2.0x batch 32's time, a text
    encoder's in 2.0x, 2026-12-07), measured values or not: the knob's effects fitted over trials that differ in
    other knobs too (a batch measured only in a compiled trial) read it worse than the rule. Else None, the
    knob's measured effects alone: a GPU's step grows less than its batch until the device is full (ViT-B/16, a
    decoder LM, ConvNeXt and ResNet-50 starts were priced 20-75 % over their walls when scaled by their share of
    the samples)."""
    return 1.0 if host and _leaf(knob) in SAMPLES_KNOBS else None


def _positive(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values)


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def feeds(space: SearchSpace, name: str) -> bool:
    """Whether knob ``name`` of ``space`` belongs to the input pipeline: one of its knobs
    (``PIPELINE``), or one whose condition reads one (it exists for the pipeline's sake: ``cuda_connections``
    under a GPU decoder's condition)."""
    return _leaf(name) in PIPELINE or any(_leaf(n) in PIPELINE for n in space.reads(name))


def _samples(params: Mapping[str, Any]) -> int | None:
    """The samples one step takes: ``batch_size`` x ``grad_accum_steps`` (1 when not set); None without a batch."""
    batch = _leaf_int(params, "batch_size")
    return batch * max(1, _leaf_int(params, "grad_accum_steps") or 1) if batch else None


def _leaf_int(params: Mapping[str, Any], leaf: str) -> int | None:
    """The whole-number value of the knob whose last dotted part is ``leaf`` (``knobs.num_workers``), or None."""
    for k, v in params.items():
        if str(k).rsplit(".", 1)[-1] == leaf and isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _graph_ops(seen: list[Seen], params: Mapping[str, Any]) -> float | None:
    """The distinct operations of ``params``'s step: those counted in the measured configuration nearest to it (most
    knob values in common; the most of equals), None where no trial counted them."""
    counted = [s for s in seen if s.graph_ops]
    if not counted:
        return None
    return max(counted, key=lambda s: (len(_same(s.params, params)), s.graph_ops)).graph_ops


def _past_first(phased: list[Seen], cold: list[Seen], cheap: tuple) -> list[Seen]:
    """The cold compiles ``cold`` less the sweep's first compile, where it was cold and another is left: the first
    compile into a fresh cache also builds what every later one finds there (a 1-D convolution net on the CPU,
    2026-12-07, three sweeps: first cold compiles of 12.4-14.9 s, later cold ones 5.5-7.7 s, whatever their batch
    or precision; ResNet-50 on an H100: 48.6 s, then 39.9 and 35.0 s)."""
    first = next((s for s in phased if s.cls != cheap), None)
    later = [s for s in cold if s is not first]
    return later or cold


def _primed_alike(s: Seen, params: Mapping[str, Any]) -> bool:
    """Whether ``s`` primed cuDNN's benchmark beside its compile (``prime_s``, its compilers' seconds counted) and
    ``params`` would prime the same convolutions: alike in ``FIRST_STEP_KNOBS`` and in the samples a step takes. Its
    first step is then the priming and the compile side by side, and the graph's rest after both: a warm compile
    counts the wait for the copy among its compilers' seconds (ResNet-50 on an H100, 2026-12-07: a warm repeat's
    compilers 6.0 s, its priming 6.0 s, its first step's excess 7.3 s; the cold one's 51.1 s, 6.7 s and 52.3 s)."""
    return (
        s.prime_s is not None
        and s.compiler_s is not None
        and _samples(s.params) == _samples(params)
        and _alike_first_step(s.params, params)
    )


def _alike_first_step(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two configurations agree in the knobs that decide a first step's work beyond a step
    (``FIRST_STEP_KNOBS``: cuDNN's benchmark)."""
    return all(a.get(k) == b.get(k) for k in set(a) | set(b) if _leaf(k) in FIRST_STEP_KNOBS)


def _differ(a: Mapping[str, Any], b: Mapping[str, Any]) -> set[str]:
    """The knobs whose values differ between two configurations."""
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)}


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> set[str]:
    """The knobs whose values two configurations share."""
    return {k for k in set(a) | set(b) if a.get(k) == b.get(k)}


def _log_effects(phased: list[Seen], names: list[str], ridge: float = 0.1) -> dict[tuple[str, str], float]:
    """(knob, repr(value)) -> its effect on the log step time: a ridge least-squares fit over the measured trials
    (one column per knob value, an intercept unpenalized); a value no trial measured is absent (no effect)."""
    import numpy as np

    columns = sorted({(k, repr(s.params.get(k))) for s in phased for k in names})
    if not columns or len(phased) < 2:
        return {}
    x = np.array([[1.0] + [1.0 if repr(s.params.get(k)) == v else 0.0 for k, v in columns] for s in phased])
    y = np.array([math.log(max(s.busy_s, 1e-9)) for s in phased])
    penalty = ridge * np.eye(x.shape[1])
    penalty[0, 0] = 0.0
    w = np.linalg.solve(x.T @ x + penalty, x.T @ y)
    return {c: float(w[i + 1]) for i, c in enumerate(columns)}


def _phases(s: Seen, attrs: Mapping[str, Any]) -> None:
    """Fill ``s``'s phases from its trial's attributes (the row's metrics), where they were recorded."""

    def num(key: str) -> float | None:
        v = attrs.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    setup, first, window, steps = num("setup_s"), num("first_step_s"), num("measured_s"), num("steps_measured")
    step = num("step_ms_mean")
    step = step / 1e3 if step is not None else (window / steps if window and steps else None)
    if None in (setup, first, window, step) or not step:
        return
    warmup_steps = int(num("warmup_steps") or 0) + int(num("warmup_drain_steps") or 0)  # the drain: a warm-up too
    s.compile_s = max(0.0, first - step)  # the first step's excess: compile, autotuning, lazy initialization
    s.setup_s, s.step_s, s.window_s = setup, step, window
    s.steps, s.warmup_steps = int(steps or round(window / step)), warmup_steps
    s.drain_steps = int(num("warmup_drain_steps") or 0)
    s.data_wait = num(DATA_WAIT_KEY)
    s.host = str(attrs.get("device")).startswith("cpu")  # (None in rows written before it was recorded)
    s.compiler_s = num("compiler_s")
    s.prime_s = num("prime_s")
    prof = num("prof_s") or 0.0  # a profiled re-measurement's profile: priced apart (remeasure.profile_cost)
    s.start_s = max(0.0, s.total - setup - first - max(0, warmup_steps - 1) * step - window - prof)
    s.phased = True


def _cost(t: FrozenTrial) -> float | None:
    """What the trial cost the budget: launch to end as the sweeper saw it (the launcher's composing of the job and
    the process start included), else the trial's own wall time."""
    for key in (SPENT_KEY, COST_KEY):
        cost = t.user_attrs.get(key)
        if isinstance(cost, (int, float)) and cost > 0:
            return float(cost)
    return None


def derived_timeout(
    study: optuna.Study,
    values: Mapping[str, Any],
    expensive: Mapping[str, Any],
    timeout_s: float,
    factor: float | None,
    floor_s: float,
    predicted: float | None = None,
) -> float | None:
    """The capped timeout for a trial of ``values`` (``hydra.sweeper.timeout_factor``), or None when it keeps
    ``timeout_s`` (no factor, no cap below it), never below ``floor_s``. Where the cost model priced it from
    measurements: ``factor`` x its own predicted wall (``predicted``, at its launch), or x what it would cost
    without the declared graph-neutral knobs' warm cache where that is more (a knob declared neutral that changes
    a user's graph after all: the compile is cold, and its trial must not be killed before the model learns it).
    Else ``factor`` x the slowest complete trial of its class once ``MIN_MEASURED`` were measured, never below
    twice its own prediction (a trial admitted on that price is not to be killed for sure). (JPEG on an H100: a
    warm compiled trial predicted 25 s, 19-26 s in earlier sweeps, hung until the budget cut it at 139 s; two
    compiled trials measured, no class cap. Measured predictions were at most ~2.2x short on the thirty recorded
    sweeps.)"""
    if not factor:
        return None
    model = CostModel(expensive)  # no declared graph-neutral knob: only a cache measured warm prices a compile so
    own = float(predicted) if isinstance(predicted, (int, float)) and predicted > 0 else None
    undeclared = model.phases(study, dict(values))
    if own is not None and undeclared["basis"] == "measured":
        cap = max(float(floor_s), float(factor) * max(own, float(undeclared["total"])))
    else:
        cap = _class_cap(study, model, values, float(factor), float(floor_s))
        cap = max(cap, 2.0 * own) if own is not None else cap
    return round(cap, 1) if cap < float(timeout_s) else None


def _class_cap(
    study: optuna.Study, model: CostModel, values: Mapping[str, Any], factor: float, floor_s: float
) -> float:
    """``factor`` x the slowest complete trial of the class of ``values`` (at least ``floor_s``) once
    ``MIN_MEASURED`` were measured; else no cap (infinite)."""
    mine = model.cost_class(values)
    costs = [
        float(t.user_attrs[COST_KEY])
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if status_of(t) is Status.COMPLETE
        and WARM_KEY not in t.user_attrs
        and isinstance(t.user_attrs.get(COST_KEY), (int, float))
        and model.cost_class(t.params) == mine
    ]
    return max(floor_s, factor * max(costs)) if len(costs) >= MIN_MEASURED else math.inf
