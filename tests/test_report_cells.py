"""At 80 columns every report table row stays short (no cell over 3 lines: a configuration of 15 changed knobs is
named, with a legend) and no wrapped note or paragraph continues at column 0. Studies are built from each shipped
workload's own YAML (its defaults and default search space), rows with the project's row code."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from report_rows import frame, row
from rich.console import Console
from rich.text import Text

from sweeper.report.blocks import Para, Table
from sweeper.report.build import build
from sweeper.report.render import fit_columns, to_terminal

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 3


def _choices(spec: str) -> list:
    inner = re.fullmatch(r"choice\((.*)\)", spec.strip()).group(1)
    return [OmegaConf.create({"v": v.strip()})["v"] for v in inner.split(",")]


def default_sweep(workload: str) -> list[dict]:
    """The baseline, a best that changes every knob of the default space it can (the JPEG best changed 15), and
    configurations between them, each measured twice (interleaved), as the sweep's re-measurements give."""
    yaml = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "workload" / f"{workload}.yaml"))
    defaults = {k: v for k, v in yaml["knobs"].items()}
    space = {k.removeprefix("knobs."): _choices(v) for k, v in yaml["hydra"]["sweeper"]["params"].items()}
    best = {k: next((c for c in reversed(vs) if c != defaults.get(k)), vs[0]) for k, vs in space.items()}
    configs = [dict(defaults)]
    for i in range(1, len(space) + 1):  # the defaults with the first i knobs of the best
        configs.append({**defaults, **dict(list(best.items())[:i])})
    rng = np.random.default_rng(0)
    rows, trial = [], 0
    for _ in range(2):
        for i, knobs in enumerate(configs):
            speed = 100.0 * (1 + i) * float(np.exp(rng.normal(0, 0.01)))
            rows.append(
                row(
                    f"{workload}-default",
                    trial,
                    knobs,
                    speed,
                    workload=workload,
                    defaults=defaults,
                    metrics={"peak_mem_bytes": 1e9 + 1e7 * i},
                )
            )
            trial += 1
    return rows


@pytest.mark.parametrize("workload", ["resnet50", "matmul", "transformer_block"])
def test_no_table_cell_is_more_than_three_lines_at_80_columns(workload: str) -> None:
    df = frame(default_sweep(workload))
    report = build(df, with_plots=False)
    console = Console(width=80, file=io.StringIO())
    tables = [b for b in report.blocks if isinstance(b, Table)]
    assert any(t.title == "Ranking by throughput" for t in tables)
    for t in tables:
        rows = [
            [t.brief_cells[i][n] if i in t.brief_cells else cell for i, cell in enumerate(r)]
            for n, r in enumerate(t.rows[:20])
        ]
        widths = fit_columns(t.header, rows, t.brief or list(range(len(t.header))), 80)
        for r in rows:
            for i, w in widths.items():
                lines = len(Text(r[i]).wrap(console, w))  # as the table lays the cell out
                assert lines <= MAX_LINES, (t.title, t.header[i], r[i], w)
    if workload == "resnet50":
        legend = [b.text for b in report.blocks if isinstance(b, Para) and b.text.startswith("C1 = ")]
        assert legend and legend[0].count(" + ") >= 14, "the best's 15 knob changes are spelled out once, below"


def test_wrapped_notes_and_paragraphs_never_continue_at_column_0() -> None:
    out = io.StringIO()
    console = Console(width=80, file=out, color_system=None)
    report = build(frame(default_sweep("resnet50")), with_plots=False)
    to_terminal(report.blocks, console=console)
    text = out.getvalue()
    notes = [b.note for b in report.blocks if isinstance(b, Table) and b.note]
    notes += [b.text for b in report.blocks if isinstance(b, Para)]
    lines = text.splitlines()
    for note in notes:
        if len(note) <= 80:
            continue
        head = note[:40]
        start = next(i for i, line in enumerate(lines) if line.startswith(head))
        words, seen = note.split(), lines[start].split()
        i = start
        while len(seen) < len(words):
            i += 1
            assert lines[i].startswith("  "), (note, lines[i])
            seen += lines[i].split()
    from sweeper.report.render import hanging

    out2 = io.StringIO()
    hanging(Console(width=40, file=out2), "one two three four five six seven eight nine ten eleven twelve")
    assert [ln[:2] for ln in out2.getvalue().splitlines()[1:]] == ["  "]
