"""``python -m sweeper.report [results dir] [--workload W] [--study S]``: ranked table + a Markdown file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sweeper.report import load, ranked
from sweeper.report.render import to_markdown, to_terminal


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sweeper.report", description=__doc__)
    p.add_argument("results", nargs="?", default="results", help="results folder (default: results)")
    p.add_argument("--workload", help="only this workload")
    p.add_argument("--study", help="only this study")
    p.add_argument("--out", help="Markdown file to write (default: <results>/report.md)")
    p.add_argument("--top", type=int, default=20, help="rows shown in the terminal")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    results = Path(args.results)
    if not results.exists():
        print(f"error: `results`: {results} does not exist; pass the folder a sweep wrote (default: results)",
              file=sys.stderr)
        return 2
    df = load(results, args.workload, args.study)
    if df.empty:
        print(f"error: `results`: no trial rows under {results}; run a sweep first", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else (results if results.is_dir() else results.parent) / "report.md"
    groups = df.groupby(["workload", "study"], sort=True) if len(df) else []
    parts = []
    for (workload, study), rows in groups:
        title = f"{workload} — study {study}"
        r = ranked(rows)
        to_terminal(r, rows, title, limit=args.top)
        parts.append(to_markdown(r, rows, title))
    out.write_text("\n".join(parts), encoding="utf-8")
    print(f"report written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
