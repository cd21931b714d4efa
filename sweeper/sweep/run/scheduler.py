"""Slots, futures and deadlines: what runs now, what may start, and when the sweep stops.

The scheduler reads the sweep's wall clock from its :class:`~sweeper.sweep.search.budget.Budget` (the one the cost
model's reserve and the staged sampler read too). ``hydra.sweeper.timeout_s`` is a budget for the whole command, counted
from the process's start:

* a trial starts only when its predicted cost (``sweeper.sweep.search.costs``) ends before the budget does, less the
  time reserved for the re-measurements that follow the search;
* each trial is handed ``stop_at`` = budget + ``grace_s`` (unix seconds; one priced by a guess, earlier: where the
  re-measurements' reserve begins, :meth:`Scheduler.stop_at`): the trial process is stopped then and the trial ends
  ``interrupted`` (reason ``budget``): not a failure, not counted, measured again by the same command;
* a trial that cannot be stopped that way (run in the sweeper's process, or by a remote launcher) is given up on
  ``BACKSTOP_S`` later: its process group is killed and it is recorded as interrupted by the budget.

Why a sweep stops is not decided here: the loop reports the budget's end to
:meth:`sweeper.sweep.run.stop.StopPolicy.deadline`, which records the one :class:`~sweeper.sweep.run.stop.Stop`.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from sweeper.sweep.search.budget import Budget

BACKSTOP_S = 10.0  # past budget + grace, a trial that did not stop itself is killed and given up


@dataclass
class Running:
    """A trial handed to a slot."""

    trial: Any  # optuna.Trial
    values: dict[str, Any]
    slot: Any
    started: float
    predicted_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # what the launch added (profile steps, ...)


def _deaf(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run in its slot thread with SIGINT blocked. A terminal's Ctrl-C, sent to the whole group, then reaches
    the sweeper's main thread; and a process a launcher starts from the slot (joblib's loky workers) inherits the
    block through exec, so that a Ctrl-C during its start-up imports prints no traceback: its task unblocks SIGINT
    once it runs (``launch._UnlockedTask``), and an interrupted sweep kills the idle ones
    (``isolate.interrupt_all``). multiprocessing's resource tracker is started first: its start unblocks SIGINT in
    the thread that starts it (loky's first worker did, and the second started with Ctrl-C live)."""

    def call() -> Any:
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        return fn()

    return call


class Scheduler:
    """Slots and the futures of the trials running in them, under the sweep's wall-clock budget."""

    def __init__(
        self,
        slots: list[Any],
        node: Any,
        budget_s: float | None = None,
        grace_s: float = 5.0,
        started_at: float | None = None,
        clock: Callable[[], float] = time.time,
        budget: Budget | None = None,
    ) -> None:
        self.slots = list(slots)
        self.free = list(slots)
        self.node = node
        self.budget = budget if budget is not None else Budget(budget_s, started_at, clock)
        self.clock = self.budget.clock
        self.deadline = self.budget.deadline
        self.grace_s = float(grace_s)
        self.running: dict[Future, Running] = {}
        self.pool = ThreadPoolExecutor(max_workers=max(1, len(self.slots)), thread_name_prefix="trial")
        self.wake = threading.Event()  # set when a trial ends: the loop waits on it when nothing of its own runs

    # ------------------------------------------------------------------ the clock

    def time_left(self) -> float | None:
        """Seconds until the budget ends (negative past it); None without a budget."""
        return self.budget.time_left()

    def expired(self) -> bool:
        return self.budget.expired()

    def fits(self, predicted_s: float, reserve_s: float = 0.0) -> bool:
        """A trial predicted to take ``predicted_s`` ends before the budget, ``reserve_s`` kept for later."""
        return self.budget.fits(predicted_s, reserve_s)

    def stop_at(self, keep_s: float = 0.0, predicted_s: float = 0.0) -> float | None:
        """When a trial started now must be stopped (unix seconds), or None: the budget's end and its grace, or,
        for a trial that must leave ``keep_s`` to others (``Admission.keep_s``), that and its grace before the end
        (what is left after it then holds those others at their predicted costs, with the grace to spare), but
        never before its own predicted end (``predicted_s`` from now: admitted, it may run what it was priced)."""
        if self.deadline is None:
            return None
        end = self.deadline + self.grace_s
        if keep_s <= 0:
            return end
        return min(end, max(self.deadline - keep_s - self.grace_s, self.clock() + predicted_s))

    def window_end_at(self, reserve_s: float, predicted_s: float = 0.0) -> float | None:
        """When a trial started now ends its measured window with what it measured (unix seconds,
        ``measure.end_at``), or None: where the re-measurements' ``reserve_s`` begins, never before its own
        predicted end. A trial admitted beside the reserve that runs far over its price (a CPU without bf16
        instructions: an eager bf16 step 9x fp32's, priced from fp32's, 2026-12-07) is then measured on fewer
        steps, and the baseline and the best are measured again, instead of its running into the budget's end."""
        if self.deadline is None or reserve_s <= 0:
            return None
        return max(self.deadline - reserve_s, self.clock() + predicted_s)

    def overdue(self) -> bool:
        """Past budget + grace + backstop: trials still running did not stop themselves."""
        return self.deadline is not None and self.clock() >= self.deadline + self.grace_s + BACKSTOP_S

    # ------------------------------------------------------------------ slots and futures

    def take_slot(self) -> Any:
        """A free slot whose cores and GPUs no other sweeper on the node holds, or None."""
        if not self.free:
            return None
        return self.node.take(self.free)

    def give_back(self, slot: Any) -> None:
        self.node.release(slot)
        self.free.append(slot)

    def submit(self, fn: Callable[[], Any], run: Running) -> None:
        fut = self.pool.submit(_deaf(fn))
        fut.add_done_callback(lambda _f: self.wake.set())
        self.running[fut] = run

    def finished(self, timeout: float, check: Callable[[], None] | None = None) -> list[tuple[Running, Any]]:
        """Trials that ended within ``timeout`` seconds (each with its launcher's return or exception). ``check``
        runs before they leave ``running``: an interrupt it raises finds them there (a signal that also ended a
        launcher's worker process is the interrupt, not that trial's failure)."""
        if not self.running:
            return []
        done, _ = wait(list(self.running), timeout=max(0.0, timeout), return_when=FIRST_COMPLETED)
        if check is not None:
            check()
        out = []
        for fut in done:
            run = self.running.pop(fut)
            out.append((run, fut.result()))
        return out

    def idle(self, timeout: float) -> None:
        """Nothing of this sweeper runs: wait for a trial of ours to end or ``timeout`` (others' trials)."""
        self.wake.wait(max(0.0, timeout))
        self.wake.clear()

    def close(self) -> None:
        self.pool.shutdown(wait=True)


_GIVEN_START: list[float] = []  # set by ``command_started_at``: a command run in a process that runs several


def command_started_at(when: float) -> None:
    """Say that the command about to run in this process began at ``when`` (unix seconds): its budget counts from
    then, not from the process's start. For a process that runs several commands, one after the other (the tests'
    in-process commands, a notebook); a command line's own process needs no call."""
    _GIVEN_START[:] = [float(when)]


def process_start() -> float:
    """When this command started (its budget counts from then, Hydra's start-up included): the process's start, or
    what ``command_started_at`` said."""
    if _GIVEN_START:
        return _GIVEN_START[0]
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no process table: from now
        return time.time()
