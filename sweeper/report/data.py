"""The report's view of the trial rows: loading (through the cached read of ``sweeper.results.read``), filters,
and the identity of a configuration."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sweeper.results.read import read_rows  # also the name the report's callers (and benchmarks) read rows by

log = logging.getLogger("sweeper.report")
CONFIG_PREFIXES = ("knob.", "param.")
REQUIRED = ("study", "status", "workload", "started_at")  # what every trial row has; the report needs them


def load(results: Path | str, workload: str | None = None, studies: list[str] | None = None,
         use_cache: bool = True) -> pd.DataFrame:
    """The rows of ``results``, optionally only one workload and some studies."""
    df = read_rows(results, use_cache)
    if df.empty or any(c not in df.columns for c in REQUIRED):
        return df
    bad = df["status"].isna() | df["workload"].isna()
    if bad.any():  # rows of some other table copied into the folder: not trial rows
        log.warning("skipped %d rows without status or workload (not trial rows of this tool)", int(bad.sum()))
        df = df[~bad]
    if workload:
        df = df[df["workload"] == workload]
    if studies:
        df = df[df["study"].isin(studies)]
    return df.reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------- values

def norm(value: Any) -> str:
    """One spelling per value, whatever the Parquet/pandas type: ``true``, ``256`` (not ``256.0``), ``null``."""
    if value is None or value is pd.NA or value is pd.NaT:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "null"
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    return str(value)


def value_order(values: Any) -> Any:
    """A sort key for one knob's normalized values (``norm``): numerically when every value is a number (32, 64,
    128, 256, not as text 128, 256, 32, 64), else as text; ``null`` (inactive) last."""
    def number(v: str) -> float | None:
        try:
            return float(v)
        except (TypeError, ValueError):
            return None

    present = [v for v in values if v != "null"]
    numeric = bool(present) and all(number(v) is not None and v not in ("true", "false") for v in present)
    return lambda v: (v == "null", number(v) if numeric and v != "null" else 0.0, str(v))


def config_columns(df: pd.DataFrame) -> list[str]:
    """Columns that identify a configuration: every knob and workload parameter set in some row (columns of
    other workloads, null throughout, are left out)."""
    return sorted(c for c in df.columns if c.startswith(CONFIG_PREFIXES) and df[c].notna().any())


def _norm_column(s: pd.Series) -> pd.Series:
    codes, uniques = pd.factorize(s.astype(object), use_na_sentinel=True)
    names = np.array([norm(u) for u in uniques] + ["null"], dtype=object)  # code -1 (missing) -> "null"
    return pd.Series(names[codes], index=s.index)


def normalized(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: _norm_column(df[c]) for c in cols}, index=df.index)


def config_keys(normed: pd.DataFrame) -> pd.Series:
    """One string per row naming its configuration (rows with equal knob and parameter values share it)."""
    if normed.shape[1] == 0:
        return pd.Series("", index=normed.index)
    key = normed.iloc[:, 0].astype(object)
    for c in normed.columns[1:]:
        key = key + "\x1f" + normed[c].astype(object)
    return key


def varying(normed: pd.DataFrame) -> list[str]:
    """Columns whose value differs between rows (the swept knobs; constant ones say nothing about a ranking)."""
    return [c for c in normed.columns if normed[c].nunique() > 1]


def short_name(col: str) -> str:
    return col.split(".", 1)[1] if col.startswith(CONFIG_PREFIXES) else col


# ---------------------------------------------------------------------------------------------------- study facts

def objectives_of(df: pd.DataFrame) -> list[tuple[str, str]]:
    """The study's objectives as recorded in the rows (``metric:direction,...``)."""
    spec = next((s for s in df.get("objectives", pd.Series(dtype=object)).dropna() if s), "throughput:maximize")
    return [tuple(part.split(":", 1)) for part in str(spec).split(",")]  # type: ignore[misc]


def status_counts(df: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in df["status"].value_counts().items()} if len(df) else {}


# No device measures more than this many units a second of anything (samples, tokens, TFLOP/s): a row above it was
# not measured by a trial (a number copied or edited into the folder) and is never ranked.
ABSURD = 1e18
# Nor is a row this many times faster than the median of its study's measured rows (three or more of them).
ABSURD_VS_MEDIAN = 1e4


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """Rows measured to the end with a finite loss and a positive, finite throughput (before the plausibility
    check of ``usable``). Rows without a ``throughput`` column at all (nothing measured) give none."""
    ok = df[df["status"] == "complete"] if "status" in df else df.iloc[0:0]
    if "throughput" not in ok:
        return ok.iloc[0:0]
    if "loss_finite" in ok:  # a boolean mask, also when empty (an empty object Series would select columns)
        finite = ok["loss_finite"].astype(object).map(lambda v: v is not False and v is not np.False_)
        ok = ok.loc[finite.astype(bool)]
    ok = ok[pd.to_numeric(ok["throughput"], errors="coerce").gt(0)]
    # an inf or NaN in a ranked value (rows of versions that wrote them as complete) is never ranked
    for metric in {"throughput", "peak_mem_bytes", *(m for m, _d in objectives_of(df))} & set(ok.columns):
        values = pd.to_numeric(ok[metric], errors="coerce")
        ok = ok[values.isna() | np.isfinite(values)] if metric == "peak_mem_bytes" else ok[np.isfinite(values)]
    return ok


def implausible(ok: pd.DataFrame) -> pd.Series:
    """Of measured rows (``measured``), those whose throughput no trial measures: above ``ABSURD``, or more than
    ``ABSURD_VS_MEDIAN`` times the median of the measured rows of its (workload, study) when it has three or more."""
    if ok.empty:
        return pd.Series(False, index=ok.index)
    value = pd.to_numeric(ok["throughput"], errors="coerce").astype(float)
    groups = [ok[c].astype(str) for c in ("workload", "study") if c in ok]
    out = value > ABSURD
    if groups:
        size = value.groupby(groups, sort=False).transform("size")
        median = value.groupby(groups, sort=False).transform("median")
    else:
        size, median = pd.Series(len(value), index=value.index), pd.Series(value.median(), index=value.index)
    return out | ((size >= 3) & (value > ABSURD_VS_MEDIAN * median))


def usable(df: pd.DataFrame) -> pd.DataFrame:
    """Rows measured to the end with a finite loss and a plausible throughput: what rankings and statistics use.

    Skipped duplicates carry a copy of an earlier trial's metrics, so they are not repeats and are left out.
    """
    ok = measured(df)
    return ok[~implausible(ok)]


def implausible_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Measured rows ``usable`` leaves out as implausible (the report lists them instead of ranking them)."""
    ok = measured(df)
    return ok[implausible(ok)]


def unit_of(df: pd.DataFrame) -> str:
    units = df["throughput_unit"].dropna() if "throughput_unit" in df else pd.Series(dtype=object)
    units = units[units.astype(str) != ""]
    return str(units.iloc[0]) if len(units) else ""


def fingerprint_label(df: pd.DataFrame, column: str) -> pd.Series:
    """The comparison label of each row: ``gpu`` is the GPU name, or ``cpu:<cpu_model>`` for CPU rows."""
    if column == "gpu":
        gpu = df["gpu_name"].astype(object).where(df["gpu_name"].notna(), "") if "gpu_name" in df else ""
        cpu = df["cpu_model"].astype(object).fillna("?") if "cpu_model" in df else "?"
        gpu = pd.Series(gpu, index=df.index).astype(str)
        return gpu.where(gpu != "", "cpu:" + pd.Series(cpu, index=df.index).astype(str))
    return column + "=" + df[column].map(norm)
