"""The report: read the Parquet dataset, rank configurations, mark the Pareto front, render.

It reads only Parquet (results copied from another machine, with no GPU and no Optuna storage, work).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sweeper.store import read_results

__all__ = ["load", "knob_columns", "objectives_of", "pareto_mask", "ranked"]


def load(results: Path | str, workload: str | None = None, study: str | None = None) -> pd.DataFrame:
    df = read_results(results)
    if df.empty:
        return df
    if workload:
        df = df[df["workload"] == workload]
    if study:
        df = df[df["study"] == study]
    return df.reset_index(drop=True)


def knob_columns(df: pd.DataFrame) -> list[str]:
    """Knob columns that vary within ``df`` (constant ones say nothing about a ranking)."""
    cols = [c for c in df.columns if c.startswith("knob.")]
    return [c for c in cols if df[c].astype(str).nunique(dropna=False) > 1] or cols


def objectives_of(df: pd.DataFrame) -> list[tuple[str, str]]:
    """The study's objectives as recorded in the rows (``metric:direction,...``)."""
    spec = next((s for s in df.get("objectives", pd.Series(dtype=str)).dropna() if s), "throughput:maximize")
    return [tuple(part.split(":", 1)) for part in spec.split(",")]  # type: ignore[misc]


def pareto_mask(values: np.ndarray, directions: list[str]) -> np.ndarray:
    """Rows of ``values`` (n x k) not dominated by any other row, for the given directions."""
    signed = values * np.array([1.0 if d == "minimize" else -1.0 for d in directions])  # all minimized
    n = len(signed)
    mask = np.ones(n, dtype=bool)
    order = np.lexsort(signed.T[::-1])
    best_so_far: list[np.ndarray] = []
    for i in order:
        row = signed[i]
        if not np.all(np.isfinite(row)):
            mask[i] = False
            continue
        for other in best_so_far:
            if np.all(other <= row) and np.any(other < row):
                mask[i] = False
                break
        if mask[i]:
            best_so_far.append(row)
    return mask


def ranked(df: pd.DataFrame) -> pd.DataFrame:
    """Completed trials whose loss stayed finite, with rank columns and the Pareto flag.

    ``rank_throughput`` (1 = fastest) and ``rank_memory`` (1 = least peak memory); ``pareto`` marks rows on the
    front of throughput (max) vs peak memory (min), or of the study's own objectives when it has several.
    """
    ok = df[df["status"] == "complete"].copy()
    if "loss_finite" in ok:
        ok = ok[ok["loss_finite"].fillna(True).astype(bool)]
    if ok.empty:
        return ok
    ok["rank_throughput"] = ok["throughput"].rank(ascending=False, method="min").astype(int)
    ok["rank_memory"] = ok["peak_mem_bytes"].rank(ascending=True, method="min").astype(int)
    objectives = objectives_of(ok)
    if len(objectives) < 2:
        objectives = [("throughput", "maximize"), ("peak_mem_bytes", "minimize")]
    cols = [m for m, _ in objectives]
    values = ok[cols].astype(float).to_numpy()
    ok["pareto"] = pareto_mask(values, [d for _, d in objectives])
    return ok.sort_values(["rank_throughput", "rank_memory"]).reset_index(drop=True)


def summarize_status(df: pd.DataFrame) -> dict[str, Any]:
    return df["status"].value_counts().to_dict() if not df.empty else {}
