"""Sweep progress in the terminal: a rich progress bar (trials done / target, best so far) and one line per trial."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from sweeper.results.outcome import Status, TrialOutcome

_STYLE = {Status.COMPLETE: "green", Status.FAILED: "red", Status.INFEASIBLE: "yellow", Status.PRUNED: "cyan",
          Status.SKIPPED: "dim", Status.INTERRUPTED: "magenta"}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


_PREFIXES = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))


def si(value: Any, unit: str = "") -> str:
    """``  498 MFLOP/s``, `` 1.29 ksamples/s``: 3 significant digits, an SI prefix, the number right-aligned in
    7 characters (number and prefix) so values of one unit line up one below the other. A unit that carries a
    prefix (``TFLOP/s``) is rescaled; a value that is no finite number is printed as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"{value} {unit}".strip()
    scale, base = 1.0, unit
    if len(unit) > 1 and unit[1].isupper() and unit[0] in dict(_PREFIXES):  # TFLOP/s, GB/s (not MiB, not s)
        scale, base = dict(_PREFIXES)[unit[0]], unit[1:]
    x = float(value) * scale
    prefix, div = next(((p, d) for p, d in _PREFIXES if abs(x) >= d), ("", 1.0))
    mantissa = f"{x / div:#.3g}".rstrip(".")
    if float(mantissa) >= 1000 and prefix != "P":  # 999.7 rounds up to the next prefix
        prefix, div = _PREFIXES[[p for p, _ in _PREFIXES].index(prefix) - 1]
        mantissa = f"{x / div:#.3g}".rstrip(".")
    return f"{mantissa + ' ' + prefix:>7}{base}"


def _short(key: str) -> str:
    return key.removeprefix("knobs.")


def study_best(study: Any, objective: tuple[str, str]) -> tuple[float, int] | None:
    """The study's best measured value of the first objective and its trial (every process's trials, all
    commands'), or None. Duplicates reuse another trial's result, so only measured trials are considered."""
    from optuna.trial import TrialState

    metric, direction = objective
    best: tuple[float, int] | None = None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        value = t.user_attrs.get(metric)
        if t.user_attrs.get("status") != "complete" or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        if best is None or (value > best[0] if direction == "maximize" else value < best[0]):
            best = (float(value), t.number)
    return best


class SweepProgress:
    """One line per trial on the console (number, status, the objective, the knobs that differ from the
    workload's defaults) under a bar with the study's best; Hydra's launch details go to the sweep's log file."""

    def __init__(self, study: str, target: int, objectives: list[tuple[str, str]], done: int,
                 baseline: dict[str, Any] | None = None, optuna_study: Any = None) -> None:
        self.console = Console(stderr=True, highlight=False)  # lines wrap between words, at the console's width
        self.objectives = objectives
        self.baseline = dict(baseline or {})
        self.trial_seconds = 0.0
        self.pruned_walls: list[float] = []
        self.complete_walls: list[float] = []
        self.counts: dict[Status, int] = {}
        self.progress = Progress(TextColumn(f"[bold]{escape(study)}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console,
                                 transient=False)
        self.task = self.progress.add_task("", total=target, completed=done)
        if optuna_study is not None:
            self._show_best(optuna_study)

    def __enter__(self) -> "SweepProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def extend(self, n: int) -> None:
        """More trials joined the sweep (re-measurements of the best configurations)."""
        total = self.progress.tasks[0].total
        if total is not None:  # None: the budget is the only limit
            self.progress.update(self.task, total=total + n)

    def note(self, text: str) -> None:
        self.console.print(Text(text))

    def line(self, number: int, outcome: TrialOutcome, values: dict[str, Any]) -> Text:
        """``trial   7 complete     14.3 GFLOP/s  1.2 s  dtype=fp32 transpose_a=True``, as rich ``Text``: printed, it
        wraps between words at the console's width (a word is cut only when longer than a line)."""
        metric = self.objectives[0][0]
        value = outcome.metrics.get(metric)
        if outcome.status is Status.COMPLETE:
            unit = outcome.metrics.get("throughput_unit", "") if metric == "throughput" else ""
            shown = si(value, unit) if metric == "throughput" else f"{metric}={_fmt(value)}"
            detail = shown + f"  {outcome.wall_s:.1f} s"
        elif outcome.reason.startswith("duplicate:"):
            detail = f"same as trial {outcome.reason.split(':', 1)[1]} (not measured again)"
        else:
            detail = outcome.reason or ""
        changed = {k: v for k, v in values.items()
                   if v is not None and (k not in self.baseline or v != self.baseline[k])}  # inactive: None
        knobs = " ".join(f"{_short(k)}={_fmt(v)}" for k, v in changed.items()) if changed else "(the defaults)"
        text = Text(f"trial {number:>3} ", overflow="fold")
        text.append(f"{outcome.status.value:<11}", style=_STYLE[outcome.status])  # "interrupted" fits
        text.append(" ")
        text.append(f"{detail}  {knobs}")
        return text

    def trial_done(self, number: int, outcome: TrialOutcome, values: dict[str, Any], study: Any = None) -> None:
        self.counts[outcome.status] = self.counts.get(outcome.status, 0) + 1
        if outcome.status is Status.PRUNED:
            self.pruned_walls.append(outcome.wall_s)
        elif outcome.status is Status.COMPLETE:
            self.complete_walls.append(outcome.wall_s)
        self.trial_seconds += outcome.wall_s
        self.progress.console.print(self.line(number, outcome, values), soft_wrap=False)
        if study is not None:
            self._show_best(study)
        if not outcome.reason.startswith("duplicate:"):  # the bar counts trials toward n_trials
            self.progress.advance(self.task)

    def _show_best(self, study: Any) -> None:
        best = study_best(study, self.objectives[0])
        if best is not None:
            self.progress.update(self.task, description=f"study best {self.objectives[0][0]}={_fmt(best[0])} "
                                                        f"(trial {best[1]})")

    def summary(self, study: Any) -> None:
        parts = ", ".join(f"{n} {s.value}" for s, n in self.counts.items())
        saved = ""
        if self.pruned_walls and self.complete_walls:
            full = sorted(self.complete_walls)[len(self.complete_walls) // 2]
            seconds = sum(max(0.0, full - w) for w in self.pruned_walls)
            saved = f"; pruning saved ~{seconds:.1f} s (median full trial {full:.1f} s)"
        self.console.print(f"sweep done: {parts or 'no new trials'}; trials' own wall time {self.trial_seconds:.1f} s"
                           f"{saved}; study {escape(repr(study.study_name))} has {len(study.trials)} trials")


# Loggers of Hydra's launchers: each logs every job's full override line (~900 characters with the trial's context).
_LAUNCHER_LOGGERS = ("hydra._internal.core_plugins", "hydra_plugins.hydra_joblib_launcher",
                     "hydra_plugins.hydra_submitit_launcher", "hydra_plugins.hydra_ray_launcher")


def elide_context(text: str) -> str:
    """``trial.context=b64:<5 KB>`` (the sweep's context, which Hydra logs with every job) as
    ``trial.context=b64:…(5123 chars)``: the log keeps one readable line per job."""
    import re

    return re.sub(r"(trial\.context=b64:)([A-Za-z0-9+/=_-]{16,})",
                  lambda m: f"{m.group(1)}…({len(m.group(2))} chars)", text)


def _mask_passwords(record: Any) -> bool:
    """A URL's password (``postgresql://user:secret@host``) never reaches the log file: ``user:***@``."""
    from sweeper.sweep.secrets import scrub

    record.msg = elide_context(scrub(record.getMessage()))
    record.args = None
    return True


def log_launches_to(path: Path) -> None:
    """Send the launchers' per-job lines to ``path`` (the sweep's log file) instead of the console."""
    import logging

    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    handler.addFilter(_mask_passwords)
    for name in _LAUNCHER_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [h for h in logger.handlers if not isinstance(h, logging.FileHandler)] + [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False


def announce_single(cfg: Any) -> None:
    """Before a single run (no ``-m``): what runs, with which knobs, and where its row and log go (stderr)."""
    from hydra.core.hydra_config import HydraConfig

    from sweeper.sweep import schema
    from sweeper.sweep.config import as_dict as plain
    from sweeper.sweep.config import trial_config
    from sweeper.trial import gpu

    try:
        tcfg = trial_config(plain(cfg), gpu.device_info(), list(HydraConfig.get().overrides.task))
        schema.validate(tcfg)
    except Exception:  # noqa: BLE001 - bad input is reported by the run itself, with its key, alone
        return
    knobs = " ".join(f"{k}={_fmt(v)}" for k, v in (tcfg.get("knobs") or {}).items())
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(f"running {escape(tcfg['workload']['name'])} on {tcfg['device']}"
                  f"{' (preset ' + tcfg['preset'] + ')' if tcfg['preset'] else ''}: {escape(knobs)}")
    console.print(f"row -> {escape(str(Path(tcfg['results_dir']) / 'trials'))}/, "
                  f"log -> {escape(HydraConfig.get().runtime.output_dir)}/")


def print_single(result: dict[str, Any]) -> None:
    """The result of a single run (no sweep), as a small table on stdout."""
    from rich.table import Table

    outcome = TrialOutcome.from_dict(result)
    m = outcome.metrics
    table = Table(title=f"trial: {outcome.status.value}")  # the reason below, whole: a title is cut to the table
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("throughput", "throughput_unit", "step_ms_p50", "step_ms_p10", "step_ms_p90", "step_cv",
                "peak_mem_bytes", "data_wait_frac", "gpu_util_mean", "achieved_tflops", "mfu", "first_step_s",
                "setup_s", "compile_s"):
        if key in m:
            table.add_row(key, metric_text(key, m[key]))
    console = Console()
    if table.row_count:
        console.print(table)
    else:
        console.print(Text(f"trial: {outcome.status.value}", style="bold"))
    if outcome.reason:
        console.print(Text(f"reason: {outcome.reason}"))
    if outcome.message:
        console.print(Text(outcome.message))


def metric_text(key: str, value: Any) -> str:
    """A metric for a person: NaN is blank, except where a word says why (no peak FLOP/s, no NVML sample)."""
    if isinstance(value, float) and math.isnan(value):
        return {"mfu": "n/a (no peak FLOP/s for this device)", "gpu_util_mean": "n/a (no GPU sampled)",
                "achieved_tflops": "n/a"}.get(key, "")
    return _fmt(value)
