"""Kill points for the data-loss tests: the sweeper kills itself (SIGKILL) at a named write/tell boundary.

``KNOB_SWEEPER_KILL_AT=<point>[:<n>]`` in the sweeper's environment kills it the n-th time (default 1) it passes
``<point>``: ``asked`` (a trial created, nothing sampled), ``sampled`` (its configuration recorded, not launched),
``row`` (a trial's row written, the study not told), ``told`` (told, the console line not printed),
``queued`` (part of a new study's first trials queued) and ``remeasure`` (the re-measurements queued).
Unset (always, outside the tests), a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

_ENV = "KNOB_SWEEPER_KILL_AT"
_seen: dict[str, int] = {}


def fault_point(name: str) -> None:
    spec = os.environ.get(_ENV)
    if not spec:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    _seen[name] = _seen.get(name, 0) + 1
    if _seen[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
