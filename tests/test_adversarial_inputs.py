"""Hostile inputs and environments: corrupt folder files, passwords with URL characters, input that would expand
into gigabytes, non-finite objectives, names that would build paths outside their folder, sweepers of several
results folders on one node, and interrupts while starting. Each ends in one line, bounded memory and consistent
rows."""

from __future__ import annotations

import logging
import math
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import optuna
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from optuna.trial import TrialState

from sweeper.report.data import usable
from sweeper.results import read, rows, store
from sweeper.results.keys import override_string, override_value
from sweeper.results.outcome import Status, TrialOutcome
from sweeper.sweep.cli import preflight
from sweeper.sweep.config import secrets
from sweeper.sweep.run import slots
from sweeper.sweep.study import trials as studies

from conftest import FAULTS, QUICK, ROOT, run_cli, run_main

PG_URL = os.environ.get("KNOB_SWEEPER_PG_URL")


# ---------------------------------------------------------------------------------------------------- the folder


def _two_workloads(trials: Path) -> None:
    store.write_trial(trials, "a", 0, "ua", {"study": "a", "trial": 0, "status": "complete", "knob.x": 1})
    store.write_trial(trials, "b", 0, "ub", {"study": "b", "trial": 0, "status": "complete", "knob.y": "s"})


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_damaged_schema_file_is_rebuilt_from_every_row(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    trials = tmp_path / "trials"
    _two_workloads(trials)
    schema = trials / store.SCHEMA_FILE
    if damage == "corrupt":
        schema.write_bytes(b"not parquet at all")
    else:
        schema.unlink()
    with caplog.at_level(logging.WARNING):
        store.write_trial(trials, "a", 1, "ua", {"study": "a", "trial": 1, "status": "complete", "knob.z": 2.5})
    every = {"study", "trial", "status", "knob.x", "knob.y", "knob.z"}
    assert set(pq.read_schema(schema).names) == every
    assert set(pd.read_parquet(trials).columns) == every
    assert set(pq.read_table(trials).column_names) == every
    assert set(pl.read_parquet(str(trials / "*.parquet"), missing_columns="insert").columns) == every
    if damage == "corrupt":
        assert len(_warnings(caplog, str(schema))) == 1, caplog.text


def test_a_stale_schema_file_learns_the_columns_of_rows_copied_in(tmp_path: Path) -> None:
    """A row file copied from another folder (its columns never reached this folder's schema file): the first
    read of the folder adds them, so plain pandas/pyarrow readers see them from then on."""
    results = tmp_path / "results"
    _two_workloads(results / "trials")
    pq.write_table(
        pa.table({"study": ["c"], "trial": [0], "status": ["complete"], "knob.w": [7]}),
        results / "trials" / f"{store.file_prefix('c', 'uc')}.000000.parquet",
    )
    assert "knob.w" in store.read_results(results).columns
    assert "knob.w" in pd.read_parquet(results / "trials").columns
    assert "knob.w" in pq.read_table(results / "trials").column_names


def test_an_unreadable_file_is_warned_about_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    results = tmp_path / "results"
    _two_workloads(results / "trials")
    bad = results / "trials" / f"{store.file_prefix('a', 'ua')}.000007.parquet"
    bad.write_bytes(b"PAR1 cut short")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # a sweep reads its folder several times
            assert len(store.read_results(results)) == 2
            assert len(read.read_rows(results)) == 2
            store.compact_all(results)
    assert len(_warnings(caplog, bad.name)) == 1, caplog.text


def test_a_corrupt_report_cache_is_named_and_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    results = tmp_path / "results"
    _two_workloads(results / "trials")
    assert len(read.read_rows(results)) == 2
    cache = results / read.CACHE_DIR / "rows.parquet"
    cache.write_bytes(b"garbage")
    with caplog.at_level(logging.WARNING):
        assert len(read.read_rows(results)) == 2
    assert len(_warnings(caplog, str(cache))) == 1, caplog.text
    pq.read_table(cache)  # written again, readable


def test_a_killed_compaction_leaves_no_temporary_file(tmp_path: Path) -> None:
    trials = tmp_path / "trials"
    _two_workloads(trials)
    key = store.file_prefix("a", "ua")
    leftover = trials / f".{key}.compacted-000001-20260101T000000000000-h-999999.parquet.tmp"
    leftover.write_bytes(b"half a file")
    dead_row = trials / f".{key}.000003.parquet.{store.host_name()}.999999999.tmp"
    dead_row.write_bytes(b"half a row")
    store.compact(trials, "a", "ua")
    assert not leftover.exists() and not dead_row.exists()


# ---------------------------------------------------------------------------------------------------- passwords

PASSWORDS = ["Sl/ash#Pw9", "p@ss:w?rd", "a%2Fb?c#d", "q:/?#@x"]


def _spellings(password: str) -> set[str]:
    from urllib.parse import quote, unquote

    return {password, quote(password, safe=""), unquote(password)} - {""}


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("form", ["as-written", "encoded", "query"])
def test_every_spelling_of_a_password_is_masked(password: str, form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from urllib.parse import quote

    if form == "as-written":
        url = f"postgresql+psycopg://knob:{password}@db.example:5432/sweeps"
    elif form == "encoded":
        url = f"postgresql+psycopg://knob:{quote(password, safe='')}@db.example:5432/sweeps"
    else:
        url = f"postgresql+psycopg://knob@db.example/sweeps?password={quote(password, safe='')}&sslmode=require"
    monkeypatch.delenv(secrets.ENV, raising=False)
    masked = secrets.mask(url)
    hidden = secrets.hide_argv([f"hydra.sweeper.storage={url}"])[0]
    error = secrets.scrub(f"Could not parse SQLAlchemy URL from string '{url}' (password={password})")
    for text in (masked, hidden, error):
        assert "***" in text and not any(s in text for s in _spellings(password)), text
    assert secrets.reveal(masked) == url, "the trial gets the real URL back"
    assert secrets.mask("journal:///tmp/a:b@c/optuna.journal") == "journal:///tmp/a:b@c/optuna.journal"


@pytest.mark.parametrize("password", ["Sl/ash#Pw9", "p@ss:w?rd"])
def test_a_connection_error_never_prints_the_password(tmp_path: Path, password: str) -> None:
    url = f"postgresql+psycopg://knob:{password}@127.0.0.1:9/nodb"
    proc = run_cli([*QUICK, f"hydra.sweeper.storage={url}"], tmp_path / "results", timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().count("\n") == 0 and "knob:***@" in proc.stderr, proc.stderr
    out = proc.stdout + proc.stderr
    assert not any(s in out for s in _spellings(password)), out
    for p in (tmp_path / "results").rglob("*"):
        assert not p.is_file() or not any(s.encode() in p.read_bytes() for s in _spellings(password)), p


@pytest.mark.skipif(not PG_URL, reason="needs PostgreSQL (KNOB_SWEEPER_PG_URL)")
def test_a_password_with_url_characters_is_nowhere_after_a_sweep(tmp_path: Path) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    password, role = "Sl/ash#Pw9", f"knob_pw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}'")
    server = make_url(PG_URL)
    url = f"postgresql+psycopg://{role}:{password}@{server.host}:{server.port}/{server.database}"
    results, name = tmp_path / "results", f"pw-{uuid.uuid4().hex[:8]}"
    args = [*QUICK, "hydra.sweeper.n_trials=2", f"hydra.sweeper.study_name={name}", f"hydra.sweeper.storage={url}"]
    proc = run_cli(args, results, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    hydra_yaml = [p.read_text() for p in (results / "multirun").rglob("hydra.yaml")]
    assert len(hydra_yaml) == 2 and all(f"{role}:***@" in t for t in hydra_yaml)
    out = proc.stdout + proc.stderr
    assert not any(s in out for s in _spellings(password))
    for p in results.rglob("*"):
        assert not p.is_file() or not any(s.encode() in p.read_bytes() for s in _spellings(password)), p
    study = optuna.load_study(study_name=name, storage=url)
    assert len([t for t in study.trials if t.state == TrialState.COMPLETE]) == 2, "trials used the real URL"


# ---------------------------------------------------------------------------------------------------- memory

_BOUNDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from sweeper.errors import ConfigError
from sweeper.sweep.config.space import build_space, parse_param
from sweeper.sweep.config.expressions import _check_expression, evaluate, ExpressionError
kind, text = sys.argv[1], sys.argv[2]
try:
    if kind == "param":
        build_space({"knobs.x": text, "knobs.y": "range(0, 1000)"}, {}, [], {"knobs.x": 1, "knobs.y": 1}).grid()
    elif kind == "expr":
        _check_expression("hydra.sweeper.constraints[0]", text, {"knobs.x": 3})
    else:
        evaluate(text, {"knobs.x": 3})
except (ConfigError, ExpressionError) as e:
    # VmHWM: this program's own peak (ru_maxrss would also count the parent's pages the fork copied before exec)
    hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
    peak_mb = int(hwm.split()[1]) // 1024
    print(f"error: {e}"); print(f"peak {peak_mb} MB", file=sys.stderr); sys.exit(2)
print("accepted"); sys.exit(0)
"""


@pytest.mark.parametrize(
    "kind, text",
    [
        ("param", "range(1, 100000000000)"),
        ("param", "range(1, 100000000000, 3)"),
        ("param", "range(0.0, 1e11, 0.5)"),
        ("param", "shuffle(range(1, 100000000000))"),
        ("param", "float(range(1, 100000000000))"),
        ("param", "tag(log, range(1, 100000000000))"),
        ("param", "range(1, 1e300)"),
        ("param", "range(1, 10, 0)"),
        ("param", "range(0, 100000)"),  # each range fits, their grid (1e5 x 1e3) is listed by Optuna: refused
        ("expr", "'a' * 10000000000 == 'a'"),
        ("expr", "'a' * 10**10 == 'a'"),
        ("expr", "(1,) * 10000000000 == (1,)"),
        ("expr", "[0] * 10000000000 == [0]"),
        ("expr", "'%0999999999d' % 1 == 'x'"),
        ("expr", "'%.999999999f' % 1.0 == 'x'"),
        ("expr", "'%*d' % (999999999, 1) == 'x'"),
        ("expr", "knobs.x ** 99999999 > 0"),
        ("expr", "[y for y in (1, 2)] == 1"),
        ("eval", "'%0999999999d' % knobs.x == 'x'"),
        ("eval", "'ab' * (knobs.x * 1000000000) == 'a'"),
    ],
)
def test_input_that_would_expand_is_refused_before_it_allocates(kind: str, text: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _BOUNDED, kind, text], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr[-1500:])
    assert proc.stdout.startswith("error: ") and proc.stdout.count("\n") == 1, proc.stdout
    peak_mb = int(proc.stderr.rsplit("peak ", 1)[1].split()[0])
    assert peak_mb < 500, f"{peak_mb} MB: the size was checked after allocating"


def test_a_huge_range_in_a_sweep_is_one_line_with_bounded_memory(tmp_path: Path) -> None:
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, 3 << 30))

    cmd = [
        sys.executable,
        "-m",
        "sweeper",
        *FAULTS,
        "-m",
        "hydra.sweeper.params={knobs.fault:none,knobs.work:'range(1,100000000000)'}",
        f"results_dir={tmp_path / 'results'}",
    ]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "knobs.work" in lines[0] and "interval(" in lines[0], proc.stderr


# ---------------------------------------------------------------------------------------------------- non-finite


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, None])
def test_a_non_finite_objective_fails_in_optuna_and_in_the_row(value: float | None) -> None:
    objectives = [("throughput", "maximize"), ("peak_mem_bytes", "minimize")]
    outcome = TrialOutcome(
        Status.COMPLETE, metrics={"throughput": 10.0, "peak_mem_bytes": value}, started_at=1.0, ended_at=2.0
    ).checked(objectives)
    assert outcome.status is Status.FAILED
    assert outcome.reason == ("objective-missing:peak_mem_bytes" if value is None else "non-finite:peak_mem_bytes")
    study = optuna.create_study(directions=["maximize", "minimize"])
    trial = study.ask()
    studies.tell(study, trial, outcome, objectives)
    row = rows.make_row(outcome, study="s", trial=0, cfg={"workload": {"name": "w"}}, objectives=objectives)
    assert study.trials[0].state == TrialState.FAIL and row["status"] == "failed"
    assert study.trials[0].user_attrs[studies.REASON_KEY] == row["reason"] == outcome.reason
    assert row["throughput"] == 10.0, "what was measured is kept"


def test_the_report_never_ranks_a_non_finite_value() -> None:
    """Rows written as complete with an inf or NaN throughput (older versions did) are never usable."""
    df = pd.DataFrame(
        {
            "status": ["complete"] * 4,
            "throughput": [math.inf, math.nan, 5.0, 7.0],
            "peak_mem_bytes": [1.0, 1.0, math.inf, None],
            "objectives": "throughput:maximize",
        }
    )
    assert usable(df)["throughput"].tolist() == [7.0]


@pytest.mark.parametrize(
    "value",
    [
        "inf",
        "-inf",
        "nan",
        "NaN",
        "INF",
        "1e3",
        "1_000",
        "true",
        "False",
        "null",
        "NULL",
        "bf16",
        "a.b",
        "it's",
        "x\\",
        math.inf,
        -math.inf,
        1e16,
        3,
        True,
        None,
    ],
)
def test_an_override_reads_back_as_the_same_value_and_type(value: object) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in (override_value(value), override_string("knobs.mode", value).split("=", 1)[1]):
        back = parser.parse_override(f"knobs.mode={text}").value()
        assert type(back) is type(value) and (back == value or back != back and value != value), (value, text)
    assert override_value("inf") == "'inf'" and override_value("bf16") == "bf16"


# ---------------------------------------------------------------------------------------------------- paths


@pytest.mark.parametrize("name", ["r?x", "r%41b", "r#1", "q?mode=ro", "a%2Fb"])
def test_the_default_database_stays_inside_its_results_folder(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    url = studies.storage_url(None, folder)
    optuna.create_study(storage=url, study_name="s")
    assert (folder / "optuna.db").is_file()
    assert [p for p in tmp_path.rglob("optuna.db")] == [folder / "optuna.db"]


def test_a_host_name_with_a_slash_keeps_files_in_their_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "rack/7/../node.example")
    trials = tmp_path / "trials"
    store.write_trial(trials, "a", 0, "u", {"study": "a", "trial": 0, "status": "complete"})
    store.write_trial(trials, "a-runs", None, "u", {"study": "a-runs", "trial": None, "status": "complete"})
    store.compact(trials, "a", "u")
    assert len(store.read_results(tmp_path)) == 2
    assert all(p.parent == trials for p in tmp_path.rglob("*") if p.is_file())
    mig = slots.Slot(0, ("MIG-GPU-5c4e/1/0",), (0,))
    node = slots.NodeSlots(tmp_path / "locks", [mig], 1)
    assert node.take([mig]) == mig
    assert all(p.parent == slots.node_dir(tmp_path / "locks") for p in (tmp_path / "locks").rglob("*") if p.is_file())


# ---------------------------------------------------------------------------------------------------- the node


def test_sweepers_of_different_results_folders_see_each_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(slots.LOCK_DIR_ENV, raising=False)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches the folder it found first
    a = {"results_dir": str(tmp_path / "a"), "trial": {"lock_dir": None}}
    b = {"results_dir": str(tmp_path / "b"), "trial": {"lock_dir": None}}
    assert slots.node_lock_dir(a) == slots.node_lock_dir(b)
    assert slots.node_lock_dir(a).is_relative_to(tmp_path / "tmp")
    with slots.Occupancy(slots.node_lock_dir(a), ["cpu-0"], "study-a", 0) as first:
        with slots.Occupancy(slots.node_lock_dir(b), ["cpu-0"], "study-b", 0) as second:
            pass
        assert first.shared_with(second.start + 1) == ["study-b#0"]
    assert slots.node_lock_dir({**a, "trial": {"lock_dir": str(tmp_path / "own")}}) == tmp_path / "own"


# ---------------------------------------------------------------------------------------------------- one line


def test_ctrl_c_while_starting_is_one_line_and_exit_130() -> None:
    code = "import os, signal, sweeper.__main__; os.kill(os.getpid(), signal.SIGINT); import torch"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "interrupted (Ctrl-C) while starting: nothing ran; run the command again"
    ]


def test_a_study_name_too_long_for_a_database_is_one_line(tmp_path: Path) -> None:
    name = "s" * 600
    proc = run_cli([*QUICK, f"hydra.sweeper.study_name={name}"], tmp_path / "results", timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: `hydra.sweeper.study_name`: has 600 characters"), lines


@pytest.mark.parametrize(
    "text,line",
    [
        ("knobs: {precision: fp32, batch_size: 8\n  bad: [1, 2\n", "4:6"),  # an unclosed flow mapping
        ("knobs:\n  precision: fp32\n   batch_size: 8\n", "5:14"),  # a key indented into the previous value
        ("knobs:\n\tprecision: fp32\n", "4:1"),  # a tab
    ],
)
def test_a_yaml_file_that_does_not_parse_is_named_with_its_line(tmp_path: Path, text: str, line: str) -> None:
    """PyYAML's mark (line:column, counting the two header lines) names where the parser gave up."""
    conf = tmp_path / "conf" / "workload"
    conf.mkdir(parents=True)
    (conf / "mine.yaml").write_text("# @package _global_\nworkload: {name: mine, module: mine}\n" + text)
    proc = run_cli(["-cd", str(tmp_path / "conf"), "+workload=mine"], tmp_path / "results")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"mine.yaml:{line}`" in lines[0], lines[0]
    assert "is not valid YAML" in lines[0]


def _own_workload_with_a_word_knob(tmp_path: Path, knob_class: str = "") -> list[str]:
    """A workload of the user's own whose knob ``label`` is a string swept over words (``knob_class``: its
    module's ``Knobs`` lines, none by default); returns the command's first arguments."""
    (tmp_path / "conf" / "workload").mkdir(parents=True)
    (tmp_path / "conf" / "workload" / "mine.yaml").write_text(
        f"# @package _global_\nworkload: {{name: mine, module: {tmp_path / 'mine.py'}}}\nknobs: {{label: plain}}\n"
        "hydra:\n  sweeper:\n    params:\n      knobs.label: choice(plain, fancy)\n"
    )
    head = f"import dataclasses\nfrom typing import Literal\n\n{knob_class}\n" if knob_class else ""
    (tmp_path / "mine.py").write_text(f"{head}def build(cfg, device):\n    raise RuntimeError('never built')\n")
    return ["-cd", str(tmp_path / "conf"), "+workload=mine"]


def test_a_number_pinned_on_a_string_knob_of_ones_own_workload_names_both_values(tmp_path: Path) -> None:
    """`knobs.label=3.0` with -m, where the workload's knob is a string swept over words: one line that names the
    pinned value and the space's, not a message that blames the workload's own value."""
    proc = run_cli([*_own_workload_with_a_word_knob(tmp_path), "-m", "knobs.label=3.0"], tmp_path / "r")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "'plain' is str" in lines[0] and "3.0 is float" in lines[0] and "quote" in lines[0], lines[0]


KNOBS_STR = "@dataclasses.dataclass(frozen=True)\nclass Knobs:\n    label: str = 'plain'\n"
KNOBS_LITERAL = "@dataclasses.dataclass(frozen=True)\nclass Knobs:\n    label: Literal['plain', 'fancy'] = 'plain'\n"


@pytest.mark.parametrize(
    "knob_class,value,expected",
    [
        ("", "3.0", "`knobs.label`: 3.0 is a float but the workload's search space gives it strings ('plain', "
                    "'fancy'); give one of them, or quote a value meant as a string: knobs.label=\"'3.0'\""),
        ("", "7", "`knobs.label`: 7 is an int but the workload's search space gives it strings ('plain', 'fancy'); "
                  "give one of them, or quote a value meant as a string: knobs.label=\"'7'\""),
        ("", "true", "`knobs.label`: True is a bool but the workload declares a string (default 'plain'); give a "
                     "string, e.g. knobs.label=plain"),
        (KNOBS_STR, "3.0", "`knobs.label`: 3.0 is not a value workload 'mine' can run; give a string"),
        (KNOBS_LITERAL, "3.0", "`knobs.label`: 3.0 is not a value workload 'mine' can run; use one of: plain, fancy"),
    ],
    ids=["space", "space-int", "bool", "class-str", "class-literal"],
)  # fmt: skip
def test_a_single_run_of_a_number_on_a_string_knob_of_ones_own_workload_is_one_line(
    tmp_path: Path, knob_class: str, value: str, expected: str
) -> None:
    """The same values without -m: the single run checks them against the workload's knob class, or without one
    against its own search space, as a sweep does, before its one trial launches."""
    results = tmp_path / "r"
    proc = run_main([*_own_workload_with_a_word_knob(tmp_path, knob_class), f"knobs.label={value}"], results)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0] == f"error: {expected}"
    assert not (results / "trials").exists(), "no trial ran"


@pytest.mark.parametrize(
    "args",
    [
        ["knobs.label=fancy"],  # one of the space's words
        ["knobs.label='3.0'"],  # quoted: a string that reads as a number
        ["hydra.sweeper.params={knobs.label:'choice(1.5,3.0)'}", "knobs.label=3.0"],  # the command's own space
    ],
)
def test_a_single_run_of_a_value_of_the_spaces_kind_passes_the_check(tmp_path: Path, args: list[str]) -> None:
    base = _own_workload_with_a_word_knob(tmp_path)
    preflight([*base, *args, f"results_dir={tmp_path / 'r'}"], str(ROOT / "conf"))  # returns: no one-line exit


def test_a_single_run_of_a_number_on_a_knob_its_class_lets_take_one_passes_the_check(tmp_path: Path) -> None:
    """The knob class decides where it declares the knob: activation checkpointing is swept over off and all, and
    takes a number of blocks too."""
    args = ["+workload=transformer_block", "knobs.activation_checkpointing=2", f"results_dir={tmp_path}"]
    preflight(args, str(ROOT / "conf"))
