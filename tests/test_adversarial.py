"""Defects found by adversarial testing: no row lost, no secret shown, bad input stopped early."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from optuna.trial import TrialState

from sweeper.results import store
from sweeper.sweep.config.space import build_space

from conftest import FAULTS, NO_REMEASURE, QUICK, ROOT, run_cli, run_main


def _one_line_exit_2(proc: subprocess.CompletedProcess, expected_start: str, results: Path) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {expected_start}"), proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    trials = results / "trials"
    assert not trials.exists() or not store.trial_files(trials), "no trial ran"


# ---------------------------------------------------------------------------------------------------- bad input

BAD = [
    # item 1: a knob value of the wrong type, swept or not, single run or sweep
    (
        ["+workload=matmul", "knobs.transpose_a=yes"],
        "`knobs.transpose_a`: 'yes' is a string but the workload declares a bool (default False); give true or false",
    ),
    (["+workload=matmul", "-m", "knobs.allow_tf32=yes"], "`knobs.allow_tf32`: 'yes' is a string"),
    (["+workload=matmul", "-m", "knobs.allow_tf32=1"], "`knobs.allow_tf32`: 1 is an int"),
    (["+workload=matmul", "workload.m=1.5"], "`workload.m`: 1.5 is a float but the workload declares an int"),
    (["+workload=resnet50", "knobs.batch_size=big"], "`knobs.batch_size`: 'big' is a string"),
    (
        ["+workload=matmul", "-m", "++hydra.sweeper.params={knobs.allow_tf32:yes}"],
        "`knobs.allow_tf32`: the space's value 'yes' is str",
    ),
    (
        ["+workload=matmul", "-m", "knobs.transpose_a=choice(true,maybe)"],
        "`knobs.transpose_a`: the space's value 'maybe' is str",
    ),
    # item 7: settings out of range, unparsable or empty values, unusable results folder
    (
        ["+workload=matmul", "measure.steps=0"],
        "`measure.steps`: must be >= 1, got 0; give the number of measured steps",
    ),
    (["+workload=matmul", "-m", "measure.steps=-5"], "`measure.steps`: must be >= 1, got -5"),
    (["+workload=matmul", "trial.timeout_s=0"], "`trial.timeout_s`: must be > 0 seconds, got 0.0"),
    (["+workload=matmul", "-m", "trial.timeout_s=-1"], "`trial.timeout_s`: must be > 0 seconds, got -1.0"),
    (["+workload=matmul", "-m", "hydra.sweeper.max_failures=-1"], "`hydra.sweeper.max_failures`: must be"),
    (["+workload=matmul", "-m", "hydra.sweeper.n_jobs=0"], "`hydra.sweeper.n_jobs`: must be a whole number >= 1"),
    (["+workload=matmul", "-m", "hydra.sweeper.confirm_top_k=-3"], "`hydra.sweeper.confirm_top_k`: must be"),
    (["+workload=matmul", "-m", "hydra.sweeper.max_failure_rate=1.5"], "`hydra.sweeper.max_failure_rate`: must"),
    (["+workload=matmul", "-m", "hydra.sweeper.max_failure_rate=-0.1"], "`hydra.sweeper.max_failure_rate`: must"),
    (["+workload=matmul", "-m", "trial.resources={cpus:0}"], "`trial.resources.cpus`: must be a whole number"),
    (["+workload=matmul", "-m", "knobs.dtype=choice()"], "`knobs.dtype`: cannot parse 'choice()'"),
    (["+workload=matmul", "-m", "knobs.dtype=choice(fp32"], "`knobs.dtype`: cannot parse 'choice(fp32'"),
    (["+workload=matmul", "knobs.dtype="], "`knobs.dtype`: is empty"),
    (
        ["+workload=matmul", "knobs.dtype=fp64"],
        "`knobs.dtype`: 'fp64' is not a value workload 'matmul' can run; use one of: fp32, tf32, fp16, bf16",
    ),
    (["+workload=resnet50", "-m", "knobs.compile=choice(off,turbo)"], "`knobs.compile`: 'turbo' is not a value"),
    (["+workload=transformer_block", "knobs.sdpa_backend=fastest"], "`knobs.sdpa_backend`: 'fastest' is not a value"),
    (["+workload=matmul", "-m", "knobs.dtype="], "`knobs.dtype`: is empty"),
    # item 8: expressions that would fail or cost without bound at evaluation time
    (
        ["+workload=matmul", "-m", "+hydra.sweeper.constraints=['workload.m / 0 > 1']"],
        "`hydra.sweeper.constraints[0]`: 'workload.m / 0 > 1' cannot be evaluated with the defaults (ZeroDivisionError",
    ),
    (
        ["+workload=matmul", "-m", "+hydra.sweeper.constraints=['knobs.dtype + 1 > 0']"],
        "`hydra.sweeper.constraints[0]`: 'knobs.dtype + 1 > 0' cannot be evaluated with the defaults (TypeError",
    ),
    (
        ["+workload=matmul", "-m", '+hydra.sweeper.constraints=[\'"ab" * 100000000 == ""\']'],
        '`hydra.sweeper.constraints[0]`: \'"ab" * 100000000 == ""\' cannot be evaluated with the defaults (a '
        "repetition",
    ),
    (
        ["+workload=matmul", "-m", "+hydra.sweeper.constraints=['workload.m < 10 ** 400']"],
        "`hydra.sweeper.constraints[0]`: 'workload.m < 10 ** 400' uses Pow",
    ),
    (
        ["+workload=matmul", "-m", "+hydra.sweeper.constraints=['" + " + ".join(["workload.m"] * 1200) + " > 0']"],
        "`hydra.sweeper.constraints[0]`: the expression has",
    ),
    (
        ["+workload=matmul", "-m", "+hydra.sweeper.constraints=['" + " + ".join(["workload.m"] * 60) + " > 0']"],
        "`hydra.sweeper.constraints[0]`: the expression is too large",
    ),
    (
        ["+workload=matmul", "-m", "++hydra.sweeper.conditions={knobs.fp16_reduced_precision:'1 // 0 == 0'}"],
        "`hydra.sweeper.conditions.knobs.fp16_reduced_precision`: '1 // 0 == 0' cannot be evaluated",
    ),
]


@pytest.mark.parametrize("args,expected", BAD, ids=[" ".join(a)[:80] for a, _ in BAD])
def test_bad_input_stops_before_any_trial(results: Path, args: list[str], expected: str) -> None:
    _one_line_exit_2(run_main(args, results), expected, results)  # in this process: no start-up to pay


def test_bad_input_from_the_command_line_process(results: Path) -> None:
    """The same stop through a real ``python -m sweeper`` process (the cases above run its code in-process)."""
    args, expected = BAD[0]
    _one_line_exit_2(run_cli(args, results, timeout=120), expected, results)


def test_results_dir_that_is_a_file_or_read_only(tmp_path: Path) -> None:
    file = tmp_path / "results"
    file.write_text("not a folder")
    proc = run_cli(["+workload=matmul", "-m", f"results_dir={file}"], timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: `results_dir`: '{file}' is a file; give a folder, e.g. results_dir=results"
    ), proc.stderr
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1M", "tmpfs", str(ro)]).returncode != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    try:
        proc = run_cli(["+workload=matmul", f"results_dir={ro / 'r'}"], timeout=120)
        assert proc.returncode == 2 and proc.stderr.strip().startswith(
            f"error: `results_dir`: '{ro}' is not writable"
        ), proc.stderr
    finally:
        subprocess.run(["umount", str(ro)])


def test_expression_error_at_sampling_time_skips_the_configuration(tmp_path: Path) -> None:
    """A constraint that divides by a sampled value of zero: that configuration is skipped with the reason, the
    sweep goes on, and no trial stays RUNNING."""
    results = tmp_path / "results"
    proc = run_main(
        [
            *FAULTS,
            "-m",
            "hydra.sweeper.params={knobs.fault:none,knobs.work:'choice(0,16)'}",
            "hydra.sweeper.sampler=grid",
            "+hydra.sweeper.constraints=['100 / knobs.work > 1']",
            "hydra.sweeper.n_trials=2",
            "trial.timeout_s=300",
            *NO_REMEASURE,
        ],
        results,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = store.read_results(results).set_index("knob.work")
    assert df.loc[0, "status"] == "skipped" and df.loc[0, "reason"].startswith("invalid:ZeroDivisionError")
    assert df.loc[16, "status"] == "complete"
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    assert all(t.state.is_finished() for t in study.trials)


def test_expressions_are_bounded_in_the_space_builder() -> None:
    from sweeper.errors import ConfigError

    defaults = {"knobs.a": 2, "knobs.s": "x"}
    for expr in ("knobs.s * 100000 == ''", "(" * 300 + "1" + ")" * 300, "knobs.a " + "+ knobs.a " * 150 + "> 0"):
        with pytest.raises(ConfigError):
            build_space({}, {}, [expr], defaults)


# ---------------------------------------------------------------------------------------------------- reading


def test_reader_survives_mixed_types_on_disk(tmp_path: Path) -> None:
    """Rows written before types were validated (a string where other files hold a bool, an int where others hold
    a float): the report runs, warns naming the column and the file, and the cache keeps refreshing."""
    results = tmp_path / "results"
    trials = results / "trials"
    trials.mkdir(parents=True)
    base = {
        "study": "s",
        "trial": 0,
        "status": "complete",
        "reason": "",
        "workload": "matmul",
        "objectives": "throughput:maximize",
        "throughput": 1.0,
        "throughput_unit": "x/s",
        "started_at": pd.Timestamp("2026-12-01", tz="UTC"),
        "knob.allow_tf32": False,
        "knob.m": 8.0,
    }
    for n, extra in enumerate([{}, {"knob.allow_tf32": True, "knob.m": 16}, {"knob.allow_tf32": "yes"}]):
        row = {**base, "trial": n, "throughput": 1.0 + n, **extra}
        pq.write_table(pa.Table.from_pylist([row]), trials / f"s-0123456789.{n:06d}.parquet")
    proc = run_cli([str(results)], module="sweeper.report", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "column knob.allow_tf32 has different types" in proc.stderr and "s-0123456789.000002.parquet" in proc.stderr
    df = store.read_results(results)
    assert sorted(df["knob.allow_tf32"]) == ["false", "true", "yes"] and sorted(df["knob.m"]) == [8.0, 8.0, 16.0]
    row = {**base, "trial": 3, "throughput": 9.0}
    pq.write_table(pa.Table.from_pylist([row]), trials / "s-0123456789.000003.parquet")
    proc = run_cli([str(results)], module="sweeper.report", timeout=300)
    assert proc.returncode == 0 and "9" in (results / "report.md").read_text(), proc.stderr[-2000:]
    cached = pq.read_table(results / ".report-cache" / "rows.parquet")
    assert cached.num_rows == 4, "the cache refreshed"


def test_corrupt_file_is_skipped_with_a_warning(tmp_path: Path) -> None:
    results = tmp_path / "results"
    run_main([*QUICK, "hydra.sweeper.n_trials=2", "hydra.sweeper.seed=0"], results, check=True)
    trials = results / "trials"
    good = store.trial_files(trials)
    assert len(good) == 1 and store.is_compacted(good[0])
    data = good[0].read_bytes()
    truncated = trials / good[0].name.replace("compacted-000001", "compacted-000000")
    truncated.write_bytes(data[: len(data) // 2])  # a half-copied file
    (trials / "faults-zzzzzzzzzz.000099.parquet").write_bytes(b"not parquet at all")
    proc = run_cli([str(results)], module="sweeper.report", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for bad in (truncated.name, "faults-zzzzzzzzzz.000099.parquet"):
        assert f"skipped {trials / bad}: not a readable Parquet file" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(store.read_results(results)) == 2
    # The sweep says so too, and compaction goes on around the unreadable file.
    # its own process: this one has warned about those files already (once per process)
    proc = run_cli([*QUICK, "hydra.sweeper.n_trials=1", "hydra.sweeper.seed=0"], results, timeout=300)
    assert proc.returncode == 0 and "not a readable Parquet file" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert len(store.read_results(results)) == 3
    assert truncated.exists(), "an unreadable file is left for the user to look at"


def test_merging_two_machines_results_keeps_every_row(tmp_path: Path) -> None:
    """Two storages, one default study name: their compacted files copied into one folder keep all rows."""
    merged = tmp_path / "merged" / "trials"
    merged.mkdir(parents=True)
    for machine, n in (("a", 3), ("b", 2)):
        results = tmp_path / machine
        run_main([*QUICK, f"hydra.sweeper.n_trials={n}", "hydra.sweeper.seed=1"], results, check=True)
        for p in store.trial_files(results / "trials"):
            shutil.copy(p, merged / p.name)
    raw = pd.read_parquet(merged)
    assert len(raw) == 5
    df = store.read_results(merged.parent)
    assert len(df) == 5 and df["study_id"].nunique() == 2 and set(df["study"]) == {"faults"}
    from sweeper.report.data import load

    assert len(load(merged.parent)) == 5, "the report reads every row"


def test_study_file_names_are_injective_and_visible() -> None:
    names = ["../../x", "x", "col a", "col_a", "col-a", "é", "e", "_lead", ".hidden", 'q"uote', "a/b", "a.b", "", "ö"]
    prefixes = [store.file_prefix(n, "") for n in names]
    assert len(set(prefixes)) == len(names)
    for p in prefixes:
        assert p[0].isalnum() and all(c.isalnum() or c in "_-" for c in p)
        assert store.study_of(f"{p}.000001.parquet") == p
    assert store.file_prefix("faults", "id1") != store.file_prefix("faults", "id2")


@pytest.mark.parametrize("study", ['odd "name" é', "../../up", "_lead"])
def test_any_study_name_and_quotes_reach_the_trial_intact(tmp_path: Path, study: str) -> None:
    results = tmp_path / 'res"ults'
    proc = run_main(
        [
            *FAULTS,
            "-m",
            f"hydra.sweeper.study_name='{study}'",
            "hydra.sweeper.n_trials=1",
            "hydra.sweeper.params={knobs.fault:none,knobs.work:16}",
            f"results_dir='{results}'",
            "trial.timeout_s=300",
            *NO_REMEASURE,
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = store.trial_files(results / "trials")
    assert len(files) == 1 and files[0].parent == results / "trials" and files[0].name[0].isalnum()
    df = pd.read_parquet(results / "trials")
    assert list(df["study"]) == [study] and list(df["status"]) == ["complete"], df[["status", "message"]]


# ---------------------------------------------------------------------------------------------------- layout (#19)


def test_four_readers_read_every_column_of_a_mixed_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workloads in one folder: pandas, pyarrow, DuckDB and polars, with the README's commands, read every
    row and every column of both."""
    duckdb = pytest.importorskip("duckdb")
    polars = pytest.importorskip("polars")
    results = tmp_path / "results"
    run_main([*QUICK, "hydra.sweeper.n_trials=2", "hydra.sweeper.seed=0"], results, check=True)
    run_main(["+workload=matmul", "-m", "hydra.sweeper.n_trials=2", *NO_REMEASURE], results, check=True)
    run_cli(["+workload=matmul", "knobs.dtype=fp32"], results, check=True, timeout=300)  # a single run's file
    trials = results / "trials"
    want = store.read_results(results)
    columns = set(want.columns)
    assert {"knob.fault", "knob.work", "knob.dtype", "knob.transpose_a"} <= columns and len(want) == 5
    monkeypatch.chdir(tmp_path)
    readers = {
        "pandas": lambda: pd.read_parquet("results/trials"),
        "pyarrow": lambda: pq.read_table("results/trials").to_pandas(),
        "duckdb": lambda: duckdb.sql("SELECT * FROM read_parquet('results/trials/*.parquet', union_by_name=true)").df(),
        "polars": lambda: polars.read_parquet("results/trials/*.parquet", missing_columns="insert").to_pandas(),
    }
    for name, read in readers.items():
        df = read()
        assert set(df.columns) == columns, (name, columns ^ set(df.columns))
        assert len(df) == 5, name
        assert sorted(df["knob.work"].dropna()) == sorted(want["knob.work"].dropna()), name
        assert sorted(df["knob.dtype"].dropna()) == sorted(want["knob.dtype"].dropna()), name
    assert store.SCHEMA_FILE in os.listdir(trials)


# ---------------------------------------------------------------------------------------------------- interrupts


def _start(args: list[str], results: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The sweeper in its own session (as a terminal runs it); output to files, so that waiting for it waits for the
    sweeper only (the forkserver it leaves to exit by itself holds inherited pipes a little longer)."""
    cmd = [sys.executable, "-m", "sweeper", *args, f"results_dir={results}"]
    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        return subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            stdout=out,
            stderr=err,
            start_new_session=True,
        )


def _wait_running(results: Path, study: str, number: int, log: Path, timeout: float = 180) -> None:
    """Until the sweep's Optuna storage shows trial ``number`` RUNNING. Read through a read-only SQLite connection,
    opened and closed each poll: the poll must not create the storage nor hold it (``optuna.load_study`` here
    created the schema itself, racing the sweeper, and left an engine per poll open on the file it writes)."""
    deadline = time.time() + timeout
    db = results / "optuna.db"
    query = (
        "SELECT t.state FROM trials t JOIN studies s ON s.study_id = t.study_id WHERE s.study_name = ? AND t.number = ?"
    )
    while time.time() < deadline:
        if db.exists():
            try:
                with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
                    row = con.execute(query, (study, number)).fetchone()
                if row and row[0] == "RUNNING":
                    return
            except sqlite3.Error:  # the sweeper is creating the schema, or holds a write lock
                pass
        time.sleep(0.2)
    err = log.with_suffix(".err")
    tail = err.read_text()[-3000:] if err.exists() else "(no stderr)"
    raise AssertionError(f"trial {number} never ran in {timeout:.0f} s; the sweep's stderr ends:\n{tail}")


def _wait_for(path: Path, log: Path, timeout: float = 180) -> None:
    """Until ``path`` exists (a process of the sweep made it), or fail with the sweep's stderr."""
    deadline = time.time() + timeout
    while not path.exists():
        if time.time() > deadline:
            err = log.with_suffix(".err")
            tail = err.read_text()[-3000:] if err.exists() else "(no stderr)"
            raise AssertionError(f"{path.name} never appeared in {timeout:.0f} s; the sweep's stderr ends:\n{tail}")
        time.sleep(0.05)


@pytest.mark.parametrize(
    "sig,code,launcher",
    [(signal.SIGINT, 130, "basic"), (signal.SIGTERM, 143, "basic"), (signal.SIGINT, 130, "joblib")]
    + [(signal.SIGINT, 130, "joblib-workers")],
)
def test_interrupt_stops_within_seconds_and_records_interrupted(
    tmp_path: Path, sig: int, code: int, launcher: str
) -> None:
    """Ctrl-C (the terminal signals the whole group) or SIGTERM while a trial hangs, with Hydra's default launcher
    and with joblib's: n_jobs=1 runs the job in the sweeper's process (before the fix the trial's forkserver,
    started from a worker thread, printed a KeyboardInterrupt traceback), and two loky worker processes with two
    slots (the second and third trials wait for the first, whose configuration they share: never run)."""
    results = tmp_path / "results"
    args = [
        *FAULTS,
        "-m",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.params={knobs.fault:hang,knobs.work:16}",
        "trial.timeout_s=600",
        f"workload.hanging_to={tmp_path / 'hanging'}",
    ]
    if launcher == "joblib":
        args += ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"]
    elif launcher == "joblib-workers":
        args += ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.sweeper.n_jobs=2"]
    proc = _start(args, results, tmp_path / "sweep")
    _wait_running(results, "faults", 0, tmp_path / "sweep")
    _wait_for(tmp_path / "hanging", tmp_path / "sweep")  # the trial process hangs in its step now
    children = psutil.Process(proc.pid).children(recursive=True)
    t0 = time.time()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # what a terminal's Ctrl-C does: the whole foreground group
    else:
        proc.send_signal(sig)
    proc.wait(timeout=60)
    assert time.time() - t0 < 10
    out, err = (tmp_path / "sweep.out").read_text(), (tmp_path / "sweep.err").read_text()
    assert proc.returncode == code, err[-3000:]
    assert "Traceback" not in out + err, err[-3000:]
    # loky's resource tracker (joblib's process, on the same stderr) may warn of a semaphore at its own exit,
    # after the sweeper's last notice: its two lines are not the sweeper's
    ours = "\n".join(ln for ln in err.splitlines() if "resource_tracker" not in ln and ln.strip() != "warnings.warn(")
    last = ours.rstrip().rsplit("\ninterrupted (", 1)[-1]  # the last notice, its wrapped lines indented
    assert all(ln.startswith("    ") for ln in last.splitlines()[1:]), err[-3000:]
    assert " ".join(last.split()).endswith("run the same command again to resume"), err[-3000:]
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    states = [(t.state, t.user_attrs.get("reason")) for t in study.trials]
    assert states[0] == (TrialState.FAIL, "interrupted")
    assert states[1:] == [(TrialState.FAIL, "surplus")] * (2 if "workers" in launcher else 0), states
    df = store.read_results(results)
    assert list(df["status"]) == ["interrupted"] and list(df["reason"]) == ["interrupted"]


# Imported by every Python process of the sweep (on PYTHONPATH): a joblib (loky) worker stays in its start-up, before
# any of the project's code, until it is killed; each says it is there with a file named by its pid.
_SLOW_WORKER = """
import os, sys, time
if os.environ.get("SLOW_WORKER_DIR") and "popen_loky_posix" in " ".join(getattr(sys, "orig_argv", [])):
    open(os.path.join(os.environ["SLOW_WORKER_DIR"], str(os.getpid())), "w").close()
    time.sleep(300)
"""


def test_ctrl_c_while_a_launchers_workers_start_prints_no_traceback(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches every process of the group, a joblib worker still importing too (a loaded
    machine takes seconds): no traceback on the screen, exit 130, the trial recorded as interrupted, and the
    workers (which never ran a task) gone with the sweeper."""
    site, starting, results = tmp_path / "site", tmp_path / "starting", tmp_path / "results"
    site.mkdir()
    starting.mkdir()
    (site / "sitecustomize.py").write_text(_SLOW_WORKER)
    args = [*FAULTS, "-m", "hydra.sweeper.n_trials=1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    env = {"PYTHONPATH": str(site), "SLOW_WORKER_DIR": str(starting)}
    proc = _start([*args, "hydra.sweeper.n_jobs=2"], results, tmp_path / "sweep", env)
    deadline = time.time() + 180
    while len(os.listdir(starting)) < 2 and time.time() < deadline:  # both workers in their start-up
        time.sleep(0.05)
    assert len(os.listdir(starting)) == 2, (tmp_path / "sweep.err").read_text()[-3000:]
    workers = [psutil.Process(int(pid)) for pid in os.listdir(starting)]
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    err = (tmp_path / "sweep.out").read_text() + (tmp_path / "sweep.err").read_text()
    assert proc.returncode == 130, err[-3000:]
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    err = (tmp_path / "sweep.out").read_text() + (tmp_path / "sweep.err").read_text()  # the workers' too, now
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    assert [(t.state, t.user_attrs.get("reason")) for t in study.trials] == [(TrialState.FAIL, "interrupted")]


def test_full_disk_one_line_and_resumable(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    db = tmp_path / "optuna.db"
    try:
        # 300 kB hold about five trials' rows and logs: the disk fills well before the target, and the command run
        # again after the space is freed finishes the target (the trials left of 15, not of a larger one)
        args = [*QUICK, "hydra.sweeper.n_trials=15", "hydra.sweeper.seed=0", f"hydra.sweeper.storage=sqlite:///{db}"]
        proc = run_cli(args, disk / "results", timeout=400)
        assert proc.returncode == 1, proc.stderr[-3000:]
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "[HYDRA]" not in ln]
        assert "Traceback" not in proc.stderr
        assert lines[-1].startswith("error: no space left writing " + str(disk)), lines[-3:]
        assert lines[-1].endswith("free space and run the same command again to resume")
        study = optuna.load_study(study_name="faults", storage=f"sqlite:///{db}")
        assert not [t for t in study.trials if t.state == TrialState.RUNNING]
        before = store.read_results(disk / "results")
        told = {t.number for t in study.trials if t.state != TrialState.FAIL}
        assert set(before["trial"]) <= {t.number for t in study.trials}
        assert told <= set(before["trial"]), "every trial the study counts has its row"
    finally:
        moved = tmp_path / "moved"
        if (disk / "results").exists():
            shutil.copytree(disk / "results", moved)
        subprocess.run(["umount", str(disk)])
    proc = run_cli(
        [*args[:-3], "hydra.sweeper.n_trials=1", "hydra.sweeper.seed=0", f"hydra.sweeper.storage=sqlite:///{db}"],
        moved,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = store.read_results(moved)
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{db}")
    assert sorted(df["trial"]) == sorted(t.number for t in study.trials)


# ---------------------------------------------------------------------------------------------------- resume


def test_row_written_before_the_crash_is_told_on_resume(tmp_path: Path) -> None:
    """The sweeper died between a trial's row and the tell: the study is told what the row says (one truth)."""
    results = tmp_path / "results"
    run_main([*QUICK, "hydra.sweeper.n_trials=1", "hydra.sweeper.seed=0"], results, check=True)
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    sid = study.user_attrs["knob_sweeper:study_id"]
    # The state a SIGKILL leaves right after the row of trial 1 was written: trial 1 RUNNING, owned by a dead pid.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    trial = study.ask()
    trial.set_user_attr("owner", f"{os.uname().nodename}:{int(dead.stdout)}")
    row = store.read_table(store.trial_files(results / "trials")).to_pylist()[0]
    row.update(trial=trial.number, throughput=123.0)
    store.write_row(store.trial_path(results / "trials", "faults", trial.number, sid), row)
    run_main([*QUICK, "hydra.sweeper.n_trials=1", "hydra.sweeper.seed=0"], results, check=True)
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    t1 = study.trials[1]
    assert t1.state == TrialState.COMPLETE and t1.values == [123.0] and t1.user_attrs["status"] == "complete"
    df = store.read_results(results).set_index("trial")
    assert df.loc[1, "status"] == "complete" and df.loc[1, "throughput"] == 123.0
    assert (df["status"] == "complete").sum() == 3 and len(study.trials) == 3


def test_seeded_command_run_again_samples_new_configurations(tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = [*QUICK, "hydra.sweeper.n_trials=4", "hydra.sweeper.seed=0", "hydra.sweeper.baseline_first=false"]
    run_main(args, results, check=True)
    run_main(args, results, check=True)
    df = store.read_results(results).sort_values("trial")
    assert len(df) == 8
    assert not (df["reason"].fillna("").str.startswith("duplicate:")).any(), df[["trial", "knob.work", "reason"]]
    assert df["knob.work"].nunique() == 8


# -------------------------------------------------------------------------------------------------- the report's input


def test_report_rejects_rows_that_are_not_trial_rows(tmp_path: Path) -> None:
    trials = tmp_path / "r" / "trials"
    trials.mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2], "throughput": [1.0, 2.0]}), trials / "other.parquet")
    proc = run_cli([str(tmp_path / "r")], module="sweeper.report", timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: `results`: the rows under {tmp_path / 'r'} have no study, status, workload, started_at column; they "
        "are not trial rows of this tool (pass the folder a sweep wrote)"
    ), proc.stderr[-2000:]


def test_report_on_a_read_only_results_folder(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(ro)]).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        shutil.copytree(Path(__file__).parent / "fixtures" / "report" / "single", ro / "results")
        assert subprocess.run(["mount", "-o", "remount,ro", str(ro)]).returncode == 0
        proc = run_cli([str(ro / "results")], module="sweeper.report", timeout=300)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.strip() == (
            f"error: `--out`: cannot write {ro / 'results' / 'report.md'} (Read-only file "
            "system); pass --out PATH in a folder you can write"
        ), proc.stderr[-2000:]
        proc = run_cli(
            [str(ro / "results"), "--out", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html")],
            module="sweeper.report",
            timeout=300,
        )
        assert proc.returncode == 0 and (tmp_path / "r.md").is_file(), proc.stderr[-2000:]
    finally:
        subprocess.run(["umount", str(ro)])
