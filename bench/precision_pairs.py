"""fp16 against bf16 in the recorded sweeps: every pair of completed trials of one sweep whose knobs differ only in
``precision`` (fp16 and bf16), with the ratio of their throughputs.

Reads the rows of the default sweeps kept in ``bench/results`` (``*-budget-*-trials.parquet``: H200 and H100,
torch 2.11), takes each configuration's best completed trial (a re-measurement beside its first), and prints one
line a pair: the sweep, the configuration (compile mode, batch, memory format, optimizer, cuDNN's benchmark) and
fp16 / bf16. CPU only, a second:

    python bench/precision_pairs.py [--json OUT]

The handbook's start picks bf16 on a GPU of compute capability 8.0 or later (``sweeper/sweep/search/handbook.py``);
these pairs are what the sweeps measured of the other reduced precision where they measured both.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
SHAPE = ["knob.compile", "knob.batch_size", "knob.memory_format", "knob.optimizer_impl", "knob.cudnn_benchmark"]


def pairs(path: Path) -> list[dict]:
    """The fp16/bf16 pairs of one sweep's rows: configurations alike in every other knob."""
    df = pd.read_parquet(path)
    if "knob.precision" not in df or "throughput" not in df:
        return []
    df = df[(df["status"] == "complete") & df["throughput"].notna()]
    knobs = [c for c in df.columns if c.startswith("knob.") and c != "knob.precision" and df[c].notna().any()]
    best = df.groupby(["knob.precision", *knobs], dropna=False)["throughput"].max().reset_index()
    fp16, bf16 = (best[best["knob.precision"] == p].drop(columns="knob.precision") for p in ("fp16", "bf16"))
    both = fp16.merge(bf16, on=knobs, suffixes=("_fp16", "_bf16"))
    sweep = path.name.removesuffix("-trials.parquet")
    return [
        {
            "sweep": sweep,
            **{k.removeprefix("knob."): _plain(r[k]) for k in SHAPE if k in r},
            "fp16": float(r["throughput_fp16"]),
            "bf16": float(r["throughput_bf16"]),
            "ratio": float(r["throughput_fp16"] / r["throughput_bf16"]),
        }
        for _, r in both.iterrows()
    ]


def _plain(value: object) -> object:
    return None if pd.isna(value) else value.item() if hasattr(value, "item") else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the pairs as JSON lines here")
    args = parser.parse_args(argv)
    rows = [p for path in sorted(RESULTS.glob("*-budget-*-trials.parquet")) for p in pairs(path)]
    for r in rows:
        shape = " ".join(f"{k}={r[k]}" for k in (s.removeprefix("knob.") for s in SHAPE) if r.get(k) is not None)
        print(f"{r['sweep']:40s} {shape:96s} fp16/bf16 {r['ratio']:.3f}")
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
