"""Sweep progress in the terminal: a rich progress bar (trials done / target, best so far) and one line per trial."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sweeper.results.outcome import Status, TrialOutcome

_STYLE = {Status.COMPLETE: "green", Status.FAILED: "red", Status.INFEASIBLE: "yellow", Status.PRUNED: "cyan",
          Status.SKIPPED: "dim"}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class SweepProgress:
    def __init__(self, study: str, target: int, objectives: list[tuple[str, str]], done: int) -> None:
        self.console = Console(stderr=True)
        self.objectives = objectives
        self.best: tuple[float, int] | None = None
        self.trial_seconds = 0.0
        self.pruned_walls: list[float] = []
        self.complete_walls: list[float] = []
        self.counts: dict[Status, int] = {}
        self.progress = Progress(TextColumn(f"[bold]{study}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console,
                                 transient=False)
        self.task = self.progress.add_task("", total=target, completed=done)

    def __enter__(self) -> "SweepProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def extend(self, n: int) -> None:
        """More trials joined the sweep (re-measurements of the best configurations)."""
        self.progress.update(self.task, total=self.progress.tasks[0].total + n)

    def note(self, text: str) -> None:
        self.console.print(text)

    def trial_done(self, number: int, outcome: TrialOutcome, values: dict[str, Any]) -> None:
        self.counts[outcome.status] = self.counts.get(outcome.status, 0) + 1
        if outcome.status is Status.PRUNED:
            self.pruned_walls.append(outcome.wall_s)
        elif outcome.status is Status.COMPLETE:
            self.complete_walls.append(outcome.wall_s)
        self.trial_seconds += outcome.wall_s
        metric, direction = self.objectives[0]
        value = outcome.metrics.get(metric)
        if outcome.status is Status.COMPLETE and isinstance(value, (int, float)) and math.isfinite(value):
            signed = value if direction == "maximize" else -value
            if self.best is None or signed > self.best[0]:
                self.best = (signed, number)
        knobs = " ".join(f"{k.split('.')[-1]}={_fmt(v)}" for k, v in values.items())
        unit = outcome.metrics.get("throughput_unit", "")
        shown = f"{metric}={_fmt(value)}" + (f" {unit}" if metric == "throughput" and unit else "")
        detail = shown if outcome.status is Status.COMPLETE else outcome.reason
        self.progress.console.print(
            f"trial {number:>4} [{_STYLE[outcome.status]}]{outcome.status.value:<10}[/] {escape(detail)}  {escape(knobs)}",
            highlight=False, markup=True)
        if self.best is not None:
            best = self.best[0] if direction == "maximize" else -self.best[0]
            self.progress.update(self.task, description=f"best {metric}={_fmt(best)} (trial {self.best[1]})")
        self.progress.advance(self.task)

    def summary(self, study: Any) -> None:
        parts = ", ".join(f"{n} {s.value}" for s, n in self.counts.items())
        saved = ""
        if self.pruned_walls and self.complete_walls:
            full = sorted(self.complete_walls)[len(self.complete_walls) // 2]
            seconds = sum(max(0.0, full - w) for w in self.pruned_walls)
            saved = f"; pruning saved ~{seconds:.1f} s (median full trial {full:.1f} s)"
        self.console.print(f"sweep done: {parts or 'no new trials'}; trials' own wall time {self.trial_seconds:.1f} s"
                           f"{saved}; study {study.study_name!r} has {len(study.trials)} trials")


def print_single(result: dict[str, Any]) -> None:
    """The result of a single run (no sweep), as a small table on stdout."""
    from rich.table import Table

    outcome = TrialOutcome.from_dict(result)
    m = outcome.metrics
    table = Table(title=f"trial: {outcome.status.value}" + (f" ({outcome.reason})" if outcome.reason else ""))
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("throughput", "throughput_unit", "step_ms_p50", "step_ms_p10", "step_ms_p90", "step_cv",
                "peak_mem_bytes", "data_wait_frac", "gpu_util_mean", "achieved_tflops", "mfu", "first_step_s",
                "setup_s", "compile_s"):
        if key in m:
            table.add_row(key, _fmt(m[key]))
    console = Console()
    console.print(table)
    if outcome.message:
        console.print(escape(outcome.message))
