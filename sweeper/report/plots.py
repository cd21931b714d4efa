"""Plotly figure specs (plain ``{"data", "layout"}`` dicts, drawn by the plotly.js embedded in the HTML).

Every string that comes from a config, a study name or a host goes through ``html.escape`` here: plotly.js
reads a small HTML subset in labels and decodes entities, so escaped text shows as typed and cannot add markup.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd

from sweeper.report.analysis import Analysis

_MIB = 1024 * 1024
_BLUE, _ORANGE, _GREY, _GREEN, _RED = "#1f77b4", "#ff7f0e", "#9aa0a6", "#2ca02c", "#d62728"


def esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _floats(values: Any) -> list[float | None]:
    arr = np.asarray(values, dtype=float)
    return [None if not np.isfinite(v) else float(v) for v in arr]


def _layout(title: str, x: str, y: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": esc(title)},
        "xaxis": {"title": {"text": esc(x)}, "automargin": True},
        "yaxis": {"title": {"text": esc(y)}, "automargin": True},
        "height": 420,
        "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        "template": "plotly_white",
        **extra,
    }


def _points(name: str, sub: pd.DataFrame, mem: Any, hover: list[str], color: str) -> dict[str, Any]:
    """A scatter trace of configurations: throughput over peak memory (MiB), 95 % intervals as error bars."""
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": _floats(mem),
        "y": _floats(sub["value"]),
        "text": hover,
        "hoverinfo": "text+x+y",
        "marker": {"color": color, "size": 9},
        "error_y": {
            "type": "data",
            "array": _floats(sub["hi"] - sub["value"]),
            "arrayminus": _floats(sub["value"] - sub["lo"]),
            "thickness": 1,
            "width": 0,
            "color": color,
        },
    }


def throughput_vs_memory(a: Analysis) -> dict[str, Any]:
    """Scatter of configurations (error bars: 95 % intervals) with the Pareto front drawn through its points."""
    c = a.configs
    mem = c["peak_mem_bytes"].to_numpy(float) / _MIB
    hover = [esc(f"#{r} {lab}") for r, lab in zip(c["rank"], c["label"])]
    pareto = c["pareto"].to_numpy(bool)
    data = [
        _points("configuration", c[~pareto], mem[~pareto], [h for h, m in zip(hover, pareto) if not m], _GREY),
        _points("Pareto front", c[pareto], mem[pareto], [h for h, m in zip(hover, pareto) if m], _BLUE),
    ]
    front = c[c["pareto"]].assign(_mem=mem[c["pareto"].to_numpy(bool)]).sort_values("_mem")
    data.append(
        {
            "type": "scatter",
            "mode": "lines",
            "name": "front",
            "x": _floats(front["_mem"]),
            "y": _floats(front["value"]),
            "line": {"color": _BLUE, "dash": "dot"},
            "hoverinfo": "skip",
            "showlegend": False,
        }
    )
    if c["is_baseline"].any():
        b = c[c["is_baseline"]]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "baseline",
                "x": _floats(b["peak_mem_bytes"] / _MIB),
                "y": _floats(b["value"]),
                "marker": {"symbol": "star", "size": 16, "color": _ORANGE},
                "hoverinfo": "name+x+y",
            }
        )
    return {
        "data": data,
        "layout": _layout(f"{a.title}: throughput vs peak memory", "peak memory (MiB)", f"throughput ({a.unit})"),
    }


def importance_bars(a: Analysis) -> dict[str, Any]:
    data = []
    for metric, color in (("throughput", _BLUE), ("peak_mem_bytes", _ORANGE)):
        imp = a.importance.get(metric)
        if not imp:
            continue
        knobs = sorted(imp, key=imp.get)
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": esc(metric),
                "y": [esc(k) for k in knobs],
                "x": [imp[k] for k in knobs],
                "marker": {"color": color},
            }
        )
    return {
        "data": data,
        "layout": _layout(f"{a.title}: knob importance", "importance (sums to 1 per metric)", "knob", barmode="group"),
    }


def marginal(a: Analysis, knob: str) -> dict[str, Any]:
    m = a.marginals[a.marginals["knob"] == knob]
    values = [esc("(inactive)" if v == "null" else v) for v in m["value"]]
    data = [
        {
            "type": "bar",
            "name": "mean of configurations",
            "x": values,
            "y": _floats(m["mean"]),
            "marker": {"color": _BLUE},
        },
        {
            "type": "scatter",
            "mode": "markers",
            "name": "best configuration",
            "x": values,
            "y": _floats(m["best"]),
            "marker": {"color": _ORANGE, "size": 11, "symbol": "diamond"},
        },
    ]
    layout = _layout(f"{a.title}: throughput per value of {knob}", knob, f"throughput ({a.unit})")
    layout["xaxis"]["type"] = "category"
    return {"data": data, "layout": layout}


def history(a: Analysis) -> dict[str, Any]:
    h = a.history
    data = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "trial",
            "x": _floats(h["trial"]),
            "y": _floats(h["value"]),
            "marker": {"color": _GREY, "size": 7},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "best so far",
            "x": _floats(h["trial"]),
            "y": _floats(h["best"]),
            "line": {"color": _GREEN, "shape": "hv"},
        },
    ]
    return {"data": data, "layout": _layout(f"{a.title}: optimization history", "trial", f"throughput ({a.unit})")}


def trend(table: pd.DataFrame, unit: str) -> dict[str, Any]:
    """Best throughput per night (study), one line per workload, error bars: the best's 95 % interval
    (``table``: workload, night, best, lo, hi)."""
    data = []
    for workload, rows in table.groupby("workload", sort=True):
        best, lo, hi = (rows[c].to_numpy(float) for c in ("best", "lo", "hi"))
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": esc(workload),
                "x": [esc(n) for n in rows["night"]],
                "y": _floats(best),
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": _floats(hi - best),
                    "arrayminus": _floats(best - lo),
                },
            }
        )
    layout = _layout(
        "best throughput per night", "night (study, in the order they started)", f"best throughput ({unit})"
    )
    layout["xaxis"]["type"] = "category"
    return {"data": data, "layout": layout}


def pair_scatter(common: pd.DataFrame, ref: str, other: str, unit: str, title: str) -> dict[str, Any]:
    """Throughput of the common configurations on ``ref`` (x) vs ``other`` (y), with the y = x line."""
    x, y = common[f"value@{ref}"].to_numpy(float), common[f"value@{other}"].to_numpy(float)
    top = float(np.nanmax(np.concatenate([x, y]))) if len(x) else 1.0
    data = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "configuration",
            "x": _floats(x),
            "y": _floats(y),
            "text": [esc(v) for v in common["label"]],
            "hoverinfo": "text+x+y",
            "marker": {"color": _BLUE, "size": 9},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "same throughput",
            "x": [0, top],
            "y": [0, top],
            "line": {"color": _GREY, "dash": "dot"},
            "hoverinfo": "skip",
        },
    ]
    return {"data": data, "layout": _layout(title, f"{ref} ({unit})", f"{other} ({unit})")}
