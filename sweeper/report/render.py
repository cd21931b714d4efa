"""Terminal (rich) and Markdown renderings of report blocks. Plots are HTML only; Markdown points to the file.

Text from configs, hosts and error messages is never read as markup: rich cells are ``Text`` objects (a study
named ``[bold]x`` prints as typed), Markdown cells have ``|`` and ``<``/``>``/``&`` escaped.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from sweeper.report.blocks import Block, Heading, Para, Plot, Table

_STYLE = {"best": "bold green", "baseline": "bold yellow", "bad": "bold red"}


def to_terminal(blocks: list[Block], limit: int = 20, console: Console | None = None) -> None:
    console = console or Console()
    for b in blocks:
        if isinstance(b, Heading):
            console.print(Text(b.text, style="bold underline" if b.level <= 2 else "bold"))
        elif isinstance(b, Para):
            style = {"note": "dim", "alert": "bold red"}.get(b.kind, "")
            console.print(Text(b.text, style=style))
        elif isinstance(b, Table):
            console.print(_rich_table(b, limit))
            more = b.more + max(0, len(b.rows) - limit)
            if more:
                console.print(Text(f"... {more} more rows in report.md / report.html", style="dim"))
            if b.note:
                console.print(Text(b.note, style="dim"))
    console.print()


def _rich_table(t: Table, limit: int) -> RichTable:
    """The table's ``brief`` columns (all when unset); the files have the rest."""
    cols = t.brief or list(range(len(t.header)))
    align = t.alignment()
    table = RichTable(title=Text(t.title, style="bold"), show_lines=False, header_style="bold")
    for i in cols:
        table.add_column(Text(t.header[i]), justify="right" if align[i] == "r" else "left", overflow="fold")
    marks = t.marks or [""] * len(t.rows)
    for row, mark in zip(t.rows[:limit], marks):
        table.add_row(*[Text(row[i]) for i in cols], style=_STYLE.get(mark, ""))
    return table


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
