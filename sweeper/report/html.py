"""One self-contained HTML file: tables, plots, and plotly.js inline (no CDN: it opens offline).

Escaping: every text (headings, cells, notes) goes through ``html.escape``. Figure specs go into a JSON
``<script>`` block with ``<``, ``>``, ``&`` and the line separators U+2028/U+2029 written as ``\\uXXXX``
escapes, so no string (say a study named ``</script><script>alert(1)</script>``) can end the script element
or start markup; JSON parsers read the escapes back as the same characters.
"""

from __future__ import annotations

import functools
import html
import json
import math
from typing import Any

import numpy as np

from sweeper.report.blocks import Block, Code, Contents, Heading, Para, Plot, Table

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1500px;color:#222;
padding:0 16px}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:2em}
table{border-collapse:collapse;margin:8px 0 4px;font-size:12.5px}caption{text-align:left;font-weight:600;padding:4px 0}
th,td{border:1px solid #ddd;padding:2px 5px;vertical-align:top}th{background:#f5f5f5;font-weight:600;min-width:2.5em}
td.r{text-align:right;white-space:nowrap}td.l{max-width:24em;overflow-wrap:normal;word-break:keep-all}
nav.toc{background:#fafafa;border:1px solid #e5e5e5;padding:6px 14px;margin:12px 0;font-size:14px}
nav.toc ol{margin:4px 0;padding-left:22px}
tr.best td{background:#eef9ee}tr.baseline td{background:#fff6dd}tr.bad td{background:#fde8e8}
.note{color:#555;font-size:13px}.alert{color:#b00020;font-weight:600}.scroll{overflow-x:auto}
.plot{width:100%;min-height:420px;margin:8px 0 24px}
pre.code{background:#f7f7f7;border:1px solid #e5e5e5;padding:8px;overflow-x:auto;font-size:12.5px}
"""

_BOOT = """
(function(){
  var figs = JSON.parse(document.getElementById("figures").textContent);
  Object.keys(figs).forEach(function(id){
    var f = figs[id];
    Plotly.newPlot(id, f.data, f.layout, {displaylogo: false, responsive: true});
  });
})();
"""


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().replace("</script", "<\\/script")


def _default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def script_json(obj: Any) -> str:
    """JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(obj, default=_default, allow_nan=False, separators=(",", ":"))
    for ch, rep in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, rep)
    return text


def _sanitize(obj: Any) -> Any:
    """NaN/inf -> None, so the JSON is standard (plotly.js reads null as a gap)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_sanitize(v) for v in obj]
    return obj


def _table(t: Table, limit: int) -> str:
    e = html.escape
    cols = t.page or list(range(len(t.header)))  # a table too wide for a 1,400-px window leaves columns to the .md
    align = t.alignment()
    head = "".join(f"<th>{e(t.header[i])}</th>" for i in cols)
    body = []
    marks = t.marks or [""] * len(t.rows)
    for row, mark in zip(t.rows[:limit], marks):
        cells = "".join(f'<td class="{align[i]}">{e(row[i])}</td>' for i in cols)
        body.append(f'<tr class="{e(mark)}">{cells}</tr>' if mark else f"<tr>{cells}</tr>")
    hidden = t.more + max(0, len(t.rows) - limit)
    more = f'<p class="note">… {hidden} more row{"s" * (hidden != 1)} not shown.</p>' if hidden else ""
    note = f'<p class="note">{e(t.note)}</p>' if t.note else ""
    return (f'<div class="scroll"><table><caption>{e(t.title)}</caption><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>{more}{note}")


def to_html(blocks: list[Block], title: str, limit: int = 200) -> str:
    e = html.escape
    parts: list[str] = []
    figures: dict[str, Any] = {}
    sections = [b.text for b in blocks if isinstance(b, Heading) and b.level == 2]
    seen = 0
    for b in blocks:
        if isinstance(b, Heading):
            level = min(max(b.level, 1), 4)
            anchor = ""
            if b.level == 2:
                anchor, seen = f' id="section-{seen}"', seen + 1
            parts.append(f"<h{level}{anchor}>{e(b.text)}</h{level}>")
        elif isinstance(b, Contents):
            links = "".join(f'<li><a href="#section-{i}">{e(text)}</a></li>' for i, text in enumerate(sections))
            parts.append(f'<nav class="toc"><strong>{e(b.title)}</strong><ol>{links}</ol></nav>')
        elif isinstance(b, Para):
            cls = {"note": "note", "alert": "alert"}.get(b.kind, "")
            parts.append(f'<p class="{cls}">{e(b.text)}</p>' if cls else f"<p>{e(b.text)}</p>")
        elif isinstance(b, Code):
            parts.append(f'<p><strong>{e(b.title)}</strong></p><pre class="code">{e(chr(10).join(b.lines))}</pre>')
        elif isinstance(b, Table):
            parts.append(_table(b, limit))
        elif isinstance(b, Plot):
            pid = f"plot-{len(figures)}"
            figures[pid] = _sanitize(b.figure)
            parts.append(f'<div class="plot" id="{pid}" role="img" aria-label="{e(b.title)}"></div>')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{e(title)}</title>"
        f"<style>{_CSS}</style><script>{plotly_js()}</script></head><body>\n"
        + "\n".join(parts)
        + f'\n<script type="application/json" id="figures">{script_json(figures)}</script>'
        + f"\n<script>{_BOOT}</script>\n</body></html>\n"
    )
