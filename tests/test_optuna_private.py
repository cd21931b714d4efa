"""Optuna's private names are used in one module, ``sweeper.sweep.study.optuna_private``, and work with the Optuna
installed.

* No other module of ``sweeper/`` (or the plugin) imports a private Optuna module or name, or reads a private
  attribute Optuna defines (``trial._trial_id``, ``study._storage``, ...), also through ``getattr``: read with
  ``ast`` against the names the installed Optuna's source defines.
* Each function of the one module reads what it says from a real study (SQLite), so that an Optuna that renamed
  one fails here, not in a sweep; ``pyproject.toml`` bounds Optuna to the major version they were read from.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweeper.sweep.study import optuna_private as private

ROOT = Path(__file__).resolve().parent.parent
THE_MODULE = ROOT / "sweeper/sweep/study/optuna_private.py"


@cache
def optuna_private_names() -> frozenset[str]:
    """Every private name the installed Optuna defines: attributes set on ``self``, methods and functions,
    module-level names and its private modules."""
    names: set[str] = set()
    pattern = re.compile(r"(?:self\.|def |class |^)(_[A-Za-z]\w*)\s*[:=(]", re.M)
    for path in Path(optuna.__file__).parent.rglob("*.py"):
        names.update(n for n in pattern.findall(path.read_text(encoding="utf-8")) if not n.startswith("__"))
        names.update(p for p in path.relative_to(Path(optuna.__file__).parent).with_suffix("").parts if p[0] == "_")
    names.discard("__init__")
    return frozenset(names)


def private_uses(path: Path, root: Path = ROOT) -> list[str]:
    """Where ``path`` uses one of Optuna's private names (``file:line: what``)."""
    private_names = optuna_private_names()
    where = path.relative_to(root)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "optuna" and any(p.startswith("_") for p in alias.name.split(".")):
                    out.append(f"{where}:{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            parts = node.module.split(".") + [a.name for a in node.names]
            if any(p.startswith("_") and not p.startswith("__") for p in parts):
                out.append(f"{where}:{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Attribute) and node.attr in private_names:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1:
                name = node.args[1]
                if isinstance(name, ast.Constant) and name.value in private_names:
                    out.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_no_module_but_one_uses_optunas_private_names() -> None:
    sources = sorted((ROOT / "sweeper").rglob("*.py")) + sorted((ROOT / "hydra_plugins").rglob("*.py"))
    found = [hit for p in sources if p != THE_MODULE for hit in private_uses(p)]
    assert found == [], "use sweeper.sweep.study.optuna_private instead:\n" + "\n".join(found)


def test_the_scan_finds_each_kind_of_private_use(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import optuna.storages._heartbeat\n"
        "from optuna.storages.journal._file import BaseJournalFileLock\n"
        "from optuna.study._constrained_optimization import _CONSTRAINTS_KEY\n"
        "def f(study, trial, os):\n"
        "    os._exit(0)\n"  # not Optuna's
        "    return trial._trial_id, study._storage, study._study_id, getattr(study, '_thread_local')\n"
    )
    hits = [h.split(": ", 1)[1] for h in private_uses(bad, tmp_path)]
    assert len(hits) == 7, hits
    assert not any("_exit" in h for h in hits)
    assert private_uses(THE_MODULE), "the one module is where they are"


def test_optuna_is_bounded_to_the_major_version_the_private_names_were_read_from() -> None:
    (spec,) = re.findall(r'^\s*"(optuna[^"]*)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M)
    major = int(optuna.__version__.split(".")[0])
    assert f">={major}" in spec and f"<{major + 1}" in spec, spec


def test_each_private_read_works_with_the_installed_optuna(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(storage=url, study_name="s")
    study.enqueue_trial({"x": 1})
    queued = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))[0]
    assert queued.system_attrs[private.FIXED_PARAMS_KEY] == {"x": 1}
    storage = private.storage_of(study)
    assert isinstance(storage, optuna.storages.BaseStorage)
    assert storage.get_study_id_from_name("s") == private.study_id(study)
    trial = study.ask()
    assert private.trial_id(trial) == storage.get_trial_id_from_study_id_trial_number(private.study_id(study), 0)
    assert private.trial_id(study.trials[0]) == private.trial_id(trial)
    trial.set_constraint("fits", 1.0)
    assert any(k.startswith(private.CONSTRAINTS_KEY) for k in study.trials[0].system_attrs)
    assert private.stale_trial_ids(study) == set(), "no heartbeat: nothing is stale"

    study._get_trials(deepcopy=False, use_cache=True)  # what the samplers read during an ask
    assert study._thread_local.cached_all_trials is not None
    private.forget_cached_trials(study)
    assert study._thread_local.cached_all_trials is None


@pytest.mark.parametrize("kind", ["sqlite", "journal", "memory"])
def test_many_user_attributes_are_written_in_one_commit(tmp_path: Path, kind: str) -> None:
    """``set_user_attrs``: every attribute lands, read back by a new reader of the storage and on the trial itself;
    an RDB storage commits them together (one COMMIT, counted by SQLAlchemy's event; the public call commits each);
    a journal appends one log per attribute, as the public call does (see ``finished`` below)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    attrs = {f"m{i}": i * 0.5 for i in range(40)} | {"status": "complete", "flag": True}
    if kind == "sqlite":
        storage: object = f"sqlite:///{tmp_path / 's.db'}"
    elif kind == "journal":
        storage = JournalStorage(JournalFileBackend(str(tmp_path / "s.journal")))
    else:
        storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name="s")
    trial = study.ask()
    commits: list[int] = []
    if kind == "sqlite":
        import sqlalchemy

        engine = private.storage_of(study)._backend.engine
        sqlalchemy.event.listen(engine, "commit", lambda _conn: commits.append(1))
    if kind == "journal":
        appends: list[int] = []
        backend = private.storage_of(study)._backend
        original = backend.append_logs
        backend.append_logs = lambda logs: (appends.append(len(logs)), original(logs))[1]
    private.set_user_attrs(trial, attrs)
    if kind == "sqlite":
        assert len(commits) == 1, f"{len(commits)} commits for {len(attrs)} attributes"
    if kind == "journal":
        assert appends == [1] * len(attrs), appends
    assert trial.user_attrs == attrs
    study.tell(trial, 1.0)
    again = study if kind == "memory" else optuna.load_study(study_name="s", storage=storage)
    assert again.trials[0].user_attrs == attrs

    # A trial another process finished meanwhile: one error, nothing written, and the storage reads on
    # (a journal given all the logs at once raised again at each later read, one per log).
    finished = study.ask()
    other = optuna.load_study(study_name="s", storage=storage) if kind != "memory" else study
    other.tell(finished.number, 2.0)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        private.set_user_attrs(finished, {"late": 1, "later": 2})
    assert len(study.get_trials(deepcopy=False)) == 2 and len(study.get_trials(deepcopy=False)) == 2
    assert "late" not in study.trials[1].user_attrs


def test_stale_heartbeats_are_read(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "s.db"
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}", heartbeat_interval=60, grace_period=60)
    study = optuna.create_study(storage=storage, study_name="s")
    fresh, old = study.ask(), study.ask()
    for t in (fresh, old):
        storage.record_heartbeat(private.trial_id(t))
    assert private.stale_trial_ids(study) == set()
    with sqlite3.connect(db) as con:  # its last beat an hour ago (the database's clock: no sleep moves it)
        con.execute(
            "UPDATE trial_heartbeats SET heartbeat = datetime('now', '-1 hour') WHERE trial_id = ?",
            (private.trial_id(old),),
        )
    assert private.stale_trial_ids(study) == {private.trial_id(old)}


@pytest.mark.parametrize("lock", ["JournalFileSymlinkLock", "JournalFileOpenLock"])
def test_the_journal_lock_base_is_the_one_optunas_locks_derive_from(lock: str) -> None:
    from optuna.storages import journal

    assert issubclass(getattr(journal, lock), private.JournalFileLock)
