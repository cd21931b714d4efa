"""The stop rules, one by one, on a fake clock: each event the loop reports and the decision the policy answers with
(``sweeper.sweep.run.stop``). In-process, no trial, no sleep: milliseconds."""

from __future__ import annotations

import optuna
import pytest

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.config.space import build_space
from sweeper.sweep.run.stop import (
    MAX_DUPLICATES_IN_A_ROW,
    MAX_OVER_BUDGET_IN_A_ROW,
    STUCK_AFTER,
    Act,
    Action,
    Configurations,
    Ended,
    Note,
    Stop,
    StopPolicy,
    left_text,
)
from sweeper.sweep.search import dedup
from sweeper.sweep.search.budget import Budget

OVER = TrialOutcome(Status.SKIPPED, Reason.OVER_BUDGET.tag("compile=default:58s"), "predicted 58 s")
DUPLICATE = TrialOutcome(Status.SKIPPED, Reason.DUPLICATE.tag(3), "same as trial 3")
COMPLETE = TrialOutcome(Status.COMPLETE)
MEASURED = TrialOutcome(Status.COMPLETE, "", "", {"throughput": 1.0})
INVALID = TrialOutcome(Status.SKIPPED, "invalid:x > 2", "constraint does not hold: x > 2")


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Space:
    """The duplicate rules' questions: ``size`` None is a space too large to enumerate."""

    def __init__(self, size: int | None, exhausted: bool = False) -> None:
        self.n, self.done, self.asked = size, exhausted, 0

    def size(self) -> int | None:
        self.asked += 1
        return self.n

    def exhausted(self) -> bool:
        return self.done


def policy(space: Space | None = None, budget_s: float = 300.0, now: float = 260.0) -> StopPolicy:
    """A search policy on a budget of ``budget_s`` seconds, ``now`` seconds into it (40 s left by default)."""
    return StopPolicy(Budget(budget_s, started_at=0.0, clock=Clock(now)), space)


def over_budget(p: StopPolicy, spare: str | None, trial: int = 7) -> object:
    """A proposal over budget settled; the loop queues what the policy asks (``spare``) and hands it back."""
    decision = p.settled(OVER, launched=False, trial=trial)
    assert decision == Action(Act.QUEUE_SPARE, p.over_budget_in_a_row, trial)
    return p.done(decision, spare)


# ------------------------------------------------------------------ the budget


def test_the_budget_s_end_stops_the_phase_once_and_says_nothing_more() -> None:
    clock = Clock(299.0)
    p = StopPolicy(Budget(300, started_at=0.0, clock=clock))
    assert p.deadline() is None and not p.stopped
    clock.t = 300.0
    assert p.deadline() == Ended(Stop.BUDGET, None)  # the summary's line says it ("reached")
    assert p.deadline() is None and p.reason is Stop.BUDGET and p.exit_code() == 0
    assert StopPolicy(Budget(None, started_at=0.0, clock=Clock(1e9))).deadline() is None  # no budget: never


def test_nothing_that_fits_stops_the_phase_with_the_time_left() -> None:
    assert policy().nothing_fits() == Ended(Stop.BUDGET, "budget: no trial fits in the 40 s left")
    assert left_text(None) == "no limit" and left_text(Budget(300, 0.0, Clock(400.0))) == "0 s"


def test_proposals_over_budget_without_spare_work_stop_the_search_at_the_tenth_in_a_row() -> None:
    p = policy()
    for _ in range(MAX_OVER_BUDGET_IN_A_ROW - 1):
        assert over_budget(p, None) is None and not p.stopped
    assert over_budget(p, None) == Ended(Stop.BUDGET, "budget: the last 10 proposals cannot end in the 40 s left")
    assert p.reason is Stop.BUDGET
    assert p.settled(OVER, launched=False, trial=8) is None  # stopped: no spare work is queued any more


def test_spare_work_that_fits_keeps_the_search_going_however_long_the_streak() -> None:
    p = policy()
    for _ in range(3 * MAX_OVER_BUDGET_IN_A_ROW):
        said = over_budget(p, "a repeat of trial 1")
        assert said == Note("trial 7 does not fit the 40 s left; queued a repeat of trial 1")
    assert not p.stopped
    # the streak went on counting: the first proposal with nothing spare to queue stops the search
    assert isinstance(over_budget(p, None), Ended) and p.reason is Stop.BUDGET


def test_a_proposal_that_fits_ends_the_over_budget_streak() -> None:
    p = policy()
    for _ in range(MAX_OVER_BUDGET_IN_A_ROW - 1):
        over_budget(p, None)
    p.fitted()
    for _ in range(MAX_OVER_BUDGET_IN_A_ROW - 1):
        assert over_budget(p, None) is None
    assert not p.stopped
    assert isinstance(over_budget(p, None), Ended)


# ------------------------------------------------------------------ duplicates


def test_duplicates_on_a_space_too_large_to_enumerate_stop_at_the_hundredth_in_a_row() -> None:
    """Without a budget (``n_trials`` alone) a sampler stuck on measured configurations stops the search at the
    hundredth in a row."""
    p = StopPolicy(None, Space(None))
    for _ in range(MAX_DUPLICATES_IN_A_ROW - 1):
        assert p.settled(DUPLICATE, launched=False) is None  # never an untried one to queue
    assert p.settled(DUPLICATE, launched=False) == Ended(
        Stop.EXHAUSTED,
        "space exhausted: the sampler proposed 100 measured configurations in a row (widen the space, or try "
        "another sampler)",
    )
    assert p.ended() is Stop.EXHAUSTED and p.exit_code() == 0


def test_a_stuck_sampler_under_a_budget_spends_the_time_left_where_it_pays_then_stops() -> None:
    """Under a budget the hundredth duplicate in a row queues spare-time work (an untried neighbour of the best, a
    repeat of a top one) instead of stopping with the time left; once stuck, every fifth in a row does; the first
    time nothing fits, the search stops as exhausted (it stopped at once, however much budget was left)."""
    p = policy(Space(None))
    for _ in range(MAX_DUPLICATES_IN_A_ROW - 1):
        assert p.settled(DUPLICATE, launched=False) is None
    action = p.settled(DUPLICATE, launched=False)
    assert action == Action(Act.QUEUE_STUCK, MAX_DUPLICATES_IN_A_ROW)
    assert p.done(action, "an untried configuration that fits") == Note(
        "the sampler proposed 100 measured configurations in a row; 40 s left: queued an untried configuration that "
        "fits"
    )
    assert not p.stopped
    for _ in range(STUCK_AFTER - 1):  # what was queued waits (or was skipped): every fifth in a row asks again
        assert p.settled(DUPLICATE, launched=False) is None
    assert p.settled(DUPLICATE, launched=False) == Action(Act.QUEUE_STUCK, MAX_DUPLICATES_IN_A_ROW + STUCK_AFTER)
    p.settled(MEASURED, launched=True, trial=101)  # what was queued ran
    for _ in range(STUCK_AFTER - 1):
        assert p.settled(DUPLICATE, launched=False) is None
    action = p.settled(DUPLICATE, launched=False)
    assert action == Action(Act.QUEUE_STUCK, STUCK_AFTER)
    assert p.done(action, None) == Ended(
        Stop.EXHAUSTED,
        "space exhausted: the sampler proposed 5 measured configurations in a row (widen the space, or try another "
        "sampler)",
    )


def test_duplicates_on_an_enumerable_space_queue_an_untried_configuration_every_fifth() -> None:
    space = Space(12)
    p = policy(space)
    for _ in range(STUCK_AFTER - 1):
        assert p.settled(DUPLICATE, launched=False) is None
    action = p.settled(DUPLICATE, launched=False)
    assert action == Action(Act.QUEUE_UNTRIED, STUCK_AFTER)
    assert p.done(action, 7) == Note(
        "the sampler proposed 5 measured configurations in a row; queued one of the 7 not yet measured"
    )
    assert p.done(action, 0) is None  # nothing was queued (something queued already runs next): nothing to say
    assert not p.stopped
    space.done = True
    action = p.settled(DUPLICATE, launched=False)
    assert action == Action(Act.QUEUE_REPEAT, STUCK_AFTER + 1)  # a budget's time left: see the test below
    assert p.done(action, None) == Ended(
        Stop.EXHAUSTED,
        "space exhausted: all 12 configurations of the search space are measured (or cannot run here, failed in "
        "this command, or hold a value that failed); widen the space (or hydra.sweeper.repeat=true to measure again)",
    )


def test_an_exhausted_space_spends_the_budgets_time_left_on_repeats_then_stops() -> None:
    """Every configuration measured with time left in the budget: repeats of the top configurations (what separates
    them in the report), while one fits; the first time none does, the search stops on the exhausted space. Without
    a budget (``n_trials`` alone) it stops at once."""
    p = policy(Space(12, exhausted=True))
    action = p.settled(DUPLICATE, launched=False)
    assert action == Action(Act.QUEUE_REPEAT, 1)
    assert p.done(action, "a repeat of trial 4") == Note(
        "every configuration is measured; 40 s left: queued a repeat of trial 4"
    )
    assert not p.stopped
    p.settled(COMPLETE, launched=True)  # the repeat ran
    action = p.settled(DUPLICATE, launched=False)
    assert action == Action(Act.QUEUE_REPEAT, 1)
    assert isinstance(p.done(action, None), Ended) and p.ended() is Stop.EXHAUSTED

    unbudgeted = StopPolicy(None, Space(12, exhausted=True))
    decision = unbudgeted.settled(DUPLICATE, launched=False)
    assert (
        isinstance(decision, Ended) and decision.stop is Stop.EXHAUSTED and "space exhausted" in (decision.note or "")
    )


def test_a_measured_trial_ends_the_duplicate_streak_a_skipped_one_does_not() -> None:
    p = StopPolicy(None, Space(None))
    for _ in range(MAX_DUPLICATES_IN_A_ROW - 1):
        p.settled(DUPLICATE, launched=False)
    p.settled(MEASURED, launched=True, trial=5)
    assert p.duplicates_in_a_row == 0
    for _ in range(MAX_DUPLICATES_IN_A_ROW - 1):
        p.settled(DUPLICATE, launched=False)
    p.settled(INVALID, launched=True, trial=6)  # a launched trial that measured nothing
    p.settled(INVALID, launched=False, trial=7)  # a constraint: no streak of its own
    assert isinstance(p.settled(DUPLICATE, launched=False), Ended)


def test_after_a_stop_a_duplicate_neither_enumerates_the_space_nor_decides() -> None:
    space = Space(12, exhausted=True)
    p = policy(space)
    p.interrupted()
    assert p.settled(DUPLICATE, launched=False) is None and space.asked == 0
    assert p.reason is Stop.INTERRUPTED and p.exit_code() == 130


# ------------------------------------------------------------------ the other stops


def test_an_exhausted_grid_stops_the_search() -> None:
    p = policy()
    assert p.grid_exhausted() == Ended(
        Stop.EXHAUSTED, "space exhausted: every configuration of the grid has been tried"
    )
    assert p.grid_exhausted() is None


def test_the_failure_budget_stops_the_sweep_with_exit_1_and_the_first_stop_wins() -> None:
    p = policy()
    assert p.failures(4, "max_failures=4") == Ended(
        Stop.FAILURES,
        "stopping: 4 failed trials reach the failure budget (max_failures=4); the workload itself looks broken",
    )
    assert p.nothing_fits() is None and p.interrupted() is None and p.failures(5, "max_failures=4") is None
    assert p.reason is Stop.FAILURES and p.exit_code() == 1 and p.remeasure() is None  # no re-measurements


def test_an_interrupt_stops_the_sweep_with_exit_130() -> None:
    p = policy()
    assert p.interrupted() == Ended(Stop.INTERRUPTED, None)
    assert p.exit_code() == 130 and p.remeasure() is None


def test_a_search_that_recorded_no_stop_reached_n_trials() -> None:
    p = policy(Space(12))
    p.settled(MEASURED, launched=True, trial=0)
    assert not p.stopped and p.ended() is Stop.N_TRIALS and p.exit_code() == 0
    assert Stop.N_TRIALS.searched and Stop.EXHAUSTED.searched and not Stop.BUDGET.searched


# ------------------------------------------------------------------ the re-measurements' own policy


@pytest.mark.parametrize("searched", [Stop.N_TRIALS, Stop.EXHAUSTED, Stop.BUDGET])
def test_the_re_measurements_start_with_no_stop_and_no_streak_and_end_on_the_search_s_reason(searched: Stop) -> None:
    p = policy(Space(None))
    for _ in range(MAX_OVER_BUDGET_IN_A_ROW - 1):
        over_budget(p, None)
    {Stop.EXHAUSTED: p.grid_exhausted, Stop.BUDGET: p.nothing_fits, Stop.N_TRIALS: lambda: None}[searched]()
    again = p.remeasure()
    assert again is not None and again is not p
    assert not again.stopped and again.over_budget_in_a_row == 0 and again.duplicates_in_a_row == 0
    assert again.ended() is searched  # nothing stopped the re-measurements: the search's reason stands
    assert again.remeasures_fit(3, 3) is None and not again.stopped
    assert over_budget(again, None) is None  # its own streak: one, not ten


def test_re_measurements_that_do_not_fit_stop_their_phase_on_the_budget() -> None:
    p = policy()
    again = p.remeasure()
    assert again is not None
    assert again.remeasures_fit(0, 2) == Ended(Stop.BUDGET, "budget: 2 of 2 re-measurements do not fit the 40 s left")
    assert again.ended() is Stop.BUDGET and p.ended() is Stop.N_TRIALS  # the sweep's reason is the later phase's


def test_re_measurements_that_fit_run_when_others_do_not() -> None:
    """One of three fits: the phase goes on to measure it (a note, no stop), and ends on the budget once it ran."""
    again = policy().remeasure()
    assert again is not None
    decision = again.remeasures_fit(1, 3)
    assert decision == Note("budget: 2 of 3 re-measurements do not fit the 40 s left; measuring the 1 that fit")
    assert not again.stopped and again.ended() is Stop.BUDGET


# ------------------------------------------------------------------ the space's questions, answered for real


def test_configurations_enumerate_once_and_answer_from_the_study() -> None:
    space = build_space({"knobs.a": "choice(1, 2)", "knobs.b": "choice(x, y)"}, {}, [], {"knobs.a": 1, "knobs.b": "x"})
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    configs = Configurations(study, space, {"knobs.a": 1, "knobs.b": "x"})
    assert configs.size() == 4 and not configs.exhausted()
    assert configs.queue_untried() == 4  # four left untried; the first is queued
    assert configs.queue_untried() == 0  # something is queued already: it runs next
    assert len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))) == 1
    for a in (1, 2):
        for b in ("x", "y"):
            values = {"knobs.a": a, "knobs.b": b}
            study.add_trial(
                optuna.trial.create_trial(
                    params=values,
                    distributions=dict(space.params),
                    value=1.0,
                    user_attrs={dedup.KEY: dedup.config_key(values), "status": "complete"},
                )
            )
    assert configs.exhausted() and configs.valid_keys() is configs.keys
    big = Configurations(study, build_space({"knobs.x": "range(1, 100000)"}, {}, [], {"knobs.x": 1}), {"knobs.x": 1})
    assert big.size() is None and not big.exhausted()
