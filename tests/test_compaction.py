"""Compaction of finished studies: one Parquet file per study, every row and type kept, each trial read once."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sweeper.report.__main__ import main as report_main
from sweeper.report.data import read_rows
from sweeper.results import lookup, store

from conftest import NO_REMEASURE, ROOT, run_main

FIXTURES = Path(__file__).parent / "fixtures" / "report"
SOURCES = ("single", "multi", "nights", "compare", "data", "failed")


def write_fixture_rows(results: Path) -> pa.Table:
    """The recorded fixture rows written one file per trial, as the sweeper writes them (9 studies)."""
    table = pa.concat_tables(
        [pq.read_table(FIXTURES / s / "trials" / "rows.parquet") for s in SOURCES], promote_options="permissive"
    )
    types = {f.name: f.type for f in table.schema}
    for row in table.to_pylist():
        store.write_row(store.trial_path(results / "trials", row["study"], row["trial"]), row, types)
    return table


def visible(trials: Path) -> list[str]:
    return sorted(p.name for p in trials.iterdir() if not p.name.startswith(".") and p.name != store.SCHEMA_FILE)


def column_types(paths: list[Path]) -> dict[str, pa.DataType]:
    return {f.name: f.type for f in store.read_table(paths).schema}


def by_trial(df: pd.DataFrame) -> pd.DataFrame:
    """Rows in one order: the report cache appends the rows of new files after the rows it holds."""
    return df.sort_values(["study", "trial"], kind="stable").reset_index(drop=True)


def write_simple(trials: Path, study: str, trial: int, reason: str = "") -> None:
    store.write_row(
        store.trial_path(trials, study, trial),
        {"study": study, "trial": trial, "status": "complete", "reason": reason, "value": trial * 2.0},
    )


def test_compaction_keeps_every_row_and_type_and_is_idempotent(tmp_path: Path) -> None:
    results = tmp_path / "results"
    trials = results / "trials"
    source = write_fixture_rows(results)
    single_run = store.trial_path(trials, "matmul-single", None)  # a run outside any study: never compacted
    store.write_row(
        single_run, {**source.slice(0, 1).to_pylist()[0], "trial": None}, {f.name: f.type for f in source.schema}
    )
    before, types = store.read_results(results), column_types(store.trial_files(trials))
    cached_before = read_rows(results)  # writes the report cache over the per-trial files

    outs = store.compact_all(results)
    assert len(outs) == 9 and all(store.is_compacted(p) for p in outs)
    assert visible(trials) == sorted([p.name for p in outs] + [single_run.name])
    after = store.read_results(results)
    pd.testing.assert_frame_equal(after, before)
    assert column_types(store.trial_files(trials)) == types
    assert len(after) == source.num_rows + 1 and after["trial"].isna().sum() == 1
    # The report cache drops the folded files' rows and reads the compacted files; a cold read agrees.
    pd.testing.assert_frame_equal(by_trial(read_rows(results)), by_trial(cached_before))
    shutil.rmtree(results / ".report-cache")
    pd.testing.assert_frame_equal(read_rows(results), cached_before)

    stamps = {p.name: p.stat().st_mtime_ns for p in store.trial_files(trials)}
    assert store.compact_all(results) == outs, "a compacted study is left as it is"
    assert {p.name: p.stat().st_mtime_ns for p in store.trial_files(trials)} == stamps


def test_report_is_identical_after_compaction(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_fixture_rows(results)

    def report() -> list[str]:
        assert report_main([str(results), "--top", "3"]) == 0
        return [
            re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", "generated", (results / name).read_text())
            for name in ("report.md", "report.html")
        ]

    per_trial = report()
    store.compact_all(results)
    assert report() == per_trial  # the cache written over the per-trial files, then the compacted files
    shutil.rmtree(results / ".report-cache")
    assert report() == per_trial  # cold


def test_crash_between_rename_and_delete_reads_each_trial_once(tmp_path: Path) -> None:
    results = tmp_path / "results"
    trials = results / "trials"
    write_fixture_rows(results)
    before = store.read_results(results)
    saved = tmp_path / "saved"
    shutil.copytree(trials, saved)
    store.compact_all(results)
    read_rows(results)  # a warm cache of the compacted files
    for f in sorted(saved.glob("*.parquet"))[::2]:  # the crash came halfway through deleting the inputs
        shutil.copy2(f, trials / f.name)
    assert len(store.trial_files(trials)) > 9
    pd.testing.assert_frame_equal(by_trial(store.read_results(results)), by_trial(before))
    pd.testing.assert_frame_equal(by_trial(read_rows(results)), by_trial(read_rows(results, use_cache=False)))
    assert not read_rows(results).duplicated(["study", "trial"]).any()
    assert len(read_rows(results)) == len(before)
    store.compact_all(results)  # the next compaction folds the leftovers in
    assert len(visible(trials)) == 9
    pd.testing.assert_frame_equal(store.read_results(results), before)


def test_which_copy_counts(tmp_path: Path) -> None:
    """A per-trial file beats a compacted copy (a trial re-written after compaction); a later compaction beats an
    earlier one (a crash before the earlier one was deleted)."""
    trials = tmp_path / "trials"
    for n in range(5):
        write_simple(trials, "s", n)
    first = store.compact(trials, "s")
    assert first is not None
    write_simple(trials, "s", 2, reason="rewritten")
    df = store.read_results(trials)
    assert sorted(df["trial"]) == list(range(5))
    assert df.set_index("trial").loc[2, "reason"] == "rewritten"
    assert lookup.read_trial_outcome(trials, "s", 2).reason == "rewritten"
    shutil.copy2(first, tmp_path / first.name)
    second = store.compact(trials, "s")
    assert second is not None and visible(trials) == [second.name]
    shutil.copy2(tmp_path / first.name, first)  # the earlier compaction's file survived a crash
    for df in (store.read_results(trials), read_rows(trials), read_rows(trials, use_cache=False)):
        assert sorted(df["trial"]) == list(range(5))
        assert df.set_index("trial").loc[2, "reason"] == "rewritten"
    assert lookup.read_trial_outcome(trials, "s", 2).reason == "rewritten"
    third = store.compact(trials, "s")
    assert third is not None and visible(trials) == [third.name]
    assert store.read_results(trials).set_index("trial").loc[2, "reason"] == "rewritten"


def test_lookups_after_compaction(tmp_path: Path) -> None:
    trials = tmp_path / "trials"
    for study in ("a", "a.b", "<odd name>"):
        for n in range(3):
            write_simple(trials, study, n, reason=f"{study}/{n}")
    store.compact(trials, "a.b")
    store.compact(trials, "<odd name>")
    write_simple(trials, "a.b", 3, reason="a.b/3")
    for study in ("a", "a.b", "<odd name>"):
        for n in range(3):
            assert lookup.has_trial(trials, study, n)
            assert lookup.read_trial_outcome(trials, study, n).reason == f"{study}/{n}"
        assert not lookup.has_trial(trials, study, 7)
        assert lookup.read_trial_outcome(trials, study, 7) is None
    assert lookup.has_trial(trials, "a.b", 3) and not lookup.has_trial(trials, "a", 3)
    assert len(store.trial_files(trials)) == 3 + 1 + 1 + 1, "compacting a.b left study a alone"


def test_a_trial_rewritten_after_compaction_is_on_disk_once(tmp_path: Path) -> None:
    """A live sweeper records what a dead one's trial did after a third one compacted the study: a plain
    ``pandas.read_parquet`` of the folder (no ``read_once``) still sees the trial once, as last written."""
    trials = tmp_path / "trials"
    for n in range(3):
        write_simple(trials, "s", n, reason="first")
    store.compact(trials, "s")
    row = {"study": "s", "trial": 1, "status": "failed", "reason": "interrupted", "value": None}
    assert store.write_trial(trials, "s", 1, "", row) is not None
    df = pd.read_parquet(trials).set_index("trial")
    assert not df.index.duplicated().any(), df
    assert df["reason"].to_dict() == {0: "first", 1: "interrupted", 2: "first"}
    assert store.write_trial(trials, "s", 2, "", {**row, "trial": 2}, only_if_missing=True) is None
    assert store.write_trial(trials, "s", 3, "", {**row, "trial": 3}, only_if_missing=True) is not None
    df = pd.read_parquet(trials).set_index("trial")
    assert df["reason"].to_dict() == {0: "first", 1: "interrupted", 2: "first", 3: "interrupted"}


_WORKER = """
import sys, time
from pathlib import Path
from sweeper.results import store
mode, trials = sys.argv[1], Path(sys.argv[2])
if mode == "write":
    for n in range(200, 400):
        store.write_row(store.trial_path(trials, "busy", n),
                        {"study": "busy", "trial": n, "status": "complete", "reason": "", "value": n * 2.0})
elif mode == "rewrite":
    for n in range(200):
        store.write_trial(trials, "busy", n, "",
                          {"study": "busy", "trial": n, "status": "complete", "reason": "again", "value": n * 2.0})
elif mode == "compact":
    for _ in range(6):
        store.compact(trials, "busy")
        time.sleep(0.05)
else:
    done = Path(sys.argv[3])
    while not done.exists():
        df = store.read_results(trials)
        assert not df.duplicated(["study", "trial"]).any(), "a trial read twice"
        assert set(range(200)) <= set(df["trial"]), "a row went missing"
"""


def test_concurrent_compactions_and_a_writer_lose_nothing(tmp_path: Path) -> None:
    trials = tmp_path / "trials"
    for n in range(200):
        write_simple(trials, "busy", n)
    done = tmp_path / "done"

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", _WORKER, *args], cwd=ROOT, stderr=subprocess.PIPE, text=True)

    reader = start("read", str(trials), str(done))
    workers = [start("write", str(trials)), start("rewrite", str(trials)), start("compact", str(trials)),
               start("compact", str(trials))]
    for p in workers:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    done.touch()
    assert reader.wait(timeout=60) == 0, reader.stderr.read()
    raw = pd.read_parquet(trials)
    assert not raw["trial"][raw["trial"] < 200].duplicated().any(), "a re-written trial is on disk twice"
    assert (raw.loc[raw["trial"] < 200, "reason"] == "again").all()
    df = store.read_results(trials)
    assert sorted(df["trial"]) == list(range(400))
    assert (df["value"] == df["trial"] * 2.0).all()
    store.compact(trials, "busy")
    assert len(visible(trials)) == 1
    assert sorted(store.read_results(trials)["trial"]) == list(range(400))


def test_sweep_leaves_its_study_compacted_and_resumes(results: Path) -> None:
    args = ["+workload=matmul", "-m", "hydra.sweeper.n_trials=3", *NO_REMEASURE]
    run_main(args, results, check=True)
    trials = results / "trials"
    files = visible(trials)
    assert len(files) == 1 and store.is_compacted(files[0]), files
    assert sorted(store.read_results(results)["trial"]) == [0, 1, 2]

    run_main(args, results, check=True)  # the same command again: the study continues
    files = visible(trials)
    assert len(files) == 1 and store.is_compacted(files[0]) and ".compacted-000002-" in files[0], files
    df = store.read_results(results)
    # n_trials counts new measurements: the second command measured 3 more; configurations it drew again are
    # recorded as skipped duplicates. Every trial of the study has exactly one row, none lost.
    assert sorted(df["trial"]) == list(range(len(df))) and df["study"].nunique() == 1
    assert (df["status"] == "complete").sum() == 6
    assert df.loc[df["status"] != "complete", "reason"].str.startswith("duplicate:").all()
    study = optuna.load_study(study_name=df["study"][0], storage=f"sqlite:///{results / 'optuna.db'}")
    assert len(study.trials) == len(df)
    for t in study.trials:
        assert (
            lookup.read_trial_outcome(trials, df["study"][0], t.number, df["study_id"][0]).status.value
            == t.user_attrs["status"]
        )
