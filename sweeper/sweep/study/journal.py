"""The journal storage's file lock, owned and bounded: a lock left by a killed process never holds a command.

Optuna's ``JournalFileBackend`` serializes its appends with a lock file (``<journal>.lock``, a symbolic link made
and removed around each write). A process killed inside a write leaves the link behind, and Optuna's own lock then
waits, silently, until it has stood unchanged for 30 s before it forces it: every next command loses 30 s, past
its own budget. :class:`OwnedLock` is the same kind of lock (a symbolic link, so it works where Optuna's does),
whose link names its holder (``host:pid:start time``):

* a holder on this host that is gone, a zombie (killed, its parent not yet reaping it) or whose pid is now another
  process's is taken for dead: its lock is broken at once (``sweeper.results.procs.pid_alive``);
* any other lock (a live holder, another host, or a link made by Optuna's own lock, which names no holder) is broken
  once it stands ``GRACE_S`` (Optuna's 30 s, counted from the link's creation), or when the command's budget ends
  (``deadline``, unix seconds): no wait outlasts the budget;
* a wait longer than ``SAY_AFTER_S`` is said in one line: the lock, its holder, and when it will be broken.

Every process of the sweeper opens a journal through ``sweeper.sweep.study.storage`` and so takes this lock. A process
of Optuna's own lock class writing the same journal (a script, optuna-dashboard) follows the link to read its
age: it cannot, and retries until the link is gone, which a sweeper's next write ensures for a dead holder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from sweeper.results.poll import poll
from sweeper.results.procs import pid_alive
from sweeper.sweep.study.attrs import Owner
from sweeper.sweep.study.optuna_private import JournalFileLock

log = logging.getLogger(__name__)

TAG = "knob-sweeper-lock:"  # the link's target: TAG + host:pid:start time (a holder this host can check)
GRACE_S = 30.0  # Optuna's grace period: a lock standing this long is broken whoever holds it
SAY_AFTER_S = 1.0  # a wait this long is said in one line


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return round(float(psutil.Process(pid).create_time()), 2)
    except psutil.Error:
        return None


def holder_state(target: str) -> tuple[Owner, str]:
    """(``Owner.DEAD`` | ``ALIVE`` | ``UNKNOWN``, who) for the link target ``target`` of a lock file."""
    if not target.startswith(TAG):
        return Owner.UNKNOWN, "a process that named no holder (Optuna's own lock class)"
    host, _, rest = target[len(TAG) :].partition(":")
    pid, _, started = rest.partition(":")
    who = f"{host}:{pid}"
    if host != socket.gethostname() or not pid.isdigit():
        return Owner.UNKNOWN, f"{who} (another host)"
    now = _start_time(int(pid))
    if now is None or not pid_alive(int(pid)):  # gone, or a zombie: killed, not yet reaped by its parent
        return Owner.DEAD, who
    with contextlib.suppress(ValueError):
        if abs(now - float(started)) > 1.0:  # the pid is another process's now
            return Owner.DEAD, who
    return Owner.ALIVE, who


class OwnedLock(JournalFileLock):
    """``<journal>.lock`` as a symbolic link naming its holder; see the module's docstring."""

    def __init__(
        self,
        journal: str,
        deadline: float | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.path = journal + ".lock"
        self.deadline = deadline
        self.clock = clock
        self.sleep = sleep
        self.tag = f"{TAG}{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"

    def acquire(self) -> bool:
        began = self.clock()
        said = False
        breaks_at = began

        def attempt() -> bool:
            """Take the lock, breaking a dead holder's or an expired one at once; False: wait, then try again."""
            nonlocal said, breaks_at
            while True:
                try:
                    os.symlink(self.tag, self.path)
                    return True
                except FileExistsError:
                    pass
                try:
                    made = os.lstat(self.path).st_mtime
                    target = os.readlink(self.path) if os.path.islink(self.path) else ""  # a file: Optuna's open lock
                except FileNotFoundError:
                    continue  # released meanwhile: try again at once
                except OSError:
                    target = ""
                state, who = holder_state(target)
                now = self.clock()
                if state is Owner.DEAD:
                    self._break(target)
                    continue
                breaks_at = made + GRACE_S if self.deadline is None else min(made + GRACE_S, self.deadline)
                if now >= breaks_at:
                    why = "at the budget's end" if self.deadline is not None and now >= self.deadline else "30 s old"
                    log.warning("journal lock %s held by %s: broken (%s)", self.path, who, why)
                    self._break(target)
                    continue
                if not said and now - began >= SAY_AFTER_S:
                    said = True
                    log.warning(
                        "waiting for the journal lock %s held by %s; broken when its holder is gone or in %.0f s at "
                        "most",
                        self.path,
                        who,
                        breaks_at - now,
                    )
                return False

        def sleep(seconds: float) -> None:  # never past the moment the lock is broken
            self.sleep(min(seconds, max(0.0, breaks_at - self.clock())))

        return poll(attempt, None, 0.001, max_interval_s=0.25, clock=self.clock, sleep=sleep)

    def _break(self, target: str) -> None:
        """Remove the lock ``target`` names, not one another process made since it was read."""
        aside = f"{self.path}.{uuid.uuid4().hex}.broken"
        try:
            os.rename(self.path, aside)
        except OSError:
            return  # someone else broke or released it
        try:
            now = os.readlink(aside) if os.path.islink(aside) else ""
            if now != target:  # a new holder's lock, made after the read: put it back
                with contextlib.suppress(OSError):
                    os.symlink(now, self.path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(aside)

    def release(self) -> None:
        """Remove this process's lock; one broken meanwhile (taken for stale) is not another's to remove."""
        try:
            if os.readlink(self.path) != self.tag:
                return
        except OSError:
            return
        self._break(self.tag)
