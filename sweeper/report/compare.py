"""Side by side across fingerprints: ``--compare gpu`` (or any column: torch_version, hostname, cpu_cores ...).

Per workload, rows are grouped by the column's value (``gpu``: the GPU name, ``cpu:<cpu_model>`` for CPU rows).
Configurations are matched by all their knob and workload-parameter values, so only truly identical runs are
set side by side. Shown: each group's best configuration, throughput ratios against the reference group (the
first label in sorted order) with intervals, MFU (throughput normalised to each device's peak, the fair axis
across generations), Spearman's rank correlation of the common configurations, and whether one group's best
configuration is still near-best on the other (tied with its best within noise, or within 5 %).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sweeper.report import plots
from sweeper.report.analysis import configurations
from sweeper.report.baseline import label, workload_defaults
from sweeper.report.blocks import Block, Heading, Para, Plot, Table, interval, num, pct, times
from sweeper.report.data import fingerprint_label, unit_of, usable
from sweeper.report.stats import aggregate, rank_configs, ratio

NEAR_BEST = 0.95
FINGERPRINT_COLUMNS = ("gpu", "gpu_name", "torch_version", "hostname", "cpu_model", "cpu_cores", "cuda_version",
                       "driver_version", "python_version", "gpu_count", "device")


def check_column(df: pd.DataFrame, column: str) -> str | None:
    """An error line for ``--compare`` when the column cannot be compared, else None."""
    if column != "gpu" and column not in df.columns:
        known = ", ".join(c for c in FINGERPRINT_COLUMNS if c == "gpu" or c in df.columns)
        return f"error: `--compare`: no column {column!r} in the rows; use gpu or a column such as: {known}"
    ok = usable(df)  # rows of trials that never ran carry no fingerprint
    if fingerprint_label(ok, column).nunique() < 2:
        value = fingerprint_label(ok, column).iloc[0] if len(ok) else "-"
        return (f"error: `--compare {column}`: every selected row has the same value ({value}); "
                f"add results from another machine or pick another column")
    return None


def compare_blocks(df: pd.DataFrame, column: str, limit: int, with_plots: bool = True) -> list[Block]:
    out: list[Block] = [Heading(f"Comparison by {column}", 2)]
    labels = fingerprint_label(df, column)
    for workload, rows in df.groupby("workload", sort=True):
        out += _workload(rows, labels.loc[rows.index], column, limit, with_plots)
    return out


def _workload(rows: pd.DataFrame, labels: pd.Series, column: str, limit: int, with_plots: bool) -> list[Block]:
    workload = str(rows["workload"].iloc[0])
    unit = unit_of(rows)
    ok, normed, keys, swept = configurations(rows)
    groups = sorted(labels.loc[ok.index].unique())
    out: list[Block] = [Heading(f"{workload}: {column}", 3)]
    if len(groups) < 2:
        out.append(Para(f"Only one {column} value has completed trials of {workload}; nothing to compare.", "note"))
        return out
    defaults = workload_defaults(rows, normed, keys)
    first = normed.loc[ok.index].groupby(keys.loc[ok.index]).first()
    names = {k: label(v, swept, defaults) for k, v in zip(first.index, first.to_dict("records"))}
    agg = {g: rank_configs(aggregate(ok[labels.loc[ok.index] == g], keys)) for g in groups}
    ref = groups[0]
    out.append(_summary(agg, groups, names, rows, labels, unit))
    for other in groups[1:]:
        common = agg[ref].index.intersection(agg[other].index)
        out += _pair(agg[ref], agg[other], ref, other, common, names, unit, limit, with_plots, workload)
    return out


def _summary(agg: dict[str, pd.DataFrame], groups: list[str], names: dict[str, str], rows: pd.DataFrame,
             labels: pd.Series, unit: str) -> Table:
    ref = agg[groups[0]].iloc[0]
    table_rows = []
    for g in groups:
        c = agg[g]
        best = c.iloc[0]
        studies = ", ".join(sorted(rows.loc[labels == g, "study"].astype(str).unique()))
        r, lo, hi = ratio(best["value"], best["rel_se"], best["t"], ref["value"], ref["rel_se"], ref["t"])
        table_rows.append([g, studies, str(int(c["n"].sum())), str(len(c)), names.get(best.name, "?"),
                           num(best["value"]), interval(best["lo"], best["hi"]), num(best["mfu"], 3),
                           num(c["mfu"].max(), 3), times(r, lo, hi)])
    return Table("Best configuration per group", ["group", "studies", "trials", "configs", "best configuration",
                                                  f"best ({unit})", "95% CI", "mfu of best", "best mfu",
                                                  f"best vs {groups[0]}"], table_rows, align="llrrlrrrrr",
                 note="mfu = achieved FLOP/s / the device's peak: it compares generations fairly where raw "
                      "throughput does not ('-' where the peak is unknown, e.g. CPUs).")


def _pair(a: pd.DataFrame, b: pd.DataFrame, ref: str, other: str, common: pd.Index, names: dict[str, str],
          unit: str, limit: int, with_plots: bool, workload: str) -> list[Block]:
    out: list[Block] = []
    if len(common) == 0:
        out.append(Para(f"{other} vs {ref}: no configuration ran on both (knob and workload-parameter values "
                        f"must match, e.g. the same preset); only the best configurations above compare.", "note"))
        return out
    x, y = a.loc[common], b.loc[common]
    r, lo, hi = ratio(y["value"], y["rel_se"], y["t"], x["value"], x["rel_se"], x["t"])
    side = pd.DataFrame({"label": [names.get(k, "?") for k in common], f"value@{ref}": x["value"],
                         f"value@{other}": y["value"], "ratio": r, "lo": lo, "hi": hi,
                         "rank_a": x["rank"], "rank_b": y["rank"], "mfu_a": x["mfu"], "mfu_b": y["mfu"]},
                        index=common).sort_values(f"value@{ref}", ascending=False)
    rows = [[s["label"], num(s[f"value@{ref}"]), str(int(s["rank_a"])), num(s[f"value@{other}"]),
             str(int(s["rank_b"])), times(s["ratio"], s["lo"], s["hi"]), num(s["mfu_a"], 3), num(s["mfu_b"], 3)]
            for _, s in side.head(limit).iterrows()]
    out.append(Table(f"{workload}: {other} vs {ref}, {len(common)} common configurations",
                     ["configuration", f"{ref} ({unit})", f"# on {ref}", f"{other} ({unit})", f"# on {other}",
                      f"{other} / {ref}", f"mfu {ref}", f"mfu {other}"], rows, align="lrrrrrrr",
                     more=max(0, len(side) - limit)))
    out.append(Para(_agreement(a, b, ref, other, common, names)))
    if with_plots:
        out.append(Plot(f"{other} vs {ref}", plots.pair_scatter(side, ref, other, unit,
                                                                f"{workload}: {other} vs {ref}")))
    return out


def spearman(x: pd.Series, y: pd.Series) -> tuple[float, float]:
    """Spearman's rho and its p-value (nan when fewer than 3 pairs or a constant side; the p-value also without
    scipy, the report extra)."""
    if len(x) < 3 or x.nunique() < 2 or y.nunique() < 2:
        return float("nan"), float("nan")
    try:
        from scipy import stats as sps
    except ImportError:
        return float(x.rank().corr(y.rank())), float("nan")
    res = sps.spearmanr(x.to_numpy(float), y.to_numpy(float))
    return float(res.statistic), float(res.pvalue)


def _near_best(c: pd.DataFrame, key: str) -> str:
    if key not in c.index:
        return "did not run there"
    row, top = c.loc[key], c.iloc[0]
    frac = row["value"] / top["value"]
    near = row["rank"] == 1 or frac >= NEAR_BEST
    return (f"rank {int(row['rank'])} of {len(c)}, {pct(frac)} of the best there"
            f" -> {'still near-best' if near else 'not near-best'}")


def _agreement(a: pd.DataFrame, b: pd.DataFrame, ref: str, other: str, common: pd.Index,
               names: dict[str, str]) -> str:
    rho, p = spearman(a.loc[common, "value"], b.loc[common, "value"])
    corr = (f"Spearman rank correlation over {len(common)} common configurations: {num(rho, 3)} (p={num(p, 2)})"
            if not np.isnan(rho) else f"Spearman rank correlation: needs 3 or more common configurations "
                                      f"with differing throughputs ({len(common)} here)")
    best_a, best_b = a.index[0], b.index[0]
    return (f"{corr}. Best on {ref} ({names.get(best_a, '?')}) on {other}: {_near_best(b, best_a)}. "
            f"Best on {other} ({names.get(best_b, '?')}) on {ref}: {_near_best(a, best_b)}.")
