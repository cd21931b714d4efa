"""Kill points for the data-loss tests: the sweeper kills itself (SIGKILL) at a named write/tell boundary.

``KNOB_SWEEPER_KILL_AT=<point>[:<n>]`` in the sweeper's environment kills it the n-th time (default 1) it passes
``<point>``. The points, in the order a sweep passes them:

* ``queued``: part of a new study's first trials queued (``sweeper.sweep.search.warm``);
* ``orphan-row`` / ``orphan-told``: a dead sweeper's trial recovered: its ``interrupted`` row written, the study not
  told / the study told (from its row, or interrupted) (``sweeper.sweep.run.settle``);
* ``requeued``: part of the interrupted configurations queued again (``sweeper.sweep.run.recovery``);
* ``asked``: a trial created (a new one, or a queued one taken), nothing sampled (``sweeper.sweep.study.trials``);
* ``sampled``: its configuration recorded, not launched (``sweeper.sweep.loop``);
* ``row`` / ``told``: a launched trial's row written, the study not told / told, the console line not printed;
* ``skip-row`` / ``skip-told``: the same for a trial answered without launching (a duplicate, a constraint, the
  device, the budget);
* ``interrupted-row`` / ``interrupted-told``: the same for a trial stopped by Ctrl-C, SIGTERM or the budget;
* ``remeasure``: part of the re-measurements queued (``sweeper.sweep.run.remeasure``).

``KNOB_SWEEPER_INTERRUPT_AT=<point>[:<n>]`` sends the sweeper a SIGINT (a Ctrl-C) there instead, so that the
interrupt path's own points can be reached without a race against a terminal. Unset (always, outside the tests), a
point costs two dictionary lookups.
"""

from __future__ import annotations

import os
import signal

_SIGNALS = {"KNOB_SWEEPER_KILL_AT": signal.SIGKILL, "KNOB_SWEEPER_INTERRUPT_AT": signal.SIGINT}
_seen: dict[tuple[str, str], int] = {}


def fault_point(name: str) -> None:
    for env, sig in _SIGNALS.items():
        spec = os.environ.get(env)
        if not spec:
            continue
        point, _, nth = spec.partition(":")
        if point != name:
            continue
        _seen[env, name] = _seen.get((env, name), 0) + 1
        if _seen[env, name] == int(nth or 1):
            os.kill(os.getpid(), sig)
