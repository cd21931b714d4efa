"""Storage passwords: never printed, never written, wherever the URL came from (the command line
or a config file), tried against a real PostgreSQL with a password-protected role."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from conftest import QUICK, run_cli

PG_URL = os.environ.get("KNOB_SWEEPER_PG_URL")
needs_pg = pytest.mark.skipif(not PG_URL, reason="needs PostgreSQL (KNOB_SWEEPER_PG_URL)")


def _role_with_password(role: str, password: str) -> str:
    """A new PostgreSQL login role with ``password`` (a fresh name: the server outlives the test, and the study
    tables a role created keep it from being dropped); the URL that logs in as it."""
    import psycopg

    with psycopg.connect(PG_URL.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")
    return f"postgresql+psycopg://{role}:{password}@{PG_URL.split('://', 1)[1].split('@', 1)[1]}"


def _assert_nowhere(password: str, results: Path, *texts: str) -> None:
    assert all(password not in text for text in texts)
    for path in results.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path


@needs_pg
def test_storage_password_is_never_printed_or_written(tmp_path: Path) -> None:
    password, role = "Pw-4adversarial-Z9", f"knob_secret_{uuid.uuid4().hex[:8]}"
    url = _role_with_password(role, password)
    results = tmp_path / "results"
    name = f"secret-{uuid.uuid4().hex[:8]}"  # the server outlives the test
    proc = run_cli(
        [
            *QUICK,
            "hydra.sweeper.n_trials=2",
            f"hydra.sweeper.study_name={name}",
            f"hydra.sweeper.storage={url}",
            "hydra.sweeper.pruner.type=median",
        ],
        results,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = [p.read_text() for p in (results / "multirun").rglob("*.yaml")]
    assert saved and any(f"{role}:***@" in text for text in saved)
    _assert_nowhere(password, results, proc.stdout, proc.stderr)
    study = optuna.load_study(study_name=name, storage=url)
    assert len([t for t in study.trials if t.state == TrialState.COMPLETE]) == 2
    bad = url.rsplit(":", 1)[0].rsplit("@", 1)[0] + "@127.0.0.1:9/nodb"
    proc = run_cli([*QUICK, f"hydra.sweeper.storage={bad}"], tmp_path / "r2", timeout=120)
    assert proc.returncode == 2 and password not in proc.stdout + proc.stderr
    assert f"{role}:***@127.0.0.1:9" in proc.stderr


@needs_pg
def test_a_password_written_in_a_config_file_is_masked_too(tmp_path: Path) -> None:
    """The URL in the user's own YAML (a site config), not on the command line: Hydra composes each job's config
    from that file again and saves it under multirun/, so the sweeper masks it in every job's overrides."""
    password, role = "Pw-in-yaml-Q7", f"knob_secret_{uuid.uuid4().hex[:8]}"
    url = _role_with_password(role, password)
    site = tmp_path / "conf" / "site"
    site.mkdir(parents=True)
    (site / "secret.yaml").write_text(f"# @package _global_\nhydra:\n  sweeper:\n    storage: {url}\n")
    results, name = tmp_path / "results", f"yaml-secret-{uuid.uuid4().hex[:8]}"
    args = [f"hydra.searchpath=[file://tests/faultload/conf,file://{tmp_path / 'conf'}]", *QUICK[1:], "+site=secret"]
    proc = run_cli([*args, "hydra.sweeper.n_trials=2", f"hydra.sweeper.study_name={name}"], results, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    hydra_yaml = [p.read_text() for p in (results / "multirun").rglob("hydra.yaml")]
    assert len(hydra_yaml) == 2 and all(f"{role}:***@" in text for text in hydra_yaml), "one per trial, masked"
    _assert_nowhere(password, results, proc.stdout, proc.stderr)
    study = optuna.load_study(study_name=name, storage=url)
    assert len([t for t in study.trials if t.state == TrialState.COMPLETE]) == 2, "the trials used the real URL"
