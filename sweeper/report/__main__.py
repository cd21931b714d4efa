"""``python -m sweeper.report [results] [--workload W] [--study S] [--compare COL] [--baseline STUDY|latest|DATE]
[--fail-on-regression PCT] [--html PATH] [--out PATH] [--recipe]``

Prints the report to the terminal and writes ``report.md``, ``report.html`` and ``recipe.json`` (each study's
configuration to adopt, machine-readable) into the results folder.
Exit codes: 0 ok, 2 bad input (one line naming the flag and the fix), 3 a regression with --fail-on-regression.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_BAD_INPUT, EXIT_REGRESSION = 0, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every other bad input
        print(f"error: {message}; see python -m sweeper.report --help", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = _Parser(
        prog="python -m sweeper.report",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("results", nargs="?", default="results", help="results folder (default: results)")
    p.add_argument("--workload", help="only this workload")
    p.add_argument(
        "--study", action="append", help="only this study (repeat for several); with --baseline: tonight's study"
    )
    p.add_argument("--compare", metavar="COL", help="compare fingerprints: gpu, torch_version, hostname, or any column")
    p.add_argument(
        "--baseline",
        metavar="STUDY|latest|DATE",
        help="nightly: compare tonight's study with this study, the latest before it, or the last study "
        "of a date YYYY-MM-DD",
    )
    p.add_argument(
        "--fail-on-regression",
        metavar="PCT",
        help="with --baseline: exit 3 when something regressed beyond noise by at least PCT (e.g. 5%%)",
    )
    p.add_argument("--html", metavar="PATH", help="HTML file to write (default: <results>/report.html)")
    p.add_argument("--out", metavar="PATH", help="Markdown file to write (default: <results>/report.md)")
    p.add_argument(
        "--top", type=int, default=20, help="rows per table in the terminal (Markdown: at least 50, HTML: at least 200)"
    )
    p.add_argument(
        "--importance",
        choices=("auto", "fanova", "ped-anova"),
        default="auto",
        help="Optuna importance evaluator (auto: fANOVA when scikit-learn is installed)",
    )
    p.add_argument("--no-cache", action="store_true", help="read every Parquet file, ignore <results>/.report-cache")
    p.add_argument(
        "--recipe",
        action="store_true",
        help="print each study's configuration to adopt (the fastest, or one tied with it that saves "
        "10%% of a GPU's memory) as Hydra overrides that re-run it and PyTorch lines that apply it, "
        "with what it was measured under; writes no files",
    )
    return p.parse_args(argv)


# The report extra (pip install 'torch-knob-sweeper[report]'): scipy (exact p-values), scikit-learn (fANOVA
# importance) and plotly (plotly.js, embedded in the HTML). Without it the tables, Markdown and PED-ANOVA
# importance are written, and one line says what the extra adds.
REPORT_EXTRA = ("scipy", "sklearn", "plotly")
EXTRA_HINT = (
    "fANOVA knob importance and the HTML report with its plots need the report extra: "
    "pip install 'torch-knob-sweeper[report]'"
)


def missing_extra() -> list[str]:
    """The report extra's modules that cannot be imported here."""
    import importlib.util

    missing = []
    for name in REPORT_EXTRA:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def _fail(message: str) -> int:
    print(message, file=sys.stderr)
    return EXIT_BAD_INPUT


def _bad_args(args: argparse.Namespace, results: Path) -> str | None:
    """What is wrong with the flags alone (before any row is read), or None."""
    from sweeper.report.importance import has_sklearn

    if not results.exists():
        return f"error: `results`: {results} does not exist; pass the folder a sweep wrote (default: results)"
    if args.fail_on_regression is not None and not args.baseline:
        return "error: `--fail-on-regression` needs `--baseline STUDY|latest|DATE` to compare with"
    if args.importance == "fanova" and not has_sklearn():
        return (
            "error: `--importance fanova` needs scikit-learn, in the report extra: "
            "pip install 'torch-knob-sweeper[report]', or use --importance ped-anova"
        )
    if args.top < 1:
        return f"error: `--top`: {args.top} must be at least 1"
    return None


def _bad_rows(df: Any, args: argparse.Namespace, results: Path) -> str | None:
    """What is wrong with the rows read, or with the flags that name studies or a column in them, or None."""
    from sweeper.report.compare import check_column
    from sweeper.report.data import REQUIRED

    if df.empty:
        what = f" of workload {args.workload!r}" if args.workload else ""
        return f"error: `results`: no trial rows{what} under {results}; run a sweep first"
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        return (
            f"error: `results`: the rows under {results} have no {', '.join(missing)} column; they are not "
            "trial rows of this tool (pass the folder a sweep wrote)"
        )
    if args.study:
        unknown = sorted(set(args.study) - set(df["study"].astype(str)))
        if unknown:
            known = ", ".join(sorted(df["study"].astype(str).unique()))
            return f"error: `--study`: no rows of {', '.join(map(repr, unknown))}; studies here: {known}"
    if args.compare:
        scope = df[df["study"].astype(str).isin(args.study)] if args.study else df
        return check_column(scope, args.compare) or None
    return None


def _unwritable(writes: Iterable[tuple[str, Path]]) -> str | None:
    """The first of the ``(flag, path)`` files to write that cannot be written, said in one line, or None."""
    for flag, path in writes:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8"):
                pass
        except OSError as e:
            return f"error: `{flag}`: cannot write {path} ({e.strerror}); pass {flag} PATH in a folder you can write"
    return None


def _write(
    report: Any, df: Any, args: argparse.Namespace, results: Path, md_path: Path, html_path: Path | None
) -> None:
    """The report to the terminal, then ``report.md``, ``recipe.json`` beside it and (with the report extra,
    ``html_path`` not None) ``report.html``."""
    from sweeper.report.html import to_html
    from sweeper.report.recipe import recipes_json
    from sweeper.report.render import to_markdown, to_terminal

    to_terminal(report.blocks, limit=args.top)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    (md_path.parent / "recipe.json").write_text(recipes_json(report.analyses, df), encoding="utf-8")
    md_path.write_text(
        to_markdown(report.blocks, None if html_path is None else html_path.name, limit=max(50, args.top)),
        encoding="utf-8",
    )
    if html_path is None:
        print(f"report written to {md_path} (and recipe.json beside it)")
        print(EXTRA_HINT, file=sys.stderr)
    else:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(
            to_html(report.blocks, f"Sweep report: {results}", limit=max(200, args.top)), encoding="utf-8"
        )
        print(f"report written to {md_path} and {html_path} (and recipe.json beside the Markdown)")


def _gate(report: Any, threshold: float | None) -> int:
    """With --fail-on-regression: what could not be gated, and EXIT_REGRESSION for a regression beyond it."""
    if threshold is not None and report.not_gated:
        print("not gated: " + "; ".join(report.not_gated), file=sys.stderr)
    if threshold is not None and report.regressions:
        print(f"regression beyond noise and {threshold:.0%}: " + "; ".join(report.regressions), file=sys.stderr)
        return EXIT_REGRESSION
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from sweeper.report.build import build
    from sweeper.report.data import load
    from sweeper.report.nightly import BadInput, parse_threshold

    results = Path(args.results)
    problem = _bad_args(args, results)
    if problem:
        return _fail(problem)
    try:
        threshold = parse_threshold(args.fail_on_regression)
    except BadInput as e:
        return _fail(str(e))
    df = load(results, args.workload, None, use_cache=not args.no_cache)
    problem = _bad_rows(df, args, results)
    if problem:
        return _fail(problem)
    folder = results if results.is_dir() else results.parent
    md_path = Path(args.out) if args.out else folder / "report.md"
    html_path = Path(args.html) if args.html else folder / "report.html"
    missing = missing_extra()
    writes = () if args.recipe else (("--out", md_path), *(() if missing else (("--html", html_path),)))
    problem = _unwritable(writes)  # --recipe writes no file: it checks none (the check leaves an empty file behind)
    if problem:
        return _fail(problem)
    try:
        report = build(
            df,
            source=str(results),
            studies=args.study,
            compare=args.compare,
            baseline=args.baseline,
            threshold=threshold,
            evaluator=args.importance,
            with_plots=not missing,
        )
    except BadInput as e:
        return _fail(str(e))
    if args.recipe:
        from sweeper.report.recipe import recipe_text

        print(recipe_text(report.analyses, df))
        return EXIT_OK
    _write(report, df, args, results, md_path, None if missing else html_path)
    return _gate(report, threshold)


if __name__ == "__main__":
    raise SystemExit(main())
