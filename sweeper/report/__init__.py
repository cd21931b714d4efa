"""The report: read the Parquet dataset, rank configurations with noise-aware ties, mark the Pareto front, explain
what matters (importance, marginal effects, diagnosis), compare fingerprints and nights, render to the terminal,
Markdown and one self-contained HTML file.

Runs in the report process (``python -m sweeper.report``, or a notebook) and reads only Parquet, through
``sweeper.results`` (the one ``sweeper`` package it imports): results copied from another machine, with no GPU
and no Optuna storage, work.
Modules, one concern each: ``data`` (reading, configuration identity), ``stats`` (intervals, ties, Pareto),
``baseline``, ``diagnose``, ``importance``, ``analysis`` (one study), ``compare``, ``nightly``, ``blocks`` /
``sections`` / ``build`` (the report as blocks), ``render`` (terminal, Markdown), ``plots`` and ``html``.
"""

from sweeper.report.analysis import Analysis, analyse
from sweeper.report.build import Report, build
from sweeper.report.data import load, objectives_of
from sweeper.report.stats import pareto_mask, tie_ranks

__all__ = ["Analysis", "Report", "analyse", "build", "load", "objectives_of", "pareto_mask", "tie_ranks"]
