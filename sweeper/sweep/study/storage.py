"""Opening the study's storage: the URL (a masked password put back), and every wait it can block on bounded.

SQLite waits for a busy database, PostgreSQL for its server's answer, the journal for its lock
(:mod:`sweeper.sweep.study.journal`): each is bounded by the command's budget too, and a wait longer than a second is
said in one line.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning

from sweeper.errors import ConfigError


def storage_url(url: str | None, results_dir: Path) -> str:
    """The storage URL to open (a masked password put back: ``sweeper.sweep.config.secrets``); default: SQLite."""
    from sweeper.sweep.config.secrets import reveal

    if url:
        return str(reveal(str(url)))
    from sqlalchemy.engine import URL

    results_dir.mkdir(parents=True, exist_ok=True)
    # Built, not concatenated: `?`, `#` or `%` in the folder's name would otherwise end the path early (the
    # database would land outside the results folder, shared with other folders).
    return URL.create("sqlite", database=str((results_dir / "optuna.db").resolve())).render_as_string()


def make_storage(
    url: str, heartbeat_interval: int | None = None, grace_period: int | None = None, deadline: float | None = None
) -> Any:
    """An Optuna storage for ``url``: RDB (sqlite://, postgresql://), or a journal file (``journal:///path``).

    Every wait opening it can block on is bounded, by the command's budget too (``deadline``, unix seconds): the
    journal's lock (``sweeper.sweep.study.journal``: a killed process's lock is broken at once, any other at the
    deadline or after 30 s, the wait said in one line), SQLite's wait for a busy database (60 s at most) and a
    PostgreSQL server's connection (``connect_timeout``)."""
    left = None if deadline is None else max(1.0, deadline - time.time())
    try:
        if url.startswith("journal://"):
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            from sweeper.sweep.study.journal import OwnedLock

            path = url[len("journal://") :]
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(path, lock_obj=OwnedLock(path, deadline)))
        if url.startswith("sqlite:///"):
            from sqlalchemy.engine import make_url

            Path(make_url(url).database or ".").parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {}
        if heartbeat_interval:
            kwargs.update(heartbeat_interval=heartbeat_interval, grace_period=grace_period or 2 * heartbeat_interval)
        what, limit, say_after = "", 0.0, SAY_AFTER_S
        if url.startswith("sqlite"):
            what, limit = "a busy SQLite database", max(5.0, min(60.0, left or 60.0))
            say_after = SQLITE_SAY_AFTER_S
            kwargs["engine_kwargs"] = {"connect_args": {"timeout": limit}}
        elif url.startswith("postgresql") and "connect_timeout" not in url:
            what, limit = "the PostgreSQL server", max(2, int(min(30.0, left or 30.0)))
            kwargs["engine_kwargs"] = {"connect_args": {"connect_timeout": limit}}
        said = f"waiting for {what} to open the study's storage: {limit:.0f} s at most" if what else ""
        with _said_after(say_after, said), warnings.catch_warnings():
            # Optuna's "experimental" notice, on every command with a heartbeat (PostgreSQL)
            notice = r"Argument ``heartbeat_interval`` is an experimental feature"
            warnings.filterwarnings("ignore", notice, ExperimentalWarning)
            return optuna.storages.RDBStorage(url, **kwargs)
    except Exception as e:  # noqa: BLE001 - any connection failure is bad input here
        from sweeper.sweep.config.secrets import mask, scrub

        first = scrub((str(e).strip().splitlines() or [type(e).__name__])[0][:200], url, withhold=True)
        raise ConfigError(
            "hydra.sweeper.storage",
            f"cannot open {mask(url)!r} ({first})",
            "check the URL, that the server runs and the database exists "
            "(default: leave it null for a SQLite file under results/)",
        ) from None


SAY_AFTER_S = 1.0  # a wait this long opening a storage is said in one line
# A new SQLite study database is created (Optuna's tables) as it opens: over 1 s on the H200 machine's file system
# (2026-12-05), where nothing held it. Said after 3 s, a wait for a database another process holds is still said
# well inside its 5 s minimum.
SQLITE_SAY_AFTER_S = 3.0


@contextlib.contextmanager
def _said_after(seconds: float, line: str) -> Any:
    """Log ``line`` (a warning) if the block still runs after ``seconds``."""
    import logging

    timer = threading.Timer(seconds, logging.getLogger(__name__).warning, args=(line,))
    timer.daemon = True
    if line:
        timer.start()
    try:
        yield
    finally:
        timer.cancel()
