"""Render a ranked table to the terminal (rich) and to Markdown."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from sweeper.report import knob_columns, summarize_status

_MIB = 1024 * 1024


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def table_rows(ranked: pd.DataFrame, limit: int) -> tuple[list[str], list[list[str]]]:
    """Header and string cells: rank, trial, throughput, peak memory, diagnosis metrics, knobs."""
    knobs = knob_columns(ranked)
    unit = next(iter(ranked["throughput_unit"].dropna()), "") if "throughput_unit" in ranked else ""
    header = ["#", "study/trial", f"throughput ({unit})", "peak mem (MiB)", "mem rank", "pareto", "step p50 (ms)",
              "cv", "data wait", "gpu util", "mfu"] + [k.removeprefix("knob.") for k in knobs]
    rows = []
    for _, r in ranked.head(limit).iterrows():
        rows.append([
            str(r["rank_throughput"]), f"{r['study']}/{r['trial'] if pd.notna(r['trial']) else '-'}",
            _fmt(r["throughput"]), _fmt(r["peak_mem_bytes"] / _MIB if pd.notna(r["peak_mem_bytes"]) else None),
            str(r["rank_memory"]), "*" if r["pareto"] else "",
            _fmt(r.get("step_ms_p50")), _fmt(r.get("step_cv")), _fmt(r.get("data_wait_frac")),
            _fmt(r.get("gpu_util_mean")), _fmt(r.get("mfu")),
        ] + [_fmt(r[k]) for k in knobs])
    return header, rows


def to_terminal(ranked: pd.DataFrame, all_rows: pd.DataFrame, title: str, limit: int = 20,
                console: Console | None = None) -> None:
    console = console or Console()
    header, rows = table_rows(ranked, limit)
    table = Table(title=title, show_lines=False)
    for i, h in enumerate(header):
        table.add_column(h, justify="right" if 1 < i < 11 else "left", overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print("status: " + ", ".join(f"{k} {v}" for k, v in summarize_status(all_rows).items()))


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(ranked: pd.DataFrame, all_rows: pd.DataFrame, title: str, limit: int = 50) -> str:
    header, rows = table_rows(ranked, limit)
    lines = [f"# {_md_escape(title)}", ""]
    lines.append("Status counts: " + ", ".join(f"{k} {v}" for k, v in summarize_status(all_rows).items()))
    lines.append("")
    if ranked.empty:
        lines.append("No completed trials to rank.")
        return "\n".join(lines) + "\n"
    lines.append("Ranked by throughput (1 = fastest); `pareto` marks the throughput / peak-memory front.")
    lines.append("")
    lines.append("| " + " | ".join(_md_escape(h) for h in header) + " |")
    lines.append("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        lines.append("| " + " | ".join(_md_escape(c) for c in row) + " |")
    failed = all_rows[all_rows["status"].isin(["failed", "infeasible"])]
    if not failed.empty:
        lines += ["", "## Failed and infeasible trials", "", "| study/trial | status | reason |", "|---|---|---|"]
        for _, r in failed.iterrows():
            lines.append(f"| {_md_escape(str(r['study']))}/{r['trial']} | {r['status']} | {_md_escape(str(r['reason']))} |")
    return "\n".join(lines) + "\n"
