"""The one poll loop (``sweeper.results.poll.poll``) and the waits built on it, on a fake clock: no test sleeps.

The helper asks until the condition holds or the time is up, asks once more at the end, backs off up to a cap and
never sleeps past the end. The waits that use it keep their bounds: the vanished-file retry gives up after its
patience with the last error. The study id wait and the duplicate wait are tested with real processes
(``test_scale_out.py``, ``test_duplicates.py``), the journal lock on a fake clock (``test_hostile_values.py``).
"""

from __future__ import annotations

import pytest

from sweeper.results.poll import poll
from sweeper.results.readers import retry_vanished


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_condition_that_holds_is_asked_once_and_its_answer_returned() -> None:
    clock, asked = FakeClock(), []
    assert poll(lambda: asked.append(1) or "yes", 5.0, 0.1, clock=clock, sleep=clock.sleep) == "yes"
    assert asked == [1] and clock.sleeps == []


def test_it_asks_until_the_condition_holds() -> None:
    clock = FakeClock()
    answers = iter([None, 0, [], {"found": 1}])
    assert poll(lambda: next(answers), 5.0, 0.1, clock=clock, sleep=clock.sleep) == {"found": 1}
    assert clock.sleeps == [0.1, 0.1, 0.1]


def test_it_gives_up_at_the_timeout_with_the_last_answer_never_sleeping_past_it() -> None:
    clock, asked = FakeClock(), []
    start = clock.now
    assert poll(lambda: asked.append(clock.now) or 0, 1.0, 0.3, clock=clock, sleep=clock.sleep) == 0
    assert clock.now - start == pytest.approx(1.0), "its last sleep is cut at the timeout"
    assert asked[-1] - start == pytest.approx(1.0), "asked once more when the time is up"
    assert clock.sleeps == pytest.approx([0.3, 0.3, 0.3, 0.1])


def test_a_zero_timeout_asks_once() -> None:
    clock, asked = FakeClock(), []
    assert poll(lambda: asked.append(1), 0.0, 0.1, clock=clock, sleep=clock.sleep) is None
    assert asked == [1] and clock.sleeps == []


def test_the_interval_doubles_up_to_its_cap() -> None:
    clock = FakeClock()
    answers = iter([False] * 8 + [True])
    assert poll(lambda: next(answers), None, 0.05, max_interval_s=1.0, clock=clock, sleep=clock.sleep)
    assert clock.sleeps == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_no_timeout_waits_as_long_as_it_takes() -> None:
    clock = FakeClock()
    answers = iter([False] * 10_000 + [True])
    assert poll(lambda: next(answers), None, 60.0, clock=clock, sleep=clock.sleep)
    assert len(clock.sleeps) == 10_000 and clock.now - 1000.0 == pytest.approx(600_000.0)


def test_a_vanished_file_is_read_again_and_the_last_error_raised_after_the_patience() -> None:
    clock, attempts = FakeClock(), []

    def read() -> str:
        attempts.append(clock.now)
        if len(attempts) < 4:
            raise FileNotFoundError(f"folded {len(attempts)}")
        return "rows"

    assert retry_vanished(read, 30.0, clock=clock, sleep=clock.sleep) == "rows"
    assert len(attempts) == 4 and clock.sleeps == pytest.approx([0.01] * 3)

    attempts.clear()

    def never() -> str:
        attempts.append(clock.now)
        raise FileNotFoundError(f"folded {len(attempts)}")

    with pytest.raises(FileNotFoundError, match=r"folded \d+"):
        retry_vanished(never, 0.05, clock=clock, sleep=clock.sleep)
    assert attempts[-1] - attempts[0] == pytest.approx(0.05)
