"""Pack a bench run's Parquet rows into one file, so a run on a remote GPU brings back few files.

    python bench/pack.py RESULTS_DIR OUT_FILE.parquet

Reads every row file under RESULTS_DIR/trials (the sweep's Parquet folder) and writes them as one file, rows in
file order; the columns are the union (pandas fills a row's missing ones with nulls).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd


def main() -> None:
    src, dest = Path(sys.argv[1]), Path(sys.argv[2])
    files = sorted(p for p in (src / "trials").glob("*.parquet") if not p.name.startswith("+"))
    if not files:
        print(f"pack: no row files under {src / 'trials'}")
        return
    rows = pd.concat([pd.read_parquet(p) for p in files], ignore_index=True)
    rows.to_parquet(dest, index=False)
    print(f"pack: {len(rows)} rows from {len(files)} files -> {dest}")


if __name__ == "__main__":
    main()
