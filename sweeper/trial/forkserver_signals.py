"""Imported first by the forkserver (its first preload module), before torch: from here on it ignores SIGINT, and
its exit skips the interpreter's teardown.

The sweeper starts the forkserver with SIGINT blocked (``isolate._ensure_forkserver``), not ignored: a Ctrl-C that
lands while it is spawned stays pending in the sweeper, which handles it as soon as it unblocks the signal, instead
of being lost. The forkserver inherits the blocked mask through ``exec``; here it ignores SIGINT (a Ctrl-C sent to
the terminal's process group meanwhile, pending, is discarded) and unblocks it, so that it and every trial process
forked from it start as before: SIGINT ignored, nothing blocked. The sweeper ends its trials itself.

The forkserver ends when the sweeper does (its end of a pipe closes). It holds the sweeper's stdout and stderr, so
whatever reads them (a pipe, ``| tee``, a CI log) waits for it; a normal exit tears down an interpreter with torch
imported, 0.5-0.8 s on a 2-core VM. Its exit runs the exit handlers registered after this module's (torch's) and
then ends the process at once (``os._exit``): it holds no file, no child to wait for (each trial process ends on
its own, through ``os._exit`` too, so this handler never runs in a trial).

Before torch is imported, it also sets the variables of the sweep's ``env`` that torch and Triton read when they
are imported (``isolate.IMPORT_ENV_PREFIXES``: ``TORCH_LOGS`` at torch's import, ``TORCHINDUCTOR_*`` at Inductor's
config), handed over in ``FORKSERVER_ENV``: a trial forks with torch imported, and its own setting of them would
come too late.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys

from sweeper.trial.proc import FORKSERVER_ENV  # os and signal only: nothing that reads the variables


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def exit_now() -> None:
    """The forkserver's last step: its output flushed, the process ended without the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or replaced by something without flush
            pass
    os._exit(0)


def apply_env() -> None:
    """The sweep's import-time variables (JSON in ``FORKSERVER_ENV``) set here, before the imports that read them."""
    os.environ.update(json.loads(os.environ.pop(FORKSERVER_ENV, None) or "{}"))


ignore_sigint()
apply_env()
atexit.register(exit_now)
