"""Sweep progress in the terminal: a rich progress bar (trials done / target, best so far) and one line per trial."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.progress_bar import ProgressBar
from rich.text import Text

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.study.attrs import UNIT_KEY, status_of

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


INDENT = 4  # columns a wrapped line of a trial or a notice starts at


def hanging(head: Text, words: list[str], width: int, indent: int = INDENT) -> Text:
    """``head`` then ``words`` separated by spaces, wrapped between words at ``width`` columns; every line after
    the first starts ``indent`` columns in (never at column 0, where it would read as a line of its own). A word
    longer than a line is cut at the line's end."""
    width = max(width, indent + 8)
    out = head.copy()
    col = len(out.plain.rsplit("\n", 1)[-1])
    fresh = False  # at the start of a continuation line
    for word in (w for w in words if w):
        sep = "" if fresh or col == 0 or out.plain.endswith(" ") else " "
        if not fresh and col > indent and col + len(sep) + len(word) > width:
            out.append("\n" + " " * indent)
            col, sep = indent, ""
        while col + len(sep) + len(word) > width:  # longer than a line: cut at its end
            room = width - col - len(sep)
            out.append(sep + word[:room])
            word = word[room:]
            out.append("\n" + " " * indent)
            col, sep = indent, ""
        out.append(sep + word)
        col += len(sep) + len(word)
        fresh = False
    return out


def notice(console: Console, text: str) -> None:
    """One line of words for a person, wrapped under itself (``hanging``) at the console's width."""
    console.print(hanging(Text(""), text.split(), console.width), soft_wrap=True)


class _Bar(BarColumn):
    """The bar at :meth:`SweepProgress.fraction`: towards whichever of n_trials and the budget ends the sweep."""

    def __init__(self, sweep: SweepProgress) -> None:
        super().__init__()
        self.sweep = sweep

    def render(self, task: Any) -> ProgressBar:
        return ProgressBar(total=1.0, completed=self.sweep.fraction(task), width=self.bar_width, pulse=False,
                           animation_time=task.get_time(), style=self.style, complete_style=self.complete_style,
                           finished_style=self.finished_style, pulse_style=self.pulse_style)


class _BudgetColumn(ProgressColumn):
    """``2:31/10:00``: the time spent of the budget (hydra.sweeper.timeout_s)."""

    def __init__(self, sweep: SweepProgress) -> None:
        super().__init__()
        self.sweep = sweep

    def render(self, task: Any) -> Text:
        left = self.sweep.time_left() if self.sweep.time_left is not None else None
        budget = self.sweep.budget_s or 0.0
        spent = budget - max(0.0, left) if left is not None else 0.0
        return Text(f"{_clock(spent)}/{_clock(budget)}", style="progress.elapsed")


def _clock(seconds: float) -> str:
    m, sec = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}" if m >= 60 else f"{m}:{sec:02d}"


class _Notices(logging.Handler):
    """While the sweep's console is live, the sweeper's log records (``sweeper.*``: a warm start, a baseline left
    out, a trial's warning) print through it as notices wrapped under themselves, not as logging lines that a
    terminal wraps at column 0; log files (the root logger's file handlers, which Hydra replaces at each
    in-process job) still get them."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console
        self.logger = logging.getLogger("sweeper")
        self.propagate = self.logger.propagate
        self.logger.propagate = False
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        notice(self.console, f"warning: {text}" if record.levelno >= logging.WARNING else text)
        for h in logging.getLogger().handlers:
            if isinstance(h, logging.FileHandler) and record.levelno >= h.level:
                h.handle(record)

    def detach(self) -> None:
        self.logger.removeHandler(self)
        self.logger.propagate = self.propagate


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
        if status_of(t) is not Status.COMPLETE or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        if best is None or (value > best[0] if direction == "maximize" else value < best[0]):
            best = (float(value), t.number)
    return best


class SweepProgress:
    """One line per trial on the console (number, status, the objective, the knobs that differ from the
    workload's defaults) under a bar with the study's best; Hydra's launch details go to the sweep's log file."""

    def __init__(self, study: str, target: int, objectives: list[tuple[str, str]], done: int,
                 baseline: dict[str, Any] | None = None, optuna_study: Any = None, budget_s: float | None = None,
                 time_left: Callable[[], float | None] | None = None) -> None:
        self.console = Console(stderr=True, highlight=False)  # lines wrap between words, at the console's width
        self.objectives = objectives
        self.baseline = dict(baseline or {})
        self.trial_seconds = 0.0
        self.pruned_walls: list[float] = []
        self.complete_walls: list[float] = []
        self.counts: dict[Status, int] = {}
        self.reasons: dict[str, int] = {}  # a trial's reason -> the first trial printed with it
        self.budget_s, self.time_left = (float(budget_s), time_left) if budget_s and time_left else (None, None)
        clock = _BudgetColumn(self) if self.budget_s else TimeElapsedColumn()
        self.progress = Progress(TextColumn(f"[bold]{escape(study)}"), _Bar(self), MofNCompleteColumn(),
                                 TextColumn("{task.description}"), clock, console=self.console, transient=False)
        self.task = self.progress.add_task("", total=target, completed=done, study=study)
        if optuna_study is not None:
            self._show_best(optuna_study)

    def __enter__(self) -> "SweepProgress":
        self.progress.__enter__()
        self._notices = _Notices(self.console)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._notices.detach()
        self.progress.__exit__(*exc)

    def fraction(self, task: Any) -> float:
        """How far the sweep is towards what ends it: its trials towards their target, or the time towards the
        budget (hydra.sweeper.timeout_s), whichever is further."""
        trials = task.completed / task.total if task.total else 0.0
        left = self.time_left() if self.time_left is not None else None
        spent = 1.0 - max(0.0, left) / self.budget_s if left is not None and self.budget_s else 0.0
        return min(1.0, max(trials, spent))

    def extend(self, n: int) -> None:
        """More trials joined the sweep (re-measurements of the best configurations)."""
        total = self.progress.tasks[0].total
        if total is not None:  # None: the budget is the only limit
            self.progress.update(self.task, total=total + n)

    @classmethod
    def of(cls, plan: Any, target: int, done: int, budget_s: float | None,
           time_left: Callable[[], float | None]) -> SweepProgress:
        """The progress of the sweep ``plan`` (a ``SweepPlan``), having said that its study opened."""
        progress = cls(plan.study_name, target, plan.objectives, done, plan.defaults, plan.study, budget_s, time_left)
        progress.opened(plan.created, done)
        return progress

    def opened(self, created: bool, done: int) -> None:
        """The one notice of the study's opening: new, or continued with what it holds."""
        study = self.progress.tasks[0].fields.get("study", "")
        self.note(f"a new study {study!r}" if created else f"study {study!r} continues: {done} trials measured")

    def note(self, text: str) -> None:
        notice(self.console, text)

    def line(self, number: int, outcome: TrialOutcome, values: dict[str, Any]) -> Text:
        """``trial   7 complete     14.3 GFLOP/s  1.2 s  dtype=fp32 transpose_a=True``, as rich ``Text``: printed, it
        wraps between words at the console's width (a word is cut only when longer than a line)."""
        metric = self.objectives[0][0]
        value = outcome.metrics.get(metric)
        if outcome.status is Status.COMPLETE:
            unit = outcome.metrics.get(UNIT_KEY, "")
            shown = si(value, unit) if metric == "throughput" else f"{metric}={metric_text(metric, value, unit)}"
            detail = shown + f"  {outcome.wall_s:.1f} s"
        elif outcome.kind is Reason.DUPLICATE and ", which " in outcome.message:  # a twin that failed here
            which = outcome.message.partition(", which ")[2].partition(" in this sweep")[0]
            detail = f"same as trial {outcome.detail}, which {which} (not run again)"
        elif outcome.kind is Reason.DUPLICATE:
            detail = f"same as trial {outcome.detail} (not measured again)"
        elif outcome.kind is Reason.FAILS:  # why, once: the value, the failures that blame it
            first = self.reasons.setdefault(outcome.reason, number)
            detail = outcome.message if first == number else f"{outcome.detail} fails (as trial {first})"
        elif outcome.kind is Reason.INTERRUPTED:  # "interrupted interrupted": say by what
            detail = "(Ctrl-C, SIGTERM or its sweeper's end)"
        elif outcome.kind is Reason.PRUNED:  # "pruned pruned": by what
            detail = "(stopped early by the pruner)"
        elif outcome.reason in self.reasons and len(outcome.reason) > 40:  # a long reason is printed once
            detail = f"(as trial {self.reasons[outcome.reason]})"
        else:
            detail = outcome.reason or ""
            self.reasons.setdefault(detail, number)
        changed = {k: v for k, v in values.items()
                   if v is not None and (k not in self.baseline or v != self.baseline[k])}  # inactive: None
        knobs = [f"{_short(k)}={_fmt(v)}" for k, v in changed.items()] if changed else ["(the defaults)"]
        text = Text(f"trial {number:>3} ")
        text.append(f"{outcome.status.value:<11}", style=_STYLE[outcome.status])  # "interrupted" fits
        text.append(" ")
        if outcome.status is Status.COMPLETE and len(text) + len(detail) + 2 <= self.console.width:
            text.append(detail + "  ")  # the throughput column keeps its alignment
            return hanging(text, knobs, self.console.width)
        return hanging(text, [*detail.split(" "), "|", *knobs], self.console.width)  # | : the reason ends

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
        if outcome.kind not in (Reason.DUPLICATE, Reason.FAILS):  # the bar counts trials toward n_trials
            self.progress.advance(self.task)

    def _show_best(self, study: Any) -> None:
        best = study_best(study, self.objectives[0])
        if best is not None:
            metric = self.objectives[0][0]
            if metric == "throughput":  # in the trial lines' units
                trials = study.get_trials(deepcopy=False)
                unit = trials[best[1]].user_attrs.get(UNIT_KEY) if best[1] < len(trials) else None
                shown = si(best[0], str(unit or "")).strip()
            else:
                shown = f"{metric}={metric_text(metric, best[0])}"
            self.progress.update(self.task, description=f"study best {shown} (trial {best[1]})")

    def summary(self, study: Any) -> None:
        parts = ", ".join(f"{n} {s.value}" for s, n in self.counts.items())
        saved = ""
        if self.pruned_walls and self.complete_walls:
            full = sorted(self.complete_walls)[len(self.complete_walls) // 2]
            seconds = sum(max(0.0, full - w) for w in self.pruned_walls)
            saved = f"; pruning saved ~{seconds:.1f} s (median full trial {full:.1f} s)"
        notice(self.console, f"sweep done: {parts or 'no new trials'}; trials' own wall time "
                             f"{self.trial_seconds:.1f} s{saved}; study {study.study_name!r} has "
                             f"{len(study.get_trials(deepcopy=False))} trials")


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
    from sweeper.sweep.config.secrets import scrub

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

    from sweeper.sweep.config import schema
    from sweeper.sweep.config.trial_config import as_dict as plain
    from sweeper.sweep.config.trial_config import trial_config
    from sweeper.sweep.run.job import device_check
    from sweeper.trial import gpu

    try:
        info = gpu.device_info()
        tcfg = trial_config(plain(cfg), info, list(HydraConfig.get().overrides.task))
        schema.validate(tcfg)
        if device_check(tcfg, info):
            return  # refused: the run says why, alone (one line, exit 2)
    except Exception:  # noqa: BLE001 - bad input is reported by the run itself, with its key, alone
        return
    knobs = " ".join(f"{k}={_fmt(v)}" for k, v in (tcfg.get("knobs") or {}).items())
    console = Console(stderr=True, highlight=False)
    notice(console, f"running {tcfg['workload']['name']} on {tcfg['device']}"
                    f"{' (preset ' + tcfg['preset'] + ')' if tcfg['preset'] else ''}: {knobs}")
    notice(console, f"row -> {Path(tcfg['results_dir']) / 'trials'}/, log -> {HydraConfig.get().runtime.output_dir}/")


def print_single(result: dict[str, Any]) -> None:
    """The result of a single run (no sweep), as a small table on stdout."""
    from rich.table import Table

    outcome = TrialOutcome.from_dict(result)
    m = outcome.metrics
    table = Table(title=f"trial: {outcome.status.value}")  # the reason below, whole: a title is cut to the table
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("throughput", "step_ms_p50", "step_ms_p10", "step_ms_p90", "step_cv",
                "peak_mem_bytes", "data_wait_frac", "gpu_util_mean", "achieved_tflops", "mfu", "first_step_s",
                "setup_s", "compile_s"):
        if key in m:
            table.add_row(key, metric_text(key, m[key], m.get("throughput_unit", "")))
    console = Console()
    if table.row_count:
        console.print(table)
    else:
        console.print(Text(f"trial: {outcome.status.value}", style="bold"))
    if outcome.reason:
        console.print(Text(f"reason: {outcome.reason}"))
    if outcome.message:
        console.print(Text(outcome.message))


def metric_text(key: str, value: Any, unit: str = "") -> str:
    """A metric for a person: NaN is blank, except where a word says why (no peak FLOP/s, no NVML sample);
    throughput and FLOP/s in the trial lines' units (``58.7 GFLOP/s``), memory in MiB (as the report)."""
    if isinstance(value, float) and math.isnan(value):
        return {"mfu": "n/a (no peak FLOP/s for this device)", "gpu_util_mean": "n/a (no GPU sampled)",
                "achieved_tflops": "n/a"}.get(key, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key == "throughput":
            return si(value, unit).strip()
        if key == "achieved_tflops":
            return si(value, "TFLOP/s").strip()
        if key.endswith("_bytes"):
            return f"{value / 2**20:,.1f} MiB"
    return _fmt(value)
