"""The one poll loop: ask a condition again until it holds or the time is up.

Every hand-written wait of the project goes through :func:`poll`: a duplicate trial waiting for lower-numbered trials
to record their configuration (``sweeper.sweep.search.dedup``), a process opening a new study waiting for its
creator's id (``sweeper.sweep.study.trials``), the journal storage's lock (``sweeper.sweep.study.journal``) and a
read of rows retried while a compaction folds files (``sweeper.results.readers``). In the lowest layer, so that
every process can use it; the clock and the sleep are arguments, so that a test moves time without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


def poll(
    condition: Callable[[], _T],
    timeout_s: float | None,
    interval_s: float,
    *,
    max_interval_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> _T:
    """``condition()`` until it returns something true (returned), or ``timeout_s`` seconds passed (its last, false,
    answer returned; ``None``: no limit). It is asked at least once, and once more when the time is up. Between two
    asks it sleeps ``interval_s``, doubled after each sleep up to ``max_interval_s`` (``None``: never doubled), and
    never past the end of ``timeout_s``."""
    deadline = None if timeout_s is None else clock() + max(0.0, timeout_s)
    pause = interval_s
    while True:
        answer = condition()
        if answer:
            return answer
        now = clock()
        if deadline is not None and now >= deadline:
            return answer
        sleep(pause if deadline is None else min(pause, deadline - now))
        if max_interval_s is not None:
            pause = min(2 * pause, max_interval_s)
