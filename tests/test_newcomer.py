"""A new user's first hour: the recipe of their own model and of a folder with two workloads, claims about noise,
own-model knobs checked before launch, and output that reads well at 80 columns."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeper.report.analysis import analyse
from sweeper.report.blocks import times
from sweeper.report.build import build
from sweeper.report.recipe import choose, code_lines, hydra_value, recipe_text
from sweeper.results.outcome import Status, TrialOutcome

# ---------------------------------------------------------------------------------------------------- a user's model

MODEL = '''
"""A tiny encoder of my own, written from the README's "Your own model"."""
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workloads import DeviceInfo, Workload, common

RECIPE = {"width": {"*": ["model = TinyEnc(width={value})  # the width measured"]}}


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    return common.check_common(cfg["knobs"], device)


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    knobs = cfg["knobs"]
    common.set_global_flags(knobs)
    torch.manual_seed(0)
    width, bs = int(knobs["width"]), int(knobs["batch_size"])
    model = nn.Sequential(nn.Linear(16, width), nn.GELU(), nn.Linear(width, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3,
                            **common.optimizer_kwargs(knobs.get("optimizer_impl", "foreach"), device))
    train = common.TrainStep(model, F.cross_entropy, opt, knobs, device)
    x, y = torch.randn(bs, 16, device=device), torch.randint(0, 4, (bs,), device=device)
    return Workload(step=lambda _b: train((x, y)), samples_per_step=bs, flops_per_step=0.0,
                    throughput_unit="samples/s", precision=knobs.get("precision", "fp32"))
'''

YAML = """\
# @package _global_
workload:
  name: tinyenc
  module: tinyenc_bench
knobs:
  precision: fp32
  compile: "off"
  batch_size: 8
  optimizer_impl: foreach
  width: 16
hydra:
  sweeper:
    params:
      knobs.precision: choice(fp32, bf16)
      knobs.width: choice(16, 32)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "proj"
    (p / "conf" / "workload").mkdir(parents=True)
    (p / "tinyenc_bench.py").write_text(MODEL)
    (p / "conf" / "workload" / "tinyenc.yaml").write_text(YAML)
    return p


def _run(args: list[str], cwd: Path, module: str = "sweeper", columns: int = 200) -> subprocess.CompletedProcess:
    env = {"PYTHONUNBUFFERED": "1", "COLUMNS": str(columns), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, **env},
    )


def test_own_model_sweep_report_and_recipe_on_the_cpu(project: Path) -> None:
    """Sweep, report and --recipe of a model defined here: the recipe's lines are this model's (its own RECIPE,
    its AdamW, autocast on the CPU), its re-run command runs, and its rows carry no distributed columns."""
    sweep = _run(
        [
            "-cd",
            "conf",
            "+workload=tinyenc",
            "-m",
            "hydra.sweeper.sampler=grid",
            "hydra.sweeper.n_trials=4",
            "measure.warmup_steps=1",
            "measure.steps=5",
            "trial.timeout_s=300",
            "hydra.sweeper.confirm_top_k=0",  # no re-measurements after the search (tests/conftest.py NO_REMEASURE)
            "hydra.sweeper.confirm_unstable=false",
        ],
        project,
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    rows = pd.read_parquet(project / "results" / "trials")
    assert not [c for c in rows.columns if c.startswith("knob.distributed.")], "a block the trials never used"
    assert set(rows["workload_module"]) == {"tinyenc_bench"}
    report = _run(["results", "--recipe"], project, module="sweeper.report")
    assert report.returncode == 0, report.stderr[-3000:]
    out = report.stdout
    assert "device_type='cuda'" not in out and "GradScaler('cuda')" not in out, out
    assert "torch.optim.SGD" not in out
    assert "optimizer = torch.optim.AdamW(model.parameters(), ..., foreach=True)" in out
    width = re.search(r"knobs\.width=(\d+)", out).group(1)
    assert f"model = TinyEnc(width={width})  # the width measured" in out, "the model's own RECIPE"
    if "knobs.precision=bf16" in out:
        assert "torch.autocast(device_type='cpu', dtype=torch.bfloat16)" in out
    command = next(line for line in out.splitlines() if line.startswith("python -m sweeper "))
    args = command.split()[3:]
    assert not [a for a in args if a.endswith("=null")], command
    rerun = _run(["-cd", "conf", *args, "measure.warmup_steps=1", "measure.steps=5"], project)
    assert rerun.returncode == 0, rerun.stderr[-3000:]


def test_own_model_helper_knobs_refused_before_launch(project: Path) -> None:
    """``knobs.precision=fp8`` means nothing to ``common.TrainStep``: one line and exit 2, in a single run and in a
    sweep, before any trial (no row)."""
    for args in (["knobs.precision=fp8"], ["-m", "knobs.precision=choice(fp8, fp32)"]):
        proc = _run(["-cd", "conf", "+workload=tinyenc", *args], project)
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert len(err) == 1 and err[0].startswith("error: `knobs.precision`: 'fp8'"), err
        assert "fp32, tf32, fp16, bf16" in err[0]
        assert not (project / "results" / "trials").exists() or not any((project / "results" / "trials").iterdir())


OWN_KNOB_MODEL = '''
"""A model whose own knob, ``knobs.act``, is checked by its own check()."""
from typing import Any

from workloads import DeviceInfo, Workload, common


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    if cfg["knobs"]["act"] not in ("gelu", "relu"):
        return f"act must be gelu or relu, got {cfg['knobs']['act']!r}"
    return common.check_common(cfg["knobs"], device)


def build(cfg: dict[str, Any], device: Any) -> Workload:
    raise AssertionError("never built: its knob was refused before any trial")
'''


def test_own_knob_refused_by_own_check_is_bad_input(tmp_path: Path) -> None:
    """A value of one's own knob that one's own check() refuses is one line naming the knob, exit 2, no row, in a
    single run and in a sweep that fixes it (as the package's own knobs are)."""
    from conftest import run_main

    conf = tmp_path / "conf"
    (conf / "workload").mkdir(parents=True)
    (tmp_path / "actknob_bench.py").write_text(OWN_KNOB_MODEL)
    (conf / "workload" / "actknob.yaml").write_text(
        "# @package _global_\n"
        f"workload: {{name: actknob, module: {tmp_path / 'actknob_bench.py'}}}\n"
        "knobs: {precision: fp32, act: gelu, batch_size: 8}\n"
        "hydra: {sweeper: {params: {knobs.batch_size: 'choice(8, 16)'}}}\n"
    )
    for args in (["knobs.act=gleu"], ["-m", "knobs.act=gleu", "hydra.sweeper.n_trials=2"]):
        proc = run_main(["-cd", str(conf), "+workload=actknob", *args], tmp_path / "results")
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (args, proc.stderr[-3000:])
        assert len(err) == 1 and err[0].startswith("error: `knobs.act`: "), err
        assert "act must be gelu or relu, got 'gleu'" in err[0] and "give a value it accepts" in err[0]
        assert not list((tmp_path / "results").rglob("*.parquet")), "no row: nothing was tried"


def test_own_workload_without_config_dir_hints_cd(project: Path) -> None:
    proc = _run(["+workload=tinyenc"], project)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "unknown workload 'tinyenc'" in line and "-cd conf" in line and "hydra.searchpath" in line, line


# ---------------------------------------------------------------------------------------------------- rows by hand


def _rows(
    specs: list[tuple],
    workload: str = "matmul",
    study: str = "s",
    device: str = "cpu",
    cv: float = 0.01,
    extra: dict | None = None,
) -> pd.DataFrame:
    """Rows of one study: ``(trial, {knob: value}, throughput[, peak_mem, step_cv])`` each."""
    out = []
    for spec in specs:
        trial, knobs, value = spec[:3]
        row = {
            "study": study,
            "trial": trial,
            "status": "complete",
            "reason": "",
            "workload": workload,
            "preset": "",
            "started_at": pd.Timestamp("2026-12-03", tz="UTC") + pd.Timedelta(seconds=trial or 0),
            "throughput": value,
            "throughput_unit": "samples/s",
            "steps_measured": 20,
            "step_cv": spec[4] if len(spec) > 4 else cv,
            "peak_mem_bytes": spec[3] if len(spec) > 3 else 1e6,
            "device": device,
            "cpu_model": "EPYC",
            "hostname": "vm",
            "torch_version": "2.11",
            **{f"knob.{k}": v for k, v in knobs.items()},
            **(extra or {}),
        }
        out.append(row)
    return pd.DataFrame(out)


def test_recipe_of_two_workloads_writes_only_each_workloads_keys() -> None:
    a = _rows(
        [(0, {"dtype": "fp32"}, 1.0), (1, {"dtype": "bf16"}, 2.0)],
        "matmul",
        "mm",
        extra={"param.m": 256, "is_default_config": False},
    )
    b = _rows(
        [(0, {"precision": "fp32", "width": 16}, 10.0), (1, {"precision": "bf16", "width": 32}, 20.0)],
        "tinyenc",
        "te",
        extra={"param.depth": 2},
    )
    df = pd.concat([a, b], ignore_index=True)  # each workload's columns are null in the other's rows
    text = recipe_text(build(df, with_plots=False).analyses, df)
    commands = [line for line in text.splitlines() if line.startswith("python -m sweeper")]
    assert len(commands) == 2
    mm = next(c for c in commands if "+workload=matmul" in c)
    te = next(c for c in commands if "+workload=tinyenc" in c)
    assert "knobs.width" not in mm and "knobs.precision" not in mm and "workload.depth" not in mm, mm
    assert "knobs.dtype" not in te and "workload.m=" not in te and "=null" not in te, te


def test_recipe_lines_are_the_devices_the_study_ran_on() -> None:
    for device, want in (("cpu", "device_type='cpu'"), ("cuda:0", "device_type='cuda'")):
        row = _rows([(0, {"precision": "bf16", "cudnn_benchmark": True}, 1.0)], "resnet50", device=device).iloc[0]
        lines = code_lines(row)
        assert any(want in line for line in lines), lines
        assert ("torch.backends.cudnn.benchmark = True" in lines) == (device != "cpu"), lines


def test_optimizer_line_names_the_models_optimizer_or_says_it_is_unknown(tmp_path: Path) -> None:
    row = _rows([(0, {"optimizer_impl": "fused"}, 1.0)], "transformer_block").iloc[0]
    assert "optimizer = torch.optim.AdamW(model.parameters(), ..., fused=True)" in code_lines(row)
    row = _rows([(0, {"optimizer_impl": "fused"}, 1.0)], "resnet50").iloc[0]
    assert "optimizer = torch.optim.SGD(model.parameters(), ..., fused=True)" in code_lines(row)
    (tmp_path / "two_opts.py").write_text("import torch\na = torch.optim.Adam(p)\nb = torch.optim.SGD(q)\n")
    own = {"workload_module": str(tmp_path / "two_opts.py")}
    row = _rows([(0, {"optimizer_impl": "fused"}, 1.0)], "mine", extra=own)
    line = next(s for s in code_lines(row.iloc[0]) if "fused=True" in s)
    assert "SGD" not in line and "Adam" not in line and "could not read which optimizer" in line, line


def test_recipe_reads_modules_without_importing_them() -> None:
    """The report process never imports torch or a workload (the recipe reads RECIPE with ast)."""
    code = textwrap.dedent("""
        import sys, pandas as pd
        from sweeper.report.recipe import code_lines
        row = pd.Series({"workload": "resnet50", "device": "cpu", "knob.precision": "bf16", "knob.num_workers": 4})
        lines = code_lines(row)
        assert any("autocast" in s for s in lines) and any("num_workers=4" in s for s in lines), lines
        bad = sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "workloads.", "tinyenc")))
        bad = [m for m in bad if m != "workloads.base" and not m.startswith("workloads.spec")]  # torch-free
        assert not bad, bad
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "1e3", "True", "NULL", "false", "two words", "a'b", "256"])
def test_recipe_quotes_what_hydra_would_reparse(value: str) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_override(f"knobs.x={hydra_value(value, 'knobs.x')}").value()
    assert parsed == value and isinstance(parsed, str), (value, hydra_value(value))


def test_recipe_keeps_numbers_numbers() -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for value in (256, 0.5, 4.0, float("inf"), True, None):
        parsed = OverridesParser.create().parse_override(f"k={hydra_value(value)}").value()
        assert parsed == value or (value == 4.0 and parsed == 4), (value, parsed)


def test_never_recommends_a_configuration_slower_than_the_baseline() -> None:
    """The fastest is noisy (its interval covers the others); the least-memory one of its tie group is 0.71x the
    baseline: the recipe is the fastest, says that it is not faster than the defaults beyond noise, and never the
    slower least-memory one (peak memory on the CPU is the process's RSS: never a reason)."""
    rows = _rows(
        [
            (0, {"batch_size": 32}, 100.0, 2e6),
            (1, {"batch_size": 64}, 150.0, 3e6, 3.0),
            (2, {"batch_size": 8}, 71.0, 1e6),
        ],
        extra={"knob_defaults": json.dumps({"knob.batch_size": 32})},
    )
    a = analyse(rows)
    key, why = choose(a)
    assert key == a.configs.index[0] and "not faster than the workload defaults beyond noise" in why, (
        a.configs[["label", "rank", "speedup"]],
        why,
    )


def test_beyond_noise_only_where_noise_was_measured() -> None:
    once = _rows(
        [(0, {"batch_size": 32}, 100.0), (1, {"batch_size": 64}, 300.0)],
        extra={"knob_defaults": json.dumps({"knob.batch_size": 32})},
    )
    a = analyse(once)
    from sweeper.report.sections import headline, ranking

    text = headline(a)
    assert "beyond noise" not in text and "measured once; no noise estimate" in text, text
    assert a.configs["speedup_lo"].isna().all()
    assert "(" not in ranking(a, 10).rows[0][6], "no speed-up interval"
    twice = pd.concat(
        [once, _rows([(2, {"batch_size": 32}, 101.0), (3, {"batch_size": 64}, 297.0)])], ignore_index=True
    )
    twice["knob_defaults"] = json.dumps({"knob.batch_size": 32})
    b = analyse(twice)
    assert "beyond noise" in headline(b) and b.configs["speedup_lo"].notna().all()


def test_speedups_never_print_as_zero() -> None:
    for r, lo, hi in ((0.0058, 0.004, 0.009), (0.0001, 0.00005, 0.0002)):
        text = times(r, lo, hi)
        assert all(float(n) > 0 for n in re.findall(r"\d[\d.]*", text)), text  # never 0.00x (0.00–0.01)
    assert times(2.1, 1.62, 2.71) == "2.10x (1.62–2.71)"


# ---------------------------------------------------------------------------------------------------- single runs


def test_single_runs_are_not_a_study_and_unrun_rows_name_no_machine() -> None:
    runs = _rows([(None, {"batch_size": 32}, 100.0), (None, {"batch_size": 64}, 120.0)], study="tinyenc-runs")
    sweep = _rows([(0, {"batch_size": 32}, 100.0), (1, {"batch_size": 64}, 130.0)], study="night")
    other = _rows([(0, {"batch_size": 32}, 90.0), (1, {"batch_size": 64}, 140.0)], study="night2")
    never = sweep.iloc[[0]].assign(
        trial=2,
        status="failed",
        reason="interrupted",
        throughput=np.nan,
        cpu_model=None,
        torch_version=None,
        device=None,
    )
    df = pd.concat([runs, sweep, never, other], ignore_index=True)
    report = build(df, with_plots=False)
    summary = next(b for b in report.blocks if getattr(b, "title", "").startswith("Summary"))
    assert [r[0] for r in summary.rows] == ["night", "night2"], summary.rows
    text = recipe_text(report.analyses, df)
    assert "tinyenc-runs" not in text and "single runs" not in text, text
    trend = next((b for b in report.blocks if getattr(b, "title", "") == "Best throughput per night"), None)
    assert trend is not None and "tinyenc-runs" not in str(trend.rows)
    for a in report.analyses:
        assert not any("?" in m for m in a.machines), a.machines


# ---------------------------------------------------------------------------------------------------- output


def _outcome(status: Status, metrics: dict | None = None, reason: str = "") -> TrialOutcome:
    return TrialOutcome(status, reason, "", metrics or {}, 0.0, 1.2)


def test_trial_lines_wrap_between_words_and_align_throughput(monkeypatch, capsys) -> None:
    from sweeper.sweep.run.progress import SweepProgress

    monkeypatch.setenv("COLUMNS", "80")
    p = SweepProgress("s", 3, [("throughput", "maximize")], 0)
    knobs = {f"knobs.transpose_{c}": True for c in "abcdefgh"}
    p.trial_done(1, _outcome(Status.COMPLETE, {"throughput": 0.0004976, "throughput_unit": "TFLOP/s"}), knobs)
    p.trial_done(2, _outcome(Status.COMPLETE, {"throughput": 0.1044, "throughput_unit": "TFLOP/s"}), knobs)
    err = capsys.readouterr().err
    lines = [ln.rstrip() for ln in err.splitlines() if ln.strip()]
    words = set(" ".join(f"{k.removeprefix('knobs.')}=True" for k in knobs).split())
    assert all(len(ln) <= 80 for ln in lines), lines
    for ln in lines:
        for w in ln.split():
            assert not w.startswith("transpose") or w in words, (w, lines)
    values = [re.search(r"complete {4}(.{7}\S+)", ln) for ln in lines]  # padded to 11 ("interrupted"), a space
    shown = [m.group(1) for m in values if m]
    assert shown == ["  498 MFLOP/s", "  104 GFLOP/s"], shown


def test_every_status_is_one_word_apart_from_its_reason(capsys) -> None:
    from sweeper.sweep.run.progress import SweepProgress

    p = SweepProgress("s", 3, [("throughput", "maximize")], 0)
    for status in Status:
        if status is not Status.COMPLETE:
            p.trial_done(1, _outcome(status, reason="budget"), {})
    err = capsys.readouterr().err
    for status in Status:
        if status is not Status.COMPLETE:
            assert re.search(rf"\b{status.value} +budget\b", err), (status, err)


def test_failed_single_run_shows_its_whole_reason(capsys) -> None:
    from sweeper.sweep.run.progress import print_single

    reason = "exception:AttributeError"
    print_single(_outcome(Status.FAILED, reason=reason).to_dict())
    out = capsys.readouterr().out
    assert f"reason: {reason}" in out, out


def test_sweep_log_elides_the_trial_context(tmp_path: Path) -> None:
    import logging

    from sweeper.sweep.run.progress import log_launches_to

    log_launches_to(tmp_path / "sweep.log")
    logger = logging.getLogger("hydra._internal.core_plugins.basic_launcher")
    logger.info("#0 : knobs.dtype=bf16 trial.context=b64:%s", "QUJD" * 1300)
    for h in logger.handlers:
        h.flush()
    text = (tmp_path / "sweep.log").read_text()
    assert "knobs.dtype=bf16 trial.context=b64:…(5200 chars)" in text and "QUJDQUJD" not in text, text[-300:]


def test_help_lists_the_default_sampler_and_counts_agree() -> None:
    from sweeper.report.render import plural

    assert plural(1, "more column") == "1 more column" and plural(2, "more column") == "2 more columns"
    proc = subprocess.run([sys.executable, "-m", "sweeper", "--help"], capture_output=True, text=True, timeout=120)
    assert re.search(r"sampler=staged\|tpe\|random\|grid", proc.stdout), proc.stdout


def test_terminal_configuration_column_shows_what_differs() -> None:
    knobs = {f"k{i}": "on" for i in range(14)}
    rows = _rows(
        [
            (0, {**knobs, "batch_size": 256}, 100.0),
            (1, {**knobs, "batch_size": 128}, 50.0),
            (2, {**{k: "off" for k in knobs}, "batch_size": 64}, 10.0),
        ]
    )
    a = analyse(rows)
    from sweeper.report.sections import legend, ranking

    table = ranking(a, 10)
    brief = table.brief_cells[2]
    assert brief[1] == "#1 + batch_size=128", brief
    assert all(len(b) <= 30 and len(full[2]) <= 30 for b, full in zip(brief, table.rows)), "rows stay short"
    assert table.rows[1][2] == "C2" and any("k13" in p.text for p in legend(a, 10)), "the legend has the full list"


# ---------------------------------------------------------------------------------------------------- noise


def test_step_time_stability_flags() -> None:
    from sweeper.trial.stability import stability

    rng = np.random.default_rng(0)
    steady = list(np.abs(rng.normal(1e-3, 1e-4, 50)))
    assert stability(steady) == {**stability(steady), "step_bimodal": False, "step_unstable": False}
    two_speeds = [5e-5] * 30 + [8e-3] * 10  # the shared CPU's matmul: ~0.05 ms or ~8 ms
    s = stability(rng.permutation(two_speeds).tolist())
    assert s["step_bimodal"] and s["step_unstable"] and s["step_gap_ratio"] > 100
    one_outlier = steady + [20e-3]
    assert not stability(one_outlier)["step_bimodal"], "one pause is not a second mode"
    scattered = list(rng.lognormal(math.log(1e-3), 0.9, 60))
    assert stability(scattered)["step_unstable"]


def test_default_threads_leave_the_node_a_core() -> None:
    from sweeper.trial.threads import default_threads

    assert default_threads(2, 2) == 1
    assert default_threads(16, 16) == 15
    assert default_threads(16, 8) == 7, "at most the physical cores"
    assert default_threads(16, 16, concurrent=4) == 3
    assert default_threads(1, 1) == 1


def test_real_trial_records_threads_and_step_stability(tmp_path: Path) -> None:
    from conftest import run_main

    run_main(["+workload=matmul", "measure.steps=10"], tmp_path / "r", check=True)
    row = pd.read_parquet(tmp_path / "r" / "trials").iloc[0]
    import os

    from sweeper.trial.threads import default_threads, physical_cores

    cpus = os.sched_getaffinity(0)
    assert int(row["cpu_threads"]) == default_threads(len(cpus), physical_cores(cpus))
    assert isinstance(row["step_bimodal"], (bool, np.bool_)) and row["step_gap_ratio"] >= 1.0
    assert bool(row["step_bimodal"]) == (row["step_gap_ratio"] >= 2.0)
    assert not [c for c in row.index if c.startswith("knob.distributed.")]


def test_report_fsdp_layout_matches_the_trials() -> None:
    from sweeper.report.recipe_dist import fsdp_layout
    from workloads import parallel

    for sharding in parallel.SHARDINGS:
        for world in range(1, 9):
            assert fsdp_layout(sharding, world) == parallel.fsdp_layout(sharding, world), (sharding, world)
