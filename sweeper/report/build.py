"""Assemble the whole report: nightly comparison, fingerprint comparison, then one section per study."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pandas as pd

from sweeper.report.analysis import Analysis, analyse, single_run_rows
from sweeper.report.blocks import Block, Code, Heading, Para
from sweeper.report.compare import compare_blocks
from sweeper.report.nightly import has_nights, nightly, trend_blocks
from sweeper.report.recipe import recipe_lines, recipe_of
from sweeper.report.sections import study_blocks, summary_blocks

RECIPE_TITLE = "Recipe: the configuration to adopt (command and code lines: report.md, report.html, recipe.json)"


@dataclass
class Report:
    blocks: list[Block]
    analyses: list[Analysis] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    not_gated: list[str] = field(default_factory=list)  # workloads the nightly gate could not compare


def build(
    df: pd.DataFrame,
    *,
    source: str = "",
    studies: list[str] | None = None,
    compare: str | None = None,
    baseline: str | None = None,
    threshold: float | None = None,
    limit: int = 500,
    evaluator: str = "auto",
    with_plots: bool = True,
) -> Report:
    """``df``: every row of the selected workload(s). ``studies`` narrows the study sections (and tonight's study
    for ``baseline``); the nightly comparison needs the baseline rows too, so ``df`` is not pre-filtered.
    Tables keep at most ``limit`` rows (the renderers show fewer)."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    selected = df[df["study"].astype(str).isin(studies)] if studies else df
    # the header counts the rows the report is about; --baseline also reads the baseline night's rows
    counted = df if baseline else selected
    blocks: list[Block] = [
        Heading("Sweep report", 1),
        Para(f"{len(counted)} trial rows from {source or 'the results'}; generated {now}.", "note"),
    ]
    report = Report(blocks)
    if baseline:
        n = nightly(df, baseline, studies, threshold, limit, with_plots)
        blocks += n.blocks
        report.regressions, report.not_gated = n.regressions, n.not_gated
    elif has_nights(sweeps := selected[~single_run_rows(selected)]):  # single runs are no night; --study narrows
        blocks += [Heading("Trend over nights", 2), *trend_blocks(sweeps, with_plots)]
    if compare:
        blocks += compare_blocks(selected, compare, limit, with_plots)
    for _, rows in selected.groupby(["workload", "study"], sort=True):
        a = analyse(rows.reset_index(drop=True), evaluator)
        report.analyses.append(a)
        blocks += study_blocks(a, limit, with_plots)
        recipe = recipe_of(a, rows)
        if recipe is not None:
            blocks.append(Code(RECIPE_TITLE, recipe_lines(recipe)))
    studies_only = [a for a in report.analyses if not a.single_runs]  # single runs are not a study
    if len(studies_only) > 1:  # a long page: what it holds, first
        blocks[2:2] = summary_blocks(studies_only)
    return report
