"""Terminal (rich) and Markdown renderings of report blocks. Plots are HTML only; Markdown points to the file.

Text from configs, hosts and error messages is never read as markup: rich cells are ``Text`` objects (a study
named ``[bold]x`` prints as typed), Markdown cells have ``|`` and ``<``/``>``/``&`` escaped.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from sweeper.report.blocks import Block, Code, Heading, Para, Plot, Table

_STYLE = {"best": "bold green", "baseline": "bold yellow", "bad": "bold red"}


def to_terminal(blocks: list[Block], limit: int = 20, console: Console | None = None) -> None:
    """Print the blocks for the console's width (a terminal's, or ``COLUMNS``, 80 when neither is known)."""
    console = console or Console()
    for b in blocks:
        if isinstance(b, Heading):
            console.print(Text(b.text, style="bold underline" if b.level <= 2 else "bold"))
        elif isinstance(b, Para):
            style = {"note": "dim", "alert": "bold red"}.get(b.kind, "")
            hanging(console, b.text, style)
        elif isinstance(b, Code):  # what it says; the lines to copy are in the files (a fold would break them)
            console.print(Text(b.title, style="bold"))
            for line in b.lines:
                if line.startswith("# ") and not line.endswith(":"):  # what it is and why; no header of a copy
                    hanging(console, line[2:])

        elif isinstance(b, Table):
            table, dropped = _rich_table(b, limit, console.width)
            console.print(table)
            more = b.more + max(0, len(b.rows) - limit)
            left_out = [plural(more, "more row")] if more else []
            if dropped:
                left_out.append(plural(dropped, "more column"))
            if left_out:
                hanging(console, f"... {' and '.join(left_out)} in report.md / report.html", "dim")
            if b.note:
                hanging(console, b.note, "dim")
    console.print()


INDENT = "  "  # a wrapped paragraph's or note's later lines: never at column 0, where a new item starts


def hanging(console: Console, text: str, style: str = "") -> None:
    """``text`` wrapped between words to the console's width, its continuation lines indented; a word longer than
    a line (a results folder's path) is cut at the line's end, as the sweep's console does."""
    import textwrap

    width = max(20, console.width)
    for paragraph in str(text).splitlines() or [""]:
        lines = textwrap.wrap(paragraph, width, subsequent_indent=INDENT, break_long_words=True,
                              break_on_hyphens=False) or [""]
        for line in lines:
            console.print(Text(line, style=style), soft_wrap=True)


def plural(n: int, noun: str) -> str:
    """``1 more column``, ``2 more columns``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


_CELL = 3  # a column's share of the box: one border and one space of padding on each side


def _widest_word(text: str) -> int:
    return max((len(w) for w in str(text).split()), default=1)


def fit_columns(header: list[str], rows: list[list[str]], priority: list[int], width: int) -> dict[int, int]:
    """Columns to show and their widths (``{index: width}``) so that the table fits ``width`` characters and no
    word is broken: each column is at least as wide as its longest word (header included). Columns are dropped
    from the end of ``priority`` (most important first) until the rest fit; spare width then goes to the
    columns whose text would otherwise wrap, so cells stay on one line when there is room."""
    least = {i: max([_widest_word(header[i])] + [_widest_word(r[i]) for r in rows]) for i in priority}
    most = {i: max([len(header[i])] + [len(r[i]) for r in rows]) for i in priority}
    shown = list(priority)
    while len(shown) > 1 and sum(least[i] + _CELL for i in shown) + 1 > width:
        shown.pop()
    widths = {i: least[i] for i in shown}
    spare = width - 1 - sum(widths[i] + _CELL for i in shown)
    while spare > 0:
        grow = [i for i in shown if widths[i] < most[i]]
        if not grow:
            break
        for i in grow[:spare]:
            widths[i] += 1
        spare -= min(spare, len(grow))
    return {i: widths[i] for i in sorted(shown)}


def _rich_table(t: Table, limit: int, width: int = 10_000) -> tuple[RichTable, int]:
    """The table's ``brief`` columns (all when unset; in ``brief``'s order of importance) that fit ``width``;
    the files have the rest. Returns the table and how many of the brief columns were left out."""
    priority = t.brief or list(range(len(t.header)))
    align = t.alignment()
    rows = [[t.brief_cells[i][n] if i in t.brief_cells else cell for i, cell in enumerate(row)]
            for n, row in enumerate(t.rows[:limit])]  # the terminal's shorter cells (the files have the full ones)
    widths = fit_columns(t.header, rows, priority, width)
    table = RichTable(title=Text(t.title, style="bold"), show_lines=False, header_style="bold")
    for i, w in widths.items():
        table.add_column(Text(t.header[i]), justify="right" if align[i] == "r" else "left", overflow="fold",
                         width=w)
    marks = t.marks or [""] * len(t.rows)
    for row, mark in zip(rows, marks):
        table.add_row(*[Text(row[i]) for i in widths], style=_STYLE.get(mark, ""))
    return table, len(priority) - len(widths)


def md_escape(text: str) -> str:
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
            .replace("\r", " ").replace("\n", " "))


def to_markdown(blocks: list[Block], html_name: str | None = None, limit: int = 50) -> str:
    lines: list[str] = []
    plots = 0
    for b in blocks:
        if isinstance(b, Heading):
            lines += [f"{'#' * b.level} {md_escape(b.text)}", ""]
        elif isinstance(b, Para):
            text = md_escape(b.text)
            lines += [f"**{text}**" if b.kind == "alert" else (f"_{text}_" if b.kind == "note" else text), ""]
        elif isinstance(b, Code):
            fence = "`" * 3
            lines += [f"**{md_escape(b.title)}**", "", fence, *b.lines, fence, ""]
        elif isinstance(b, Table):
            lines += _md_table(b, limit)
        elif isinstance(b, Plot):
            plots += 1
    if plots and html_name:
        lines += [f"_{plots} plots are in {md_escape(html_name)} (self-contained, opens offline)._", ""]
    return "\n".join(lines).rstrip() + "\n"


def _md_table(t: Table, limit: int) -> list[str]:
    sep = ["---:" if a == "r" else "---" for a in t.alignment()]
    lines = [f"**{md_escape(t.title)}**", "", "| " + " | ".join(md_escape(h) for h in t.header) + " |",
             "|" + "|".join(sep) + "|"]
    for row in t.rows[:limit]:
        lines.append("| " + " | ".join(md_escape(c) for c in row) + " |")
    more = t.more + max(0, len(t.rows) - limit)
    if more:
        lines.append(f"| … {more} more | " + " | ".join("" for _ in t.header[1:]) + " |")
    lines.append("")
    if t.note:
        lines += [f"_{md_escape(t.note)}_", ""]
    return lines
