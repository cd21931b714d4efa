"""Imported first by the forkserver (its first preload module), before torch: from here on it ignores SIGINT.

The sweeper starts the forkserver with SIGINT blocked (``isolate._ensure_forkserver``), not ignored: a Ctrl-C that
lands while it is spawned stays pending in the sweeper, which handles it as soon as it unblocks the signal, instead
of being lost. The forkserver inherits the blocked mask through ``exec``; here it ignores SIGINT (a Ctrl-C sent to
the terminal's process group meanwhile, pending, is discarded) and unblocks it, so that it and every trial process
forked from it start as before: SIGINT ignored, nothing blocked. The sweeper ends its trials itself.
"""

from __future__ import annotations

import signal


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


ignore_sigint()
