"""Why the GPU idles: the profiled baseline and best of a study side by side, from their rows' ``prof_*`` columns.

A trial run with ``measure.profile_steps`` > 0 records where the device's time went (``sweeper.trial.trace_analysis``
defines each column). ``sweeper.report.profiled`` picks each configuration's latest profile and names what limits
it (the threshold rules of ``diagnose`` remain the fallback); this module draws the section: one sentence on the
largest change, a compact table, a stacked bar of the window, and the trace files to open in Perfetto. Studies
without profiles get no section.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from sweeper.report.blocks import Block, Heading, Para, Plot, Table, num, pct
from sweeper.report.profiled import BUSY, CAUSES, CLASSES, PERFETTO, _f, device_name, profile_diagnosis

if TYPE_CHECKING:
    from sweeper.report.analysis import Analysis

_COLORS = {
    "matmul": "#1f77b4",
    "attention": "#17becf",
    "norm_elementwise": "#9467bd",
    "optimizer": "#8c564b",
    "memcpy": "#e377c2",
    "comm": "#bcbd22",
    "other": "#7f7f7f",
    "input": "#d62728",
    "sync": "#ff7f0e",
    "launch": "#ffbb78",
    "idle_other": "#c7c7c7",
}


# What usually removes each idle cause (docs/measurements/budget.md: the JPEG best's launch gaps): named for the best
# configuration when that cause holds at least REMEDY_AT of its window.
REMEDIES = {
    "input": "more loader workers, pinned memory and non-blocking copies, or decoding on the GPU",
    "sync": "no host reads of GPU values (.item(), printing a loss) inside the step",
    "launch": "CUDA graphs (torch.compile mode reduce-overhead) or fewer Python threads holding the GIL "
    "(a shorter sys.setswitchinterval)",
}
REMEDY_AT = 0.03
CHANGE_AT = 0.01  # a largest change under a point of the window is not worth a sentence


def _summary(side: str, p: Any) -> str:
    dev, idle = device_name(p), 1.0 - _f(p.get(BUSY))
    causes = {c: _f(p.get(f"prof_idle_{c}_frac")) for c in CAUSES}
    cause = max(causes, key=lambda c: -1 if math.isnan(causes[c]) else causes[c])
    shares = {c: _f(p.get(f"prof_k_{c}_frac")) for c in CLASSES}
    top = max(shares, key=lambda c: -1 if math.isnan(shares[c]) else shares[c])
    text = f"{side}: {dev} idle {pct(idle, 1)}"
    if idle >= 0.01 and causes[cause] > 0:
        text += f", {causes[cause] * 100:.0f} points {CAUSES[cause]}"
        if side == "best" and causes[cause] >= REMEDY_AT and cause in REMEDIES:
            text += f" (what usually removes it: {REMEDIES[cause]})"
    if not math.isnan(shares[top]):
        text += f"; busy time mostly {CLASSES[top]} ({pct(shares[top])})"
    return text


def headline(base: Any | None, best: Any | None) -> str:
    """One sentence: each side's idle share and main cause, and the largest change between them."""
    parts = [_summary(side, p) for side, p in (("baseline", base), ("best", best)) if p is not None]
    if base is not None and best is not None:
        cols = {**{f"prof_idle_{c}_frac": CAUSES[c] for c in CAUSES}, BUSY: "busy"}
        delta = {c: _f(best.get(c)) - _f(base.get(c)) for c in cols}
        delta = {c: d for c, d in delta.items() if not math.isnan(d) and c != BUSY and abs(d) >= CHANGE_AT}
        if delta:
            c = max(delta, key=lambda k: abs(delta[k]))
            parts.append(
                f"largest change: {cols[c]}, {_f(base.get(c)) * 100:.0f} -> {_f(best.get(c)) * 100:.0f} "
                "points of the window"
            )
    return "; ".join(parts) + "."


def _mfu(p: Any) -> str:
    m, peak, name = _f(p.get("mfu")), _f(p.get("mfu_peak_tflops")), p.get("mfu_peak")
    if math.isnan(m):
        return "-"
    return f"{num(m, 3)} of {num(peak)} TFLOP/s ({name})" if isinstance(name, str) and name else num(m, 3)


def _table(sides: list[tuple[str, Any, str]]) -> Table:
    rows = [
        ["configuration", *[label for _, _, label in sides]],
        ["trial", *[num(p.get("trial")) for _, p, _ in sides]],
        ["device busy", *[f"{pct(p.get(BUSY), 1)} ({device_name(p)})" for _, p, _ in sides]],
    ]
    rows += [[f"idle: {c}", *[pct(p.get(f"prof_idle_{c}_frac"), 1) for _, p, _ in sides]] for c in CAUSES]
    rows += [  # kernel classes that take under half a percent on every side are left out (compact)
        [f"busy: {CLASSES[c]}", *[pct(p.get(f"prof_k_{c}_frac"), 1) for _, p, _ in sides]]
        for c in CLASSES
        if any(_f(p.get(f"prof_k_{c}_frac")) >= 0.005 for _, p, _ in sides)
    ]
    rows.append(["top kernel", *[_top_kernel(p) for _, p, _ in sides]])
    rows.append(["step (ms, profiled)", *[num(p.get("prof_step_ms")) for _, p, _ in sides]])
    rows.append(["MFU (peak)", *[_mfu(p) for _, p, _ in sides]])
    rows.append(["diagnosis", *[profile_diagnosis(p) for _, p, _ in sides]])
    return Table(
        "Where the device's time went (profiled steps)",
        ["", *[s for s, _, _ in sides]],
        rows,
        align="l" * (1 + len(sides)),
        note="idle: shares of the profiled window; busy: shares of the device's busy time. On the CPU, "
        "busy is the main thread's time in the step's ops and launch its time between them.",
    )


def _top_kernel(p: Any) -> str:
    try:
        top = json.loads(p.get("prof_top_kernels") or "[]")
    except (TypeError, ValueError):
        return "-"
    return f"{top[0]['name'][:60]} ({pct(top[0]['share'])})" if top else "-"


def _figure(sides: list[tuple[str, Any, str]]) -> dict[str, Any]:
    """Stacked horizontal bars, one per side: the busy share split by kernel class, then each idle cause."""
    names = [s for s, _, _ in sides]
    data = []
    for c, label in CLASSES.items():
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": f"busy: {label}",
                "y": names,
                "x": [100 * _f(p.get(BUSY)) * _f(p.get(f"prof_k_{c}_frac")) for _, p, _ in sides],
                "marker": {"color": _COLORS[c]},
            }
        )
    for c, label in CAUSES.items():
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": f"idle: {label}",
                "y": names,
                "x": [100 * _f(p.get(f"prof_idle_{c}_frac")) for _, p, _ in sides],
                "marker": {"color": _COLORS["idle_other" if c == "other" else c]},
            }
        )
    return {
        "data": data,
        "layout": {
            "barmode": "stack",
            "template": "plotly_white",
            "height": 260,
            "title": {"text": "Where the device's time went (% of the profiled window)"},
            "xaxis": {"title": {"text": "% of window"}, "range": [0, 100]},
            "margin": {"l": 80, "r": 20, "t": 50, "b": 50},
        },
    }


def profile_blocks(a: Analysis, with_plots: bool = True) -> list[Block]:
    """The section for a study whose baseline or best configuration was profiled; [] otherwise."""
    prof = a.profiles
    if prof.empty or a.configs.empty:
        return []
    best_key = a.configs.index[0]
    base_key = a.baseline.key
    sides: list[tuple[str, Any, str]] = []
    if base_key is not None and base_key in prof.index and base_key != best_key:
        sides.append(
            (
                "baseline",
                prof.loc[base_key],
                str(a.configs.loc[base_key, "name"]) if base_key in a.configs.index else "baseline",
            )
        )
    if best_key in prof.index:
        sides.append(
            (
                "best" if base_key != best_key else "best (= baseline)",
                prof.loc[best_key],
                str(a.configs.loc[best_key, "name"]),
            )
        )
    if not sides:
        return []
    base = next((p for s, p, _ in sides if s == "baseline"), None)
    best = next((p for s, p, _ in sides if s.startswith("best")), None)
    out: list[Block] = [Heading("Why the GPU idles (profiled)", 3), Para(headline(base, best)), _table(sides)]
    if with_plots:
        out.append(Plot("Where the device's time went", _figure(sides)))
    traces = ", ".join(str(p.get("prof_trace")) for _, p, _ in sides if p.get("prof_trace"))
    if traces:
        out.append(Para(f"Traces (relative to the results folder; open in {PERFETTO}): {traces}", "note"))
    return out
