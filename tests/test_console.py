"""The sweep's console at 80 columns: wrapped lines indented under their trial, one notice per cause, the bar
counting towards what ends the sweep, numbers in the trial lines' units."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from sweeper.results.outcome import Status, TrialOutcome
from sweeper.sweep.run.progress import SweepProgress, hanging, print_single

from conftest import run_main

WIDTH = 80


def _outcome(status: Status, metrics: dict | None = None, reason: str = "") -> TrialOutcome:
    return TrialOutcome(status, reason, "", metrics or {}, 0.0, 1.2)


def _no_line_wraps_at_column_0(text: str) -> list[str]:
    """The lines of ``text``, checked: none is longer than the terminal (it would wrap at column 0)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert all(len(ln) <= WIDTH for ln in lines), [ln for ln in lines if len(ln) > WIDTH]
    return lines


def test_a_sweep_at_80_columns_never_continues_a_line_at_column_0(results: Path, monkeypatch) -> None:
    """A real sweep whose lines are long (a knob list, a default outside the space, a capped measurement window,
    a budget): every line fits 80 columns, every wrapped line is indented, and each notice is said once."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # Optuna's own log, on its own handler
    logging.getLogger("optuna").addHandler(handler)
    try:
        proc = run_main(["+workload=matmul", "-m", "hydra.sweeper.n_trials=4", "hydra.sweeper.sampler=grid",
                         "knobs.dtype=choice(fp16,fp32)", "knobs.transpose_a=choice(true,false)",
                         "measure.steps=2", "measure.warmup_steps=1", "measure.min_time_s=1", "measure.max_steps=2",
                         "hydra.sweeper.timeout_s=600"], results, check=True)  # fmt: skip
    finally:
        logging.getLogger("optuna").removeHandler(handler)
    lines = _no_line_wraps_at_column_0(proc.stderr)
    starts = (
        "trial ",
        "    ",
        "a new study",
        "study ",
        "matmul-tiny ",
        "no baseline",
        "warning: ",
        "sweep done",
        "sweep ended",
        "cost model",
    )
    assert all(ln.startswith(starts) for ln in lines), [ln for ln in lines if not ln.startswith(starts)]
    assert any(ln.startswith("    ") for ln in lines), "some line was long enough to wrap"
    assert proc.stderr.count("a new study 'matmul-tiny'") == 1
    assert not [m for m in seen if "study" in m], seen  # "A new study created" and "Using an existing study"
    assert proc.stderr.count("no baseline trial") == 1, "said once, not once per phase of the sweep"
    assert proc.stderr.count("measure.max_steps stopped the window") == 1, "said once, not once per trial"
    bar = next(ln for ln in lines if ln.startswith("matmul-tiny "))
    assert re.search(r"study best \d\S* [kMG]?FLOP/s \(trial \d+\)", bar), bar
    assert re.search(r"\d+:\d\d/10:00$", bar), "the budget's clock"


def test_trial_lines_wrap_under_their_trial(monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    p = SweepProgress("s", 3, [("throughput", "maximize")], 0)
    knobs = {f"knobs.a_rather_long_knob_name_{c}": True for c in "abcdef"}
    p.trial_done(1, _outcome(Status.COMPLETE, {"throughput": 5.0e10, "throughput_unit": "FLOP/s"}), knobs)
    reason = "invalid:knobs.decode_device=hybrid decodes JPEGs on a GPU, but this trial runs on the CPU; " * 2
    p.trial_done(2, _outcome(Status.SKIPPED, reason=reason), knobs)
    p.trial_done(3, _outcome(Status.FAILED, reason="x" * 200), {})  # a word longer than a line
    lines = _no_line_wraps_at_column_0(capsys.readouterr().err)
    assert [ln[:9] for ln in lines if not ln.startswith("    ")] == ["trial   1", "trial   2", "trial   3"], lines
    assert "a_rather_long_knob_name_f=True" in " ".join(lines)
    assert " | a_rather_long_knob_name_a=True" in " ".join(ln.strip() for ln in lines), "the reason ends there"


def test_hanging_keeps_the_head_and_cuts_only_words_longer_than_a_line() -> None:
    from rich.text import Text

    text = hanging(Text("trial   1 complete  "), ["aaaa", "bbbb", "c" * 30], 24).plain
    assert text.splitlines() == ["trial   1 complete  aaaa", "    bbbb", "    " + "c" * 20, "    " + "c" * 10]


def test_the_bar_counts_towards_the_budget_when_it_ends_the_sweep() -> None:
    """One trial of 10 after three quarters of the budget: the bar is three quarters full, and shows the clock."""
    left = [25.0]
    p = SweepProgress("s", 10, [("throughput", "maximize")], 1, budget_s=100.0, time_left=lambda: left[0])
    task = p.progress.tasks[0]
    assert p.fraction(task) == pytest.approx(0.75)
    left[0] = 95.0
    assert p.fraction(task) == pytest.approx(0.1), "the trials, when they are further"
    clock = p.progress.columns[-1].render(task).plain
    assert clock == "0:05/1:40", clock
    plain = SweepProgress("s", 10, [("throughput", "maximize")], 4)
    assert plain.fraction(plain.progress.tasks[0]) == pytest.approx(0.4)


def test_single_run_prints_units_not_raw_numbers(capsys) -> None:
    metrics = {"throughput": 0.05872, "throughput_unit": "TFLOP/s", "peak_mem_bytes": 395239424,
               "achieved_tflops": 0.05872, "step_ms_p50": 0.07859}  # fmt: skip
    print_single(_outcome(Status.COMPLETE, metrics).to_dict())
    out = capsys.readouterr().out
    assert "395239424" not in out and "376.9 MiB" in out, out
    assert out.count("58.7 GFLOP/s") == 2 and "0.05872" not in out, out


def test_other_objectives_print_in_units_too(monkeypatch) -> None:
    """A sweep minimizing peak memory shows MiB in its trial lines and its bar, not a raw byte count."""
    import optuna

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    study = optuna.create_study(direction="minimize")
    t = study.ask()
    t.set_user_attr("peak_mem_bytes", 395239424)
    t.set_user_attr("status", "complete")
    study.tell(t, 395239424)
    p = SweepProgress("s", 3, [("peak_mem_bytes", "minimize")], 1, {}, study)
    line = p.line(0, _outcome(Status.COMPLETE, {"peak_mem_bytes": 395239424}), {}).plain
    assert "peak_mem_bytes=376.9 MiB" in line and "3.952e+08" not in line, line
    assert p.progress.tasks[0].description == "study best peak_mem_bytes=376.9 MiB (trial 0)"


def test_a_long_reason_is_printed_once(monkeypatch, capsys) -> None:
    """Every GPU-only configuration of a CPU sweep is skipped for one reason: printed in full once, then named."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    p = SweepProgress("s", 3, [("throughput", "maximize")], 0)
    reason = "invalid:knobs.decode_device=hybrid decodes JPEGs on a GPU, but this trial runs on the CPU"
    for number in (1, 2, 3):
        p.trial_done(number, _outcome(Status.SKIPPED, reason=reason), {"knobs.batch_size": number})
    p.trial_done(4, _outcome(Status.SKIPPED, reason="duplicate:1"), {})
    err = capsys.readouterr().err
    assert err.count("decodes JPEGs on a GPU") == 1, err
    assert "trial   2 skipped     (as trial 1) | batch_size=2" in err and "(as trial 1) | batch_size=3" in err, err


def test_starts_that_leave_knobs_to_the_sampler_are_one_notice(results: Path, monkeypatch) -> None:
    """Two starts whose value lies outside the space: one notice naming both, not a line per knob and start."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    proc = run_main(["+workload=matmul", "-m", "hydra.sweeper.n_trials=1", "hydra.sweeper.confirm_top_k=0",
                     "hydra.sweeper.confirm_unstable=false", "knobs.dtype=choice(fp16,fp32)", "measure.steps=2",
                     "hydra.sweeper.starts=[{knobs.dtype:bf16},{knobs.dtype:bf16}]"], results, check=True)  # fmt: skip
    _no_line_wraps_at_column_0(proc.stderr)
    text = " ".join(proc.stderr.split())
    assert text.count("not fixed by the start") == 1, proc.stderr
    assert "starts[0], starts[1]: not fixed by the start" in text and "knobs.dtype ('bf16' is outside" in text
