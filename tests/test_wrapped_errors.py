"""Errors that wrap a cause are read by their cause chain, not their message. A full disk, whatever error wraps
it: one line and exit 1, not a chain of tracebacks (Optuna's ``StorageInternalError`` says "invalid data in the
commit" for SQLite's "database or disk is full"; only its cause tells). Real SQLite files, filled for real:
``PRAGMA max_page_count`` on every connection makes SQLite answer SQLITE_FULL exactly as a full disk does. An
out-of-memory error wrapped by another (torch.compile's, a workload's) is still out of memory."""

from __future__ import annotations

import errno
import logging
import sqlite3
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from sweeper.results import store
from sweeper.sweep.run import recovery


def _full_study(tmp_path: Path) -> tuple[optuna.storages.RDBStorage, optuna.Trial, str]:
    """A study whose SQLite file can grow no more, and a trial of it."""
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    storage = optuna.storages.RDBStorage(url)
    trial = optuna.create_study(storage=storage, study_name="full").ask()
    with storage.engine.connect() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
    storage.engine.dispose()  # every connection from now on has the cap
    sqlalchemy.event.listen(storage.engine, "connect", lambda c, _r: c.execute(f"PRAGMA max_page_count={pages}"))
    return storage, trial, url


def test_a_full_study_database_behind_storage_internal_error_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logging, "raiseExceptions", logging.raiseExceptions)  # guarded turns it off
    _storage, trial, url = _full_study(tmp_path)
    with pytest.raises(SystemExit) as done:
        recovery.guarded(lambda: trial.set_user_attr("big", "x" * 200_000), lambda: url)
    assert done.value.code == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"error: no space left writing the study's database ({url}); free space and run the same command again "
        "to resume"
    ]


def test_the_cause_chain_is_read_not_the_message(tmp_path: Path) -> None:
    _storage, trial, _url = _full_study(tmp_path)
    with pytest.raises(optuna.exceptions.StorageInternalError) as told:
        trial.set_user_attr("big", "x" * 200_000)
    found = store.disk_full_in(told.value)
    assert isinstance(found, sqlite3.OperationalError) and found.sqlite_errorcode == sqlite3.SQLITE_FULL
    try:  # an OSError of a full disk, two levels down
        try:
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x"))
        except OSError as e:
            raise RuntimeError("writing failed") from e
    except RuntimeError as wrapped:
        assert store.disk_full_in(RuntimeError("outer").with_traceback(None)) is None
        outer = ValueError("outer")
        outer.__context__ = wrapped
        assert isinstance(store.disk_full_in(outer), OSError)
    locked = sqlite3.connect(tmp_path / "other.db", timeout=0)
    locked.execute("BEGIN EXCLUSIVE")
    with pytest.raises(sqlite3.OperationalError) as busy:
        sqlite3.connect(tmp_path / "other.db", timeout=0).execute("BEGIN EXCLUSIVE")
    assert store.disk_full_in(busy.value) is None  # "database is locked" is not a full disk
    locked.close()


def test_an_out_of_memory_error_wrapped_by_another_is_infeasible() -> None:
    import torch

    from sweeper.results.outcome import Status
    from sweeper.trial.child import classify

    try:
        try:
            torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: the CPU allocator really fails
        except RuntimeError as e:
            raise ValueError("the workload's step failed") from e
    except ValueError as wrapped:
        outcome = classify(wrapped)
    assert (outcome.status, outcome.reason) == (Status.INFEASIBLE, "oom")
    try:
        try:
            torch.empty(1 << 50, dtype=torch.uint8)
        except RuntimeError:
            raise KeyError("compile failed") from None  # the cause hidden, the context kept (torch.compile's way)
    except KeyError as hidden:
        assert classify(hidden).status is Status.INFEASIBLE
    assert classify(ValueError("a plain failure")).status is Status.FAILED
