"""Every use of Optuna's private names, in one place: what each reads, and why no public API serves.

The sweeper asks and tells trials itself (no ``study.optimize``), from several threads and processes, and so needs
a few of the ids and caches Optuna keeps to itself. Nothing else in ``sweeper/`` touches a private Optuna name
(``tests/test_optuna_private.py`` fails on one), and ``pyproject.toml`` bounds Optuna to the major version these
were read from: a new major version is checked here, against that test, before the bound moves.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.storages.journal._file import BaseJournalFileLock as JournalFileLock  # noqa: F401 (re-exported)

# ``JournalFileLock``: the abstract base of the journal file's locks (``acquire``/``release``), the type
# ``JournalFileBackend(lock_obj=...)`` takes; ``optuna.storages.journal`` exports only its two concrete locks, whose
# waits cannot be bounded (``sweeper.sweep.study.journal.OwnedLock`` is a third).

FIXED_PARAMS_KEY = "fixed_params"  # trial system attr Optuna writes on ``enqueue_trial``: the queued configuration
CONSTRAINTS_KEY = "constraints"  # trial system attr Optuna writes on ``set_constraint`` (``_CONSTRAINTS_KEY``)


def configuration(t: Any) -> dict[str, Any]:
    """A trial's configuration: its sampled params, else what it was queued with (``FIXED_PARAMS_KEY``: a waiting
    trial's params are empty until it starts)."""
    return dict(t.params) or dict(t.system_attrs.get(FIXED_PARAMS_KEY) or {})


def trial_id(trial: Any) -> int:
    """``Trial._trial_id`` / ``FrozenTrial._trial_id``: the trial's id in its storage (every storage call takes it;
    the public ``number`` counts within the study only)."""
    return int(trial._trial_id)


def storage_of(study: optuna.Study) -> Any:
    """``Study._storage``: the storage the study reads and writes (queued trials are popped, system attributes
    written and the storage's own uncached lists read through it; ``Study`` has no public accessor)."""
    return study._storage


def study_id(study: optuna.Study) -> int:
    """``Study._study_id``: the study's id in its storage (every storage call about the study takes it; the public
    ``study_name`` is not what the storage is asked with)."""
    return int(study._study_id)


def forget_cached_trials(study: optuna.Study) -> None:
    """Drop ``Study._thread_local.cached_all_trials``: the trials ``Study.ask`` caches per thread, so that the next
    ask sees what other processes queued meanwhile (no public call refreshes it)."""
    study._thread_local.cached_all_trials = None


def stale_trial_ids(study: optuna.Study) -> set[int]:
    """The storage's ids of trials whose heartbeat is older than its grace period (``BaseHeartbeat`` and
    ``_get_stale_trial_ids`` in ``optuna.storages._heartbeat``): the public ``fail_stale_trials`` fails them at once,
    but a wait only needs to know them. Empty when the storage has no heartbeat."""
    from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled

    storage = storage_of(study)
    if not isinstance(storage, BaseHeartbeat) or not is_heartbeat_enabled(storage):
        return set()
    return set(storage._get_stale_trial_ids(study_id(study)))


def set_user_attrs(trial: optuna.Trial, attrs: dict[str, Any]) -> None:
    """``trial.set_user_attr`` for each of ``attrs``; an RDB storage writes them in one transaction
    (``RDBStorage._set_trial_attr_without_commit`` in one ``_create_scoped_session``; ``_CachedStorage._backend``
    wraps it). Optuna's public call commits each attribute alone: a trial's ~50 metrics cost ~50 commits (fsyncs on
    SQLite, round trips to a PostgreSQL server), and a reader could see half of them. A trial another process
    finished meanwhile raises ``UpdateFinishedTrialError`` once, nothing written, as the public call's first does.
    Other storages get the public call per attribute: a journal replays its own logs for a finished trial as errors,
    one per log, at its later reads (several logs appended at once would raise at unrelated calls). The trial's
    cached copy (``Trial._cached_frozen_trial``) is updated as the public call does."""
    if not attrs:
        return
    from optuna.storages._cached_storage import _CachedStorage

    storage = trial.storage
    backend = storage._backend if isinstance(storage, _CachedStorage) else storage
    tid = trial_id(trial)
    if isinstance(backend, optuna.storages.RDBStorage):
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        with _create_scoped_session(backend.scoped_session, True) as session:
            for key, value in attrs.items():
                backend._set_trial_attr_without_commit(session, models.TrialUserAttributeModel, tid, key, value)
    else:
        for key, value in attrs.items():
            storage.set_trial_user_attr(tid, key, value)
    trial._cached_frozen_trial.user_attrs.update(attrs)
