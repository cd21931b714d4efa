"""The report as a list of blocks (headings, paragraphs, tables of plain-text cells, plots), and number formats.

Analyses turn into blocks once; the terminal, Markdown and HTML renderers only lay blocks out (and escape their
text for their format), so the three formats always say the same thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Union

_MIB = 1024 * 1024


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str
    kind: str = "text"  # text | note | alert


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    align: str = ""  # one of l/r per column; default: first two left, the rest right
    note: str = ""
    marks: list[str] = field(default_factory=list)  # per row: "" | "best" | "baseline" | "bad"
    more: int = 0  # rows left out
    brief: list[int] = field(default_factory=list)  # columns the terminal shows (all when empty), most important first
    page: list[int] = field(default_factory=list)  # columns the HTML page shows (all when empty); Markdown has all
    brief_cells: dict[int, list[str]] = field(default_factory=dict)  # column -> shorter cells for the terminal

    def alignment(self) -> str:
        return self.align or ("ll" + "r" * max(0, len(self.header) - 2))


@dataclass
class Code:
    """Lines to copy as they are (a command, code): never wrapped or reflowed; a title above them."""

    title: str
    lines: list[str]


@dataclass
class Plot:
    title: str
    figure: dict[str, Any]  # a Plotly figure spec: {"data": [...], "layout": {...}}


@dataclass
class Contents:
    """Links to the page's sections (its level-2 headings), drawn by the HTML renderer; the terminal and Markdown
    have the summary table next to it instead."""

    title: str = "Contents"


Block = Union[Heading, Para, Table, Plot, Contents, Code]


BIG = 1e9  # from here on numbers are written as ``1.23e+12``: a row's 1e300 is 9 characters, not 301 digits


def num(value: Any, digits: int = 4) -> str:
    """A number with ``digits`` significant digits (thousands separated; ``1.23e+12`` from ``BIG`` on, ``inf``);
    ``-`` for missing."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "-" if value is None else str(value)
    if math.isnan(v):
        return "-"
    if math.isinf(v) or abs(v) >= BIG:
        return f"{v:.{max(1, min(digits, 3) - 1)}e}" if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    if v != 0 and abs(v) >= 10 ** digits:
        return f"{v:,.0f}"
    return f"{v:,.{digits}g}"


def mib(value: Any) -> str:
    try:
        return num(float(value) / _MIB, 4)
    except (TypeError, ValueError):
        return "-"


def pct(value: Any, digits: int = 0) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "-"
    if math.isnan(v):
        return "-"
    return f"{num(v * 100, 3)}%" if not math.isfinite(v) or abs(v * 100) >= 10_000 else f"{v * 100:.{digits}f}%"


def interval(lo: Any, hi: Any) -> str:
    return "-" if num(lo) == "-" else f"{num(lo, 3)}–{num(hi, 3)}"


def ratio_text(r: Any) -> str:
    """A ratio with two decimals (``2.10``, ``0.71``), and two significant digits below 0.01 (``0.0058``): a ratio
    is never printed as ``0.00``."""
    v = float(r)
    if not math.isfinite(v) or abs(v) >= 10_000:
        return num(v, 3)
    return f"{v:.2g}" if 0 < abs(v) < 0.01 else f"{v:.2f}"


def times(r: Any, lo: Any = None, hi: Any = None) -> str:
    """``2.10x (1.62–2.71x)``; the interval only when given."""
    if num(r) == "-":
        return "-"
    text = f"{ratio_text(r)}x"
    if lo is not None and num(lo) != "-":
        text += f" ({ratio_text(lo)}–{ratio_text(hi)})"
    return text


def first_line(text: Any, limit: int = 160) -> str:
    s = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    s = (s.strip().splitlines() or [""])[0]
    return s if len(s) <= limit else s[: limit - 1] + "…"
