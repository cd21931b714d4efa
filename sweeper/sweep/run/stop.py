"""Why a phase of the sweep stops, decided in one place: the loop reports events, the policy answers.

The loop (``sweeper.sweep.loop``) keeps no counter and records no reason: it tells a :class:`StopPolicy` what
happened and does what the answer says. An answer is a :data:`Decision`:

* :class:`Ended`: the phase stops, for a :class:`Stop` (the first one recorded wins; a stop decided after it is
  not answered again), with the line to print (None: the summary's last line says it);
* :class:`Action`: the loop queues something now (an untried configuration, spare-time work, a repeat of a top
  configuration once the space is measured under a budget) and hands what it queued back to
  :meth:`StopPolicy.done`, which answers in turn;
* :class:`Note`: nothing stops, a line to print;
* None: nothing to do.

The events: :meth:`~StopPolicy.settled` (a trial settled: a measured one ends the duplicate streak; a duplicate and
a proposal over budget extend theirs), :meth:`~StopPolicy.fitted` (a proposal fits the budget: the over-budget
streak ends), :meth:`~StopPolicy.deadline` (the budget's end), :meth:`~StopPolicy.nothing_fits`,
:meth:`~StopPolicy.grid_exhausted`, :meth:`~StopPolicy.failures`, :meth:`~StopPolicy.remeasures_fit` and
:meth:`~StopPolicy.interrupted`. :meth:`~StopPolicy.ended` is why the phase ended (none recorded: its target was
reached, ``n_trials``); :meth:`~StopPolicy.remeasure` opens the re-measurements' own policy.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any, Protocol

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.search import dedup, failing
from sweeper.sweep.search.budget import Budget

MAX_DUPLICATES_IN_A_ROW = 100  # a space too large to enumerate: the sampler is taken to be stuck
STUCK_AFTER = 5  # an enumerable space: after this many duplicates in a row, an unmeasured configuration is queued
MAX_OVER_BUDGET_IN_A_ROW = 10  # proposals that cannot end within the budget, nothing else fitting: the search ends


class Stop(str, enum.Enum):
    """Why the sweep stops (the value is what the summary line says)."""

    BUDGET = "budget"  # hydra.sweeper.timeout_s: nothing that fits is left to start
    N_TRIALS = "n_trials"  # the study holds its target of counted trials
    FAILURES = "failures"  # max_failures / max_failure_rate reached: the workload looks broken (exit 1)
    EXHAUSTED = "exhausted"  # every configuration of the space is measured, or the sampler only repeats them
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM (exit 130 / 143)

    @property
    def searched(self) -> bool:
        """The search reached its end (its target, or the whole space): the study is marked searched."""
        return self in (Stop.N_TRIALS, Stop.EXHAUSTED)


EXIT_CODES = {Stop.FAILURES: 1, Stop.INTERRUPTED: 130}  # every other stop exits 0


class Act(enum.Enum):
    """What an :class:`Action` asks the loop to queue."""

    QUEUE_UNTRIED = "queue an untried configuration"  # result: how many were left untried (0: none queued)
    QUEUE_SPARE = "queue spare-time work"  # result: a phrase saying what was queued, or None
    QUEUE_REPEAT = "queue a repeat of a top configuration"  # the space measured, time left: as QUEUE_SPARE
    QUEUE_STUCK = "queue spare-time work for a stuck sampler"  # a space too large to enumerate: as QUEUE_SPARE


@dataclass(frozen=True)
class Ended:
    """The phase stops for ``stop``; ``note``: the line that says why (None: the summary's line says it)."""

    stop: Stop
    note: str | None = None


@dataclass(frozen=True)
class Note:
    """Nothing stops; a line to print."""

    note: str


@dataclass(frozen=True)
class Action:
    """The loop does ``act`` now and hands the result to :meth:`StopPolicy.done`."""

    act: Act
    streak: int  # the streak that asked for it (duplicates or proposals over budget in a row)
    trial: int | None = None  # the trial whose settling asked for it


Decision = Ended | Note | Action | None


class Space(Protocol):
    """What the duplicate rules ask of the search space (:class:`Configurations`, or a test's stand-in)."""

    def size(self) -> int | None:
        """How many valid configurations the space has; None: too large (or continuous) to enumerate."""

    def exhausted(self) -> bool:
        """Every valid configuration has its answer in the study."""


class Configurations:
    """The search space's valid configurations (``dedup.valid_keys``), enumerated once, at the first question."""

    def __init__(self, study: Any, space: Any, defaults: dict[str, Any], command: str | None = None) -> None:
        self.study, self.space, self.defaults = study, space, defaults
        self.command = command  # the sweep command's id: its own trials' failures are answers
        self.enumerated = False
        self.keys: set[str] | None = None

    def valid_keys(self) -> set[str] | None:
        if not self.enumerated:
            self.keys, self.enumerated = dedup.valid_keys(self.space, self.defaults), True
        return self.keys

    def size(self) -> int | None:
        keys = self.valid_keys()
        return len(keys) if keys else None

    def open_keys(self) -> set[str] | None:
        """The valid configurations but those holding a value this sweep's failures blame (``failing``)."""
        keys = self.valid_keys()
        blames = failing.blamed(self.study.get_trials(deepcopy=False), self.command) if keys else []
        if not keys or not blames:
            return keys
        active = ({k: v for k, v in json.loads(key).items() if v is not None} for key in keys)  # inactive: None
        return {key for key, values in zip(keys, active) if failing.blame_of(values, blames) is None}

    def exhausted(self) -> bool:
        return dedup.exhausted(self.study, self.open_keys(), self.command)

    def queue_untried(self) -> int:
        """Queue the next configuration nobody measured (``dedup.enqueue_untried``); how many were left untried."""
        return dedup.enqueue_untried(self.study, self.open_keys(), self.command)


def left_text(budget: Budget | None) -> str:
    """The budget's time left, as the notes say it."""
    left = None if budget is None else budget.time_left()
    return "no limit" if left is None else f"{max(0.0, left):.0f} s"


class StopPolicy:
    """The stop rules of one phase (the search, or the re-measurements after it) over ``budget``; ``space``: the
    duplicate rules' questions (None: a space never enumerated); ``after``: the search's reason, for the
    re-measurements' policy."""

    def __init__(self, budget: Budget | None = None, space: Space | None = None, after: Stop | None = None) -> None:
        self.budget, self.space, self.after = budget, space, after
        self.reason: Stop | None = None  # the first stop recorded
        self.duplicates_in_a_row = 0
        self.over_budget_in_a_row = 0
        self.stuck = False  # the sampler once proposed MAX_DUPLICATES_IN_A_ROW measured ones in a row

    @property
    def stopped(self) -> bool:
        return self.reason is not None

    def ended(self) -> Stop:
        """Why the phase ended: the first stop recorded; none: the search's reason (re-measurements), or the
        search reached its target (``n_trials``)."""
        return self.reason or self.after or Stop.N_TRIALS

    def exit_code(self) -> int:
        return EXIT_CODES.get(self.ended(), 0)

    def remeasure(self) -> StopPolicy | None:
        """The re-measurements' own policy (no stop yet, no streak), or None when the search's end allows none (the
        failure budget spent, an interrupt)."""
        searched = self.ended()
        if searched in (Stop.FAILURES, Stop.INTERRUPTED):
            return None
        return StopPolicy(self.budget, self.space, after=searched)

    # ------------------------------------------------------------------ events

    def settled(self, outcome: TrialOutcome, launched: bool, trial: int | None = None) -> Decision:
        """Trial ``trial`` settled with ``outcome`` (``launched``: it ran, else it was decided before launch)."""
        if launched:
            if outcome.status is not Status.SKIPPED:
                self.duplicates_in_a_row = 0
            return None
        if outcome.kind is Reason.OVER_BUDGET:
            return self._over_budget(trial)
        if outcome.kind in (Reason.DUPLICATE, Reason.FAILS):  # nothing new: measured, or known to fail
            return self._duplicate()
        return None

    def fitted(self) -> None:
        """A proposal is predicted to end within the budget and launches: the over-budget streak ends."""
        self.over_budget_in_a_row = 0

    def done(self, action: Action, result: Any) -> Decision:
        """What the loop's ``action`` queued: ``result`` as :class:`Act` says."""
        if action.act is Act.QUEUE_UNTRIED:
            if not result:
                return None
            return Note(
                f"the sampler proposed {action.streak} measured configurations in a row; queued one of the "
                f"{result} not yet measured"
            )
        if action.act is Act.QUEUE_REPEAT:
            if result is None:
                return self._stop(Stop.EXHAUSTED, self._exhausted_line())
            return Note(f"every configuration is measured; {left_text(self.budget)} left: queued {result}")
        if action.act is Act.QUEUE_STUCK:
            if result is None:
                return self._stop(Stop.EXHAUSTED, self._stuck_line(action.streak))
            return Note(
                f"the sampler proposed {action.streak} measured configurations in a row; "
                f"{left_text(self.budget)} left: queued {result}"
            )
        if result is not None:  # the rest of the budget goes where it pays
            return Note(f"trial {action.trial} does not fit the {left_text(self.budget)} left; queued {result}")
        if action.streak >= MAX_OVER_BUDGET_IN_A_ROW:
            return self._stop(
                Stop.BUDGET,
                f"budget: the last {action.streak} proposals cannot end in the {left_text(self.budget)} left",
            )
        return None

    def deadline(self) -> Decision:
        """Before a start, or with trials given up past it: the budget's end stops the phase."""
        if self.budget is not None and self.budget.expired():
            return self._stop(Stop.BUDGET)
        return None

    def nothing_fits(self) -> Decision:
        """Nothing is queued and not even the cheapest configuration is predicted to end within the budget."""
        return self._stop(Stop.BUDGET, f"budget: no trial fits in the {left_text(self.budget)} left")

    def grid_exhausted(self) -> Decision:
        """Nothing is queued and the grid sampler has proposed every configuration."""
        return self._stop(Stop.EXHAUSTED, "space exhausted: every configuration of the grid has been tried")

    def failures(self, failed: int, limits: str) -> Decision:
        """``failed`` trials reach the failure budget (``limits``, as the settings say it)."""
        return self._stop(
            Stop.FAILURES,
            f"stopping: {failed} failed trials reach the failure budget ({limits}); the workload itself looks broken",
        )

    def remeasures_fit(self, fit: int, wanted: int) -> Decision:
        """Of ``wanted`` re-measurements, ``fit`` are predicted to end within the budget. Those that fit run (the
        budget is what stops the phase once they have: a note); none fitting stops the phase now."""
        if fit >= wanted:
            return None
        line = f"budget: {wanted - fit} of {wanted} re-measurements do not fit the {left_text(self.budget)} left"
        if fit == 0:
            return self._stop(Stop.BUDGET, line)
        self.after = Stop.BUDGET  # why the phase ends once those that fit have run
        return Note(f"{line}; measuring the {fit} that fit")

    def interrupted(self) -> Decision:
        """Ctrl-C, SIGTERM or a full disk."""
        return self._stop(Stop.INTERRUPTED)

    # ------------------------------------------------------------------ the streaks

    def _over_budget(self, trial: int | None) -> Decision:
        """A proposal cannot end within the budget: spare-time work is queued instead, while the phase goes on."""
        self.over_budget_in_a_row += 1
        if self.stopped:
            return None
        return Action(Act.QUEUE_SPARE, self.over_budget_in_a_row, trial)

    def _duplicate(self) -> Decision:
        """The sampler proposed a measured configuration: an exhausted space, or a sampler stuck on measured ones,
        stops the phase; on an enumerable space, every ``STUCK_AFTER`` in a row, an untried one is queued. Under a
        budget the time left goes where it pays first: an exhausted space's repeats of its top configurations; a
        stuck sampler's spare-time work (once stuck, every ``STUCK_AFTER`` in a row), the stop coming when none
        fits (a sampler stuck on a space too large to enumerate stopped at once, however much time was left)."""
        self.duplicates_in_a_row += 1
        n = self.duplicates_in_a_row
        if self.stopped:
            return None
        size = None if self.space is None else self.space.size()
        if size is not None and self.space is not None and self.space.exhausted():
            if self.budget is not None and self.budget.deadline is not None:
                # the time left separates the top configurations: repeats, while one fits (then the stop)
                return Action(Act.QUEUE_REPEAT, n)
            return self._stop(Stop.EXHAUSTED, self._exhausted_line())
        if n == MAX_DUPLICATES_IN_A_ROW or (self.stuck and size is None and n % STUCK_AFTER == 0):
            if self.budget is not None and self.budget.deadline is not None:
                # time left: what pays (an untried neighbour of the best, a repeat of a top one), while one fits
                self.stuck = True
                return Action(Act.QUEUE_STUCK, n)
            return self._stop(Stop.EXHAUSTED, self._stuck_line(n))
        if size is not None and n % STUCK_AFTER == 0:
            return Action(Act.QUEUE_UNTRIED, n)
        return None

    def _stuck_line(self, n: int) -> str:
        return (
            f"space exhausted: the sampler proposed {n} measured configurations in a row (widen the space, or try "
            "another sampler)"
        )

    def _exhausted_line(self) -> str:
        size = None if self.space is None else self.space.size()
        return (
            f"space exhausted: all {size} configurations of the search space are measured (or cannot run here, "
            "failed in this command, or hold a value that failed); "
            "widen the space (or hydra.sweeper.repeat=true to measure again)"
        )

    def _stop(self, reason: Stop, note: str | None = None) -> Decision:
        """Record ``reason`` unless a stop is recorded; the :class:`Ended` to obey when it is the first."""
        if self.reason is not None:
            return None
        self.reason = reason
        return Ended(reason, note)
