"""What the CLI prints for a person: --help, --cfg job, a single run, one line per sweep trial; and a workload of
the user's own found through -cd / hydra.searchpath, with one-line errors when it cannot be."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from conftest import NO_REMEASURE, ROOT, run_cli, run_main

EXAMPLE = ROOT / "examples" / "my_project"


def test_help_describes_the_tool_not_hydra() -> None:
    out = run_cli(["--help"], check=True).stdout
    assert "powered by Hydra" not in out and "__main__" not in out
    for text in (
        "+workload=<name> -m",
        "--cfg job",
        "python -m sweeper.report",
        "-cd my_project/conf",
        "workload: matmul, resnet50, transformer_block",
    ):
        assert text in out, text


def test_cfg_job_shows_the_presets_values_and_the_search_space() -> None:
    out = run_cli(
        ["+workload=matmul", "--cfg", "job", "device=cpu", "preset=tiny", "knobs.transpose_a=choice(false)"], check=True
    ).stdout
    assert "preset tiny applied" in out
    assert re.search(r"^  m: 128$", out, re.M), "the preset's workload size, not the YAML's 8192"
    space = out.split("search_space:", 1)[1]
    assert "knobs.dtype: choice(fp32, bf16)" in space, "the preset's space"
    assert "knobs.transpose_a: choice(false)" in space, "the command line's"
    assert "knobs.bf16_reduced_precision: knobs.dtype == 'bf16'" in space, "conditions"


def test_single_run_says_what_runs_and_where_the_row_goes(results: Path) -> None:
    proc = run_cli(["+workload=matmul", "knobs.dtype=fp32"], results, check=True)
    first = proc.stderr.splitlines()
    assert any(line.startswith("running matmul on cpu (preset tiny): dtype=fp32 ") for line in first), proc.stderr
    assert f"row -> {results / 'trials'}/" in proc.stderr
    assert "n/a (no peak FLOP/s for this device)" in proc.stdout, "mfu on the CPU is explained, not nan"
    assert "nan" not in proc.stdout


def test_one_console_line_per_trial_and_details_in_the_log(results: Path) -> None:
    proc = run_main(
        [
            "+workload=matmul",
            "-m",
            "hydra.sweeper.n_trials=3",
            "hydra.sweeper.sampler=random",
            "hydra.sweeper.seed=0",
            *NO_REMEASURE,
        ],
        results,
        check=True,
    )
    out = proc.stdout + proc.stderr
    assert "trial.context" not in out and "Launching" not in out and "sqlite:" not in out
    lines = [line for line in out.splitlines() if re.match(r"trial +\d+ ", line)]
    df = pd.read_parquet(results / "trials")
    assert len(lines) == len(df)
    base = df[df["baseline"]]
    assert re.match(r"trial +0 complete +[\d.]+ [kMGT]?FLOP/s +[\d.]+ s +\(the defaults\)$", lines[0]), lines[0]
    assert len(base) == 1 and int(base["trial"].iloc[0]) == 0
    for line in lines[1:]:  # the knobs that differ from the defaults, by their short names
        assert "knobs." not in line and re.search(r"\w+=\w+", line), line
    log = next((results / "multirun").glob("*/*/sweep.log")).read_text()
    assert "trial.context=b64:…(" in log and "Launching 1 jobs locally" in log, "the context elided, not dropped"
    job_dirs = sorted(int(p.name) for p in next((results / "multirun").glob("*/*")).iterdir() if p.name.isdigit())
    assert job_dirs == sorted(df["trial"].astype(int)), "Hydra's job folders are numbered like the trials"


def test_own_workload_errors_are_one_line(tmp_path: Path) -> None:
    project = tmp_path / "p"
    shutil.copytree(EXAMPLE, project)
    (project / "conf" / "workload" / "nomodule.yaml").write_text(
        "# @package _global_\nworkload:\n  name: nomodule\nknobs:\n  batch_size: 8\n"
    )
    for args, key in (
        (["-cd", "conf", "+workload=nomodule", "-m"], "`workload`"),
        (
            ["hydra.searchpath=[file://conf]", "+workload=mlp", "workload.module=missing_bench", "-m"],
            "`workload.module`",
        ),
        (["+workload=mlp", "-m"], "`workload`"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "sweeper", *args, f"results_dir={tmp_path / 'r'}"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=300,
        )
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert len(err) == 1 and err[0].startswith(f"error: {key}"), proc.stderr[-2000:]


def test_launch_log_masks_passwords(tmp_path: Path) -> None:
    import logging

    from sweeper.sweep.run.progress import log_launches_to

    log_launches_to(tmp_path / "sweep.log")
    logger = logging.getLogger("hydra._internal.core_plugins.basic_launcher")
    logger.info('#0 : trial.context=\'{"storage":"postgresql://knob:s3cret@db:5432/x"}\' %s', "postgresql://a:b@c/d")
    for h in logger.handlers:
        h.flush()
    text = (tmp_path / "sweep.log").read_text()
    assert "s3cret" not in text and ":b@" not in text
    assert "postgresql://knob:***@db:5432/x" in text and "postgresql://a:***@c/d" in text
